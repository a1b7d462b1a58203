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
