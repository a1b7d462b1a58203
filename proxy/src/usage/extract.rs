//! Token usage from a provider's answer: the `usage` object of a JSON response, or of the
//! final chunk of a server-sent-events stream (a chat completion's usage chunk, or the
//! Responses API's `response.completed` event, whose `response` carries it).
//!
//! Anthropic's Messages API reports a stream's usage in two parts: the input in
//! `message_start` (under `message`), the output, cumulative, in `message_delta`; each
//! event's usage is [`UsageParts`], merged as the stream goes.
//!
//! Cached input tokens are recorded within the input tokens and reasoning tokens within
//! the output tokens: OpenAI counts them so; Anthropic reports cache writes and reads
//! beside `input_tokens`, and they are added to it.

use std::borrow::Cow;

use serde::Deserialize;

/// Tokens of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub input: i64,
    pub output: i64,
}

/// A `usage` object as providers write it: the token counts, and the details a trace
/// reports (`crate::otel`, which reads a whole answer once for both).
#[derive(Deserialize)]
pub(crate) struct UsageField {
    #[serde(default)]
    prompt_tokens: Option<i64>,
    #[serde(default)]
    completion_tokens: Option<i64>,
    /// The Responses API and Anthropic name them so.
    #[serde(default)]
    input_tokens: Option<i64>,
    #[serde(default)]
    output_tokens: Option<i64>,
    /// Anthropic: input written to and read from the prompt cache, beside
    /// `input_tokens`.
    #[serde(default)]
    pub cache_creation_input_tokens: Option<i64>,
    #[serde(default)]
    pub cache_read_input_tokens: Option<i64>,
    #[serde(default)]
    pub prompt_tokens_details: Option<TokenDetails>,
    #[serde(default)]
    pub input_tokens_details: Option<TokenDetails>,
    #[serde(default)]
    pub completion_tokens_details: Option<TokenDetails>,
    #[serde(default)]
    pub output_tokens_details: Option<TokenDetails>,
}

/// Cached and reasoning tokens within a usage's counts (OpenAI's `*_tokens_details`).
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct TokenDetails {
    pub cached_tokens: Option<i64>,
    pub reasoning_tokens: Option<i64>,
}

/// The parts of usage one event reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageParts {
    pub input: Option<i64>,
    pub output: Option<i64>,
}

impl UsageParts {
    /// `self` with the parts `later` reports replacing its own (an event's figures are
    /// totals so far, never increments).
    pub fn merged(self, later: UsageParts) -> UsageParts {
        UsageParts {
            input: later.input.or(self.input),
            output: later.output.or(self.output),
        }
    }

    pub fn tokens(self) -> Tokens {
        Tokens {
            input: self.input.unwrap_or(0).max(0),
            output: self.output.unwrap_or(0).max(0),
        }
    }
}

impl UsageField {
    fn parts(&self) -> UsageParts {
        let cached = self.cache_creation_input_tokens.unwrap_or(0).max(0)
            + self.cache_read_input_tokens.unwrap_or(0).max(0);
        let input = self
            .prompt_tokens
            .or(self.input_tokens.map(|input| input.max(0) + cached));
        UsageParts {
            input,
            output: self.completion_tokens.or(self.output_tokens),
        }
    }

    pub fn tokens(&self) -> Tokens {
        self.parts().tokens()
    }
}

#[derive(Deserialize)]
struct WithUsage {
    #[serde(default)]
    usage: Option<UsageField>,
}

/// The usage of a JSON response body (chat completion or embeddings).
pub fn from_json(body: &[u8]) -> Option<Tokens> {
    serde_json::from_slice::<WithUsage>(body)
        .ok()?
        .usage
        .map(|usage| usage.tokens())
}

