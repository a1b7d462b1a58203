//! A whole (not streamed) answer, read once for its usage and what the trace shows.

use serde::Deserialize;

use super::{AnswerFacts, FINISH_REASON};
use crate::endpoint::Endpoint;
use crate::usage::extract::{read_event, Text, Tokens, UsageField};
use crate::usage::json_keys::plain_strings;

/// A chat completion as a trace reads it: its usage, id and model. Its choices are not
/// parsed: how each ended is read from the answer's bytes (`plain_strings`), as a
/// stream's events are. Parsed as a stream's event is, choices and all, a whole answer
/// cost a traced request about 2,800 instructions more than its usage alone, each
/// string field read about 300 of them (`instructions.sh LOAD=plain TRACED=1`,
/// 2026-12-06).
#[derive(Deserialize)]
struct WholeChat<'a> {
    #[serde(default)]
    usage: Option<UsageField>,
    #[serde(borrow, default)]
    id: Text<'a>,
    #[serde(borrow, default)]
    model: Text<'a>,
}

/// Any other endpoint's whole answer (a response, a message, embeddings): its usage and
/// its top level's facts. It repeats `WholeChat`'s three fields rather than holding
/// them: a flattened field makes serde buffer the whole answer, and one type for both
/// would read `object`, `status` and `stop_reason` of every chat completion (about 300
/// instructions a string read).
#[derive(Deserialize)]
struct WholeAnswer<'a> {
    #[serde(default)]
    usage: Option<UsageField>,
    #[serde(borrow, default)]
    id: Text<'a>,
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(borrow, default)]
    object: Text<'a>,
    #[serde(borrow, default)]
    status: Text<'a>,
    #[serde(borrow, default)]
    stop_reason: Text<'a>,
}

impl AnswerFacts {
    /// A whole (not streamed) answer's body; its usage (`Ok(None)`: the answer has
    /// none) read in the same pass. `Err`: the body is not an answer's JSON, which the
    /// usage's own reading may still take.
    pub fn whole(&mut self, body: &[u8]) -> Result<Option<Tokens>, serde_json::Error> {
        let usage = if self.endpoint == Endpoint::ChatCompletions {
            let answer = serde_json::from_slice::<WholeChat<'_>>(body)?;
            self.name(&answer.id, &answer.model);
            match plain_strings(body, &FINISH_REASON) {
                Some(reasons) => reasons.into_iter().for_each(|r| self.finished(Some(r))),
                // An escape in a finish reason: the choices are parsed.
                None => {
                    let choices = read_event(body).and_then(|event| event.choices);
                    for choice in choices.iter().flatten() {
                        self.finished(choice.finish_reason.get());
                    }
                }
            }
            answer.usage
        } else {
            let answer = serde_json::from_slice::<WholeAnswer<'_>>(body)?;
            self.name(&answer.id, &answer.model);
            self.ended(&answer.object, &answer.status, &answer.stop_reason);
            answer.usage
        };
        if let Some(usage) = &usage {
            self.usage(usage);
        }
        Ok(usage.as_ref().map(UsageField::tokens))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::test_support::{facts_of, pairs, Attributes};
    use super::*;

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
