//! What a provider's answer says of itself (its id, model, finish reasons, cached and
//! reasoning tokens, and when its first chunk came), read for a sampled trace only:
//! whole answers once, streams event by event as they are relayed. Only the fields read
//! are taken (the rest is skipped, not built), and of a stream's events only the first
//! and those that can carry a fact: a finish reason, a status or a usage object (the
//! text deltas in between are not parsed at all).

use std::borrow::Cow;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use memchr::memmem::Finder;
use serde::Deserialize;

use super::record::{Field, SpanRecord};
use crate::usage::extract::{TokenDetails, Tokens, UsageField};

/// Finish reasons kept beyond this are dropped (one per choice; agents ask for few).
const MAX_FINISH_REASONS: usize = 16;
/// A stream's line longer than this is not read (the facts are in short events).
const MAX_LINE: usize = 1 << 20;

#[derive(Debug)]
pub struct AnswerFacts {
    attempt_started: Instant,
    first_chunk: Option<Duration>,
    /// Whether a stream's first event was read.
    first_event_read: bool,
    id: Option<String>,
    model: Option<String>,
    finish_reasons: Vec<String>,
    cache_read_tokens: Option<i64>,
    cache_creation_tokens: Option<i64>,
    reasoning_tokens: Option<i64>,
    /// The start of a stream's line whose end has not come yet.
    partial: Vec<u8>,
}

/// One JSON answer or event: a chat completion (or chunk), a Responses API object (or an
/// event carrying one under `response`), an Anthropic message (or an event carrying one
/// under `message`, or a `message_delta`).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Event<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(borrow)]
    stop_reason: Option<Cow<'a, str>>,
    #[serde(borrow)]
    object: Option<Cow<'a, str>>,
    #[serde(borrow)]
    status: Option<Cow<'a, str>>,
    usage: Option<UsageField>,
    #[serde(borrow)]
    response: Option<Box<Event<'a>>>,
    #[serde(borrow)]
    message: Option<Box<Event<'a>>>,
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Choice<'a> {
    #[serde(borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Delta<'a> {
    #[serde(borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

impl AnswerFacts {
    pub fn new(attempt_started: Instant) -> AnswerFacts {
        AnswerFacts {
            attempt_started,
            first_chunk: None,
            first_event_read: false,
            id: None,
            model: None,
            finish_reasons: Vec::new(),
            cache_read_tokens: None,
            cache_creation_tokens: None,
            reasoning_tokens: None,
            partial: Vec::new(),
        }
    }

    /// A whole (not streamed) answer's body; its usage (`Ok(None)`: the answer has
    /// none) read in the same pass. `Err`: the body is not an answer's JSON, which the
    /// usage's own reading may still take.
    pub fn whole(&mut self, body: &[u8]) -> Result<Option<Tokens>, serde_json::Error> {
        let event = serde_json::from_slice::<Event<'_>>(body)?;
        self.read(&event);
        Ok(event.usage.as_ref().map(UsageField::tokens))
    }

    /// A stream's next bytes as the provider sent them.
    pub fn chunk(&mut self, bytes: &[u8]) {
        if self.first_chunk.is_none() && !bytes.is_empty() {
            self.first_chunk = Some(self.attempt_started.elapsed());
        }
        let mut rest = bytes;
        while let Some(end) = memchr::memchr(b'\n', rest) {
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
        if data.first() != Some(&b'{') {
            return;
        }
        let first = !self.first_event_read;
        self.first_event_read = true;
        if !(first || carries_a_fact(data)) {
            return;
        }
        if let Ok(event) = serde_json::from_slice::<Event<'_>>(data) {
            self.read(&event);
        }
    }

    fn read(&mut self, event: &Event<'_>) {
        let nested = [event.response.as_deref(), event.message.as_deref()];
        for object in std::iter::once(event).chain(nested.into_iter().flatten()) {
            if self.id.is_none() {
                self.id = object.id.as_deref().map(str::to_owned);
            }
            if self.model.is_none() {
                self.model = object.model.as_deref().map(str::to_owned);
            }
            for choice in object.choices.iter().flatten() {
                self.finished(choice.finish_reason.as_deref());
            }
            self.finished(object.stop_reason.as_deref());
            if object.object.as_deref() == Some("response") {
                // The Responses API's end: `completed`, `incomplete`, `failed`.
                self.finished(object.status.as_deref().filter(|s| *s != "in_progress"));
            }
            if let Some(usage) = &object.usage {
                self.usage(usage);
            }
        }
        if let Some(delta) = &event.delta {
            self.finished(delta.stop_reason.as_deref());
        }
    }

    fn finished(&mut self, reason: Option<&str>) {
        if let Some(reason) = reason {
            if self.finish_reasons.len() < MAX_FINISH_REASONS {
                self.finish_reasons.push(reason.to_owned());
            }
        }
    }

    fn usage(&mut self, usage: &UsageField) {
        let detail = |details: &Option<TokenDetails>, of: fn(&TokenDetails) -> Option<i64>| {
            details.as_ref().and_then(of)
        };
        let cached = detail(&usage.prompt_tokens_details, |d| d.cached_tokens)
            .or_else(|| detail(&usage.input_tokens_details, |d| d.cached_tokens))
            .or(usage.cache_read_input_tokens);
        self.cache_read_tokens = cached.or(self.cache_read_tokens);
        self.cache_creation_tokens = usage
            .cache_creation_input_tokens
            .or(self.cache_creation_tokens);
        let reasoning = detail(&usage.completion_tokens_details, |d| d.reasoning_tokens)
            .or_else(|| detail(&usage.output_tokens_details, |d| d.reasoning_tokens));
        self.reasoning_tokens = reasoning.or(self.reasoning_tokens);
    }