/// A stream event, read as far as its usage, the text it carries
/// and what a trace reports of it (`crate::otel::AnswerFacts`): one parse serves all.
/// Text is borrowed from the event unless it has escapes. A field a trace reads that
/// is not a string is taken as absent, never as an unreadable event: the usage must
/// not be lost for a provider's odd id.
#[derive(Deserialize)]
pub(crate) struct Event<'a> {
    /// Boxed, as are `response` and `message`: an event rarely carries them, and
    /// inline they made the event a kilobyte that the parse moved several times.
    #[serde(default)]
    pub usage: Option<Box<UsageField>>,
    #[serde(borrow, default)]
    pub choices: Option<Vec<Choice<'a>>>,
    /// The Responses API: the response, with its usage once completed (or incomplete,
    /// or failed).
    #[serde(borrow, default)]
    pub response: Option<Box<Nested<'a>>>,
    /// Anthropic's `message_start`: the message, with the input's usage.
    #[serde(borrow, default)]
    pub message: Option<Box<Nested<'a>>>,
    /// The text of a Responses `response.output_text.delta` event, or of an Anthropic
    /// `content_block_delta`; Anthropic's `message_delta` carries the stop reason.
    #[serde(borrow, default)]
    pub delta: Option<EventDelta<'a>>,
    #[serde(borrow, default)]
    pub id: Text<'a>,
    #[serde(borrow, default)]
    pub model: Text<'a>,
    #[serde(borrow, default)]
    pub object: Text<'a>,
    #[serde(borrow, default)]
    pub status: Text<'a>,
    #[serde(borrow, default)]
    pub stop_reason: Text<'a>,
}

/// The object a Responses or Anthropic event carries.
#[derive(Deserialize)]
pub(crate) struct Nested<'a> {
    #[serde(default)]
    pub usage: Option<Box<UsageField>>,
    #[serde(borrow, default)]
    pub id: Text<'a>,
    #[serde(borrow, default)]
    pub model: Text<'a>,
    #[serde(borrow, default)]
    pub object: Text<'a>,
    #[serde(borrow, default)]
    pub status: Text<'a>,
    #[serde(borrow, default)]
    pub stop_reason: Text<'a>,
}

/// An event's `delta`: text (Responses' output text), an object with text (Anthropic's
/// text deltas) or with the stop reason (its `message_delta`), or anything else,
/// ignored.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum EventDelta<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Block {
        #[serde(borrow)]
        text: Cow<'a, str>,
    },
    Stop {
        #[serde(borrow)]
        stop_reason: Cow<'a, str>,
    },
    Other(serde::de::IgnoredAny),
}

#[derive(Deserialize)]
pub(crate) struct Choice<'a> {
    #[serde(borrow, default)]
    delta: Option<ChoiceDelta<'a>>,
    #[serde(borrow, default)]
    pub finish_reason: Text<'a>,
}

#[derive(Deserialize)]
struct ChoiceDelta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
}

/// A string field a trace reads: `None` when absent, `null` or not a string.
#[derive(Default)]
pub(crate) struct Text<'a>(pub Option<Cow<'a, str>>);

impl<'a> Text<'a> {
    pub fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> serde::de::Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
        Ok(Text(Some(Cow::Borrowed(v))))
    }

    fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
        Ok(Text(Some(Cow::Owned(v.to_owned()))))
    }

    fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
        Ok(Text(Some(Cow::Owned(v))))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_unit<E>(self) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_none<E>(self) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Text<'de>, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Text(None))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Text<'de>, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(Text(None))
    }
}

/// What one stream event says of usage.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ChunkFacts {
    pub usage: Option<UsageParts>,
    /// The chunk has no choices: the usage-only chunk `include_usage` adds.
    pub usage_only: bool,
    /// Characters of generated text, for an estimate when the stream is cut short.
    pub content_chars: usize,
}

/// Reads an event's `data:` payload (JSON); `None` for `[DONE]` or anything unparsable.
pub(crate) fn read_event(data: &[u8]) -> Option<Event<'_>> {
    serde_json::from_slice(data).ok()
}

impl Event<'_> {
    /// The usage and text of the event.
    pub fn chunk_facts(&self) -> ChunkFacts {
        let delta_chars = match &self.delta {
            Some(EventDelta::Text(text) | EventDelta::Block { text }) => text.chars().count(),
            _ => 0,
        };
        let content_chars = self
            .choices
            .iter()
            .flatten()
            .filter_map(|c| c.delta.as_ref()?.content.as_ref())
            .map(|text| text.chars().count())
            .sum::<usize>()
            + delta_chars;
        let usage = self
            .usage
            .as_deref()
            .or_else(|| self.response.as_ref()?.usage.as_deref())
            .or_else(|| self.message.as_ref()?.usage.as_deref())
            .map(UsageField::parts);
        ChunkFacts {
            usage_only: usage.is_some() && self.choices.as_ref().is_none_or(Vec::is_empty),
            usage,
            content_chars,
        }
    }
}

