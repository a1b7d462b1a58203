//! Dollar amounts in answers, written as plain decimals: `0.000056`, never `5.6e-5`
//! (serde_json writes small and large floats in exponent form, which spreadsheets and
//! people misread). Money is kept in integer micro-dollars, so six places say it all.

use serde::Serializer;
use serde_json::value::RawValue;

/// `#[serde(serialize_with = "money::plain")]` for an `f64` of dollars.
pub fn plain<S: Serializer>(usd: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    match RawValue::from_string(decimal(*usd)) {
        Ok(raw) => serde::Serialize::serialize(&raw, serializer),
        Err(_) => serializer.serialize_f64(*usd),
    }
}

/// As [`plain`], for an optional amount (`null` when absent).
pub fn plain_opt<S: Serializer>(usd: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error> {
    match usd {
        Some(usd) => plain(usd, serializer),
        None => serializer.serialize_none(),
    }
}

/// At most six places, trailing zeros dropped; a whole amount keeps one (`5.0`).
fn decimal(usd: f64) -> String {
    if !usd.is_finite() {
        return "0".to_owned();
    }
    let text = format!("{usd:.6}");
    let text = text.trim_end_matches('0');
    let text = if text.ends_with('.') {
        format!("{text}0")
    } else {
        text.to_owned()
    };
    if text == "-0.0" {
        "0.0".to_owned()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::decimal;

    #[test]
    fn amounts_are_plain_decimals() {
        assert_eq!(decimal(0.000056), "0.000056");
        assert_eq!(decimal(5.0), "5.0");
        assert_eq!(decimal(1234567.891), "1234567.891");
        assert_eq!(decimal(0.1 + 0.2), "0.3");
        assert_eq!(decimal(1e-9), "0.0");
        assert_eq!(decimal(-0.0000001), "0.0");
    }
}
