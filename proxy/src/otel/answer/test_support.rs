//! What the answer's tests share: the facts as attributes, a stream relayed with its
//! facts read, and attributes compared as text.

use std::time::{Instant, SystemTime};

use bytes::BytesMut;
use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use opentelemetry::KeyValue;

use super::AnswerFacts;
use crate::endpoint::Endpoint;
use crate::otel::record::SpanRecord;
use crate::usage::sse::SseRelay;

/// The facts as the SDK's attributes, through a span's record.
pub(super) trait Attributes {
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
pub(super) struct Relayed {
    pub relay: SseRelay,
    pub facts: AnswerFacts,
}

impl Relayed {
    pub fn new(endpoint: Endpoint) -> Relayed {
        Relayed {
            relay: SseRelay::new(endpoint, false),
            facts: AnswerFacts::new(Instant::now(), endpoint),
        }
    }

    pub fn chunk(&mut self, bytes: &[u8]) {
        self.facts.received(bytes);
        let mut out = BytesMut::new();
        self.relay.push(bytes, Some(&mut self.facts as _), &mut out);
    }

    pub fn attributes(mut self) -> Vec<KeyValue> {
        self.relay.finish(Some(&mut self.facts as _));
        self.facts.attributes()
    }
}

pub(super) fn facts_of(attributes: Vec<KeyValue>) -> Vec<(String, String)> {
    attributes
        .into_iter()
        .filter(|kv| kv.key.as_str() != "gen_ai.response.time_to_first_chunk")
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect()
}

pub(super) fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}
