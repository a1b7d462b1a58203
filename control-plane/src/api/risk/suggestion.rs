//! The risk suggestion: deterministic rules over what Warden knows of an agent, each
//! listed with what it found and the level it points to, so an auditor can reproduce the
//! result from the `inputs` the answer also carries. The suggested level is the highest
//! any matched rule points to (`minimal` when none matches). It is advice: only a
//! classification made by a person (`POST .../risk-classification`) sets the level.
//!
//! The rules (EU AI Act references are to Regulation (EU) 2024/1689):
//! - `prohibited_practice` → `prohibited`: the agent's name, description, framework or
//!   tags name a practice of Article 5 (social scoring, subliminal manipulation,
//!   exploiting vulnerabilities, emotion recognition at work or school, untargeted
//!   facial scraping, predictive policing, biometric categorisation).
//! - `annex_iii_area` → `high`: they name an area of Annex III (biometrics, critical
//!   infrastructure, education, employment, essential services such as credit or
//!   insurance, law enforcement, migration, justice, elections, medical).
//! - `interacts_with_people` → `limited`: they say it talks with people or generates
//!   content for them (Article 50 transparency: chat, assistant, support, customer...).
//! - `enforcement_history` → `limited`: in the last 30 days it was blocked or
//!   quarantined, or a policy refused its requests.
//! - `production_volume` → `limited`: it runs in production and made at least 1,000
//!   model requests in the last 30 days.
//!
//! Matching is on lowercase words: a keyword matches a whole word or the start of one
//! (`recruit` matches `recruiting`), after `_`, `-`, `.` and `/` are read as spaces.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::RiskLevel;

/// What the rules read.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SuggestionInputs {
    pub name: String,
    pub description: Option<String>,
    pub framework: Option<String>,
    pub environment: String,
    #[schema(value_type = Object)]
    pub tags: Value,
    /// `provider/model` the agent used in the last 30 days, by requests, most first.
    pub models_used: Vec<String>,
    pub requests_30d: i64,
    pub blocks_30d: i64,
    pub quarantines_30d: i64,
    pub policy_refusals_30d: i64,
    pub blocked_now: bool,
    pub quarantined_now: bool,
}

/// One rule's verdict.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RuleResult {
    pub rule: &'static str,
    pub matched: bool,
    /// The level the rule points to when it matches.
    pub suggests: RiskLevel,
    /// What it found (the words, the counts), or why it did not match.
    pub evidence: String,
}

const PROHIBITED: &[&str] = &[
    "social scoring",
    "social credit",
    "subliminal",
    "manipulat",
    "exploit vulnerab",
    "emotion recognition",
    "emotion detection",
    "facial scraping",
    "face scraping",
    "predictive policing",
    "biometric categori",
];

const ANNEX_III: &[&str] = &[
    "biometric",
    "facial recognition",
    "critical infrastructure",
    "energy grid",
    "water supply",
    "education",
    "exam",
    "admission",
    "student",
    "employment",
    "recruit",
    "hiring",
    "hr",
    "candidate",
    "resume",
    "worker management",
    "credit",
    "creditworth",
    "loan",
    "lending",
    "insurance",
    "benefit",
    "welfare",
    "emergency",
    "law enforcement",
    "police",
    "migration",
    "asylum",
    "border",
    "visa",
    "justice",
    "court",
    "judicial",
    "election",
    "voting",
    "medical",
    "diagnos",
    "patient",
];

const PEOPLE: &[&str] = &[
    "chat",
    "chatbot",
    "assistant",
    "support",
    "customer",
    "conversation",
    "helpdesk",
    "agent desk",
    "content generat",
    "copywrit",
    "voice",
    "deepfake",
];

/// Requests in 30 days from which a production agent counts as widely used.
const VOLUME_THRESHOLD: i64 = 1_000;

