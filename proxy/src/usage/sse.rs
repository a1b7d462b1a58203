//! Passes a server-sent-events stream through event by event, noting usage on the way
//! and, when the proxy asked for usage the client did not, removing the usage-only chunk
//! so the client sees exactly the stream it asked for.

use bytes::{Bytes, BytesMut};

use super::extract::{read_event, Event, Tokens, UsageParts};

/// What else reads a stream's events as the relay parses them (a trace's facts of the
/// answer): each event is parsed once for all.
pub(crate) trait EventReader {
    fn event(&mut self, event: &Event<'_>);
}

/// Holds the unfinished tail of the stream between reads.
#[derive(Debug, Default)]
pub struct SseRelay {
    pending: BytesMut,
    strip_usage_chunk: bool,
    /// The usage the stream reported so far, if it did.
    usage_parts: Option<UsageParts>,
    /// Generated characters seen, for an estimate if usage never comes.
    pub content_chars: usize,
}

impl SseRelay {
    /// `strip_usage_chunk`: the proxy injected `stream_options.include_usage`.
    pub fn new(strip_usage_chunk: bool) -> Self {
        SseRelay {
            strip_usage_chunk,
            ..SseRelay::default()
        }
    }

    /// Takes bytes from the provider and returns what to send on: every complete event,
    /// byte for byte, except a stripped usage chunk. An incomplete event waits. When the
    /// chunk holds whole events that all pass (the usual case), the provider's own bytes
    /// are passed on without a copy. Each event is read once, for usage and, when the
    /// request is traced, by `reader`.
    pub(crate) fn push(
        &mut self,
        chunk: &Bytes,
        mut reader: Option<&mut (dyn EventReader + '_)>,
    ) -> Bytes {
        let input = if self.pending.is_empty() {
            chunk.clone()
        } else {
            self.pending.extend_from_slice(chunk);
            self.pending.split().freeze()
        };
        let mut at = 0;
        // The kept events' bytes, gathered only once an event is stripped.
        let mut gathered: Option<BytesMut> = None;
        while let Some(end) = event_end(&input[at..]) {
            let event = &input[at..at + end];
            let keep = self.keep(event, reader.as_deref_mut());
            match (&mut gathered, keep) {
                (Some(out), true) => out.extend_from_slice(event),
                (None, false) => gathered = Some(BytesMut::from(&input[..at])),
                _ => {}
            }
            at += end;
        }
        self.pending.extend_from_slice(&input[at..]);
        gathered.map_or_else(|| input.slice(..at), BytesMut::freeze)
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
        for line in event.split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(data) = line.strip_prefix(b"data:") else {
                continue;
            };
            let Some(event) = read_event(data.trim_ascii()) else {
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

/// The length of the first complete event (up to and including the blank line that
/// ends it; lines end in LF or CRLF).
fn event_end(buffer: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(offset) = buffer[from..].iter().position(|b| *b == b'\n') {
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
        let mut out = Vec::new();
        for piece in STREAM.as_bytes().chunks(size) {
            out.extend_from_slice(&relay.push(&Bytes::copy_from_slice(piece), None));
        }
        out.extend_from_slice(&relay.finish(None));
        out
    }

    #[test]
    fn a_client_that_asked_for_usage_gets_the_stream_unchanged() {
        for size in [1, 7, 64, 4096] {
            let mut relay = SseRelay::new(false);
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
            let mut relay = SseRelay::new(true);
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

    #[test]
    fn whole_events_that_all_pass_are_relayed_without_a_copy() {
        let mut relay = SseRelay::new(false);
        let chunk = Bytes::from_static(STREAM.as_bytes());
        let out = relay.push(&chunk, None);
        assert_eq!(out.as_ptr(), chunk.as_ptr());
        assert_eq!(out.len(), chunk.len());
        // An event cut in two waits for its end, then goes on whole.
        let mut relay = SseRelay::new(false);
        assert!(relay
            .push(&Bytes::from_static(b"data: [DO"), None)
            .is_empty());
        assert_eq!(
            &relay.push(&Bytes::from_static(b"NE]\n\n"), None)[..],
            b"data: [DONE]\n\n"
        );
    }

    #[test]
    fn crlf_events_are_understood() {
        let mut relay = SseRelay::new(true);
        let out = relay.push(&Bytes::from_static(
            b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\r\n\r\ndata: [DONE]\r\n\r\n",
        ), None);
        assert_eq!(&out[..], b"data: [DONE]\r\n\r\n");
        assert!(relay.usage().is_some());
    }
}
