//! What a provider's answer says of itself (its id, model, finish reasons, cached and
//! reasoning tokens, and when its first chunk came), read for a sampled trace only: whole
//! answers once, streams event by event as they are relayed.

use std::time::{Duration, Instant};

use opentelemetry::{Array, KeyValue, StringValue, Value as OtelValue};
use serde_json::Value;

/// Finish reasons kept beyond this are dropped (one per choice; agents ask for few).
const MAX_FINISH_REASONS: usize = 16;
/// A stream's line longer than this is not read (the facts are in short events).
const MAX_LINE: usize = 1 << 20;

#[derive(Debug)]
pub struct AnswerFacts {
    attempt_started: Instant,
    first_chunk: Option<Duration>,
    id: Option<String>,
    model: Option<String>,
    finish_reasons: Vec<String>,
    cache_read_tokens: Option<i64>,
    cache_creation_tokens: Option<i64>,
    reasoning_tokens: Option<i64>,
    /// The start of a stream's line whose end has not come yet.
    partial: Vec<u8>,
}

impl AnswerFacts {
    pub fn new(attempt_started: Instant) -> AnswerFacts {
        AnswerFacts {
            attempt_started,
            first_chunk: None,
            id: None,
            model: None,
            finish_reasons: Vec::new(),
            cache_read_tokens: None,
            cache_creation_tokens: None,
            reasoning_tokens: None,
            partial: Vec::new(),
        }
    }

    /// A whole (not streamed) answer's body.
    pub fn whole(&mut self, body: &[u8]) {
        if let Ok(value) = serde_json::from_slice::<Value>(body) {
            self.read(&value);
        }
    }

    /// A stream's next bytes as the provider sent them.
    pub fn chunk(&mut self, bytes: &[u8]) {
        if self.first_chunk.is_none() && !bytes.is_empty() {
            self.first_chunk = Some(self.attempt_started.elapsed());
        }
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let (line, after) = rest.split_at(end);
            rest = &after[1..];
            if self.partial.is_empty() {
                self.line(line);
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                self.line(&whole);
            }
        }
        if self.partial.len() + rest.len() <= MAX_LINE {
            self.partial.extend_from_slice(rest);
        } else {
            self.partial.clear();
        }
    }

    fn line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        let data = data.trim_ascii();
        if data.first() == Some(&b'{') {
            if let Ok(value) = serde_json::from_slice::<Value>(data) {
                self.read(&value);
            }
        }
    }

    /// One JSON answer or event: a chat completion (or chunk), a Responses API object
    /// (or an event carrying one under `response`), an Anthropic message (or an event
    /// carrying one under `message`, or a `message_delta`).
    fn read(&mut self, event: &Value) {
        for object in [Some(event), event.get("response"), event.get("message")]
            .into_iter()
            .flatten()
            .filter(|v| v.is_object())
        {
            if self.id.is_none() {
                self.id = text(object.get("id"));
            }
            if self.model.is_none() {
                self.model = text(object.get("model"));
            }
            let choices = object.get("choices").and_then(Value::as_array);
            for choice in choices.into_iter().flatten() {
                self.finished(text(choice.get("finish_reason")));
            }
            self.finished(text(object.get("stop_reason")));
            if object.get("object").and_then(Value::as_str) == Some("response") {
                // The Responses API's end: `completed`, `incomplete`, `failed`.
                self.finished(text(object.get("status")).filter(|s| s != "in_progress"));
            }
            if let Some(usage) = object.get("usage") {
                self.usage(usage);
            }
        }
        if let Some(delta) = event.get("delta") {
            self.finished(text(delta.get("stop_reason")));
        }
    }

    fn finished(&mut self, reason: Option<String>) {
        if let Some(reason) = reason {
            if self.finish_reasons.len() < MAX_FINISH_REASONS {
                self.finish_reasons.push(reason);
            }
        }
    }

    fn usage(&mut self, usage: &Value) {
        let number = |path: &[&str]| {
            path.iter()
                .try_fold(usage, |value, key| value.get(key))
                .and_then(Value::as_i64)
        };
        let cached = number(&["prompt_tokens_details", "cached_tokens"])
            .or_else(|| number(&["input_tokens_details", "cached_tokens"]))
            .or_else(|| number(&["cache_read_input_tokens"]));
        self.cache_read_tokens = cached.or(self.cache_read_tokens);
        self.cache_creation_tokens =
            number(&["cache_creation_input_tokens"]).or(self.cache_creation_tokens);
        let reasoning = number(&["completion_tokens_details", "reasoning_tokens"])
            .or_else(|| number(&["output_tokens_details", "reasoning_tokens"]));
        self.reasoning_tokens = reasoning.or(self.reasoning_tokens);
    }

    pub fn attributes(self) -> Vec<KeyValue> {
        let mut attributes = Vec::new();
        if let Some(id) = self.id {
            attributes.push(KeyValue::new("gen_ai.response.id", id));
        }
        if let Some(model) = self.model {
            attributes.push(KeyValue::new("gen_ai.response.model", model));
        }
        if !self.finish_reasons.is_empty() {
            let reasons: Vec<StringValue> = self
                .finish_reasons
                .into_iter()
                .map(StringValue::from)
                .collect();
            attributes.push(KeyValue::new(
                "gen_ai.response.finish_reasons",
                OtelValue::Array(Array::String(reasons)),
            ));
        }
        let counts = [
            (
                "gen_ai.usage.cache_read.input_tokens",
                self.cache_read_tokens,
            ),
            (
                "gen_ai.usage.cache_creation.input_tokens",
                self.cache_creation_tokens,
            ),
            (
                "gen_ai.usage.reasoning.output_tokens",
                self.reasoning_tokens,
            ),
        ];
        for (name, count) in counts {
            if let Some(count) = count {
                attributes.push(KeyValue::new(name, count));
            }
        }
        if let Some(first) = self.first_chunk {
            attributes.push(KeyValue::new(
                "gen_ai.response.time_to_first_chunk",
                first.as_secs_f64(),
            ));
        }
        attributes
    }
}

