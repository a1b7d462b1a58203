//! What a request is, as approvals bound to an action and guardrails see it: a model
//! request's body as sent to one endpoint, or a tool call with its arguments.

use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use warden_shared::registry::Provider;

/// The action a request is, for approvals bound to it (`warden_shared::action`): its
/// digest is computed only when a policy asks for it.
#[derive(Debug, Clone, Copy)]
pub enum Action<'a> {
    /// A model request: the operation it asks for (its endpoint's `request_type`, since
    /// the same body means another thing on another endpoint) and its body as sent.
    Model { operation: &'a str, body: &'a [u8] },
    /// A tool call on an MCP server, with the fingerprint of the tool's approved
    /// definition.
    Tool {
        server_id: &'a str,
        tool: &'a str,
        arguments: &'a Value,
        fingerprint: &'a str,
    },
}

impl Action<'_> {
    pub fn digest(&self, provider: Provider, model: &str) -> String {
        match *self {
            Action::Model { operation, body } => {
                warden_shared::action::model_request(provider, operation, model, body)
            }
            Action::Tool {
                server_id,
                tool,
                arguments,
                fingerprint,
            } => warden_shared::action::tool_call(server_id, tool, arguments, fingerprint),
        }
    }

    /// What guardrails scan: the body as JSON, or the tool call's arguments. A body is
    /// read whole, and refused (the error says why, never quoting it) when a provider
    /// could read it otherwise than the scan would: a member named twice in one object
    /// (parsers keep the first or the last), text that is not Unicode (invalid UTF-8, a
    /// lone surrogate), or anything that is not JSON.
    pub fn content(&self) -> Result<Value, String> {
        match *self {
            Action::Model { body, .. } => {
                let mut reader = serde_json::Deserializer::from_slice(body);
                let value = Unique
                    .deserialize(&mut reader)
                    .and_then(|value| reader.end().map(|()| value));
                value.map_err(|error| format!("the body cannot be scanned: {error}"))
            }
            Action::Tool { arguments, .. } => Ok(arguments.clone()),
        }
    }
}

/// A JSON value read as `serde_json::Value` reads it, but refusing an object that names
/// a member twice (`Value` would keep the last copy, unscanned copies before it).
struct Unique;

impl<'de> DeserializeSeed<'de> for Unique {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, reader: D) -> Result<Value, D::Error> {
        reader.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(items.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = items.next_element_seed(Unique)? {
            out.push(item);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(name) = members.next_key::<String>()? {
            if out.contains_key(&name) {
                // The name itself is not quoted: it may be the very secret.
                return Err(A::Error::custom("an object names a member twice"));
            }
            let value = members.next_value_seed(Unique)?;
            out.insert(name, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(body: &[u8]) -> Result<Value, String> {
        Action::Model {
            operation: "chat.completions",
            body,
        }
        .content()
    }

    #[test]
    fn a_body_reads_as_serde_json_reads_it() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"caf\u00e9"}],"n":1,"t":0.5,"x":null,"s":true}"#;
        assert_eq!(
            content(body),
            Ok(serde_json::from_slice::<Value>(body).unwrap())
        );
    }

    #[test]
    fn a_member_named_twice_anywhere_is_refused_without_its_name() {
        for body in [
            &br#"{"messages":[],"messages":[]}"#[..],
            br#"{"messages":[{"role":"user","content":"a","content":"b"}]}"#,
            br#"{"metadata":{"sk-secret":1,"sk-secret":2}}"#,
        ] {
            let refused = content(body).unwrap_err();
            assert!(refused.contains("names a member twice"), "{refused}");
            assert!(!refused.contains("sk-secret"), "{refused}");
        }
    }

    #[test]
    fn text_that_is_not_unicode_is_refused() {
        for body in [
            &br#"{"input":"\ud800"}"#[..],
            b"{\"input\":\"\xff\xfe\"}",
            br#"{"input":"x"} trailing"#,
        ] {
            assert!(content(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
    }
}
