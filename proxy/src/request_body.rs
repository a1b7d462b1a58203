//! The agent's JSON body: the fields the proxy reads (`Peek`), and the body the provider
//! receives when the proxy must change it (`rewrite`): the provider's model name, and
//! `stream_options.include_usage` for streams whose client did not ask for usage.
//!
//! A rewrite splices members rather than rebuilding the document: every member it does
//! not change is passed on byte for byte, as the agent wrote it.

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use pingora::protocols::http::ServerSession;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::refusal::Refusal;

/// The fields the proxy reads from a request body; the rest is skipped unparsed.
#[derive(Deserialize)]
pub struct Peek<'a> {
    #[serde(borrow, default)]
    pub model: Option<Cow<'a, str>>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    /// The Responses API's bound on generated tokens.
    #[serde(default)]
    pub max_output_tokens: Option<i64>,
}

#[derive(Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// Reads the whole body (answering `Expect: 100-continue` first), refusing more than `max`.
pub async fn read_body(session: &mut ServerSession, max: usize) -> Result<Bytes, Refusal> {
    let headers = &session.req_header().headers;
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let expects_continue = headers
        .get(http::header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    if declared.is_some_and(|length| length > max) {
        // The body stays unread: the connection cannot be reused.
        session.set_keepalive(None);
        return Err(Refusal::BodyTooLarge(max));
    }
    if expects_continue && session.write_continue_response().await.is_err() {
        return Err(Refusal::BadRequest(
            "cannot answer Expect: 100-continue".into(),
        ));
    }
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0).min(max));
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > max {
                    session.set_keepalive(None);
                    return Err(Refusal::BodyTooLarge(max));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body.freeze()),
            Err(_) => return Err(Refusal::BadRequest("cannot read the request body".into())),
        }
    }
}

/// `body` with `model` set to `upstream_model` and, when `inject_usage`,
/// `stream_options.include_usage` set to true (other stream options kept).
pub fn rewrite(body: &[u8], upstream_model: &str, inject_usage: bool) -> Result<Bytes, Refusal> {
    let not_an_object = || Refusal::BadRequest("the body must be a JSON object".into());
    let members: Members = serde_json::from_slice(body).map_err(|_| not_an_object())?;
    let mut out = Object::with_capacity(body.len() + upstream_model.len() + 40);
    let mut stream_options = None;
    for (name, value) in &members.0 {
        match name.as_ref() {
            "model" => {}
            "stream_options" if inject_usage => stream_options = Some(*value),
            _ => out.member(name, value.get().as_bytes()),
        }
    }
    out.member("model", &json_string(upstream_model));
    if inject_usage {
        out.member("stream_options", &with_include_usage(stream_options));
    }
    Ok(Bytes::from(out.finish()))
}

/// The client's stream options (an object, or none) with `include_usage: true`.
fn with_include_usage(options: Option<&RawValue>) -> Vec<u8> {
    let members: Members = options
        .and_then(|raw| serde_json::from_str(raw.get()).ok())
        .unwrap_or_default();
    let mut out = Object::with_capacity(options.map_or(0, |raw| raw.get().len()) + 24);
    for (name, value) in members.0.iter().filter(|(name, _)| name != "include_usage") {
        out.member(name, value.get().as_bytes());
    }
    out.member("include_usage", b"true");
    out.finish()
}

fn json_string(text: &str) -> Vec<u8> {
    // Serializing a string into memory cannot fail.
    serde_json::to_vec(text).unwrap_or_else(|_| b"\"\"".to_vec())
}

/// A JSON object written member by member.
struct Object {
    out: Vec<u8>,
    empty: bool,
}

impl Object {
    fn with_capacity(capacity: usize) -> Object {
        let mut out = Vec::with_capacity(capacity);
        out.push(b'{');
        Object { out, empty: true }
    }

    /// `name` (escaped here) and `value` (JSON text, written as it is).
    fn member(&mut self, name: &str, value: &[u8]) {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        // Escaped straight into the output; writing to memory cannot fail.
        let _ = serde_json::to_writer(&mut self.out, name);
        self.out.push(b':');
        self.out.extend_from_slice(value);
    }

    fn finish(mut self) -> Vec<u8> {
        self.out.push(b'}');
        self.out
    }
}

/// An object's members in order, names unescaped (borrowed when they have no escapes)
/// and values as the raw JSON text they were.
#[derive(Default)]
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

/// A member name, borrowed from the input when it can be.
#[derive(Deserialize)]
struct Name<'a>(#[serde(borrow)] Cow<'a, str>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((Name(name), value)) = map.next_entry::<Name, &RawValue>()? {
                    members.push((name, value));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn rewritten(body: &str, model: &str, inject_usage: bool) -> Value {
        let bytes = rewrite(body.as_bytes(), model, inject_usage).unwrap_or_default();
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    }

    #[test]
    fn the_model_is_replaced_and_every_other_member_kept() {
        let body = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"caf\u00e9 \"q\""}],"temperature":0.5,"n":1,"tools":null}"#;
        let out = rewritten(body, "gpt-4o-mini", false);
        let mut expected: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        expected["model"] = json!("gpt-4o-mini");
        assert_eq!(out, expected);
    }

    #[test]
    fn usage_is_requested_beside_the_clients_stream_options() {
        let plain = rewritten(r#"{"model":"m","stream":true}"#, "m", true);
        assert_eq!(plain["stream_options"], json!({"include_usage": true}));
        let kept = rewritten(
            r#"{"stream_options":{"continuous_usage_stats":true,"include_usage":false},"model":"m"}"#,
            "m",
            true,
        );
        assert_eq!(
            kept["stream_options"],
            json!({"continuous_usage_stats": true, "include_usage": true})
        );
        let null = rewritten(r#"{"model":"m","stream_options":null}"#, "m", true);
        assert_eq!(null["stream_options"], json!({"include_usage": true}));
    }

    #[test]
    fn escaped_and_duplicate_names_come_out_once_and_escaped() {
        let out =
            rewrite(br#"{"model":"a","model":"b","we\"ird":1}"#, "c", false).unwrap_or_default();
        assert_eq!(&out[..], br#"{"we\"ird":1,"model":"c"}"#);
    }

    #[test]
    fn a_body_that_is_not_an_object_is_refused() {
        for body in ["[1]", "\"x\"", "{", ""] {
            assert!(rewrite(body.as_bytes(), "m", true).is_err(), "{body}");
        }
    }
}
