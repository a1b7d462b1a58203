//! Passes a server-sent-events stream through event by event, noting usage on the way
//! and, when the proxy asked for usage the client did not, removing the usage-only chunk
//! so the client sees exactly the stream it asked for.

use std::sync::LazyLock;

use bytes::{Buf, Bytes, BytesMut};
use memchr::memmem::Finder;

use super::extract::{read_event, Event, Tokens, UsageParts};
use super::json_keys::{has_value, text_chars, Key};
use super::template::{Compared, Template};
use crate::endpoint::Endpoint;

/// What else reads a stream's events as the relay parses them (a trace's facts of the
/// answer): each event is parsed once for all.
pub(crate) trait EventReader {
    /// An event the relay does not parse (it holds no usage), whose payload is `data`:
    /// the reader takes what it can from the bytes and says what it found; `Parse`: it
    /// needs the event parsed after all ([`EventReader::event`] then). `data[..from]`
    /// holds nothing for the reader (the bytes an earlier event in which it found
    /// nothing opened with: `super::template`), so it searches the rest. A stream's
    /// events parsed in full for a trace were most of what the trace added to a
    /// streamed request.
    fn unparsed(&mut self, data: &[u8], from: usize) -> Found;

    /// An event the relay parsed (one holding usage, or one the reader asked for).
    fn event(&mut self, event: &Event<'_>);
}

/// What a reader found in an event's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// Nothing it reads.
    Nothing,
    /// What it reads, taken from the bytes.
    Taken,
    /// What it reads, which only a parse of the event can take.
    Parse,
}

/// Holds the unfinished tail of the stream between reads.
#[derive(Debug)]
pub struct SseRelay {
    pending: BytesMut,
    strip_usage_chunk: bool,
    /// The key of the generated text in the stream's events (see [`text_key`]).
    text_key: &'static Finder<'static>,
    /// The bytes around the text of an earlier event (see [`Template`]).
    template: Template,
    /// The usage the stream reported so far, if it did.
    usage_parts: Option<UsageParts>,
    /// Generated characters seen, for an estimate if usage never comes.
    pub content_chars: usize,
}

impl SseRelay {
    /// A stream of `endpoint`'s events; `strip_usage_chunk`: the proxy injected
    /// `stream_options.include_usage`.
    pub fn new(endpoint: Endpoint, strip_usage_chunk: bool) -> Self {
        SseRelay {
            pending: BytesMut::new(),
            strip_usage_chunk,
            text_key: text_key(endpoint),
            template: Template::default(),
            usage_parts: None,
            content_chars: 0,
        }
    }

