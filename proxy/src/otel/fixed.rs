//! Attributes whose key and value are both fixed (the operation, the provider, the
//! decision of a forwarded request, whether it streams), with their OTLP encoding (a
//! `KeyValue` message as a span's field 9) made at compile time: every forwarded span
//! carries four, and encoding each cost about 200 instructions where a copy of its
//! bytes costs a tenth of that (`instructions.sh LOAD=plain
//! TRACED=1`, 2026-12-02).

use warden_shared::registry::Provider;

/// A fixed attribute: its key, its value and the bytes OTLP encodes them as.
#[derive(Debug, PartialEq)]
pub struct Fixed {
    pub key: &'static str,
    pub value: FixedValue,
    /// The `KeyValue` message as a span's field 9 (tag and length included).
    pub encoded: &'static [u8],
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FixedValue {
    Str(&'static str),
    Bool(bool),
}

/// Span field 9 (`attributes`), length-delimited; a `KeyValue`'s `key` (1) and `value`
/// (2); an `AnyValue`'s `string_value` (1) and `bool_value` (2).
const ATTRIBUTE: u8 = (9 << 3) | 2;
const KEY: u8 = (1 << 3) | 2;
const VALUE: u8 = (2 << 3) | 2;
const STRING_VALUE: u8 = (1 << 3) | 2;
const BOOL_VALUE: u8 = 2 << 3;

/// The length of `key` and `value`'s encoding: every length in it one byte.
pub const fn encoded_len(key: &str, value: FixedValue) -> usize {
    let value_len = match value {
        FixedValue::Str(text) => 2 + text.len(),
        FixedValue::Bool(_) => 2,
    };
    let body = 2 + key.len() + 2 + value_len;
    // A fixed attribute is short: longer ones would need lengths of two bytes.
    assert!(body < 0x80, "a fixed attribute is under 128 bytes");
    2 + body
}

/// `key` and `value` encoded, `N` being [`encoded_len`].
pub const fn encode<const N: usize>(key: &str, value: FixedValue) -> [u8; N] {
    let mut out = [0u8; N];
    let value_len = match value {
        FixedValue::Str(text) => 2 + text.len(),
        FixedValue::Bool(_) => 2,
    };
    out[0] = ATTRIBUTE;
    out[1] = (N - 2) as u8;
    out[2] = KEY;
    out[3] = key.len() as u8;
    let mut at = 4;
    at = copy(&mut out, at, key.as_bytes());
    out[at] = VALUE;
    out[at + 1] = value_len as u8;
    at += 2;
    match value {
        FixedValue::Str(text) => {
            out[at] = STRING_VALUE;
            out[at + 1] = text.len() as u8;
            copy(&mut out, at + 2, text.as_bytes());
        }
        FixedValue::Bool(flag) => {
            out[at] = BOOL_VALUE;
            out[at + 1] = flag as u8;
        }
    }
    out
}

const fn copy<const N: usize>(out: &mut [u8; N], mut at: usize, bytes: &[u8]) -> usize {
    let mut i = 0;
    while i < bytes.len() {
        out[at] = bytes[i];
        at += 1;
        i += 1;
    }
    at
}

/// A `&'static Fixed` of a key and a value, encoded at compile time.
macro_rules! fixed {
    ($key:expr, $value:expr) => {{
        const FIXED_KEY: &str = $key;
        const FIXED_VALUE: $crate::otel::fixed::FixedValue = $value;
        const LEN: usize = $crate::otel::fixed::encoded_len(FIXED_KEY, FIXED_VALUE);
        const ENCODED: [u8; LEN] = $crate::otel::fixed::encode::<LEN>(FIXED_KEY, FIXED_VALUE);
        const FIXED: $crate::otel::fixed::Fixed = $crate::otel::fixed::Fixed {
            key: FIXED_KEY,
            value: FIXED_VALUE,
            encoded: &ENCODED,
        };
        &FIXED
    }};
}

macro_rules! fixed_str {
    ($key:expr, $value:expr) => {
        fixed!($key, $crate::otel::fixed::FixedValue::Str($value))
    };
}

/// `gen_ai.operation.name` of a model request's operation (`super::operation_name`).
pub fn operation(name: &'static str) -> Option<&'static Fixed> {
    const KEY: &str = "gen_ai.operation.name";
    Some(match name {
        "chat" => fixed_str!(KEY, "chat"),
        "embeddings" => fixed_str!(KEY, "embeddings"),
        "count_tokens" => fixed_str!(KEY, "count_tokens"),
        _ => return None,
    })
}

/// `gen_ai.provider.name` of a built-in provider, the conventions' name where they have
/// one; `None` for the others, named as Warden names them.
pub fn provider(provider: Provider) -> Option<&'static Fixed> {
    const KEY: &str = "gen_ai.provider.name";
    Some(match provider {
        Provider::Openai => fixed_str!(KEY, "openai"),
        Provider::Anthropic => fixed_str!(KEY, "anthropic"),
        Provider::Google => fixed_str!(KEY, "gcp.gemini"),
        Provider::Bedrock => fixed_str!(KEY, "aws.bedrock"),
        Provider::Nvidia => fixed_str!(KEY, "nvidia"),
        _ => return None,
    })
}

/// `warden.decision` of a forwarded request.
pub const FORWARDED: &Fixed = fixed_str!("warden.decision", "forwarded");

/// `gen_ai.request.stream`.
pub fn stream(streaming: bool) -> &'static Fixed {
    const KEY: &str = "gen_ai.request.stream";
    if streaming {
        fixed!(KEY, FixedValue::Bool(true))
    } else {
        fixed!(KEY, FixedValue::Bool(false))
    }
}

#[cfg(test)]
mod tests {
    use super::super::protobuf::{encode_attribute, Scalar};
    use super::*;

    /// Each fixed attribute is the bytes the encoder writes for its key and value.
    #[test]
    fn the_compile_time_encoding_is_the_encoders() {
        let mut all: Vec<&Fixed> = vec![FORWARDED, stream(true), stream(false)];
        all.extend(
            ["chat", "embeddings", "count_tokens"]
                .into_iter()
                .map(|name| operation(name).unwrap()),
        );
        all.extend(
            [
                Provider::Openai,
                Provider::Anthropic,
                Provider::Google,
                Provider::Bedrock,
                Provider::Nvidia,
            ]
            .into_iter()
            .map(|p| provider(p).unwrap()),
        );
        for fixed in all {
            let value = match fixed.value {
                FixedValue::Str(text) => Scalar::Str(text),
                FixedValue::Bool(flag) => Scalar::Bool(flag),
            };
            assert_eq!(
                fixed.encoded,
                encode_attribute(fixed.key, value).as_slice(),
                "{fixed:?}"
            );
        }
        assert_eq!(operation("something"), None);
        assert_eq!(provider(Provider::Mcp), None);
    }
}
