//! A stream's answer, read as the relay reads its events: most are not parsed for the
//! trace.

use super::{ending, AnswerFacts};
use crate::usage::extract::{Event, EventDelta};
use crate::usage::json_keys::{has_value, plain_strings};
use crate::usage::sse::{EventReader, Found};

impl AnswerFacts {
    /// A stream's next bytes arrived: the first says when the first chunk came.
    pub fn received(&mut self, bytes: &[u8]) {
        if self.first_chunk.is_none() && !bytes.is_empty() {
            self.first_chunk = Some(self.attempt_started.elapsed());
        }
    }
}

impl EventReader for AnswerFacts {
    /// A stream's text events, most of it, are not parsed for the trace: the first is
    /// kept until the answer is named, and how a choice ended is read from the bytes
    /// where the endpoint's key says it plainly (an escape in it takes a parse).
    fn unparsed(&mut self, data: &[u8], from: usize) -> Found {
        if self.first_unparsed.is_none() && !self.named() {
            self.first_unparsed = Some(data.into());
        }
        let ending = ending(self.endpoint);
        let rest = &data[from..];
        if !ending.plain {
            // A string `status` is the response's only when a parse says so.
            return if has_value(rest, ending.key, b'"') {
                Found::Parse
            } else {
                Found::Nothing
            };
        }
        match plain_strings(rest, ending.key) {
            Some(reasons) if reasons.is_empty() => Found::Nothing,
            Some(reasons) => {
                for reason in reasons {
                    self.finished(Some(reason));
                }
                Found::Taken
            }
            None => Found::Parse,
        }
    }

    /// One event of a stream, as the usage's reading parsed it.
    fn event(&mut self, event: &Event<'_>) {
        self.name_from(event);
        let objects = [(
            &event.object,
            &event.status,
            &event.stop_reason,
            event.usage.as_deref(),
        )];
        let nested = [event.response.as_ref(), event.message.as_ref()];
        let nested = nested
            .into_iter()
            .flatten()
            .map(|n| (&n.object, &n.status, &n.stop_reason, n.usage.as_deref()));
        for (object, status, stop_reason, usage) in objects.into_iter().chain(nested) {
            self.ended(object, status, stop_reason);
            if let Some(usage) = usage {
                self.usage(usage);
            }
        }
        for choice in event.choices.iter().flatten() {
            self.finished(choice.finish_reason.get());
        }
        if let Some(EventDelta::Stop { stop_reason }) = &event.delta {
            self.finished(Some(stop_reason));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use bytes::BytesMut;

    use super::super::test_support::{facts_of, pairs, Attributes, Relayed};
    use super::*;
    use crate::endpoint::Endpoint;
    use crate::otel::protobuf::StringList;
    use crate::usage::extract::{read_event, Tokens};
    use crate::usage::sse::SseRelay;

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
}