/// The usage and text of an event's `data:` payload; `None` for `[DONE]` or anything
/// unparsable.
#[cfg(test)]
pub fn chunk_facts(data: &[u8]) -> Option<ChunkFacts> {
    read_event(data).map(|event| event.chunk_facts())
}

/// A rough token count for text that was never metered (about four characters a token),
/// used only when a stream ends before the provider reported usage.
pub fn estimate_tokens(chars: usize) -> i64 {
    i64::try_from(chars.div_ceil(4)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_comes_from_plain_responses() {
        let body = br#"{"id":"x","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}"#;
        assert_eq!(
            from_json(body),
            Some(Tokens {
                input: 12,
                output: 5
            })
        );
        let embeddings = br#"{"data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}"#;
        assert_eq!(
            from_json(embeddings),
            Some(Tokens {
                input: 8,
                output: 0
            })
        );
        assert_eq!(from_json(b"not json"), None);
        assert_eq!(from_json(br#"{"choices":[]}"#), None);
    }

    #[test]
    fn stream_chunks_tell_usage_and_text() {
        let text = chunk_facts(br#"{"choices":[{"delta":{"content":"Hello"}}],"usage":null}"#);
        assert_eq!(
            text,
            Some(ChunkFacts {
                usage: None,
                usage_only: false,
                content_chars: 5
            })
        );
        let last =
            chunk_facts(br#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#);
        assert_eq!(
            last,
            Some(ChunkFacts {
                usage: Some(UsageParts {
                    input: Some(3),
                    output: Some(2)
                }),
                usage_only: true,
                content_chars: 0
            })
        );
        let escaped = chunk_facts(br#"{"choices":[{"delta":{"content":"a\"b\u00e9"}}]}"#);
        assert_eq!(escaped.map(|facts| facts.content_chars), Some(4));
        assert_eq!(chunk_facts(b"[DONE]"), None);
    }

    #[test]
    fn responses_events_tell_usage_and_text() {
        let created = chunk_facts(
            br#"{"type":"response.created","response":{"id":"resp_1","status":"in_progress","usage":null}}"#,
        );
        assert_eq!(created.map(|facts| facts.usage), Some(None));
        let delta = chunk_facts(
            br#"{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hel\u00e9"}"#,
        );
        assert_eq!(delta.map(|facts| facts.content_chars), Some(4));
        let completed = chunk_facts(
            br#"{"type":"response.completed","response":{"id":"resp_1","output":[{"type":"message","content":[{"type":"output_text","text":"Hello"}]}],"usage":{"input_tokens":11,"input_tokens_details":{"cached_tokens":4},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":18}}}"#,
        );
        assert_eq!(
            completed
                .and_then(|facts| facts.usage)
                .map(UsageParts::tokens),
            Some(Tokens {
                input: 11,
                output: 7
            })
        );
        // A plain response's usage reads like a chat completion's.
        let plain = br#"{"id":"resp_1","object":"response","output":[],"usage":{"input_tokens":5,"output_tokens":2,"total_tokens":7}}"#;
        assert_eq!(
            from_json(plain),
            Some(Tokens {
                input: 5,
                output: 2
            })
        );
    }

    #[test]
    fn anthropic_streams_report_input_first_and_output_last() {
        let start = chunk_facts(
            br#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":25,"cache_creation_input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}}}"#,
        )
        .and_then(|facts| facts.usage)
        .unwrap_or_default();
        let text = chunk_facts(
            br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
        );
        assert_eq!(text.map(|facts| facts.content_chars), Some(5));
        let delta = chunk_facts(
            br#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#,
        )
        .and_then(|facts| facts.usage)
        .unwrap_or_default();
        assert_eq!(
            start.merged(delta).tokens(),
            Tokens {
                input: 40,
                output: 15
            }
        );
        // A whole message: cache reads and writes join the input.
        let plain = br#"{"id":"msg_1","type":"message","content":[],"usage":{"input_tokens":20,"cache_read_input_tokens":100,"output_tokens":9}}"#;
        assert_eq!(
            from_json(plain),
            Some(Tokens {
                input: 120,
                output: 9
            })
        );
    }
}
