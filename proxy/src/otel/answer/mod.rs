//! What a provider's answer says of itself (its id, model, finish reasons, cached and
//! reasoning tokens, and when its first chunk came), read for a sampled trace only, in
//! the same parse as the answer's usage: a whole answer once (`whole`), a stream event
//! by event as the relay reads them (`stream`: `crate::usage::extract::Event`).

mod stream;
#[cfg(test)]
mod test_support;
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
    use std::time::Instant;

    use super::test_support::{facts_of, pairs, Attributes, Relayed};
    use super::AnswerFacts;
    use crate::endpoint::Endpoint;

    #[test]
    fn what_is_not_json_says_nothing() {
        let mut facts = AnswerFacts::new(Instant::now(), Endpoint::ChatCompletions);
        assert!(facts.whole(b"<html>bad gateway</html>").is_err());
        assert_eq!(facts_of(facts.attributes()), pairs(&[]));
        let mut facts = Relayed::new(Endpoint::ChatCompletions);
        facts.chunk(b"data: {not json\n\n: comment\n");
        assert_eq!(facts_of(facts.attributes()), pairs(&[]));
    }
}
