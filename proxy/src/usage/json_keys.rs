//! Keys of a JSON text found in its bytes, without a parse: where a key is, whether its
//! value is an object or a string, a string value as written, the characters of one.
//! Within a JSON string a quote is always escaped, so a key's bytes, quotes included,
//! are never part of a string's text. The relay reads a stream's events so (`super::sse`),
//! and a trace how an answer ended (`crate::otel::AnswerFacts`).

use std::ops::Range;
use std::sync::LazyLock;

use memchr::memmem::Finder;

/// A key searched for in every event, with memchr's SIMD substring search built once:
/// `memmem::find` builds it anew on each call, which on events of a few tokens cost
/// about as much as the search.
pub(crate) type Key = LazyLock<Finder<'static>>;

/// Below this many bytes memchr's search rolls a hash over every byte (Rabin-Karp): its
/// vector search wants a haystack longer than a vector and the needle's chosen pair.
const SHORT_HAYSTACK: usize = 32;

/// Where `key` (quotes included) first occurs in `haystack`. A key ends with a quote, so
/// a short haystack whose last quote comes too early to end one holds none: most often
/// the rest of an event after the key last found (`null}],"usage":null}`), whose search
/// cost a traced stream about 150 instructions an event.
fn find(key: &Finder<'_>, haystack: &[u8]) -> Option<usize> {
    let needle = key.needle().len();
    if haystack.len() < needle {
        return None;
    }
    if haystack.len() < SHORT_HAYSTACK {
        let last_quote = memchr::memrchr(b'"', haystack)?;
        if last_quote + 1 < needle {
            return None;
        }
    }
    key.find(haystack)
}

/// The string values under a key of an event.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Texts {
    /// Their characters, unescaped (as `str::chars` counts them).
    pub chars: usize,
    /// The text of the only one (between its quotes), when there is one and it is closed.
    pub only: Option<Range<usize>>,
}

/// The string values under `key` in the JSON `data`. A key whose value is not a string
/// (`null`) counts none.
pub(super) fn text_chars(data: &[u8], key: &Finder<'_>) -> Texts {
    let mut texts = Texts::default();
    let mut count = 0;
    let mut at = 0;
    while let Some(found) = find(key, &data[at..]) {
        at += found + key.needle().len();
        let Some(quote) = value_start(data, at).filter(|&value| data[value] == b'"') else {
            continue;
        };
        let (chars, close) = string_chars(data, quote + 1);
        texts.chars += chars;
        count += 1;
        texts.only = close.filter(|_| count == 1).map(|close| quote + 1..close);
        at = close.map_or(data.len(), |close| close + 1);
    }
    texts
}

/// Where the value of each key `key` (quotes included) in the JSON `data` starts. The
/// next key is searched for from the value on: within a JSON string a quote is escaped,
/// so a string's text cannot hold a key, and the value's first byte (a quote, a letter,
/// a digit, a bracket) cannot start one.
fn key_values<'a>(data: &'a [u8], key: &'a Finder<'_>) -> impl Iterator<Item = usize> + 'a {
    let mut at = 0;
    std::iter::from_fn(move || loop {
        at += find(key, &data[at..])? + key.needle().len();
        if let Some(value) = value_start(data, at) {
            at = value + 1;
            return Some(value);
        }
    })
}

/// Whether some key `key` (quotes included) in the JSON `data` has a value that starts
/// with `first` (`"`: a string, `{`: an object).
pub(crate) fn has_value(data: &[u8], key: &Finder<'_>, first: u8) -> bool {
    key_values(data, key).any(|value| data[value] == first)
}

/// The string values of every key `key` (quotes included) in the JSON `data`, as they
/// are written; `None` when one has an escape (or is cut short, or is not UTF-8): it
/// takes a parse to be read. Values that are not strings are passed over.
pub(crate) fn plain_strings<'a>(data: &'a [u8], key: &Finder<'_>) -> Option<Vec<&'a str>> {
    let mut values = Vec::new();
    for quote in key_values(data, key).filter(|&value| data[value] == b'"') {
        let text = &data[quote + 1..];
        let end = memchr::memchr2(b'"', b'\\', text).filter(|&end| text[end] == b'"')?;
        values.push(std::str::from_utf8(&text[..end]).ok()?);
    }
    Some(values)
}

/// Where the value of the key that ends at `key_end` starts: past its colon and any
/// white space; `None` when no colon follows (the bytes were not a key) or the data ends.
fn value_start(data: &[u8], key_end: usize) -> Option<usize> {
    let colon = skip_space(data, key_end);
    if data.get(colon) != Some(&b':') {
        return None;
    }
    let value = skip_space(data, colon + 1);
    (value < data.len()).then_some(value)
}

/// Where the first byte at or after `at` that is not white space is.
pub(super) fn skip_space(data: &[u8], mut at: usize) -> usize {
    while data.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// The characters of the JSON string starting at `at` (after its opening quote) and
/// where its closing quote is (`None`: the data ends first). An escape is one
/// character; a `\uXXXX` low surrogate is the second half of the character its high
/// surrogate began.
pub(super) fn string_chars(data: &[u8], mut at: usize) -> (usize, Option<usize>) {
    let mut chars = 0;
    while let Some(&byte) = data.get(at) {
        match byte {
            b'"' => return (chars, Some(at)),
            b'\\' => {
                let unicode = data.get(at + 1) == Some(&b'u');
                let low_surrogate =
                    unicode && data.get(at + 2..at + 4).is_some_and(is_low_surrogate);
                chars += usize::from(!low_surrogate);
                at += if unicode { 6 } else { 2 };
            }
            // A UTF-8 continuation byte belongs to the character before it.
            _ => {
                chars += usize::from(byte & 0xC0 != 0x80);
                at += 1;
            }
        }
    }
    (chars, None)
}

/// Whether the first two hex digits of a `\u` escape make it a low surrogate (DC00 to
/// DFFF).
fn is_low_surrogate(hex: &[u8]) -> bool {
    matches!(hex[0], b'd' | b'D') && matches!(hex[1], b'c'..=b'f' | b'C'..=b'F')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_as_memchr_finds_them_in_short_haystacks_too() {
        let key = Finder::new(b"\"finish_reason\"");
        let event = br#"{"choices":[{"delta":{},"finish_reason":null},{"finish_reason":"stop"}],"usage":null}"#;
        // Every piece of the event, short and long, the key cut at either end.
        for start in 0..event.len() {
            for end in start..=event.len() {
                let haystack = &event[start..end];
                assert_eq!(find(&key, haystack), key.find(haystack), "{start}..{end}");
            }
        }
    }

    #[test]
    fn plain_strings_are_read_as_written_and_escapes_want_a_parse() {
        let key = Finder::new(b"\"finish_reason\"");
        for (data, expected) in [
            (r#"{"choices":[{"finish_reason":null}]}"#, Some(vec![])),
            (
                r#"{"choices":[{"finish_reason" : "stop"},{"finish_reason":"length"}]}"#,
                Some(vec!["stop", "length"]),
            ),
            // Text that mentions the key is within a string: its quotes are escaped.
            (
                r#"{"delta":{"content":"\"finish_reason\":\"x\""},"finish_reason":"stop"}"#,
                Some(vec!["stop"]),
            ),
            (r#"{"finish_reason":"st\u006fp"}"#, None),
            (r#"{"finish_reason":"sto"#, None),
            (
                r#"{"finish_reason":7,"finish_reason":"stop"}"#,
                Some(vec!["stop"]),
            ),
        ] {
            assert_eq!(plain_strings(data.as_bytes(), &key), expected, "{data}");
        }
    }
}
