//! Token usage from a provider's answer: the `usage` object of a JSON response, or of the
//! final chunk of a server-sent-events stream.

use std::borrow::Cow;

use serde::Deserialize;

/// Tokens of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub input: i64,
    pub output: i64,
}

#[derive(Deserialize)]
struct UsageField {
    #[serde(default)]
    prompt_tokens: Option<i64>,
    #[serde(default)]
    completion_tokens: Option<i64>,
    /// Some compatible endpoints name them as Anthropic does.
    #[serde(default)]
    input_tokens: Option<i64>,
    #[serde(default)]
    output_tokens: Option<i64>,
}

impl UsageField {
    fn tokens(&self) -> Tokens {
        Tokens {
            input: self.prompt_tokens.or(self.input_tokens).unwrap_or(0).max(0),
            output: self
                .completion_tokens
                .or(self.output_tokens)
                .unwrap_or(0)
                .max(0),
        }
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

/// A stream chunk, read only as far as usage and the text it carries (borrowed from
/// the event unless it has escapes).
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default)]
    usage: Option<UsageField>,
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    delta: Option<ChoiceDelta<'a>>,
}

#[derive(Deserialize)]
struct ChoiceDelta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
}

/// What one stream event says.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ChunkFacts {
    pub usage: Option<Tokens>,
    /// The chunk has no choices: the usage-only chunk `include_usage` adds.
    pub usage_only: bool,
    /// Characters of generated text, for an estimate when the stream is cut short.
    pub content_chars: usize,
}

/// Reads an event's `data:` payload (JSON); `None` for `[DONE]` or anything unparsable.
pub fn chunk_facts(data: &[u8]) -> Option<ChunkFacts> {
    let chunk: Chunk = serde_json::from_slice(data).ok()?;
    let content_chars = chunk
        .choices
        .iter()
        .flatten()
        .filter_map(|c| c.delta.as_ref()?.content.as_ref())
        .map(|text| text.chars().count())
        .sum();
    let usage = chunk.usage.map(|u| u.tokens());
    Some(ChunkFacts {
        usage_only: usage.is_some() && chunk.choices.as_ref().is_none_or(Vec::is_empty),
        usage,
        content_chars,
    })
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
                usage: Some(Tokens {
                    input: 3,
                    output: 2
                }),
                usage_only: true,
                content_chars: 0
            })
        );
        let escaped = chunk_facts(br#"{"choices":[{"delta":{"content":"a\"b\u00e9"}}]}"#);
        assert_eq!(escaped.map(|facts| facts.content_chars), Some(4));
        assert_eq!(chunk_facts(b"[DONE]"), None);
    }
}
