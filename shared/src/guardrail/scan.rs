//! Scanning a JSON body: every string in it, wherever it is (a prompt, a system message,
//! a tool's arguments, an embedding's input), so no field a provider reads is skipped.
//! A finding names its detector and the field's path (`messages[0].content`), never the
//! text it matched. With `redact`, each match is replaced in place by
//! `[REDACTED:<detector>]`.
//!
//! A scan has a deadline: past it, the scan stops with [`ScanError::TimedOut`], and the
//! caller refuses the request (guardrails fail closed).

use std::time::Instant;

use serde_json::Value;

use super::{Finding, Scanner};

/// What a scan found in one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub detector: String,
    pub path: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanError {
    /// The deadline passed before every field was scanned.
    TimedOut,
}

/// Scans every string of `value`; with `redact`, replaces what was found.
pub fn scan_json(
    value: &mut Value,
    scanner: &Scanner,
    redact: bool,
    deadline: Instant,
) -> Result<Vec<Hit>, ScanError> {
    let mut hits = Vec::new();
    let mut path = String::new();
    walk(value, scanner, redact, deadline, &mut path, &mut hits)?;
    Ok(hits)
}

fn walk(
    value: &mut Value,
    scanner: &Scanner,
    redact: bool,
    deadline: Instant,
    path: &mut String,
    hits: &mut Vec<Hit>,
) -> Result<(), ScanError> {
    match value {
        Value::String(text) => {
            if Instant::now() >= deadline {
                return Err(ScanError::TimedOut);
            }
            let mut found = Vec::new();
            scanner.scan(text, &mut found);
            for finding in &found {
                hits.push(Hit {
                    detector: finding.detector.clone(),
                    path: path.clone(),
                });
            }
            if redact && !found.is_empty() {
                *text = redacted(text, found);
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                let length = path.len();
                path.push_str(&format!("[{index}]"));
                walk(item, scanner, redact, deadline, path, hits)?;
                path.truncate(length);
            }
        }
        Value::Object(members) => {
            for (name, member) in members.iter_mut() {
                let length = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(name);
                walk(member, scanner, redact, deadline, path, hits)?;
                path.truncate(length);
            }
        }
        _ => {}
    }
    Ok(())
}

/// `text` with each finding replaced (overlapping ones merged into the first's name).
fn redacted(text: &str, mut found: Vec<Finding>) -> String {
    found.sort_by_key(|f| (f.range.start, std::cmp::Reverse(f.range.end)));
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for finding in found {
        if finding.range.start < at {
            at = at.max(finding.range.end);
            continue;
        }
        out.push_str(&text[at..finding.range.start]);
        out.push_str("[REDACTED:");
        out.push_str(&finding.detector);
        out.push(']');
        at = finding.range.end;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::guardrail::Detector;

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[test]
    fn every_string_is_scanned_and_named_by_its_path() {
        let scanner = Scanner::new(&Detector::ALL, &[]).unwrap();
        let mut body = json!({ "model": "gpt-4o", "messages": [
            { "role": "system", "content": "be brief" },
            { "role": "user", "content": [{ "type": "text", "text": "mail ana@example.com" }] } ] });
        let hits = scan_json(&mut body, &scanner, false, later()).unwrap();
        assert_eq!(
            hits,
            [Hit {
                detector: "email".into(),
                path: "messages[1].content[0].text".into()
            }]
        );
        assert_eq!(
            body["messages"][1]["content"][0]["text"],
            "mail ana@example.com"
        );
    }

    #[test]
    fn redaction_replaces_only_what_was_found() {
        let scanner = Scanner::new(&Detector::ALL, &[]).unwrap();
        let mut body = json!({ "input": ["card 4111111111111111, mail ana@example.com", "clean"] });
        let hits = scan_json(&mut body, &scanner, true, later()).unwrap();
        assert_eq!(hits.len(), 2);
        assert_eq!(
            body,
            json!({ "input": ["card [REDACTED:card_number], mail [REDACTED:email]", "clean"] })
        );
    }

    #[test]
    fn a_scan_past_its_deadline_fails() {
        let scanner = Scanner::new(&Detector::ALL, &[]).unwrap();
        let mut body = json!({ "input": "anything" });
        assert_eq!(
            scan_json(&mut body, &scanner, false, Instant::now()),
            Err(ScanError::TimedOut)
        );
    }
}
