//! A usage record as JSON, written by hand (see [`super::batch_body`] for why). The
//! shape is the one the control plane's `ProxyUsageRecord` reads; the tests check the
//! output against serde's rendering of the same values.

use warden_shared::timestamp::Timestamp;

use super::UsageRecord;

/// About what one record takes, to size the buffer once.
pub const RECORD_BYTES: usize = 400;

/// Appends `record`, its decision naming results list `list`.
pub fn record(out: &mut Vec<u8>, record: &UsageRecord, list: Option<usize>) {
    out.extend_from_slice(b"{\"record_id\":");
    string(out, &record.record_id);
    out.extend_from_slice(b",\"tenant_id\":");
    string(out, &record.key.tenant_id);
    out.extend_from_slice(b",\"agent_id\":");
    string(out, &record.key.agent_id);
    out.extend_from_slice(b",\"model_provider\":");
    string(out, record.model_provider.as_str());
    out.extend_from_slice(b",\"model_name\":");
    string(out, &record.model_name);
    out.extend_from_slice(b",\"request_type\":");
    string(out, record.request_type);
    out.extend_from_slice(b",\"input_tokens\":");
    integer(out, record.input_tokens);
    out.extend_from_slice(b",\"output_tokens\":");
    integer(out, record.output_tokens);
    out.extend_from_slice(b",\"recorded_at\":");
    timestamp(out, record.recorded_at);
    out.extend_from_slice(b",\"api_key_id\":");
    string(out, &record.key.id);
    if let Some((evaluation, list)) = record.evaluation.as_ref().zip(list) {
        out.extend_from_slice(b",\"evaluation\":{\"model\":");
        string(out, &evaluation.model);
        out.extend_from_slice(b",\"evaluated_at\":");
        timestamp(out, evaluation.evaluated_at);
        out.extend_from_slice(b",\"results\":");
        integer(out, i64::try_from(list).unwrap_or(i64::MAX));
        out.push(b'}');
    }
    if let Some(capture) = &record.capture {
        out.extend_from_slice(b",\"capture\":");
        capture.write(out);
    }
    if let Some(call) = &record.tool_call {
        out.extend_from_slice(b",\"tool_call\":{\"server_id\":");
        string(out, &call.server_id);
        out.extend_from_slice(b",\"server\":");
        string(out, &call.server);
        out.extend_from_slice(b",\"tool\":");
        string(out, &call.tool);
        out.extend_from_slice(b",\"outcome\":");
        string(out, call.outcome);
        out.extend_from_slice(b",\"decision\":");
        string(out, call.decision);
        if let Some(policy_id) = call.policy_id {
            out.extend_from_slice(b",\"policy_id\":");
            integer(out, policy_id);
        }
        out.extend_from_slice(b",\"latency_ms\":");
        integer(out, call.latency_ms);
        out.push(b'}');
    }
    out.push(b'}');
}

/// A JSON string. Ids, providers and most model names need no escape: they are copied
/// after one check; anything else goes through serde_json's escaping.
pub fn string(out: &mut Vec<u8>, value: &str) {
    if value.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(value.as_bytes());
        out.push(b'"');
    } else if serde_json::to_writer(&mut *out, value).is_err() {
        // Writing into a Vec cannot fail; an empty string keeps the JSON whole anyway.
        out.extend_from_slice(b"\"\"");
    }
}

fn integer(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn timestamp(out: &mut Vec<u8>, at: Timestamp) {
    match at.rfc3339_bytes() {
        Some(text) => {
            out.push(b'"');
            out.extend_from_slice(&text);
            out.push(b'"');
        }
        None => string(out, &at.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};
    use warden_shared::policy::Outcome;
    use warden_shared::registry::Provider;

    use super::*;
    use crate::decisions::results;
    use crate::test_fixtures::{key, no_nvidia};
    use crate::usage::{batch_body, RecordEvaluation};

    fn record(record_id: &str, model_name: &str, decided: bool) -> UsageRecord {
        UsageRecord {
            record_id: record_id.into(),
            key: key("ak_01KEY", "ten_01TENANT", "agt_01AGENT"),
            model_provider: Provider::Anthropic,
            model_name: model_name.into(),
            request_type: "chat.completions",
            input_tokens: 12,
            output_tokens: -3,
            recorded_at: Timestamp::from_millis(1_764_000_000_123),
            budget: None,
            evaluation: decided.then(|| RecordEvaluation {
                model: format!("anthropic/{model_name}"),
                evaluated_at: Timestamp::from_millis(951_782_400_000),
                policy_results: results(&no_nvidia(), Outcome::Pass),
            }),
            capture: None,
            tool_call: None,
        }
    }

    #[test]
    fn records_read_back_as_the_values_they_hold() {
        let odd_model = "claude \"q\\\\uote\"\n\u{1}é";
        let records = [
            record("usg_1", "claude-3-5-sonnet", false),
            record("usg_2", odd_model, true),
        ];
        let body = batch_body("batch \"1\"", &records).expect("serialized");
        let read: Value = serde_json::from_slice(&body).expect("valid JSON");
        let plain = |id: &str, model: &str| {
            json!({
                "record_id": id, "tenant_id": "ten_01TENANT", "agent_id": "agt_01AGENT",
                "model_provider": "anthropic", "model_name": model,
                "request_type": "chat.completions", "input_tokens": 12, "output_tokens": -3,
                "recorded_at": "2025-11-24T16:00:00.123Z", "api_key_id": "ak_01KEY",
            })
        };
        let mut decided = plain("usg_2", odd_model);
        decided["evaluation"] = json!({
            "model": format!("anthropic/{odd_model}"),
            "evaluated_at": "2000-02-29T00:00:00.000Z",
            "results": 0,
        });
        assert_eq!(read["batch_id"], json!("batch \"1\""));
        assert_eq!(
            read["records"],
            json!([plain("usg_1", "claude-3-5-sonnet"), decided])
        );
        assert_eq!(read["result_lists"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            read["result_lists"][0][0]["policy_name"],
            json!("no \"nvidia\"")
        );
    }

    #[test]
    fn a_batch_without_decisions_has_no_result_lists() {
        let body = batch_body("b", &[record("usg_1", "gpt-4o", false)]).expect("serialized");
        let read: Value = serde_json::from_slice(&body).expect("valid JSON");
        assert_eq!(
            read.as_object()
                .map(|o| o.keys().cloned().collect::<Vec<_>>()),
            Some(vec!["batch_id".to_owned(), "records".to_owned()])
        );
    }

    #[test]
    fn strings_are_escaped_only_when_they_must_be() {
        for text in [
            "",
            "plain",
            "é ü",
            "a\"b",
            "back\\slash",
            "tab\tnew\nline",
            "\u{7f}",
        ] {
            let mut out = Vec::new();
            string(&mut out, text);
            assert_eq!(
                String::from_utf8(out).expect("utf-8"),
                serde_json::to_string(text).expect("serde")
            );
        }
    }
}
