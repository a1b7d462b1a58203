//! SAML single sign-on against a real IdP: `idp.py` makes key pairs and signs responses
//! with signxml (exclusive C14N, RSA-SHA256) in a virtual environment from PyPI, answering
//! the AuthnRequests Warden redirects to it. Every attack a SAML service provider must
//! resist is posted to the assertion consumer service and refused without a session.

mod console;

use std::path::{Path, PathBuf};
use std::process::Command;

use reqwest::redirect::Policy;
use serde_json::{json, Value};

use crate::helpers::{expect_error, expect_status, TestApp, TestTenant};
use crate::python::venv_python;

const IDP_ENTITY_ID: &str = "https://idp.example.com/saml";
const IDP_SSO_URL: &str = "https://idp.example.com/saml/sso";

/// The test IdP: its Python and a folder of key pairs (`idp`, `other`, `expired`).
struct Idp {
    python: PathBuf,
    keys: tempfile::TempDir,
}

impl Idp {
    fn start() -> Idp {
        let python = venv_python(
            "saml-idp",
            &["signxml==4.5.1", "cryptography==50.0.2", "lxml==6.1.3"],
        );
        let keys = tempfile::tempdir().expect("a key folder");
        for (name, expired) in [("idp", false), ("other", false), ("expired", true)] {
            let mut command = Command::new(&python);
            command
                .arg(script())
                .args(["keypair"])
                .arg(keys.path())
                .arg(name);
            if expired {
                command.arg("--expired");
            }
            assert!(command.status().expect("python runs").success());
        }
        Idp { python, keys }
    }

    fn file(&self, name: &str) -> String {
        self.keys.path().join(name).display().to_string()
    }

    fn cert(&self, name: &str) -> String {
        std::fs::read_to_string(self.keys.path().join(format!("{name}.cert.pem"))).unwrap()
    }

