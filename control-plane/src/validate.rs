//! Input types that carry their own rules, so deserializing them is validating them.
//!
//! A rule broken inside a request body surfaces as a 422 whose `details.field` names the
//! field, through the ordinary serde error path.

use std::fmt;

use serde::{Deserialize, Serialize};
use utoipa::openapi::{ObjectBuilder, RefOr, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

/// Text of `MIN..=MAX` characters without control characters, trimmed of outer spaces.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Text<const MIN: usize, const MAX: usize>(String);

impl<const MIN: usize, const MAX: usize> Text<MIN, MAX> {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_inner(self) -> String {
        self.0
    }
}

impl<const MIN: usize, const MAX: usize> TryFrom<String> for Text<MIN, MAX> {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        let trimmed = value.trim();
        // ASCII (ids, model names: nearly every value) is counted and checked by byte.
        let (length, control) = if trimmed.is_ascii() {
            let bytes = trimmed.as_bytes();
            (bytes.len(), bytes.iter().any(|b| b.is_ascii_control()))
        } else {
            (
                trimmed.chars().count(),
                trimmed.chars().any(char::is_control),
            )
        };
        // The untrimmed length counts too, so the document's `maxLength` is exact.
        let raw_length = if value.is_ascii() {
            value.len()
        } else {
            value.chars().count()
        };
        if length < MIN || length > MAX || raw_length > MAX {
            return Err(format!("must be {MIN} to {MAX} characters long"));
        }
        if control {
            return Err("must not contain control characters".to_owned());
        }
        // Untrimmed input keeps its allocation (the proxy's batches parse thousands).
        if trimmed.len() == value.len() {
            return Ok(Text(value));
        }
        Ok(Text(trimmed.to_owned()))
    }
}

impl<const MIN: usize, const MAX: usize> From<Text<MIN, MAX>> for String {
    fn from(text: Text<MIN, MAX>) -> String {
        text.0
    }
}

impl<const MIN: usize, const MAX: usize> fmt::Debug for Text<MIN, MAX> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl<const MIN: usize, const MAX: usize> PartialSchema for Text<MIN, MAX> {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(MIN))
            .max_length(Some(MAX))
            .pattern(Some(text_pattern(MIN)))
            .into()
    }
}

/// The pattern of a [`Text`] of at least `min` characters once trimmed: no control
/// characters, and outer whitespace (trimmed, as Rust's `char::is_whitespace` knows it)
/// around at least `min` characters that start and end with something else.
pub fn text_pattern(min: usize) -> String {
    const WHITESPACE: &str =
        r"\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";
    const CONTROL: &str = r"\u0000-\u001f\u007f-\u009f";
    let edge = format!("[^{CONTROL}{WHITESPACE}]");
    let inner = format!("[^{CONTROL}]");
    let body = match min {
        0 => format!("(?:{edge}(?:{inner}*{edge})?)?"),
        1 => format!("{edge}(?:{inner}*{edge})?"),
        _ => format!("{edge}{inner}{{{},}}{edge}", min - 2),
    };
    format!("^[{WHITESPACE}]*{body}[{WHITESPACE}]*$")
}

/// Each length range is a schema of its own (`Text1_100`): under one shared name, the
/// last range registered would describe every text field.
impl<const MIN: usize, const MAX: usize> ToSchema for Text<MIN, MAX> {
    fn name() -> std::borrow::Cow<'static, str> {
        format!("Text{MIN}_{MAX}").into()
    }
}

/// Deserializes a field that may be absent (`None`), `null` (`Some(None)`) or a value,
/// for PATCH bodies where `null` clears a field and absence leaves it alone.
pub fn present<'de, T, D>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: serde::Deserializer<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// An email address, lowercased; checked for shape only (one `@`, a dotted domain).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "String", into = "String")]
#[schema(value_type = String, format = "email")]
pub struct Email(String);

