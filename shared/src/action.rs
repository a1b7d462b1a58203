//! The digest of an action, which an approval can be bound to (`policy::Releases`): a
//! reviewer approves what was held, and only that same action is let through again.
//!
//! - A model request: its provider, the operation (the endpoint: the same body asks for
//!   a count of tokens on one and for a generation on another), the model asked for and
//!   the SHA-256 of its body as sent (a retry by an SDK sends the same bytes; another
//!   prompt is another action).
//! - A tool call: the MCP server's id, the tool, its arguments as canonical JSON
//!   (object members sorted, no white space: the same arguments in another order are
//!   the same action) and the fingerprint of the tool's approved definition (a tool
//!   whose definition changed is another action).
//!
//! Each part is length-prefixed before hashing, so no two actions share an input.

use sha2::{Digest, Sha256};

use crate::registry::Provider;

/// The digest of a model request (hex SHA-256) to `operation` (the endpoint's stable
/// name, e.g. `chat.completions`, `messages.count_tokens`).
pub fn model_request(provider: Provider, operation: &str, model: &str, body: &[u8]) -> String {
    let body_digest = Sha256::digest(body);
    digest(&[
        b"model",
        provider.as_str().as_bytes(),
        operation.as_bytes(),
        model.as_bytes(),
        &body_digest,
    ])
}

/// The digest of a tool call (hex SHA-256).
pub fn tool_call(
    server_id: &str,
    tool: &str,
    arguments: &serde_json::Value,
    definition_fingerprint: &str,
) -> String {
    let mut canonical = Vec::new();
    write_canonical(&mut canonical, arguments);
    digest(&[
        b"tool",
        server_id.as_bytes(),
        tool.as_bytes(),
        &canonical,
        definition_fingerprint.as_bytes(),
    ])
}

/// Whether `text` has the form of a digest: 64 hex digits.
pub fn is_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn digest(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    crate::keys::hex(&hasher.finalize())
}

/// JSON with object members in code-point order and no white space, whatever order
/// serde_json's maps keep.
fn write_canonical(out: &mut Vec<u8>, value: &serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut members: Vec<_> = map.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (index, (name, member)) in members.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_scalar(out, &Value::String(name.clone()));
                out.push(b':');
                write_canonical(out, member);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_canonical(out, item);
            }
            out.push(b']');
        }
        scalar => write_scalar(out, scalar),
    }
}

fn write_scalar(out: &mut Vec<u8>, value: &serde_json::Value) {
    // Writing a scalar into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_same_arguments_in_any_order_are_one_action_and_others_are_not() {
        let a = tool_call(
            "mcp_1",
            "delete_branch",
            &json!({ "repo": "w", "branch": "feature-x" }),
            "f1",
        );
        let reordered: serde_json::Value =
            serde_json::from_str(r#"{"branch":"feature-x","repo":"w"}"#).unwrap();
        assert_eq!(a, tool_call("mcp_1", "delete_branch", &reordered, "f1"));
        let main = tool_call(
            "mcp_1",
            "delete_branch",
            &json!({ "repo": "w", "branch": "main" }),
            "f1",
        );
        assert_ne!(a, main);
        // Another definition of the tool, another server: other actions.
        assert_ne!(a, tool_call("mcp_1", "delete_branch", &reordered, "f2"));
        assert_ne!(a, tool_call("mcp_2", "delete_branch", &reordered, "f1"));
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn model_requests_are_told_apart_by_body_model_operation_and_provider() {
        let body = br#"{"model":"gpt-4o","messages":[]}"#;
        let chat = "chat.completions";
        let one = model_request(Provider::Openai, chat, "gpt-4o", body);
        assert_eq!(one, model_request(Provider::Openai, chat, "gpt-4o", body));
        assert_ne!(one, model_request(Provider::Openai, chat, "gpt-4o", b"{}"));
        assert_ne!(
            one,
            model_request(Provider::Openai, chat, "gpt-4o-mini", body)
        );
        assert_ne!(
            one,
            model_request(Provider::Anthropic, chat, "gpt-4o", body)
        );
        assert_ne!(
            one,
            model_request(Provider::Openai, "responses", "gpt-4o", body)
        );
        let count = model_request(Provider::Anthropic, "messages.count_tokens", "c", body);
        assert_ne!(
            count,
            model_request(Provider::Anthropic, "messages", "c", body)
        );
    }

    #[test]
    fn parts_cannot_run_into_each_other() {
        assert_ne!(
            tool_call("ab", "c", &json!(null), "f"),
            tool_call("a", "bc", &json!(null), "f")
        );
    }
}