fn text(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts_of(attributes: Vec<KeyValue>) -> Vec<(String, String)> {
        attributes
            .into_iter()
            .filter(|kv| kv.key.as_str() != "gen_ai.response.time_to_first_chunk")
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect()
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_chat_completion() {
        let mut facts = AnswerFacts::new(Instant::now());
        facts.whole(br#"{"id":"chatcmpl-1","model":"gpt-4o-2024-08-06","choices":[{"finish_reason":"stop"},{"finish_reason":"length"}],
            "usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}"#);
        assert_eq!(
            facts_of(facts.attributes()),
            pairs(&[
                ("gen_ai.response.id", "chatcmpl-1"),
                ("gen_ai.response.model", "gpt-4o-2024-08-06"),
                ("gen_ai.response.finish_reasons", r#"["stop","length"]"#),
                ("gen_ai.usage.cache_read.input_tokens", "4"),
                ("gen_ai.usage.reasoning.output_tokens", "2"),
            ])
        );
    }

    #[test]
    fn an_anthropic_stream_split_across_chunks() {
        let mut facts = AnswerFacts::new(Instant::now());
        let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":3,\"cache_creation_input_tokens\":1}}}\n\n\
             event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n";
        for piece in stream.as_bytes().chunks(7) {
            facts.chunk(piece);
        }
        let attributes = facts.attributes();
        assert!(attributes
            .iter()
            .any(|kv| kv.key.as_str() == "gen_ai.response.time_to_first_chunk"));
        assert_eq!(
            facts_of(attributes),
            pairs(&[
                ("gen_ai.response.id", "msg_1"),
                ("gen_ai.response.model", "claude-sonnet-4-5"),
                ("gen_ai.response.finish_reasons", r#"["end_turn"]"#),
                ("gen_ai.usage.cache_read.input_tokens", "3"),
                ("gen_ai.usage.cache_creation.input_tokens", "1"),
            ])
        );
    }

    #[test]
    fn a_responses_stream_ends_with_its_status() {
        let mut facts = AnswerFacts::new(Instant::now());
        facts.chunk(b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"model\":\"gpt-4o\",\"status\":\"in_progress\"}}\n\n");
        facts.chunk(b"data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"usage\":{\"output_tokens_details\":{\"reasoning_tokens\":6}}}}\n\ndata: [DONE]\n\n");
        assert_eq!(
            facts_of(facts.attributes()),
            pairs(&[
                ("gen_ai.response.id", "resp_1"),
                ("gen_ai.response.model", "gpt-4o"),
                ("gen_ai.response.finish_reasons", r#"["completed"]"#),
                ("gen_ai.usage.reasoning.output_tokens", "6"),
            ])
        );
    }

    #[test]
    fn what_is_not_json_says_nothing() {
        let mut facts = AnswerFacts::new(Instant::now());
        facts.whole(b"<html>bad gateway</html>");
        facts.chunk(b"data: {not json\n\n: comment\n");
        assert_eq!(facts_of(facts.attributes()), pairs(&[]));
    }
}
