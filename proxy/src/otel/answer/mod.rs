//! What a provider's answer says of itself (its id, model, finish reasons, cached and
//! reasoning tokens, and when its first chunk came), read for a sampled trace only, in
//! the same parse as the answer's usage: a whole answer once (`whole`), a stream event
//! by event as the relay reads them (`stream`: `crate::usage::extract::Event`).

mod stream;
mod whole;

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use memchr::memmem::Finder;

use super::protobuf::{span_attribute, Scalar, StringList};
use super::record::SpanRecord;
use crate::endpoint::Endpoint;
use crate::usage::extract::{read_event, Event, Text, TokenDetails, UsageField};
use crate::usage::json_keys::Key;

/// Room for an answer's id and model as attributes (about 70 bytes for OpenAI's).
const NAMES_CAPACITY: usize = 128;

/// Finish reasons kept beyond this are dropped (one per choice; agents ask for few).
const MAX_FINISH_REASONS: usize = 16;

/// The key under which an event of an endpoint's stream that carries no usage can say
/// how the answer ended (chat completions' `finish_reason`, Anthropic's `stop_reason`, a
/// response's `status`), read with a string value only (`"finish_reason":null` is in
/// every chat chunk). Within a JSON string a quote is escaped, so these bytes are never
/// part of text. One key an endpoint: searching every event for all three was a third
/// of what a trace added to a streamed request's instructions (`instructions.sh
/// TRACED=1`, 2026-12-01). Each is found by memchr's substring search, which looks for
/// two of its bytes at once: found by its `_` alone, each `_` of an event checked, the
/// key cost a traced stream of 8 events as OpenAI sends them (a `_` in
/// `service_tier`, `system_fingerprint` and its value) 1,270 instructions more
/// (`instructions.sh LOAD=streamed TRACED=1`, 2026-12-07).
static FINISH_REASON: Key = LazyLock::new(|| Finder::new(b"\"finish_reason\""));
static STOP_REASON: Key = LazyLock::new(|| Finder::new(b"\"stop_reason\""));
static STATUS: Key = LazyLock::new(|| Finder::new(b"\"status\""));

/// How an endpoint's events say how the answer ended.
#[derive(Clone, Copy)]
struct Ending {
    key: &'static Key,
    /// Whether every string value of the key is a finish reason (chat completions'
    /// `finish_reason` and Anthropic's `stop_reason` mean that wherever they are), so
    /// that it is read from the event's bytes; a `status` is one only on the response
    /// object, which takes a parse to tell.
    plain: bool,
}

fn ending(endpoint: Endpoint) -> Ending {
    match endpoint {
        Endpoint::Messages | Endpoint::MessagesCountTokens => Ending {
            key: &STOP_REASON,
            plain: true,
        },
        Endpoint::Responses => Ending {
            key: &STATUS,
            plain: false,
        },
        Endpoint::ChatCompletions | Endpoint::Embeddings => Ending {
            key: &FINISH_REASON,
            plain: true,
        },
    }
}

#[derive(Debug)]
pub struct AnswerFacts {
    attempt_started: Instant,
    /// Where its events say how a choice ended (`ending`), and whether a whole answer's
    /// choices do (chat completions').
    endpoint: Endpoint,
    /// A stream's first event the relay did not parse, kept while no event has named
    /// the answer: its id and model are read from it at the end if none does. Chat
    /// completions' usage chunk and the Responses and Messages events with usage name
    /// it, so it is rarely parsed; parsed at once, it cost a streamed request about
    /// 5,000 instructions (`instructions.sh TRACED=1`, 2026-12-02).
    first_unparsed: Option<Box<[u8]>>,
    first_chunk: Option<Duration>,
    /// The answer's id and model as the span's attributes, written as they are read
    /// (copied once, not kept as texts of their own and freed one by one).
    names: Vec<u8>,
    has_id: bool,
    has_model: bool,
    finish_reasons: StringList,
    cache_read_tokens: Option<i64>,
    cache_creation_tokens: Option<i64>,
    reasoning_tokens: Option<i64>,
}

impl AnswerFacts {
    /// The facts of an answer of `endpoint` to an attempt that started then.
    pub fn new(attempt_started: Instant, endpoint: Endpoint) -> AnswerFacts {
        AnswerFacts {
            attempt_started,
            endpoint,
            first_unparsed: None,
            first_chunk: None,
            // An id and a model: written without the buffer growing.
            names: Vec::with_capacity(NAMES_CAPACITY),
            has_id: false,
            has_model: false,
            finish_reasons: StringList::default(),
            cache_read_tokens: None,
            cache_creation_tokens: None,
            reasoning_tokens: None,
        }
    }

