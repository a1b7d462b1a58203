use std::time::Duration;

use serde_json::json;

use super::*;
use crate::guardrail::detect::WINDOW;
use crate::guardrail::Detector;

fn later() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

fn every() -> Scanner {
    Scanner::new(&Detector::ALL, &[]).unwrap()
}

fn hit(detector: &str, path: &str, in_name: bool) -> Hit {
    Hit {
        detector: detector.into(),
        path: path.into(),
        in_name,
    }
}

const OPENAI_KEY: &str = "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12T3BlbkFJMn34Op56Qr78St90Uv12";

#[test]
fn every_string_is_scanned_and_named_by_its_path() {
    let mut body = json!({ "model": "gpt-4o", "messages": [
        { "role": "system", "content": "be brief" },
        { "role": "user", "content": [{ "type": "text", "text": "mail ana@example.com" }] } ] });
    let hits = scan_json(&mut body, &every(), false, later()).unwrap();
    assert_eq!(hits, [hit("email", "messages[1].content[0].text", false)]);
    assert_eq!(
        body["messages"][1]["content"][0]["text"],
        "mail ana@example.com"
    );
}

#[test]
fn redaction_replaces_only_what_was_found() {
    let mut body = json!({ "input": ["card 4111111111111111, mail ana@example.com", "clean"] });
    let hits = scan_json(&mut body, &every(), true, later()).unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(
        body,
        json!({ "input": ["card [REDACTED:card_number], mail [REDACTED:email]", "clean"] })
    );
}

#[test]
fn a_secret_used_as_a_name_is_found_and_never_shown() {
    let mut body =
        json!({ "metadata": { OPENAI_KEY: "x", "owner": { OPENAI_KEY: "ana@example.com" } } });
    let mut hits = scan_json(&mut body, &every(), false, later()).unwrap();
    hits.sort_by(|a, b| (&a.path, &a.detector).cmp(&(&b.path, &b.detector)));
    assert_eq!(
        hits,
        [
            hit("openai_key", "metadata.*", true),
            hit("email", "metadata.owner.*", false),
            hit("openai_key", "metadata.owner.*", true),
        ]
    );
}

#[test]
fn a_name_another_guardrail_would_find_is_not_shown_either() {
    // This guardrail looks for e-mail addresses only; the name holds a key.
    let emails = Scanner::new(&[Detector::Email], &[]).unwrap();
    let mut body = json!({ OPENAI_KEY: "mail ana@example.com" });
    let hits = scan_json(&mut body, &emails, false, later()).unwrap();
    assert_eq!(hits, [hit("email", "*", false)]);
}

#[test]
fn redaction_renames_a_name_that_held_a_secret() {
    let mut body = json!({ "metadata": { OPENAI_KEY: "x", "ana@example.com": "y", "plain": "z" } });
    scan_json(&mut body, &every(), true, later()).unwrap();
    assert_eq!(
        body,
        json!({ "metadata": { "[REDACTED:openai_key]": "x", "[REDACTED:email]": "y", "plain": "z" } })
    );
}

#[test]
fn a_scan_past_its_deadline_fails() {
    let mut body = json!({ "input": "anything" });
    assert_eq!(
        scan_json(&mut body, &every(), false, Instant::now()),
        Err(ScanError::TimedOut)
    );
}

#[test]
fn the_deadline_holds_inside_one_long_string() {
    // One string of 32 MiB: far more than a millisecond's scanning on any machine.
    let long = "call +44 20 7946 0958 or mail nobody at example dot com ".repeat(600_000);
    let mut body = json!({ "input": long });
    let deadline = Instant::now() + Duration::from_millis(1);
    let started = Instant::now();
    assert_eq!(
        scan_json(&mut body, &every(), false, deadline),
        Err(ScanError::TimedOut)
    );
    // Stopped within a window or two of the deadline, not after the whole string.
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_match_across_a_window_boundary_is_found_whole() {
    for offset in [1, 10, 30, OPENAI_KEY.len() - 1] {
        let mut text = "x ".repeat(WINDOW / 2);
        text.truncate(WINDOW - offset - 1);
        text.push(' ');
        text.push_str(OPENAI_KEY);
        text.push_str(&" y".repeat(WINDOW));
        let mut body = json!({ "input": text });
        let hits = scan_json(&mut body, &every(), true, later()).unwrap();
        assert_eq!(hits, [hit("openai_key", "input", false)], "offset {offset}");
        let redacted = body["input"].as_str().unwrap();
        assert!(!redacted.contains("T3BlbkFJ"), "offset {offset}");
        assert!(redacted.contains("[REDACTED:openai_key]"));
    }
}

#[test]
fn a_tenant_pattern_longer_than_a_window_is_found_whole() {
    let scanner = Scanner::new(&[], &[("blob".into(), "BLOB:[a-z]+".into())]).unwrap();
    let text = format!("a BLOB:{} b", "q".repeat(3 * WINDOW));
    let mut body = json!({ "input": text });
    let hits = scan_json(&mut body, &scanner, true, later()).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(body["input"], json!("a [REDACTED:blob] b"));
}

#[test]
fn a_private_key_is_redacted_whole() {
    let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAv1bX\nZ9qk3Lw+/8==\n-----END RSA PRIVATE KEY-----";
    // As a string, and as JSON inside a string (its line breaks escaped).
    let escaped = pem.replace('\n', "\\n");
    for key in [pem.to_owned(), escaped] {
        let mut body = json!({ "input": format!("here: {key} thanks") });
        scan_json(&mut body, &every(), true, later()).unwrap();
        assert_eq!(
            body["input"],
            json!("here: [REDACTED:private_key] thanks"),
            "{key}"
        );
    }
    // Cut short, without its END line: all of the rest is the key's.
    let mut body =
        json!({ "input": "key: -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC" });
    scan_json(&mut body, &every(), true, later()).unwrap();
    assert_eq!(body["input"], json!("key: [REDACTED:private_key]"));
}