    /// Takes bytes from the provider and appends to `out` what to send on: every
    /// complete event, byte for byte, except a stripped usage chunk. An incomplete event
    /// waits. The kept events are copied straight from `chunk` (or from the tail held
    /// from the last read), in one piece when none is stripped. Each event is read once,
    /// for usage and, when the request is traced, by `reader`.
    pub(crate) fn push(
        &mut self,
        chunk: &[u8],
        mut reader: Option<&mut (dyn EventReader + '_)>,
        out: &mut BytesMut,
    ) {
        let mut pending = std::mem::take(&mut self.pending);
        let continued = !pending.is_empty();
        if continued {
            pending.extend_from_slice(chunk);
        }
        let input: &[u8] = if continued { &pending } else { chunk };
        let (mut at, mut kept_from) = (0, 0);
        while let Some(end) = event_end(&input[at..]) {
            if !self.keep(&input[at..at + end], reader.as_deref_mut()) {
                out.extend_from_slice(&input[kept_from..at]);
                kept_from = at + end;
            }
            at += end;
        }
        out.extend_from_slice(&input[kept_from..at]);
        if continued {
            pending.advance(at);
        } else {
            pending.extend_from_slice(&chunk[at..]);
        }
        self.pending = pending;
    }

    /// The usage the stream reported, if it did.
    pub fn usage(&self) -> Option<Tokens> {
        self.usage_parts.map(UsageParts::tokens)
    }

    /// The rest at the end of the stream (an event without its final blank line).
    pub(crate) fn finish(&mut self, reader: Option<&mut (dyn EventReader + '_)>) -> Bytes {
        let rest = self.pending.split();
        if !rest.is_empty() && self.keep(&rest, reader) {
            return rest.freeze();
        }
        Bytes::new()
    }

    fn keep(&mut self, event: &[u8], mut reader: Option<&mut (dyn EventReader + '_)>) -> bool {
        let mut keep = true;
        for line in lines(event) {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(data) = line.strip_prefix(b"data:") else {
                continue;
            };
            let data = data.trim_ascii();
            let read = reader.is_some();
            // An event that repeats the template's bytes around its text is searched
            // only after its text, or not at all.
            let (known_chars, from) = match self.template.compare(data, read) {
                Compared::Same { chars } => {
                    self.content_chars += chars;
                    continue;
                }
                Compared::Opens { chars, rest } => (chars, rest),
                Compared::Unlike => (0, 0),
            };
            let rest = &data[from..];
            // Most events are a few tokens of text: parsing each in full was a tenth of
            // the proxy's CPU a stream. One that cannot hold usage, and that no reader
            // wants, only has its generated text counted, by a scan for its key.
            let mut found = Found::Nothing;
            let parse = has_value(rest, &USAGE_KEY, b'{')
                || reader.as_deref_mut().is_some_and(|reader| {
                    found = reader.unparsed(data, from);
                    found == Found::Parse
                });
            if !parse {
                let texts = text_chars(rest, self.text_key);
                self.content_chars += known_chars + texts.chars;
                if let Some(text) = texts.only.filter(|_| from == 0 && found == Found::Nothing) {
                    self.template.learn(data, text, read);
                }
                continue;
            }
            let Some(event) = read_event(data) else {
                continue;
            };
            if let Some(reader) = reader.as_deref_mut() {
                reader.event(&event);
            }
            let facts = event.chunk_facts();
            self.content_chars += facts.content_chars;
            if let Some(usage) = facts.usage {
                self.usage_parts = Some(self.usage_parts.unwrap_or_default().merged(usage));
                if self.strip_usage_chunk && facts.usage_only {
                    keep = false;
                }
            }
        }
        keep
    }
}

/// The key every usage of a stream's events is under (`usage`, `response.usage`,
/// `message.usage`), read where its value is an object: OpenAI's chunks carry
/// `"usage":null` until the last when usage is asked for, as the proxy asks. Within a
/// JSON string a quote is always escaped, so these bytes are a key, never part of text.
static USAGE_KEY: Key = LazyLock::new(|| Finder::new(b"\"usage\""));
static CONTENT_KEY: Key = LazyLock::new(|| Finder::new(b"\"content\""));
static DELTA_KEY: Key = LazyLock::new(|| Finder::new(b"\"delta\""));
static TEXT_KEY: Key = LazyLock::new(|| Finder::new(b"\"text\""));

/// The key, quotes included, of the text an endpoint's stream events generate, as the
/// full parse reads it (`Event::chunk_facts`): chat completions' `choices[].delta.content`,
/// the Responses API's `delta` (a string), Anthropic's `delta.text`. In those events no
/// other string value has that key.
fn text_key(endpoint: Endpoint) -> &'static Finder<'static> {
    match endpoint {
        Endpoint::Responses => &DELTA_KEY,
        Endpoint::Messages => &TEXT_KEY,
        Endpoint::ChatCompletions | Endpoint::Embeddings | Endpoint::MessagesCountTokens => {
            &CONTENT_KEY
        }
    }
}

/// The lines of `event`, split at each LF as `split(|b| *b == b'\n')` splits them (a CR
/// before an LF stays with its line), each LF found by memchr's search. Split byte by
/// byte, the lines of a 170-byte chat chunk cost about 900 of the 2,300 instructions
/// the relay spent on it: a seventh of all the proxy's instructions for a streamed
/// request (`load-tests/instructions.sh`, 2026-12-01).
fn lines(event: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(event);
    std::iter::from_fn(move || {
        let text = rest?;
        match memchr::memchr(b'\n', text) {
            Some(at) => {
                rest = Some(&text[at + 1..]);
                Some(&text[..at])
            }
            None => {
                rest = None;
                Some(text)
            }
        }
    })
}

/// The length of the first complete event (up to and including the blank line that
/// ends it; lines end in LF or CRLF).
fn event_end(buffer: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(offset) = memchr::memchr(b'\n', &buffer[from..]) {
        let at = from + offset;
        match buffer.get(at + 1) {
            Some(b'\n') => return Some(at + 2),
            Some(b'\r') if buffer.get(at + 2) == Some(&b'\n') => return Some(at + 3),
            _ => from = at + 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = concat!(
        "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\n",
        "data: [DONE]\n\n",
    );

    fn relay_in_pieces(relay: &mut SseRelay, size: usize) -> Vec<u8> {
        let mut out = BytesMut::new();
        for piece in STREAM.as_bytes().chunks(size) {
            relay.push(piece, None, &mut out);
        }
        out.extend_from_slice(&relay.finish(None));
        out.to_vec()
    }

    #[test]
    fn lines_split_as_a_split_at_each_line_feed_does() {
        for event in [
            &b""[..],
            b"\n",
            b"data: x\n\n",
            b"event: e\r\ndata: {}\r\n\r\n",
            b"no end",
            b"\n\nafter\nlast",
        ] {
            let expected: Vec<&[u8]> = event.split(|b| *b == b'\n').collect();
            assert_eq!(lines(event).collect::<Vec<_>>(), expected, "{event:?}");
        }
    }

    #[test]
    fn a_client_that_asked_for_usage_gets_the_stream_unchanged() {
        for size in [1, 7, 64, 4096] {
            let mut relay = SseRelay::new(Endpoint::ChatCompletions, false);
            assert_eq!(relay_in_pieces(&mut relay, size), STREAM.as_bytes());
            assert_eq!(
                relay.usage(),
                Some(Tokens {
                    input: 7,
                    output: 2
                })
            );
            assert_eq!(relay.content_chars, 5);
        }
    }

    #[test]
    fn the_injected_usage_chunk_is_removed() {
        for size in [1, 5, 64, 4096] {
            let mut relay = SseRelay::new(Endpoint::ChatCompletions, true);
            let out = String::from_utf8(relay_in_pieces(&mut relay, size)).unwrap_or_default();
            assert!(!out.contains("prompt_tokens"), "{out}");
            assert!(out.contains("\"Hel\"") && out.ends_with("data: [DONE]\n\n"));
            assert_eq!(
                out.len(),
                STREAM.len() - STREAM.lines().nth(4).map_or(0, |l| l.len() + 2)
            );
            assert_eq!(
                relay.usage(),
                Some(Tokens {
                    input: 7,
                    output: 2
                })
            );
        }
    }

    /// `chunk` relayed by `relay` on its own: what it sends on.
    fn pushed(relay: &mut SseRelay, chunk: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        relay.push(chunk, None, &mut out);
        out.to_vec()
    }

    #[test]
    fn an_event_cut_in_two_waits_for_its_end_then_goes_on_whole() {
        let mut relay = SseRelay::new(Endpoint::ChatCompletions, false);
        assert_eq!(pushed(&mut relay, STREAM.as_bytes()), STREAM.as_bytes());
        let mut relay = SseRelay::new(Endpoint::ChatCompletions, false);
        let first = b"data: {\"choices\":[]}\n\n";
        assert_eq!(
            pushed(&mut relay, &[&first[..], b"data: [DO"].concat()),
            first
        );
        assert_eq!(pushed(&mut relay, b"NE]\n"), b"");
        assert_eq!(pushed(&mut relay, b"\ndata: x"), b"data: [DONE]\n\n");
        assert_eq!(&relay.finish(None)[..], b"data: x");
    }

    #[test]
    fn crlf_events_are_understood() {
        let mut relay = SseRelay::new(Endpoint::ChatCompletions, true);
        let out = pushed(
            &mut relay,
            b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\r\n\r\ndata: [DONE]\r\n\r\n",
        );
        assert_eq!(out, b"data: [DONE]\r\n\r\n");
        assert!(relay.usage().is_some());
    }

    /// Events of each API that hold no usage, with the text in every form JSON allows.
    const TEXT_EVENTS: [(Endpoint, &str); 16] = [
        (
            Endpoint::ChatCompletions,
            r#"{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        ),
        (
            Endpoint::ChatCompletions,
            r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"Hello, wörld"},"logprobs":null}]}"#,
        ),
        (
            Endpoint::ChatCompletions,
            r#"{"choices":[{"delta":{"content" : "a\"b\\c\n\u00e9\ud83d\ude00 \uD83D\uDE00😀"}}]}"#,
        ),
        (
            Endpoint::ChatCompletions,
            r#"{"choices":[{"delta":{"content":null,"reasoning_content":"not counted","tool_calls":[{"function":{"arguments":"{\"content\":\"x\"}"}}]}}]}"#,
        ),
        (
            Endpoint::ChatCompletions,
            r#"{"choices":[{"index":0,"delta":{"content":"one"}},{"index":1,"delta":{"content":"two"}}]}"#,
        ),
        (
            Endpoint::ChatCompletions,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        ),
        (
            Endpoint::ChatCompletions,
            r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}],"usage" : null}"#,
        ),
        (Endpoint::ChatCompletions, "[DONE]"),
        (
            Endpoint::Responses,
            r#"{"type":"response.in_progress","response":{"id":"resp_1","status":"in_progress","usage":null}}"#,
        ),
        (
            Endpoint::Responses,
            r#"{"type":"response.output_text.delta","item_id":"m1","output_index":0,"content_index":0,"delta":"Hi \"there\""}"#,
        ),
        (
            Endpoint::Responses,
            r#"{"type":"response.output_text.done","item_id":"m1","text":"Hi \"there\""}"#,
        ),
        (
            Endpoint::Responses,
            r#"{"type":"response.created","response":{"id":"resp_1","status":"in_progress","output":[]}}"#,
        ),
        (
            Endpoint::Messages,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        (
            Endpoint::Messages,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Bonjour à tous"}}"#,
        ),
        (
            Endpoint::Messages,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"text\":"}}"#,
        ),
        (
            Endpoint::Messages,
            r#"{"type":"content_block_stop","index":0}"#,
        ),
    ];

    #[test]
    fn the_text_scan_counts_what_the_full_parse_counts() {
        for (endpoint, data) in TEXT_EVENTS {
            assert!(!has_value(data.as_bytes(), &USAGE_KEY, b'{'), "{data}");
            let parsed = read_event(data.as_bytes()).map_or(0, |e| e.chunk_facts().content_chars);
            assert_eq!(
                text_chars(data.as_bytes(), text_key(endpoint)).chars,
                parsed,
                "{endpoint:?} {data}"
            );
        }
        let escaped = r#"{"choices":[{"delta":{"content":"a\"b\u00e9"}}]}"#;
        assert_eq!(text_chars(escaped.as_bytes(), &CONTENT_KEY).chars, 4);
    }

    #[test]
    fn events_cut_short_or_malformed_count_what_they_hold() {
        let key = text_key(Endpoint::ChatCompletions);
        for (data, chars) in [
            (r#"{"choices":[{"delta":{"content":"abc\u12"#, 4),
            (r#"{"choices":[{"delta":{"content":"abc\"#, 4),
            (r#"{"choices":[{"delta":{"content":"ab"#, 2),
            (r#"{"choices":[{"delta":{"content":"#, 0),
            (r#"{"choices":[{"delta":{"content""#, 0),
            (r#""content":"a","content":"#, 1),
            (r#""content"x"content":"é""#, 1),
        ] {
            assert_eq!(text_chars(data.as_bytes(), key).chars, chars, "{data}");
        }
        let mut relay = SseRelay::new(Endpoint::ChatCompletions, false);
        let cut = b"data: {\"choices\":[{\"delta\":{\"content\":\"ab\\\n\n";
        assert_eq!(pushed(&mut relay, cut), cut);
    }

    #[test]
    fn a_stream_without_usage_counts_its_text_with_or_without_a_trace() {
        struct Nothing;
        impl EventReader for Nothing {
            fn unparsed(&mut self, _: &[u8], _: usize) -> Found {
                Found::Parse
            }
            fn event(&mut self, _: &Event<'_>) {}
        }
        for endpoint in [
            Endpoint::ChatCompletions,
            Endpoint::Responses,
            Endpoint::Messages,
        ] {
            let stream: String = TEXT_EVENTS
                .iter()
                .filter(|(e, _)| *e == endpoint)
                .map(|(_, data)| format!("data: {data}\n\n"))
                .collect();
            let chunk = stream.as_bytes();
            let mut quick = SseRelay::new(endpoint, false);
            let mut parsed = SseRelay::new(endpoint, false);
            assert_eq!(pushed(&mut quick, chunk), chunk);
            let mut out = BytesMut::new();
            parsed.push(chunk, Some(&mut Nothing), &mut out);
            assert_eq!(out, chunk);
            assert!(quick.content_chars > 0, "{endpoint:?}");
            assert_eq!(quick.content_chars, parsed.content_chars, "{endpoint:?}");
            assert_eq!(quick.usage(), None);
        }
    }
}
