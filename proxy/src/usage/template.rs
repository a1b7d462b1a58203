//! A stream's events repeat themselves but for their text. Each of OpenAI's chunks
//! carries the answer's id, creation time, model, service tier and system fingerprint
//! and the choice's index before its text, and `logprobs`, `finish_reason` and `usage`
//! after it (then an `obfuscation` string of random length, unless the client turned it
//! off); each of Anthropic's text deltas its type and index. The relay keeps the bytes
//! around the text of the last event it read without a parse that held one text and
//! nothing for a reader (the template). An event that opens with the template's bytes
//! holds nothing before its text that the template's event did not, so only its text
//! and what follows it are searched; one that also ends with them holds nothing but its
//! text. Searched whole, each of the paced mock's 53 chunks cost the relay about 500
//! instructions more, and a trace's search of it for how the answer ended about 450
//! more: a streamed request 318,501 instructions, 349,907 traced; with the template
//! 290,249 and 298,182 (`instructions.sh TRACED=1`, 2026-12-07).
//!
//! Within a JSON string a quote is escaped, so a key cannot start or end within a text;
//! one could only take the text's closing quote as its own, and then a comma or a
//! closing bracket follows it (checked), where a key's colon would.

use std::ops::Range;

use super::json_keys::{skip_space, string_chars};

/// The bytes around the text of an event read without a parse.
#[derive(Debug, Default)]
pub(super) struct Template {
    /// Up to and including the text's opening quote; empty: no template yet.
    head: Vec<u8>,
    /// After the text's closing quote.
    tail: Vec<u8>,
    /// Whether a reader read the event (and found nothing in it): a template is used for
    /// events read as its own was.
    read: bool,
}

/// How an event compares with the template.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Compared {
    /// It does not open with the template's bytes.
    Unlike,
    /// It opens with them: its text's characters, and where the rest (after the text's
    /// closing quote) starts, to be searched.
    Opens { chars: usize, rest: usize },
    /// It is the template's bytes but for its text: its text's characters.
    Same { chars: usize },
}

impl Template {
    /// How `data`, an event's payload, compares with the template; `read`: a reader reads it.
    pub(super) fn compare(&self, data: &[u8], read: bool) -> Compared {
        if self.head.is_empty() || self.read != read || !data.starts_with(&self.head) {
            return Compared::Unlike;
        }
        let (chars, Some(close)) = string_chars(data, self.head.len()) else {
            return Compared::Unlike;
        };
        let rest = close + 1;
        if data[rest..] == self.tail[..] {
            Compared::Same { chars }
        } else if follows_a_value(&data[rest..]) {
            Compared::Opens { chars, rest }
        } else {
            Compared::Unlike
        }
    }

    /// Takes `data`, an event read without a parse whose only text is `text` (its bytes
    /// between its quotes) and in which a reader, if `read`, found nothing, as the
    /// template.
    pub(super) fn learn(&mut self, data: &[u8], text: Range<usize>, read: bool) {
        let after = &data[text.end + 1..];
        if !follows_a_value(after) {
            return;
        }
        self.head.clear();
        self.head.extend_from_slice(&data[..text.start]);
        self.tail.clear();
        self.tail.extend_from_slice(after);
        self.read = read;
    }
}

/// Whether the bytes after a string are what follows a value in JSON: after any white
/// space, a comma or a closing bracket. Then no key starts at the string's closing
/// quote, and none that ends there has a value.
fn follows_a_value(after: &[u8]) -> bool {
    matches!(after.get(skip_space(after, 0)), Some(b',' | b'}' | b']'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENAI: &str = r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}],"usage":null,"obfuscation":"ab"}"#;

    fn learned(data: &str, read: bool) -> Template {
        let start = data.find("\"content\":\"").unwrap() + "\"content\":\"".len();
        let end = start + data[start..].find('"').unwrap();
        let mut template = Template::default();
        template.learn(data.as_bytes(), start..end, read);
        template
    }

    #[test]
    fn an_event_is_compared_around_its_text() {
        let template = learned(OPENAI, false);
        let same = OPENAI.replace("\"Hel\"", r#""lo, \"wörld\"""#);
        assert_eq!(
            template.compare(same.as_bytes(), false),
            Compared::Same { chars: 11 }
        );
        let padded = OPENAI
            .replace("\"Hel\"", "\"lo\"")
            .replace("\"ab\"", "\"xyz\"");
        let rest = padded.find("\"lo\"").unwrap() + 4;
        assert_eq!(
            template.compare(padded.as_bytes(), false),
            Compared::Opens { chars: 2, rest }
        );
        assert_eq!(
            &padded[rest..],
            r#"},"finish_reason":null}],"usage":null,"obfuscation":"xyz"}"#
        );
        for unlike in [
            OPENAI.replace("\"index\":0", "\"index\":1"),
            // Read by a reader, the template learned without one.
            OPENAI.to_owned(),
            // A text that is not closed, or followed by what only follows a key.
            OPENAI.replace("\"Hel\"},", "\"Hel\\\"},"),
            OPENAI.replace("\"Hel\"},", "\"Hel\":{},"),
            OPENAI[..OPENAI.find("Hel").unwrap()].to_owned(),
        ] {
            let read = unlike == OPENAI;
            assert_eq!(
                template.compare(unlike.as_bytes(), read),
                Compared::Unlike,
                "{unlike}"
            );
        }
    }

    #[test]
    fn no_template_is_learned_from_a_text_followed_by_a_colon() {
        let odd = OPENAI.replace("\"Hel\"},", "\"Hel\" :{},");
        let template = learned(&odd, false);
        assert_eq!(template.compare(odd.as_bytes(), false), Compared::Unlike);
        assert!(template.head.is_empty());
    }
}