    /// How an object (an answer, or one an event carries) says it ended: Anthropic's
    /// `stop_reason`, a response's `status` once it is no longer in progress.
    fn ended(&mut self, object: &Text<'_>, status: &Text<'_>, stop_reason: &Text<'_>) {
        self.finished(stop_reason.get());
        if object.get() == Some("response") {
            self.finished(status.get().filter(|s| *s != "in_progress"));
        }
    }

    fn finished(&mut self, reason: Option<&str>) {
        if let Some(reason) = reason {
            if self.finish_reasons.len() < MAX_FINISH_REASONS {
                self.finish_reasons.push(reason);
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

    /// Whether the answer's id and model are both known.
    fn named(&self) -> bool {
        self.has_id && self.has_model
    }

    /// Takes the id and model of one of an event's objects, where not known yet.
    fn name(&mut self, id: &Text<'_>, model: &Text<'_>) {
        if let Some(id) = id.get().filter(|_| !self.has_id) {
            span_attribute(&mut self.names, "gen_ai.response.id", Scalar::Str(id));
            self.has_id = true;
        }
        if let Some(model) = model.get().filter(|_| !self.has_model) {
            span_attribute(&mut self.names, "gen_ai.response.model", Scalar::Str(model));
            self.has_model = true;
        }
    }

    /// Takes the id and model an event names: its own, then those of the object it
    /// carries (the Responses API's events the response, Anthropic's `message_start`
    /// the message).
    fn name_from(&mut self, event: &Event<'_>) {
        self.name(&event.id, &event.model);
        for nested in [event.response.as_ref(), event.message.as_ref()]
            .into_iter()
            .flatten()
        {
            self.name(&nested.id, &nested.model);
        }
    }

    /// The facts as attributes of the attempt's span.
    pub fn add_to(mut self, span: &mut SpanRecord) {
        if let Some(first) = self.first_unparsed.take().filter(|_| !self.named()) {
            if let Some(event) = read_event(&first) {
                self.name_from(&event);
            }
        }
        span.encoded(&self.names);
        if !self.finish_reasons.is_empty() {
            span.strs("gen_ai.response.finish_reasons", &self.finish_reasons);
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
                span.int(name, count);
            }
        }
        if let Some(first) = self.first_chunk {
            span.float("gen_ai.response.time_to_first_chunk", first.as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use bytes::BytesMut;
    use opentelemetry::trace::{SpanId, SpanKind, TraceId};
    use opentelemetry::KeyValue;

    use super::*;
    use crate::usage::extract::Tokens;
    use crate::usage::sse::{EventReader, Found, SseRelay};

    /// The facts as the SDK's attributes, through a span's record.
    trait Attributes {
        fn attributes(self) -> Vec<KeyValue>;
    }

    impl Attributes for AnswerFacts {
        fn attributes(self) -> Vec<KeyValue> {
            let mut span = SpanRecord::new(
                TraceId::from(1),
                SpanId::from(1),
                SpanKind::Client,
                SystemTime::now(),
            );
            self.add_to(&mut span);
            span.attributes()
        }
    }

    /// A stream relayed to a client, its facts read from the relay's events.
    struct Relayed {
        relay: SseRelay,
        facts: AnswerFacts,
    }

    impl Relayed {
        fn new(endpoint: Endpoint) -> Relayed {
            Relayed {
                relay: SseRelay::new(endpoint, false),
                facts: AnswerFacts::new(Instant::now(), endpoint),
            }
        }

        fn chunk(&mut self, bytes: &[u8]) {
            self.facts.received(bytes);
            let mut out = BytesMut::new();
            self.relay.push(bytes, Some(&mut self.facts as _), &mut out);
        }

        fn attributes(mut self) -> Vec<KeyValue> {
            self.relay.finish(Some(&mut self.facts as _));
            self.facts.attributes()
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
        let mut facts = AnswerFacts::new(Instant::now(), Endpoint::ChatCompletions);
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
    fn a_whole_answer_of_each_endpoint_names_itself_and_how_it_ended() {
        for (endpoint, answer, expected) in [
            // A finish reason with an escape takes the parse of the choices.
            (
                Endpoint::ChatCompletions,
                r#"{"id":"c","model":"m","choices":[{"message":{"content":"a_b"},"finish_reason":"st\u006fp"}]}"#,
                [
                    ("gen_ai.response.id", "c"),
                    ("gen_ai.response.model", "m"),
                    ("gen_ai.response.finish_reasons", r#"["stop"]"#),
                ],
            ),
            (
                Endpoint::Responses,
                r#"{"id":"resp_1","object":"response","model":"gpt-4o","status":"completed","output":[{"status":"in_progress"}]}"#,
                [
                    ("gen_ai.response.id", "resp_1"),
                    ("gen_ai.response.model", "gpt-4o"),
                    ("gen_ai.response.finish_reasons", r#"["completed"]"#),
                ],
            ),
            (
                Endpoint::Messages,
                r#"{"id":"msg_1","type":"message","model":"claude","stop_reason":"end_turn","content":[{"text":"\"stop_reason\":\"x\""}]}"#,
                [
                    ("gen_ai.response.id", "msg_1"),
                    ("gen_ai.response.model", "claude"),
                    ("gen_ai.response.finish_reasons", r#"["end_turn"]"#),
                ],
            ),
        ] {
            let mut facts = AnswerFacts::new(Instant::now(), endpoint);
            assert_eq!(facts.whole(answer.as_bytes()).unwrap(), None, "{answer}");
            assert_eq!(facts_of(facts.attributes()), pairs(&expected), "{answer}");
        }
    }

    #[test]
    fn an_anthropic_stream_split_across_chunks() {
        let mut facts = Relayed::new(Endpoint::Messages);
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
        let mut facts = Relayed::new(Endpoint::Responses);
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
    fn an_ending_without_usage_is_read_under_its_endpoints_key() {
        let named = "\"id\":\"x_1\",\"model\":\"m\"";
        for (endpoint, opening, ending, reason) in [
            (
                Endpoint::ChatCompletions,
                format!("data: {{{named},\"choices\":[]}}\n\n"),
                "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n",
                "length",
            ),
            (
                Endpoint::Messages,
                format!("data: {{\"type\":\"message_start\",\"message\":{{{named}}}}}\n\n"),
                "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"}}\n\n",
                "max_tokens",
            ),
            (
                Endpoint::Responses,
                format!("data: {{\"response\":{{{named},\"object\":\"response\"}}}}\n\n"),
                "data: {\"response\":{\"object\":\"response\",\"status\":\"incomplete\"}}\n\n",
                "incomplete",
            ),
        ] {
            let mut facts = Relayed::new(endpoint);
            facts.chunk(opening.as_bytes());
            facts.chunk(ending.as_bytes());
            let reasons = format!("[\"{reason}\"]");
            assert_eq!(
                facts_of(facts.attributes()),
                pairs(&[
                    ("gen_ai.response.id", "x_1"),
                    ("gen_ai.response.model", "m"),
                    ("gen_ai.response.finish_reasons", &reasons),
                ]),
                "{endpoint:?}"
            );
        }
    }

    #[test]
    fn a_chat_stream_is_read_at_its_first_and_last_chunks() {
        let mut facts = Relayed::new(Endpoint::ChatCompletions);
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
    }

    #[test]
    fn a_streams_text_events_are_not_parsed_for_the_trace() {
        let text = br#"{"id":"c","model":"m","choices":[{"delta":{"content":"\"status\": \"x"},"finish_reason":null}],"usage":null}"#;
        let mut facts = AnswerFacts::new(Instant::now(), Endpoint::ChatCompletions);
        assert_eq!(facts.unparsed(text, 0), Found::Nothing, "kept, not parsed");
        assert_eq!(facts.unparsed(text, 0), Found::Nothing);
        for (endpoint, ending, parse) in [
            (
                Endpoint::ChatCompletions,
                &br#"{"id":"c","choices":[{"delta":{},"finish_reason" : "stop"}],"usage":null}"#[..],
                false,
            ),
            (
                Endpoint::ChatCompletions,
                br#"{"choices":[{"finish_reason":"st\u006fp"}]}"#,
                true,
            ),
            (
                Endpoint::Messages,
                br#"{"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#,
                false,
            ),
            // An item's status is not the response's: the parse tells them apart.
            (
                Endpoint::Responses,
                br#"{"type":"response.output_item.done","item":{"status":"completed"}}"#,
                true,
            ),
        ] {
            let mut facts = AnswerFacts::new(Instant::now(), endpoint);
            let shown = String::from_utf8_lossy(ending);
            let found = if parse { Found::Parse } else { Found::Taken };
            assert_eq!(facts.unparsed(ending, 0), found, "{shown}");
            if parse {
                facts.event(&read_event(ending).unwrap());
            }
            let expected: &[&str] = match endpoint {
                Endpoint::Responses => &[],
                Endpoint::Messages => &["end_turn"],
                _ => &["stop"],
            };
            let mut list = StringList::default();
            expected.iter().for_each(|reason| list.push(reason));
            assert_eq!(facts.finish_reasons, list, "{shown}");
            // Each endpoint's events are searched for its own key only.
            if endpoint != Endpoint::ChatCompletions {
                let mut chat = AnswerFacts::new(Instant::now(), Endpoint::ChatCompletions);
                assert_eq!(chat.unparsed(ending, 0), Found::Nothing, "{shown}");
                assert!(chat.finish_reasons.is_empty(), "{shown}");
            }
        }
    }

    /// A chat chunk as OpenAI streams it, `delta` and `finish` written as JSON, `tail`
    /// what follows the choices.
    fn openai_chunk(delta: &str, finish: &str, tail: &str) -> String {
        format!("{{\"id\":\"chatcmpl-t\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]{tail}}}")
    }

    /// Events of a chat stream, in the forms that repeat (`Same`), open alike
    /// (`Opens`: `obfuscation` of another length) or only look alike, with texts that
    /// mention keys, escapes, a finish reason beside a text, and JSON that is not valid.
    fn chat_events() -> Vec<String> {
        let texts = [
            "Hel",
            "",
            r#"a\"b"#,
            "usage",
            "finish_reason",
            r#"\"usage\":{\"prompt_tokens\":1}"#,
            r#"x\"finish_reason"#,
            r#"\u00e9😀"#,
        ];
        let mut events = Vec::new();
        for text in texts {
            let delta = format!("{{\"content\":\"{text}\"}}");
            for tail in [
                ",\"usage\":null",
                ",\"usage\":null,\"obfuscation\":\"ab\"",
                ",\"usage\":null,\"obfuscation\":\"abcde\"",
            ] {
                events.push(openai_chunk(&delta, "null", tail));
            }
            events.push(openai_chunk(&delta, "\"length\"", ",\"usage\":null"));
            events.push(openai_chunk(&delta, "\"st\\u006fp\"", ",\"usage\":null"));
            // Not JSON: the text followed by what follows a key.
            events.push(openai_chunk(
                &format!("{{\"content\":\"{text}\":{{}}}}"),
                "null",
                "",
            ));
            events.push(openai_chunk(
                &format!("{{\"content\":\"{text}\"usage\":{{}}}}"),
                "null",
                "",
            ));
        }
        events.push(openai_chunk("{}", "\"stop\"", ",\"usage\":null"));
        events.push(openai_chunk(
            "{\"content\" : \"sp\" }",
            "null",
            " , \"usage\" : null",
        ));
        events.push(r#"{"choices":[{"index":0,"delta":{"content":"one"}},{"index":1,"delta":{"content":"two"},"finish_reason":"stop"}]}"#.to_owned());
        events.push(r#"{"id":"chatcmpl-u","model":"gpt-4o-2024","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}"#.to_owned());
        events
    }

    /// Events of an Anthropic stream: usage in the first and last, text deltas between.
    fn messages_events() -> Vec<String> {
        let mut events = vec![
            r#"{"type":"message_start","message":{"id":"msg_1","model":"claude","usage":{"input_tokens":5}}}"#.to_owned(),
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_owned(),
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}"#.to_owned(),
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"}}"#.to_owned(),
            r#"{"type":"ping"}"#.to_owned(),
        ];
        for text in ["Bon", "jour", r#"\"stop_reason\":\"x"#, "stop_reason", ""] {
            events.push(format!("{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}"));
            events.push(format!("{{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}"));
        }
        events
    }

    #[test]
    fn a_streams_facts_and_text_are_those_of_its_events_read_one_by_one() {
        // Streams of the events in many orders (xorshift, fixed seed), each read by one
        // relay (which compares each event with the template of an earlier one) and by
        // a new relay for each event (no template), with the same reader throughout and
        // with none.
        let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = |bound: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % bound as u64) as usize
        };
        for (endpoint, events) in [
            (Endpoint::ChatCompletions, chat_events()),
            (Endpoint::Messages, messages_events()),
        ] {
            for round in 0..300 {
                let count = 2 + next(12);
                let stream: Vec<&String> =
                    (0..count).map(|_| &events[next(events.len())]).collect();
                let shown = format!("{endpoint:?} round {round}: {stream:#?}");
                let mut whole = Relayed::new(endpoint);
                let mut unread = SseRelay::new(endpoint, false);
                let mut one_by_one = AnswerFacts::new(Instant::now(), endpoint);
                let (mut chars, mut unread_chars) = (0, 0);
                let (mut usage, mut unread_usage) = (None, None);
                for event in &stream {
                    let bytes = format!("data: {event}\n\n");
                    whole.chunk(bytes.as_bytes());
                    unread.push(bytes.as_bytes(), None, &mut BytesMut::new());
                    let mut alone = SseRelay::new(endpoint, false);
                    alone.push(
                        bytes.as_bytes(),
                        Some(&mut one_by_one as _),
                        &mut BytesMut::new(),
                    );
                    chars += alone.content_chars;
                    usage = merged(usage, alone.usage());
                    let mut alone = SseRelay::new(endpoint, false);
                    alone.push(bytes.as_bytes(), None, &mut BytesMut::new());
                    unread_chars += alone.content_chars;
                    unread_usage = merged(unread_usage, alone.usage());
                }
                assert_eq!(unread.content_chars, unread_chars, "{shown}");
                assert_eq!(unread.usage(), unread_usage, "{shown}");
                assert_eq!(whole.relay.content_chars, chars, "{shown}");
                assert_eq!(whole.relay.usage(), usage, "{shown}");
                assert_eq!(
                    facts_of(whole.attributes()),
                    facts_of(one_by_one.attributes()),
                    "{shown}"
                );
            }
        }
    }

    /// The usage of two events as a stream's reading merges them: a count the later
    /// one gives replaces the earlier one's.
    fn merged(earlier: Option<Tokens>, later: Option<Tokens>) -> Option<Tokens> {
        match (earlier, later) {
            (Some(a), Some(b)) => Some(Tokens {
                input: if b.input > 0 { b.input } else { a.input },
                output: if b.output > 0 { b.output } else { a.output },
            }),
            (a, b) => b.or(a),
        }
    }

    #[test]
    fn a_stream_is_named_by_its_usage_event_or_else_by_its_first() {
        let chunk = |id: &str| {
            format!("data: {{\"id\":\"{id}\",\"model\":\"gpt-4o\",\"choices\":[{{\"delta\":{{\"content\":\"a\"}},\"finish_reason\":null}}],\"usage\":null}}\n\n")
        };
        let mut facts = Relayed::new(Endpoint::ChatCompletions);
        facts.chunk(chunk("chatcmpl-first").as_bytes());
        facts.chunk(b"data: {\"id\":\"chatcmpl-usage\",\"model\":\"gpt-4o-2024\",\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n");
        assert_eq!(
            facts_of(facts.attributes()),
            pairs(&[
                ("gen_ai.response.id", "chatcmpl-usage"),
                ("gen_ai.response.model", "gpt-4o-2024"),
            ])
        );
        let mut facts = Relayed::new(Endpoint::ChatCompletions);
        facts.chunk(chunk("chatcmpl-first").as_bytes());
        facts.chunk(chunk("chatcmpl-second").as_bytes());
        assert_eq!(
            facts_of(facts.attributes()),
            pairs(&[
                ("gen_ai.response.id", "chatcmpl-first"),
                ("gen_ai.response.model", "gpt-4o"),
            ])
        );
    }

    #[test]
    fn what_is_not_json_says_nothing() {
        let mut facts = AnswerFacts::new(Instant::now(), Endpoint::ChatCompletions);
        assert!(facts.whole(b"<html>bad gateway</html>").is_err());
        assert_eq!(facts_of(facts.attributes()), pairs(&[]));
        let mut facts = Relayed::new(Endpoint::ChatCompletions);
        facts.chunk(b"data: {not json\n\n: comment\n");
        assert_eq!(facts_of(facts.attributes()), pairs(&[]));
    }

    #[test]
    fn odd_fields_are_absent_facts_and_the_usage_stays() {
        let mut facts = AnswerFacts::new(Instant::now(), Endpoint::ChatCompletions);
        let usage = facts.whole(
            br#"{"id":7,"model":{"name":"x"},"object":["chat"],"choices":[{"finish_reason":1}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
        );
        assert_eq!(
            usage.unwrap(),
            Some(Tokens {
                input: 3,
                output: 2
            })
        );
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
            let mut facts = AnswerFacts::new(Instant::now(), Endpoint::ChatCompletions);
            assert_eq!(
                facts.whole(answer).unwrap(),
                crate::usage::extract::from_json(answer),
                "{}",
                String::from_utf8_lossy(answer)
            );
        }
    }
}
