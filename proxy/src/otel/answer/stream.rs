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
