//! The format of Warden's bearer credentials and how they are stored and verified.
//!
//! Every credential starts with the brand prefix `wdn_`. API keys are `wdn_` followed by 40
//! base62 characters (about 238 bits of entropy); session tokens from login are
//! `wdn_sess_` followed by 40 base62 characters. Because the secret part is long and
//! random, a single SHA-256 is the right storage hash: it allows an indexed lookup by hash
//! (fast, and what is looked up is not the secret), while a slow password hash would add
//! nothing against guessing 238 bits. The final comparison is constant-time regardless.

use rand::Rng;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The brand prefix every Warden credential starts with.
pub const BRAND_PREFIX: &str = "wdn_";
/// The prefix of session tokens issued by login.
pub const SESSION_PREFIX: &str = "wdn_sess_";
/// How many characters of a key are exposed as its `key_prefix`.
pub const DISPLAY_PREFIX_LEN: usize = 12;

const SECRET_LEN: usize = 40;
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const MAX_CREDENTIAL_LEN: usize = 256;

/// What kind of credential a bearer token claims to be, judged by its prefix alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    ApiKey,
    Session,
}

/// Generates a new API key: `wdn_` plus 40 random base62 characters.
pub fn generate_api_key() -> String {
    generate_with_prefix(BRAND_PREFIX)
}

/// Generates a new session token: `wdn_sess_` plus 40 random base62 characters.
pub fn generate_session_token() -> String {
    generate_with_prefix(SESSION_PREFIX)
}

fn generate_with_prefix(prefix: &str) -> String {
    let mut rng = rand::thread_rng();
    let mut key = String::with_capacity(prefix.len() + SECRET_LEN);
    key.push_str(prefix);
    for _ in 0..SECRET_LEN {
        key.push(char::from(BASE62[rng.gen_range(0..BASE62.len())]));
    }
    key
}

/// Classifies a presented bearer token, or `None` when it cannot be a Warden credential.
pub fn classify(token: &str) -> Option<CredentialKind> {
    if token.len() > MAX_CREDENTIAL_LEN || !token.starts_with(BRAND_PREFIX) {
        return None;
    }
    if token.starts_with(SESSION_PREFIX) {
        Some(CredentialKind::Session)
    } else {
        Some(CredentialKind::ApiKey)
    }
}

/// Whether an operator-supplied key (e.g. the bootstrap platform key) is acceptable:
/// brand prefix, at least 24 characters after it, and only URL-safe characters.
pub fn is_acceptable_supplied_key(key: &str) -> bool {
    let Some(secret) = key.strip_prefix(BRAND_PREFIX) else {
        return false;
    };
    !key.starts_with(SESSION_PREFIX)
        && secret.len() >= 24
        && key.len() <= MAX_CREDENTIAL_LEN
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `bytes` as lowercase hex: how Warden writes every hash, token and random id it shows.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push_hex(&mut out, bytes);
    out
}

/// Appends `bytes` to `out` as lowercase hex (W3C trace context's ids and flags too),
/// 32 bytes at a time through a buffer on the stack: a `String::push` a digit (a
/// capacity check and a UTF-8 encoding each) cost a traced request's `traceparent` 677
/// instructions (`load-tests/instructions.sh`, 2026-12-02).
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    let mut buffer = [0u8; 64];
    out.reserve(bytes.len() * 2);
    for chunk in bytes.chunks(32) {
        let digits = &mut buffer[..chunk.len() * 2];
        put_hex(digits, chunk);
        // Hex digits are ASCII: the check is a pass over at most 64 bytes.
        out.push_str(std::str::from_utf8(digits).unwrap_or_default());
    }
}

/// `bytes` as lowercase hex digits into `out`, two a byte (as many bytes as `out` holds
/// pairs).
///
/// A byte's two digits are one look-up in a table made at compile time, where a digit
/// at a time (a shift or a mask and a look-up each) cost a `traceparent`'s 24 bytes 258
/// instructions (`load-tests/instructions.sh LOAD=plain TRACED=1`, 2026-12-06).
pub fn put_hex(out: &mut [u8], bytes: &[u8]) {
    for (pair, &byte) in out.chunks_exact_mut(2).zip(bytes) {
        let [high, low] = HEX_PAIRS[usize::from(byte)];
        pair[0] = high;
        pair[1] = low;
    }
}

/// The two lowercase hex digits of every byte.
static HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0u8; 2]; 256];
    let mut byte = 0;
    while byte < 256 {
        pairs[byte] = [DIGITS[byte >> 4], DIGITS[byte & 0x0f]];
        byte += 1;
    }
    pairs
};

/// The storage hash of a credential: lowercase hex SHA-256.
pub fn hash_credential(raw: &str) -> String {
    hex(&Sha256::digest(raw.as_bytes()))
}

/// Constant-time check that `raw` hashes to `stored_hash`.
pub fn verify_credential(raw: &str, stored_hash: &str) -> bool {
    hash_credential(raw)
        .as_bytes()
        .ct_eq(stored_hash.as_bytes())
        .into()
}

/// The short, non-secret prefix shown to users to tell keys apart.
pub fn display_prefix(raw: &str) -> String {
    raw.chars().take(DISPLAY_PREFIX_LEN).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_carry_the_brand_prefix_and_verify() {
        let key = generate_api_key();
        assert!(key.starts_with(BRAND_PREFIX));
        assert_eq!(key.len(), BRAND_PREFIX.len() + SECRET_LEN);
        assert_eq!(classify(&key), Some(CredentialKind::ApiKey));
        let hash = hash_credential(&key);
        assert!(verify_credential(&key, &hash));
        assert!(!verify_credential(&generate_api_key(), &hash));
        assert_ne!(generate_api_key(), key);
    }

    #[test]
    fn session_tokens_are_told_apart_from_api_keys() {
        let token = generate_session_token();
        assert_eq!(classify(&token), Some(CredentialKind::Session));
        assert_eq!(classify("sk-openai-style"), None);
    }

    #[test]
    fn supplied_keys_must_carry_the_prefix_and_enough_entropy() {
        assert!(is_acceptable_supplied_key("wdn_0123456789abcdefghijklmn"));
        assert!(!is_acceptable_supplied_key("0123456789abcdefghijklmnop"));
        assert!(!is_acceptable_supplied_key("wdn_short"));
        assert!(!is_acceptable_supplied_key(
            "wdn_sess_0123456789abcdefghijklmn"
        ));
        assert!(!is_acceptable_supplied_key("wdn_0123456789abcdefghij klmn"));
    }

    #[test]
    fn hex_is_lowercase_two_digits_a_byte_at_any_length() {
        let bytes: Vec<u8> = (0..=255).collect();
        let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        for len in [0, 1, 31, 32, 33, 64, 65, 256] {
            assert_eq!(hex(&bytes[..len]), expected[..len * 2], "{len} bytes");
        }
        let mut out = String::from("00-");
        push_hex(&mut out, &[0xab, 0x01]);
        assert_eq!(out, "00-ab01", "appended");
    }

    #[test]
    fn display_prefix_is_short_and_not_the_secret() {
        let key = generate_api_key();
        let prefix = display_prefix(&key);
        assert_eq!(prefix.len(), DISPLAY_PREFIX_LEN);
        assert!(key.starts_with(&prefix));
    }
}
