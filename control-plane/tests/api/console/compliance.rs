//! The compliance pages against the API: readiness, an agent's risk classification and
//! FRIA written and submitted from forms, its transparency card, and an incident
//! reported, counted down, updated and its evidence pack downloaded.

use serde_json::{json, Value};

use super::Browser;
use crate::helpers::expect_status;

const FRIA_FIELDS: [&str; 6] = [
    "processes",
    "frequency_and_scope",
    "categories_of_persons",
    "specific_risks",
    "human_oversight_measures",
    "risk_mitigation_measures",
];

db_test!(
    a_compliance_officer_files_a_fria_and_an_incident_from_the_console,
    |app| {
        let tenant = app.new_tenant("enterprise").await;
        let key = &tenant.admin_key;
        let agent = app
            .register_agent(
                key,
                json!({ "name": "triage-bot", "description": "screens job applications for recruiters" }),
            )
            .await;
        let agent_id = agent["id"].as_str().unwrap();
        let mut browser = Browser::new(&app);
        browser.sign_in_with_key(key).await;

        // Readiness, as the API assesses it.
        let readiness = expect_status(app.get("/compliance/readiness", key).await, 200).await;
        let page = browser.get("/console/compliance").await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(page.body.contains(&format!(
            "EU AI Act readiness: {} of {}",
            readiness["data"]["total_score"], readiness["data"]["max_score"]
        )));
        for component in readiness["data"]["components"].as_array().unwrap() {
            let name = component["name"].as_str().unwrap().replace('_', " ");
            assert!(page.body.contains(&format!("<td>{name}</td>")), "{name}");
        }

        // The agent's page: the rules' suggestion with its evidence, then a classification.
        let path = format!("/console/agents/{agent_id}/compliance");
        let page = browser.get(&path).await;
        assert_eq!(page.status, 200, "{}", page.body);
        let suggestion = expect_status(
            app.get(&format!("/agents/{agent_id}/risk-suggestion"), key)
                .await,
            200,
        )
        .await;
        let suggested = suggestion["data"]["suggested_risk_level"].as_str().unwrap();
        assert!(page
            .body
            .contains(&format!("The rules suggest <strong>{suggested}</strong>")));
        assert!(page.body.contains("No FRIA yet."));
        let classified = browser
            .post(
                &format!("/console/agents/{agent_id}/risk-classification"),
                &[
                    ("csrf", &page.csrf()),
                    ("risk_level", "high"),
                    ("justification", "Annex III: employment"),
                ],
            )
            .await;
        assert_eq!(classified.status, 303, "{}", classified.body);
        let current = expect_status(
            app.get(&format!("/agents/{agent_id}/risk-classification"), key)
                .await,
            200,
        )
        .await;
        assert_eq!(current["data"]["risk_level"], "high");

        // A FRIA written from the form, then submitted: submitted, and in the trail.
        let mut fields: Vec<(&str, String)> = FRIA_FIELDS
            .iter()
            .map(|field| (*field, format!("{field} of the triage <b>bot</b>")))
            .collect();
        fields.push(("csrf", page.csrf()));
        let form: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let written = browser
            .post(&format!("/console/agents/{agent_id}/fria"), &form)
            .await;
        assert_eq!(written.status, 303, "{}", written.body);
        let fria = expect_status(app.get(&format!("/agents/{agent_id}/fria"), key).await, 200)
            .await["data"]
            .clone();
        assert_eq!(fria["status"], "draft");
        assert_eq!(fria["processes"], "processes of the triage <b>bot</b>");
        let page = browser.get(&path).await;
        assert!(page.body.contains("Version 1: <strong>draft</strong>"));
        // The form to write the next version starts from this one, escaped.
        assert!(page
            .body
            .contains("processes of the triage &#60;b&#62;bot&#60;/b&#62;"));
        let fria_id = fria["id"].as_str().unwrap();
        let submitted = browser
            .post(
                &format!("/console/agents/{agent_id}/fria/{fria_id}/submit"),
                &[("csrf", &page.csrf())],
            )
            .await;
        assert_eq!(submitted.status, 303, "{}", submitted.body);
        let fria = expect_status(app.get(&format!("/agents/{agent_id}/fria"), key).await, 200)
            .await["data"]
            .clone();
        assert_eq!(fria["status"], "submitted");
        let trail = app.audit_events(&tenant.id, fria_id).await;
        assert!(trail.contains(&"fria.submitted".to_owned()), "{trail:?}");
        let page = browser.get(&path).await;
        assert!(page.body.contains("Version 1: <strong>submitted</strong>"));
        assert!(
            !page.body.contains("/submit\""),
            "a submitted FRIA offers no submit"
        );
        // An incomplete form changes nothing.
        let incomplete = browser
            .post(
                &format!("/console/agents/{agent_id}/fria"),
                &[("csrf", &page.csrf()), ("processes", "only this")],
            )
            .await;
        assert_eq!(incomplete.status, 400, "{}", incomplete.body);
        assert_eq!(app.count_rows("frias", &tenant.id).await, 1);

        // The transparency card, as the API generates it.
        let card = browser
            .get(&format!("/console/agents/{agent_id}/transparency-card"))
            .await;
        assert_eq!(card.status, 200);
        let api_card = expect_status(
            app.get(&format!("/agents/{agent_id}/transparency-card"), key)
                .await,
            200,
        )
        .await;
        assert!(card
            .body
            .contains("<h1 id=\"card-heading\">triage-bot</h1>"));
        assert!(card.body.contains(&format!(
            "<dt>Risk level</dt><dd>{}</dd>",
            api_card["data"]["risk_level"].as_str().unwrap()
        )));

        // An incident reported from the form, with its deadline as the API has it.
        let page = browser.get("/console/compliance").await;
        let reported = browser
            .post(
                "/console/incidents",
                &[
                    ("csrf", &page.csrf()),
                    ("agent_id", agent_id),
                    ("title", "Rejected every applicant over 50"),
                    ("severity", "high"),
                    ("description", "A filter rule discriminated by age."),
                    ("impact", ""),
                    ("affected_persons_count", "120"),
                    ("widespread_infringement", "true"),
                ],
            )
            .await;
        assert_eq!(reported.status, 303, "{}", reported.body);
        let incident_path = reported.location().to_owned();
        let incident_id = incident_path.rsplit('/').next().unwrap();
        let incident: Value = expect_status(
            app.get(&format!("/incidents/{incident_id}"), key).await,
            200,
        )
        .await["data"]
            .clone();
        assert_eq!(incident["affected_persons_count"], 120);
        assert_eq!(incident["widespread_infringement"], true);
        assert_eq!(incident["impact"], "", "an empty field is left out");
        let reporting = &incident["reporting"];
        assert_eq!(reporting["deadline_days"], 2);
        let shown = browser.get(&incident_path).await;
        assert_eq!(shown.status, 200);
        assert!(shown.body.contains(&format!(
            "Reporting deadline (2 days, art 73 3 widespread or critical infrastructure): due in 2 d 0 h ({})",
            reporting["due_at"].as_str().unwrap()
        )), "{}", shown.body);
        // A day on, it counts down.
        app.clock.advance(24 * 3_600_000 + 5 * 60_000);
        // (The one-hour session ended meanwhile.)
        browser.sign_in_with_key(key).await;
        let shown = browser.get(&incident_path).await;
        assert!(shown.body.contains("due in 23 h 55 min"), "{}", shown.body);
        let listed = browser.get("/console/compliance").await;
        assert!(listed.body.contains("Rejected every applicant over 50"));
        assert!(listed.body.contains("due in 23 h 55 min"));

        // Updated: mitigated, the authority notified; the deadline is met.
        let updated = browser
            .post(
                &incident_path,
                &[
                    ("csrf", &shown.csrf()),
                    ("status", "mitigated"),
                    ("update_note", "rule removed"),
                    ("authority_notified", "true"),
                ],
            )
            .await;
        assert_eq!(updated.status, 303, "{}", updated.body);
        let incident: Value = expect_status(
            app.get(&format!("/incidents/{incident_id}"), key).await,
            200,
        )
        .await["data"]
            .clone();
        assert_eq!(incident["status"], "mitigated");
        assert_eq!(incident["reporting"]["status"], "met");
        let shown = browser.get(&incident_path).await;
        assert!(shown
            .body
            .contains("met: the authority was notified in time"));
        assert!(shown.body.contains("rule removed"));

        // The evidence pack downloads as the API answers it.
        let pack = browser.get(&format!("{incident_path}/evidence-pack")).await;
        assert_eq!(pack.status, 200, "{}", pack.body);
        assert!(pack.headers["content-disposition"]
            .to_str()
            .unwrap()
            .contains(&format!("evidence-pack-{incident_id}.json")));
        let downloaded: Value = serde_json::from_str(&pack.body).unwrap();
        let api_pack = expect_status(
            app.get(&format!("/incidents/{incident_id}/evidence-pack"), key)
                .await,
            200,
        )
        .await;
        assert_eq!(
            downloaded["incident"]["id"],
            api_pack["data"]["incident"]["id"]
        );

        // A reader sees the pages, no form, and a post is refused.
        let reader = app.key_with_scopes(&tenant, &["governance:read"]).await;
        let mut other = Browser::new(&app);
        other.sign_in_with_key(&reader).await;
        let page = other.get(&path).await;
        assert_eq!(page.status, 200);
        assert!(!page.body.contains("Record the classification"));
        let refused = other
            .post(
                &format!("/console/agents/{agent_id}/risk-classification"),
                &[
                    ("csrf", &page.csrf()),
                    ("risk_level", "minimal"),
                    ("justification", "x"),
                ],
            )
            .await;
        assert_eq!(refused.status, 403);
    }
);