    /// The base64 SAMLResponse the IdP posts for the AuthnRequest in `redirect_url`.
    fn respond(&self, redirect_url: &str, email: &str, variant: &str, extra: Value) -> String {
        let mut args = json!({
            "redirect_url": redirect_url, "variant": variant, "email": email,
            "victim_email": "victim@example.com", "idp_entity_id": IDP_ENTITY_ID,
            "key": self.file("idp.key.pem"), "cert": self.file("idp.cert.pem"),
            "other_key": self.file("other.key.pem"), "other_cert": self.file("other.cert.pem"),
        });
        for (name, value) in extra.as_object().into_iter().flatten() {
            args[name] = value.clone();
        }
        let output = Command::new(&self.python)
            .arg(script())
            .arg("respond")
            .arg(args.to_string())
            .output()
            .expect("python runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/api/sso/idp.py")
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

fn config_body(idp: &Idp, cert: &str) -> Value {
    json!({ "provider_name": "Test IdP", "idp_entity_id": IDP_ENTITY_ID,
            "idp_sso_url": IDP_SSO_URL, "idp_x509_cert": idp.cert(cert) })
}

/// An enterprise tenant with SSO configured for the test IdP and enabled.
async fn sso_tenant(app: &TestApp, idp: &Idp) -> TestTenant {
    let tenant = app.new_tenant("enterprise").await;
    expect_status(
        app.post("/sso/config", &tenant.admin_key, config_body(idp, "idp"))
            .await,
        201,
    )
    .await;
    let enabled = app.post("/sso/enable", &tenant.admin_key, json!({})).await;
    assert_eq!(enabled.status().as_u16(), 204);
    tenant
}

/// Starts a login as a browser does: the URL Warden redirects to.
async fn start_login(app: &TestApp, tenant_id: &str, relay_state: &str) -> String {
    let response = no_redirects()
        .get(format!(
            "{}/api/v1/sso/{tenant_id}/saml/login?relay_state={relay_state}",
            app.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 302);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.starts_with(IDP_SSO_URL), "{location}");
    location
}

async fn post_acs(app: &TestApp, tenant_id: &str, saml_response: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/api/v1/sso/{tenant_id}/saml/acs", app.base))
        .form(&[
            ("SAMLResponse", saml_response),
            ("RelayState", "/dashboard"),
        ])
        .send()
        .await
        .unwrap()
}

db_test!(
    an_admin_configures_sso_and_a_user_signs_in_through_the_idp,
    |app| {
        let idp = Idp::start();

        // Plans without SSO are refused first, whatever they send; enabling needs a config.
        let starter = app.new_tenant("starter").await;
        expect_error(
            app.post(
                "/sso/config",
                &starter.admin_key,
                json!(["not even an object"]),
            )
            .await,
            403,
            "sso_not_in_plan",
        )
        .await;
        let tenant = app.new_tenant("enterprise").await;
        let admin = tenant.admin_key.clone();
        expect_error(
            app.post("/sso/enable", &admin, json!({})).await,
            400,
            "sso_not_configured",
        )
        .await;
        let none = expect_status(app.get("/sso/config", &admin).await, 200).await;
        assert_eq!(none["data"], Value::Null);

        // The certificate must be one valid X.509 certificate.
        for bad in [idp.cert("expired"), "not a certificate".to_owned()] {
            let mut body = config_body(&idp, "idp");
            body["idp_x509_cert"] = json!(bad);
            let refused = expect_error(
                app.post("/sso/config", &admin, body).await,
                422,
                "validation_failed",
            )
            .await;
            assert_eq!(refused["error"]["details"]["field"], json!("idp_x509_cert"));
        }
        let created = expect_status(
            app.post("/sso/config", &admin, config_body(&idp, "idp"))
                .await,
            201,
        )
        .await;
        assert_eq!(created["data"]["created"], json!(true));
        let replaced = expect_status(
            app.post("/sso/config", &admin, config_body(&idp, "idp"))
                .await,
            200,
        )
        .await;
        assert_eq!(replaced["data"]["created"], json!(false));
        assert_eq!(replaced["data"]["id"], created["data"]["id"]);
        let shown = expect_status(app.get("/sso/config", &admin).await, 200).await;
        assert_eq!(shown["data"]["enabled"], json!(false));
        assert_eq!(shown["data"]["auto_provision"], json!(true));
        assert!(shown["data"].get("idp_x509_cert").is_none());
        assert!(!shown.to_string().contains("BEGIN CERTIFICATE"));
        assert_eq!(shown["data"]["idp_cert_sha256"].as_str().unwrap().len(), 95);
        // ISO 8601 UTC like every time of the API: the test IdP's certificate lasts a year.
        let expires = shown["data"]["idp_cert_expires_at"].as_str().unwrap();
        let expires = warden_shared::timestamp::Timestamp::parse_rfc3339(expires).expect(expires);
        let in_a_year = app.clock.now().as_millis() + 365 * 86_400_000;
        assert!(
            (expires.as_millis() - in_a_year).abs() < 2 * 86_400_000,
            "{expires}"
        );

        // The SP as the IdP imports it.
        let sp = expect_status(app.get("/sso/metadata", &admin).await, 200).await;
        assert_eq!(
            sp["data"]["name_id_format"],
            json!("urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress")
        );
        let acs_url = sp["data"]["acs_url"].as_str().unwrap().to_owned();
        let xml = reqwest::get(sp["data"]["metadata_url"].as_str().unwrap())
            .await
            .unwrap();
        assert_eq!(xml.status().as_u16(), 200);
        let xml = xml.text().await.unwrap();
        assert!(
            xml.contains(&acs_url) && xml.contains("emailAddress"),
            "{xml}"
        );

        // Not enabled yet: no login.
        let early = no_redirects()
            .get(format!("{}/api/v1/sso/{}/saml/login", app.base, tenant.id))
            .send()
            .await
            .unwrap();
        expect_error(early, 403, "sso_not_enabled").await;
        assert_eq!(
            app.post("/sso/enable", &admin, json!({}))
                .await
                .status()
                .as_u16(),
            204
        );

        // A user signs in through the IdP; unknown, they are provisioned with read scopes.
        let email = format!("ada-{}@example.com", tenant.id.to_lowercase());
        let redirect = start_login(&app, &tenant.id, "/dashboard").await;
        let saml_response = idp.respond(&redirect, &email, "valid", json!({}));
        let session = expect_status(post_acs(&app, &tenant.id, &saml_response).await, 200).await;
        assert_eq!(session["data"]["expires_in"], json!(3600));
        assert_eq!(session["data"]["relay_state"], json!("/dashboard"));
        let token = session["data"]["access_token"].as_str().unwrap().to_owned();
        let me = expect_status(app.get("/auth/me", &token).await, 200).await;
        assert_eq!(me["data"]["tenant_id"], json!(tenant.id));
        expect_status(app.get("/agents", &token).await, 200).await;
        expect_error(
            app.post("/agents", &token, json!({ "name": "x" })).await,
            403,
            "insufficient_scope",
        )
        .await;

        // The same response again is a replay.
        expect_error(
            post_acs(&app, &tenant.id, &saml_response).await,
            401,
            "saml_response_invalid",
        )
        .await;

        // Without provisioning, only known users sign in.
        let mut body = config_body(&idp, "idp");
        body["auto_provision"] = json!(false);
        expect_status(app.post("/sso/config", &admin, body).await, 200).await;
        let redirect = start_login(&app, &tenant.id, "").await;
        let stranger = idp.respond(&redirect, "stranger@example.com", "valid", json!({}));
        expect_error(
            post_acs(&app, &tenant.id, &stranger).await,
            403,
            "sso_user_not_provisioned",
        )
        .await;
        let redirect = start_login(&app, &tenant.id, "").await;
        let known = idp.respond(&redirect, &email, "valid", json!({}));
        expect_status(post_acs(&app, &tenant.id, &known).await, 200).await;

        // Disabling keeps the configuration and stops logins.
        assert_eq!(
            app.post("/sso/disable", &admin, json!({}))
                .await
                .status()
                .as_u16(),
            204
        );
        let kept = expect_status(app.get("/sso/config", &admin).await, 200).await;
        assert_eq!(kept["data"]["enabled"], json!(false));
        expect_error(
            post_acs(&app, &tenant.id, &known).await,
            403,
            "sso_not_enabled",
        )
        .await;

        let events = app
            .audit_events(&tenant.id, created["data"]["id"].as_str().unwrap())
            .await;
        for expected in [
            "sso.configured",
            "sso.updated",
            "sso.enabled",
            "sso.disabled",
        ] {
            assert!(
                events.iter().any(|e| e == expected),
                "{expected} in {events:?}"
            );
        }
    }
);

db_test!(
    forged_and_misdirected_responses_are_refused_without_a_session,
    |app| {
        let idp = Idp::start();
        let tenant = sso_tenant(&app, &idp).await;
        let other = sso_tenant(&app, &idp).await;
        let users_before = app.count_rows("users", &tenant.id).await;
        let attacker = "victim@example.com.evil.example.com";
        let ada = format!("ada-{}@example.com", tenant.id.to_lowercase());
        let variants: [(&str, &str); 14] = [
            ("unsigned", ada.as_str()),
            ("other_key", ada.as_str()),
            ("altered_name_id", ada.as_str()),
            ("altered_attribute", ada.as_str()),
            ("xsw_sibling", ada.as_str()),
            ("xsw_wrapped", ada.as_str()),
            ("comment_in_name_id", attacker),
            ("expired", ada.as_str()),
            ("not_yet_valid", ada.as_str()),
            ("wrong_audience", ada.as_str()),
            ("wrong_destination", ada.as_str()),
            ("wrong_issuer", ada.as_str()),
            ("doctype", ada.as_str()),
            ("valid", ada.as_str()),
        ];
        for (variant, email) in variants {
            let redirect = start_login(&app, &tenant.id, "").await;
            // The last one is valid, but answers the other tenant's SP: its audience,
            // destination, recipient and request are the other tenant's.
            let (target, saml_response) = if variant == "valid" {
                let elsewhere = start_login(&app, &other.id, "").await;
                (
                    &tenant.id,
                    idp.respond(&elsewhere, email, variant, json!({})),
                )
            } else {
                (
                    &tenant.id,
                    idp.respond(&redirect, email, variant, json!({})),
                )
            };
            let refused = post_acs(&app, target, &saml_response).await;
            let body = expect_error(refused, 401, "saml_response_invalid").await;
            eprintln!("{variant}: {}", body["error"]["message"]);
            assert!(body["data"].is_null() && body.get("access_token").is_none());
        }
        // Even addressed to this tenant's ACS, an assertion for the other tenant's SP (its
        // audience, its request) is refused.
        let sp = expect_status(app.get("/sso/metadata", &tenant.admin_key).await, 200).await;
        let elsewhere = start_login(&app, &other.id, "").await;
        let readdressed = idp.respond(
            &elsewhere,
            &ada,
            "valid",
            json!({ "acs_url": sp["data"]["acs_url"] }),
        );
        let body = expect_error(
            post_acs(&app, &tenant.id, &readdressed).await,
            401,
            "saml_response_invalid",
        )
        .await;
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Audience"),
            "{body}"
        );
        assert_eq!(app.count_rows("users", &tenant.id).await, users_before);
        // The same IdP's valid answer to this tenant's own request still works.
        let redirect = start_login(&app, &tenant.id, "").await;
        let valid = idp.respond(&redirect, &ada, "valid", json!({}));
        expect_status(post_acs(&app, &tenant.id, &valid).await, 200).await;
    }
);

db_test!(
    login_starts_and_responses_share_a_per_address_allowance,
    |config| config.auth.sso_logins_per_ip = 3,
    |app| {
        let idp = Idp::start();
        let tenant = sso_tenant(&app, &idp).await;
        let redirect = start_login(&app, &tenant.id, "").await;
        start_login(&app, &tenant.id, "").await;
        let saml_response = idp.respond(&redirect, "cap@example.com", "unsigned", json!({}));
        expect_error(
            post_acs(&app, &tenant.id, &saml_response).await,
            401,
            "saml_response_invalid",
        )
        .await;
        // The fourth from this address within the window is refused before any work.
        expect_error(
            post_acs(&app, &tenant.id, &saml_response).await,
            429,
            "rate_limited",
        )
        .await;
        let started = no_redirects()
            .get(format!("{}/api/v1/sso/{}/saml/login", app.base, tenant.id))
            .send()
            .await
            .unwrap();
        expect_error(started, 429, "rate_limited").await;
    }
);