/// The rules' verdicts and the level they suggest.
pub fn suggest(inputs: &SuggestionInputs) -> (RiskLevel, Vec<RuleResult>) {
    let text = words(inputs);
    let keyword_rule = |rule, suggests, keywords: &[&str]| {
        let found: Vec<&str> = keywords
            .iter()
            .copied()
            .filter(|k| contains_word(&text, k))
            .collect();
        RuleResult {
            rule,
            matched: !found.is_empty(),
            suggests,
            evidence: if found.is_empty() {
                "no keyword of the rule in name, description, framework or tags".to_owned()
            } else {
                format!("keywords found: {}", found.join(", "))
            },
        }
    };
    let history = inputs.blocks_30d + inputs.quarantines_30d + inputs.policy_refusals_30d;
    let flagged = history > 0 || inputs.blocked_now || inputs.quarantined_now;
    let busy = inputs.environment == "production" && inputs.requests_30d >= VOLUME_THRESHOLD;
    let rules = vec![
        keyword_rule("prohibited_practice", RiskLevel::Prohibited, PROHIBITED),
        keyword_rule("annex_iii_area", RiskLevel::High, ANNEX_III),
        keyword_rule("interacts_with_people", RiskLevel::Limited, PEOPLE),
        RuleResult {
            rule: "enforcement_history",
            matched: flagged,
            suggests: RiskLevel::Limited,
            evidence: format!(
                "last 30 days: {} blocks, {} quarantines, {} policy refusals; blocked now: {}, quarantined now: {}",
                inputs.blocks_30d,
                inputs.quarantines_30d,
                inputs.policy_refusals_30d,
                inputs.blocked_now,
                inputs.quarantined_now
            ),
        },
        RuleResult {
            rule: "production_volume",
            matched: busy,
            suggests: RiskLevel::Limited,
            evidence: format!(
                "environment {}, {} requests in the last 30 days (threshold {VOLUME_THRESHOLD} in production)",
                inputs.environment, inputs.requests_30d
            ),
        },
    ];
    let level = rules
        .iter()
        .filter(|r| r.matched)
        .map(|r| r.suggests)
        .max()
        .unwrap_or(RiskLevel::Minimal);
    (level, rules)
}

/// The agent's descriptive text, lowercase, separators read as spaces, padded so every
/// word has a space before it.
fn words(inputs: &SuggestionInputs) -> String {
    let mut text = String::from(" ");
    let mut push = |part: &str| {
        text.push_str(part);
        text.push(' ');
    };
    push(&inputs.name);
    push(inputs.description.as_deref().unwrap_or_default());
    push(inputs.framework.as_deref().unwrap_or_default());
    if let Some(tags) = inputs.tags.as_object() {
        for (key, value) in tags {
            push(key);
            push(value.as_str().unwrap_or_default());
        }
    }
    text.to_lowercase()
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { ' ' })
        .collect()
}

/// `keyword` (one or more words) at the start of a word of `text`.
fn contains_word(text: &str, keyword: &str) -> bool {
    text.match_indices(keyword)
        .any(|(at, _)| at > 0 && text.as_bytes()[at - 1] == b' ')
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn agent(name: &str, tags: Value) -> SuggestionInputs {
        SuggestionInputs {
            name: name.to_owned(),
            description: None,
            framework: None,
            environment: "dev".to_owned(),
            tags,
            models_used: Vec::new(),
            requests_30d: 0,
            blocks_30d: 0,
            quarantines_30d: 0,
            policy_refusals_30d: 0,
            blocked_now: false,
            quarantined_now: false,
        }
    }

    #[test]
    fn the_highest_matched_rule_decides() {
        assert_eq!(
            suggest(&agent("batch-summarizer", json!({}))).0,
            RiskLevel::Minimal
        );
        assert_eq!(
            suggest(&agent("support-bot", json!({}))).0,
            RiskLevel::Limited
        );
        let hiring = agent("support-bot", json!({ "domain": "recruiting" }));
        let (level, rules) = suggest(&hiring);
        assert_eq!(level, RiskLevel::High);
        let annex = rules.iter().find(|r| r.rule == "annex_iii_area").unwrap();
        assert!(
            annex.matched && annex.evidence.contains("recruit"),
            "{annex:?}"
        );
        assert_eq!(
            suggest(&agent("social_scoring_engine", json!({}))).0,
            RiskLevel::Prohibited
        );
    }

    #[test]
    fn keywords_match_words_not_fragments() {
        // `hr` is a word of its own, not the inside of `three` or `chrome`.
        assert_eq!(
            suggest(&agent("three-chrome-tabs", json!({}))).0,
            RiskLevel::Minimal
        );
        assert_eq!(
            suggest(&agent("hr-screening", json!({}))).0,
            RiskLevel::High
        );
        // `exam` starts `examples` too: matching is at a word's start, documented.
        assert_eq!(
            suggest(&agent("code-reviewer", json!({ "team": "platform" }))).0,
            RiskLevel::Minimal
        );
    }

    #[test]
    fn enforcement_history_and_volume_are_read_from_the_counts() {
        let mut flagged = agent("nightly-report", json!({}));
        flagged.policy_refusals_30d = 3;
        assert_eq!(suggest(&flagged).0, RiskLevel::Limited);
        let mut busy = agent("nightly-report", json!({}));
        busy.environment = "production".to_owned();
        busy.requests_30d = 999;
        assert_eq!(suggest(&busy).0, RiskLevel::Minimal);
        busy.requests_30d = 1_000;
        assert_eq!(suggest(&busy).0, RiskLevel::Limited);
    }
}
