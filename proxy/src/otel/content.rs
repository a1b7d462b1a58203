//! A request's prompt on its span, for operators who asked for content in their traces
//! (`tracing.capture_content`, or the GenAI instrumentations' variable
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`) and only for tenants whose
//! payload capture is enabled: the span shares the request's capture (the body, its size
//! limit and its room in the buffer), redacted by the tenant's rules on the exporting
//! thread, never on the request path, and written as the conventions'
//! `gen_ai.input.messages` and `gen_ai.system_instructions` (JSON in the shapes of their
//! schemas: a message is a role and its parts; a part is `text`, `tool_call`,
//! `tool_call_response`, `uri`, `blob`, or the API's own object for the rest).
//!
//! An MCP tool call's arguments go the same way, held under the capture's limits, as
//! `gen_ai.tool.call.arguments` on its `execute_tool` span, redacted by the rules whose
//! path starts at `arguments` (as a reviewer sees a held call's).
//!
//! Completions and tool results are never exported: payload capture covers what agents
//! send, not what models or tools answer (spec 2.18), and traces carry no more than it
//! allows.

use serde_json::{json, Map, Value};

use super::record::SpanRecord;
use crate::capture::Capture;
use crate::endpoint::Endpoint;

/// What an agent sent, held for a sampled span until its batch is exported.
#[derive(Debug)]
pub struct PendingContent {
    pub capture: Capture,
    pub shape: Sent,
}

/// What the held body is.
#[derive(Debug, Clone, Copy)]
pub enum Sent {
    /// A model request's body, to `Endpoint`.
    Prompt(Endpoint),
    /// `{"arguments": ...}`: an MCP tool call's arguments.
    ToolArguments,
}

impl PendingContent {
    /// Adds the content's attributes to `span`, redacted: a prompt's messages and the
    /// system instructions given apart from them, or a tool call's arguments; and how
    /// many values the rules changed. Or `warden.content.omitted` with why there is no
    /// content to show.
    pub fn add_to(self, span: &mut SpanRecord) {
        let (redactions, mut body) = match self.capture.redacted_value() {
            Ok(redacted) => redacted,
            Err(reason) => {
                span.str("warden.content.omitted", reason);
                return;
            }
        };
        match self.shape {
            Sent::ToolArguments => {
                let arguments = body["arguments"].take().to_string();
                span.str("gen_ai.tool.call.arguments", &arguments);
            }
            Sent::Prompt(endpoint) => {
                let prompt = Prompt::of(endpoint, &body);
                if let Some(system) = prompt.system {
                    let system = Value::Array(system).to_string();
                    span.str("gen_ai.system_instructions", &system);
                }
                let messages = Value::Array(prompt.messages).to_string();
                span.str("gen_ai.input.messages", &messages);
            }
        }
        span.int("warden.content.redactions", redactions as i64);
    }
}

/// A request's prompt in the conventions' shapes.
#[derive(Debug, Default, PartialEq)]
struct Prompt {
    /// `gen_ai.system_instructions`: parts given apart from the messages (the Responses
    /// API's `instructions`, the Messages API's `system`).
    system: Option<Vec<Value>>,
    /// `gen_ai.input.messages`.
    messages: Vec<Value>,
}

impl Prompt {
    fn of(endpoint: Endpoint, body: &Value) -> Prompt {
        match endpoint {
            Endpoint::ChatCompletions => Prompt {
                system: None,
                messages: list(&body["messages"]).map(chat_message).collect(),
            },
            Endpoint::Responses => Prompt {
                system: text_parts(&body["instructions"]),
                messages: responses_input(&body["input"]),
            },
            Endpoint::Messages | Endpoint::MessagesCountTokens => Prompt {
                system: text_parts(&body["system"]),
                messages: list(&body["messages"]).map(anthropic_message).collect(),
            },
            // The conventions describe no input of an embedding request.
            Endpoint::Embeddings => Prompt::default(),
        }
    }
}

fn list(value: &Value) -> impl Iterator<Item = &Value> {
    value.as_array().into_iter().flatten()
}

fn message(role: &Value, parts: Vec<Value>) -> Value {
    let role = role.as_str().unwrap_or("user");
    json!({ "role": role, "parts": parts })
}

fn text(content: &str) -> Value {
    json!({ "type": "text", "content": content })
}

/// A string as one text part, an array of the API's text blocks as parts (system
/// instructions); `None` when there is nothing.
fn text_parts(value: &Value) -> Option<Vec<Value>> {
    match value {
        Value::String(s) => Some(vec![text(s)]),
        Value::Array(blocks) => Some(blocks.iter().map(content_part).collect()),
        _ => None,
    }
}

/// A chat completions message: its content, its tool calls, or a tool's result.
fn chat_message(m: &Value) -> Value {
    let parts = if m["role"] == "tool" {
        vec![json!({
            "type": "tool_call_response",
            "id": m["tool_call_id"],
            "response": m["content"],
        })]
    } else {
        let calls = list(&m["tool_calls"]).map(|call| {
            json!({
                "type": "tool_call",
                "id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
            })
        });
        content_parts(&m["content"])
            .into_iter()
            .chain(calls)
            .collect()
    };
    let mut out = message(&m["role"], parts);
    if let Some(name) = m["name"].as_str() {
        out["name"] = Value::from(name);
    }
    out
}

/// The Responses API's `input`: a string (one user message) or a list of items.
fn responses_input(input: &Value) -> Vec<Value> {
    match input {
        Value::String(s) => vec![message(&Value::from("user"), vec![text(s)])],
        Value::Array(items) => items.iter().map(responses_item).collect(),
        _ => Vec::new(),
    }
}

fn responses_item(item: &Value) -> Value {
    match item["type"].as_str() {
        Some("function_call") => message(
            &Value::from("assistant"),
            vec![json!({
                "type": "tool_call",
                "id": item["call_id"],
                "name": item["name"],
                "arguments": item["arguments"],
            })],
        ),
        Some("function_call_output") => message(
            &Value::from("tool"),
            vec![json!({
                "type": "tool_call_response",
                "id": item["call_id"],
                "response": item["output"],
            })],
        ),
        Some("message") | None => message(&item["role"], content_parts(&item["content"])),
        // Reasoning items, built-in tool calls: the API's own object.
        Some(_) => message(&Value::from("assistant"), vec![item.clone()]),
    }
}

/// An Anthropic message: text, tool use and tool result blocks.
fn anthropic_message(m: &Value) -> Value {
    message(&m["role"], content_parts(&m["content"]))
}

/// A message's `content` in any of the APIs: a string is one text part, a list is its
/// blocks' parts.
fn content_parts(content: &Value) -> Vec<Value> {
    text_parts(content).unwrap_or_default()
}

/// One block of content, in whichever API's shape: text, a tool call or its result, an
/// image by address or inline; any other block as the API sent it (the conventions'
/// generic part, its `type` kept).
fn content_part(block: &Value) -> Value {
    let kind = block["type"].as_str().unwrap_or_default();
    match kind {
        "text" | "input_text" | "output_text" => match block["text"].as_str() {
            Some(s) => text(s),
            None => block.clone(),
        },
        "tool_use" => json!({
            "type": "tool_call",
            "id": block["id"],
            "name": block["name"],
            "arguments": block["input"],
        }),
        "tool_result" => json!({
            "type": "tool_call_response",
            "id": block["tool_use_id"],
            "response": block["content"],
        }),
        "image_url" => image_address(block["image_url"]["url"].as_str(), block),
        "input_image" => image_address(block["image_url"].as_str(), block),
        "image" if block["source"]["type"] == "base64" => json!({
            "type": "blob",
            "modality": "image",
            "mime_type": block["source"]["media_type"],
            "content": block["source"]["data"],
        }),
        "image" if block["source"]["type"] == "url" => {
            image_address(block["source"]["url"].as_str(), block)
        }
        _ if block.is_object() => block.clone(),
        _ => {
            let mut generic = Map::new();
            generic.insert("type".into(), Value::from("unknown"));
            generic.insert("content".into(), block.clone());
            Value::Object(generic)
        }
    }
}

/// An image named by its address: a `uri` part; a `data:` address, a `blob` part.
fn image_address(url: Option<&str>, block: &Value) -> Value {
    let Some(url) = url else {
        return block.clone();
    };
    if let Some((head, data)) = url.strip_prefix("data:").and_then(|r| r.split_once(',')) {
        let mime = head.strip_suffix(";base64").unwrap_or(head);
        return json!({ "type": "blob", "modality": "image", "mime_type": mime, "content": data });
    }
    json!({ "type": "uri", "modality": "image", "uri": url })
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use bytes::Bytes;
    use opentelemetry::trace::{SpanId, SpanKind, TraceId};
    use warden_shared::snapshot::RedactionRuleState;

    use super::*;
    use crate::capture::tests::tenant;
    use crate::capture::{CaptureBuffer, CaptureMetrics};

    /// A span with `body`, held as `shape` under a 100-byte body limit, made into
    /// attributes.
    fn added(body: &'static [u8], shape: Sent, rules: Vec<RedactionRuleState>) -> SpanRecord {
        let buffer = CaptureBuffer::new(1 << 20, 100, CaptureMetrics::unregistered());
        let mut span = SpanRecord::new(
            TraceId::from(1),
            SpanId::from(1),
            SpanKind::Client,
            SystemTime::UNIX_EPOCH,
        );
        let capture = buffer.hold(tenant(rules), &Bytes::from_static(body));
        span.content = Some(Box::new(PendingContent { capture, shape }));
        span.add_content();
        span
    }

    fn attribute(span: &SpanRecord, key: &str) -> Option<opentelemetry::Value> {
        span.attribute(key)
    }

    fn json_attribute(span: &SpanRecord, key: &str) -> Value {
        match attribute(span, key) {
            Some(opentelemetry::Value::String(text)) => {
                serde_json::from_str(text.as_str()).expect("JSON")
            }
            other => panic!("{key}: {other:?}"),
        }
    }

    #[test]
    fn held_content_becomes_redacted_attributes_or_a_note_of_its_absence() {
        let rule = |path: &str| RedactionRuleState {
            id: "secret".into(),
            field_path: path.into(),
            pattern: None,
        };
        let prompt = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"user":"u-1"}"#;
        let span = added(
            prompt,
            Sent::Prompt(Endpoint::ChatCompletions),
            vec![rule("user")],
        );
        assert_eq!(
            json_attribute(&span, "gen_ai.input.messages"),
            json!([{ "role": "user", "parts": [{ "type": "text", "content": "hi" }] }])
        );
        assert_eq!(
            attribute(&span, "warden.content.redactions"),
            Some(opentelemetry::Value::I64(1))
        );

        let call = br#"{"arguments":{"q":"docs","token":"s3cret"}}"#;
        let span = added(call, Sent::ToolArguments, vec![rule("arguments.token")]);
        assert_eq!(
            json_attribute(&span, "gen_ai.tool.call.arguments"),
            json!({ "q": "docs", "token": "[REDACTED:secret]" })
        );
        assert!(attribute(&span, "gen_ai.input.messages").is_none());

        let span = added(
            &[b'x'; 101],
            Sent::Prompt(Endpoint::ChatCompletions),
            vec![],
        );
        assert_eq!(
            attribute(&span, "warden.content.omitted"),
            Some(opentelemetry::Value::from("too_large"))
        );
        assert!(attribute(&span, "gen_ai.input.messages").is_none());
        let unreadable = added(b"{not json", Sent::ToolArguments, vec![]);
        assert_eq!(
            attribute(&unreadable, "warden.content.omitted"),
            Some(opentelemetry::Value::from("unreadable"))
        );
    }

    fn prompt(endpoint: Endpoint, body: Value) -> Prompt {
        Prompt::of(endpoint, &body)
    }

    #[test]
    fn a_chat_conversation_becomes_messages_of_parts() {
        let body = json!({ "model": "gpt-4o", "messages": [
            { "role": "system", "content": "Be brief." },
            { "role": "user", "name": "ann", "content": [
                { "type": "text", "text": "What is this?" },
                { "type": "image_url", "image_url": { "url": "https://example.com/a.png" } },
                { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBO" } },
                { "type": "input_audio", "input_audio": { "data": "UklG", "format": "wav" } },
            ] },
            { "role": "assistant", "content": null, "tool_calls": [
                { "id": "call_1", "type": "function",
                  "function": { "name": "lookup", "arguments": "{\"q\":\"a\"}" } },
            ] },
            { "role": "tool", "tool_call_id": "call_1", "content": "found" },
        ] });
        assert_eq!(
            prompt(Endpoint::ChatCompletions, body),
            Prompt {
                system: None,
                messages: vec![
                    json!({ "role": "system", "parts": [{ "type": "text", "content": "Be brief." }] }),
                    json!({ "role": "user", "name": "ann", "parts": [
                        { "type": "text", "content": "What is this?" },
                        { "type": "uri", "modality": "image", "uri": "https://example.com/a.png" },
                        { "type": "blob", "modality": "image", "mime_type": "image/png", "content": "iVBO" },
                        { "type": "input_audio", "input_audio": { "data": "UklG", "format": "wav" } },
                    ] }),
                    json!({ "role": "assistant", "parts": [
                        { "type": "tool_call", "id": "call_1", "name": "lookup", "arguments": "{\"q\":\"a\"}" },
                    ] }),
                    json!({ "role": "tool", "parts": [
                        { "type": "tool_call_response", "id": "call_1", "response": "found" },
                    ] }),
                ],
            }
        );
    }

    #[test]
    fn a_responses_request_gives_its_instructions_apart() {
        let simple = json!({ "model": "gpt-4o", "instructions": "Be brief.", "input": "Hi" });
        assert_eq!(
            prompt(Endpoint::Responses, simple),
            Prompt {
                system: Some(vec![json!({ "type": "text", "content": "Be brief." })]),
                messages: vec![
                    json!({ "role": "user", "parts": [{ "type": "text", "content": "Hi" }] })
                ],
            }
        );
        let items = json!({ "model": "gpt-4o", "input": [
            { "role": "user", "content": [
                { "type": "input_text", "text": "Look" },
                { "type": "input_image", "image_url": "https://example.com/b.png" },
            ] },
            { "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}" },
            { "type": "function_call_output", "call_id": "c1", "output": "done" },
            { "type": "reasoning", "id": "rs_1", "summary": [] },
        ] });
        assert_eq!(
            prompt(Endpoint::Responses, items).messages,
            vec![
                json!({ "role": "user", "parts": [
                    { "type": "text", "content": "Look" },
                    { "type": "uri", "modality": "image", "uri": "https://example.com/b.png" },
                ] }),
                json!({ "role": "assistant", "parts": [
                    { "type": "tool_call", "id": "c1", "name": "f", "arguments": "{}" },
                ] }),
                json!({ "role": "tool", "parts": [
                    { "type": "tool_call_response", "id": "c1", "response": "done" },
                ] }),
                json!({ "role": "assistant", "parts": [
                    { "type": "reasoning", "id": "rs_1", "summary": [] },
                ] }),
            ]
        );
    }

    #[test]
    fn a_messages_request_gives_its_system_apart_and_its_blocks_as_parts() {
        let body = json!({ "model": "claude-sonnet-4-5", "max_tokens": 10,
            "system": [{ "type": "text", "text": "Be brief." }],
            "messages": [
                { "role": "user", "content": [
                    { "type": "text", "text": "Weather?" },
                    { "type": "image", "source": { "type": "base64", "media_type": "image/jpeg", "data": "/9j/" } },
                ] },
                { "role": "assistant", "content": [
                    { "type": "tool_use", "id": "tu_1", "name": "weather", "input": { "city": "Oslo" } },
                ] },
                { "role": "user", "content": [
                    { "type": "tool_result", "tool_use_id": "tu_1", "content": "sunny" },
                ] },
            ] });
        assert_eq!(
            prompt(Endpoint::Messages, body),
            Prompt {
                system: Some(vec![json!({ "type": "text", "content": "Be brief." })]),
                messages: vec![
                    json!({ "role": "user", "parts": [
                        { "type": "text", "content": "Weather?" },
                        { "type": "blob", "modality": "image", "mime_type": "image/jpeg", "content": "/9j/" },
                    ] }),
                    json!({ "role": "assistant", "parts": [
                        { "type": "tool_call", "id": "tu_1", "name": "weather", "arguments": { "city": "Oslo" } },
                    ] }),
                    json!({ "role": "user", "parts": [
                        { "type": "tool_call_response", "id": "tu_1", "response": "sunny" },
                    ] }),
                ],
            }
        );
    }

    #[test]
    fn shapes_no_api_sends_give_what_can_be_read_and_never_fail() {
        let odd = [
            json!({ "messages": "not a list" }),
            json!({ "messages": [1, null, { "content": 5 }, { "role": 7, "content": [3] }] }),
            json!([]),
            json!(null),
        ];
        for body in odd {
            for endpoint in [
                Endpoint::ChatCompletions,
                Endpoint::Responses,
                Endpoint::Messages,
                Endpoint::Embeddings,
            ] {
                let prompt = prompt(endpoint, body.clone());
                for message in &prompt.messages {
                    assert!(message["role"].is_string() && message["parts"].is_array());
                }
            }
        }
        assert_eq!(
            prompt(
                Endpoint::ChatCompletions,
                json!({ "messages": [{ "role": "user", "content": [3] }] })
            )
            .messages,
            vec![json!({ "role": "user", "parts": [{ "type": "unknown", "content": 3 }] })]
        );
    }
}