    /// The facts as attributes of the attempt's span.
    pub fn add_to(self, span: &mut SpanRecord) {
        if let Some(id) = self.id {
            span.push("gen_ai.response.id", Field::Text(id));
        }
        if let Some(model) = self.model {
            span.push("gen_ai.response.model", Field::Text(model));
        }
        if !self.finish_reasons.is_empty() {
            span.push(
                "gen_ai.response.finish_reasons",
                Field::Texts(self.finish_reasons),
            );
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
                span.push(name, Field::Int(count));
            }
        }
        if let Some(first) = self.first_chunk {
            span.push(
                "gen_ai.response.time_to_first_chunk",
                Field::Float(first.as_secs_f64()),
            );
        }
    }
}

/// Whether a stream's event can carry a fact past its first: a finish reason or a
/// status (a string, not `null`) or a usage object.
fn carries_a_fact(data: &[u8]) -> bool {
    // Built once: building a searcher cost more than searching a short event with it.
    static NAMES: LazyLock<[(Finder<'static>, u8); 3]> = LazyLock::new(|| {
        [
            (Finder::new(b"_reason\""), b'"'),
            (Finder::new(b"\"status\""), b'"'),
            (Finder::new(b"\"usage\""), b'{'),
        ]
    });
    NAMES.iter().any(|(name, starts)| {
        name.find_iter(data).any(|at| {
            let after = &data[at + name.needle().len()..];
            let value = after
                .iter()
                .position(|b| !matches!(b, b' ' | b':' | b'\t'))
                .map(|i| after[i]);
            value == Some(*starts)
        })
    })
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use opentelemetry::trace::{SpanId, SpanKind, TraceId};
    use opentelemetry::{InstrumentationScope, KeyValue};

    use super::*;

    /// The facts as the SDK's attributes, through a span's record.
    trait Attributes {
        fn attributes(self) -> Vec<KeyValue>;
    }

    impl Attributes for AnswerFacts {
        fn attributes(self) -> Vec<KeyValue> {
            let mut span = SpanRecord {
                trace_id: TraceId::from(1),
                span_id: SpanId::from(1),
                parent: None,
                trace_state: None,
                name: "chat".into(),
                kind: SpanKind::Client,
                start: SystemTime::now(),
                end: SystemTime::now(),
                attributes: Vec::new(),
                caller: None,
                error: None,
            };
            self.add_to(&mut span);
            span.to_span_data(&InstrumentationScope::builder("t").build())
                .attributes
        }
    }

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
        let usage = facts.whole(br#"{"id":"chatcmpl-1","model":"gpt-4o-2024-08-06","choices":[{"finish_reason":"stop"},{"finish_reason":"length"}],
            "usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}"#);
        assert_eq!(
            usage.unwrap(),
            Some(Tokens {
                input: 9,
                output: 0
            })
        );
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
    fn a_chat_stream_is_read_at_its_first_and_last_chunks() {
        let mut facts = AnswerFacts::new(Instant::now());
        let chunk = |delta: &str, finish: &str, usage: &str| {
            format!("data: {{\"id\":\"chatcmpl-9\",\"model\":\"gpt-4o\",\"choices\":[{{\"delta\":{{\"content\":\"{delta}\"}},\"finish_reason\":{finish}}}],\"usage\":{usage}}}\n\n")
        };
        facts.chunk(chunk("Hel", "null", "null").as_bytes());
        // A text delta that mentions the fields is still not a fact.
        facts.chunk(chunk("finish_reason\\\" usage", "null", "null").as_bytes());
        facts.chunk(chunk("", "\"stop\"", "null").as_bytes());
        facts.chunk(b"data: {\"choices\":[],\"usage\": {\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\ndata: [DONE]\n\n");
        assert_eq!(
            facts_of(facts.attributes()),
            pairs(&[
                ("gen_ai.response.id", "chatcmpl-9"),
                ("gen_ai.response.model", "gpt-4o"),
                ("gen_ai.response.finish_reasons", r#"["stop"]"#),
                ("gen_ai.usage.cache_read.input_tokens", "2"),
            ])
        );
        assert!(!carries_a_fact(
            br#"{"choices":[{"delta":{"content":"x"},"finish_reason":null}],"usage":null}"#
        ));
        assert!(carries_a_fact(
            br#"{"choices":[{"finish_reason": "length"}]}"#
        ));
    }

    #[test]
    fn what_is_not_json_says_nothing() {
        let mut facts = AnswerFacts::new(Instant::now());
        assert!(facts.whole(b"<html>bad gateway</html>").is_err());
        facts.chunk(b"data: {not json\n\n: comment\n");
        assert_eq!(facts_of(facts.attributes()), pairs(&[]));
    }

    #[test]
    fn a_whole_answers_usage_is_the_usage_reading_of_it() {
        let answers: [&[u8]; 6] = [
            br#"{"object":"chat.completion","usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}"#,
            br#"{"object":"list","data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}"#,
            br#"{"object":"response","status":"completed","usage":{"input_tokens":7,"output_tokens":3,"output_tokens_details":{"reasoning_tokens":1}}}"#,
            br#"{"type":"message","stop_reason":"end_turn","usage":{"input_tokens":5,"cache_read_input_tokens":3,"cache_creation_input_tokens":2,"output_tokens":4}}"#,
            br#"{"id":"no-usage","choices":[]}"#,
            br#"{"usage":{"prompt_tokens":-3,"completion_tokens":null}}"#,
        ];
        for answer in answers {
            let mut facts = AnswerFacts::new(Instant::now());
            assert_eq!(
                facts.whole(answer).unwrap(),
                crate::usage::extract::from_json(answer),
                "{}",
                String::from_utf8_lossy(answer)
            );
        }
    }
}