impl Email {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Email {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        let value = value.trim().to_lowercase();
        let valid = value.len() <= 254
            && value.split_once('@').is_some_and(|(local, domain)| {
                !local.is_empty()
                    && domain.contains('.')
                    && !domain.starts_with('.')
                    && !domain.ends_with('.')
                    && !domain.contains('@')
            })
            && !value.chars().any(|c| c.is_whitespace() || c.is_control());
        if valid {
            Ok(Email(value))
        } else {
            Err("must be an email address such as ops@example.com".to_owned())
        }
    }
}

impl From<Email> for String {
    fn from(email: Email) -> String {
        email.0
    }
}

impl fmt::Debug for Email {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A password of 10 to 256 characters. Its `Debug` never shows it.
#[derive(Clone, Deserialize)]
#[serde(try_from = "String")]
pub struct Password(String);

impl Password {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Password {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        let length = value.chars().count();
        if (10..=256).contains(&length) {
            Ok(Password(value))
        } else {
            Err("must be 10 to 256 characters long".to_owned())
        }
    }
}

impl PartialSchema for Password {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::Password,
            )))
            .min_length(Some(10))
            .max_length(Some(256))
            .into()
    }
}

impl ToSchema for Password {}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_enforces_length_and_rejects_control_characters() {
        assert!(Text::<1, 6>::try_from("  abc ".to_owned()).is_ok_and(|t| t.as_str() == "abc"));
        // The untrimmed length is bounded too (the document's `maxLength`).
        assert!(Text::<1, 5>::try_from("  abc ".to_owned()).is_err());
        assert!(Text::<1, 5>::try_from("   ".to_owned()).is_err());
        assert!(Text::<1, 5>::try_from("abcdef".to_owned()).is_err());
        assert!(Text::<1, 5>::try_from("a\u{0}b".to_owned()).is_err());
        assert!(Text::<1, 5>::try_from("a\u{7f}b".to_owned()).is_err());
        assert!(Text::<1, 5>::try_from("abcde".to_owned()).is_ok_and(|t| t.as_str() == "abcde"));
        // Beyond ASCII, characters are counted, not bytes, and C1 controls are refused.
        assert!(Text::<1, 6>::try_from(" ééééé".to_owned()).is_ok_and(|t| t.as_str() == "ééééé"));
        assert!(Text::<1, 5>::try_from("éééééé".to_owned()).is_err());
        assert!(Text::<1, 5>::try_from("é\u{9f}x".to_owned()).is_err());
    }

    #[test]
    fn the_documented_pattern_accepts_exactly_what_text_accepts() {
        let samples = [
            "",
            "a",
            " a ",
            "ab",
            " ab",
            "abc",
            "  abc  ",
            "a b c",
            "\tabc\n",
            "   ",
            "a\u{0}b",
            "a\u{7f}",
            "\u{85}abc",
            "ab\u{9f}c",
            "\u{a0}abc\u{3000}",
            "ééé",
            " é é ",
            "a\nb",
            "\u{feff}abc",
            "x\u{2028}",
        ];
        for (min, pattern) in [(1, text_pattern(1)), (3, text_pattern(3))] {
            let regex = regex::Regex::new(&pattern).expect("the pattern compiles");
            for sample in samples {
                let accepted = if min == 1 {
                    Text::<1, 10>::try_from(sample.to_owned()).is_ok()
                } else {
                    Text::<3, 10>::try_from(sample.to_owned()).is_ok()
                };
                let length_ok = (min..=10).contains(&sample.chars().count());
                assert_eq!(
                    regex.is_match(sample) && length_ok,
                    accepted,
                    "min {min}: {sample:?}"
                );
            }
        }
    }

    #[test]
    fn email_shape_is_checked_and_lowercased() {
        assert!(Email::try_from("Ops@Example.com".to_owned())
            .is_ok_and(|e| e.as_str() == "ops@example.com"));
        assert!(Email::try_from("nope".to_owned()).is_err());
        assert!(Email::try_from("a@b".to_owned()).is_err());
        assert!(Email::try_from("a b@c.de".to_owned()).is_err());
    }
}
