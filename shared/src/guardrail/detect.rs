//! The detectors: what secrets and personal data look like in text an agent sends.
//!
//! Secret formats follow the rules of gitleaks (MIT licence,
//! github.com/gitleaks/gitleaks, `config/gitleaks.toml`): AWS access key ids, GitHub,
//! Slack (bot, user and app-level tokens), Stripe, OpenAI, Anthropic and Google API keys,
//! and PEM private keys (the whole block is the finding: its `BEGIN` line, its body and
//! its `END` line, or to the end of the text when no `END` line follows). A generic
//! secret is a value of 16 or more token characters assigned to a name like `key`,
//! `token`, `secret` or `password` whose entropy is at least [`GENERIC_MIN_ENTROPY`] bits a
//! character (gitleaks' generic rule does the same). Card numbers must pass the Luhn
//! check and start as a card scheme's do; IBANs must pass ISO 13616's mod-97 check;
//! phone numbers are international (`+` and 8 to 15 digits) or North American
//! (`(415) 555-0132`, `415-555-0132`, `415.555.0132`) numbers.
//!
//! Every pattern runs on the `regex` crate (linear time, no backtracking); a `RegexSet`
//! first tells which detectors can match a text at all, so clean text costs one pass. A
//! long text is searched a window at a time ([`Scanner::scan_within`]) so that a deadline
//! holds inside one string too: a match is found whole whatever window it starts in.

use std::ops::Range;
use std::time::Instant;

use regex::{Regex, RegexSet};
use serde::{Deserialize, Serialize};

use super::checks::{card_prefix, entropy, iban, luhn};

/// Bits of entropy per character a generic secret's value needs.
pub const GENERIC_MIN_ENTROPY: f64 = 3.5;

/// A built-in detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Detector {
    AwsAccessKey,
    GithubToken,
    SlackToken,
    StripeKey,
    OpenaiKey,
    AnthropicKey,
    GoogleApiKey,
    PrivateKey,
    GenericSecret,
    CardNumber,
    Iban,
    Email,
    Phone,
}

impl Detector {
    pub const ALL: [Detector; 13] = [
        Detector::AwsAccessKey,
        Detector::GithubToken,
        Detector::SlackToken,
        Detector::StripeKey,
        Detector::OpenaiKey,
        Detector::AnthropicKey,
        Detector::GoogleApiKey,
        Detector::PrivateKey,
        Detector::GenericSecret,
        Detector::CardNumber,
        Detector::Iban,
        Detector::Email,
        Detector::Phone,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Detector::AwsAccessKey => "aws_access_key",
            Detector::GithubToken => "github_token",
            Detector::SlackToken => "slack_token",
            Detector::StripeKey => "stripe_key",
            Detector::OpenaiKey => "openai_key",
            Detector::AnthropicKey => "anthropic_key",
            Detector::GoogleApiKey => "google_api_key",
            Detector::PrivateKey => "private_key",
            Detector::GenericSecret => "generic_secret",
            Detector::CardNumber => "card_number",
            Detector::Iban => "iban",
            Detector::Email => "email",
            Detector::Phone => "phone",
        }
    }

    fn pattern(self) -> &'static str {
        match self {
            Detector::AwsAccessKey => r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b",
            Detector::GithubToken => {
                r"\b(?:gh[pousr]_[0-9a-zA-Z]{36}|github_pat_[0-9a-zA-Z_]{82})\b"
            }
            Detector::SlackToken => {
                r"\b(?:xox[baprse]-[0-9a-zA-Z-]{10,72}|xapp-\d-[A-Za-z0-9]+-\d+-[A-Za-z0-9]+|xoxe\.xox[bp]-\d-[A-Za-z0-9]{100,200})"
            }
            Detector::StripeKey => r"\b(?:sk|rk)_(?:test|live|prod)_[0-9a-zA-Z]{10,99}\b",
            Detector::OpenaiKey => {
                r"\bsk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,200}|[A-Za-z0-9]{20})T3BlbkFJ[A-Za-z0-9_-]{20,200}"
            }
            Detector::AnthropicKey => r"\bsk-ant-(?:api03|admin01)-[a-zA-Z0-9_\-]{93}AA",
            Detector::GoogleApiKey => r"\bAIza[0-9A-Za-z_\-]{35}",
            Detector::PrivateKey => r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----",
            Detector::GenericSecret => {
                r#"(?i)(?:api[_-]?key|access[_-]?key|secret|token|passw(?:or)?d|pwd|credential)[a-z0-9_-]{0,20}["']?\s{0,3}(?:=|:|=>)\s{0,3}["']?([A-Za-z0-9+/=_.~-]{16,200})"#
            }
            Detector::CardNumber => {
                r"\b(?:\d{13,19}|\d{4}(?:[ -]\d{4}){3}(?:[ -]\d{3})?|\d{4}[ -]\d{6}[ -]\d{4,5})\b"
            }
            Detector::Iban => r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b",
            Detector::Email => {
                r"\b[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}\b"
            }
            Detector::Phone => {
                r"(?:\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){1,4}|\(\d{3}\) ?\d{3}-\d{4}|\b[2-9]\d{2}[-.][2-9]\d{2}[-.]\d{4})\b"
            }
        }
    }

    /// Whether a match of the pattern is the real thing (its checksum, its entropy).
    fn confirms(self, found: &str, captured: Option<&str>) -> bool {
        let digits = || -> Vec<u8> { found.bytes().filter(u8::is_ascii_digit).collect() };
        match self {
            Detector::CardNumber => {
                let digits = digits();
                luhn(&digits) && card_prefix(&digits)
            }
            Detector::Iban => {
                let compact: Vec<u8> = found.bytes().filter(|b| *b != b' ').collect();
                iban(&compact)
            }
            Detector::GenericSecret => captured.is_some_and(|value| {
                value.bytes().any(|b| b.is_ascii_digit())
                    && value.bytes().any(|b| b.is_ascii_alphabetic())
                    && entropy(value) >= GENERIC_MIN_ENTROPY
            }),
            Detector::Phone => (8..=15).contains(&digits().len()),
            _ => true,
        }
    }
}

/// One thing found: which detector (a built-in's name or a tenant pattern's id) and
/// where in the text (bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub detector: String,
    pub range: Range<usize>,
}

/// The detectors a guardrail runs, compiled once per policy.
#[derive(Debug, Clone)]
pub struct Scanner {
    set: RegexSet,
    /// In the set's order: the built-ins, then the tenant's patterns.
    detectors: Vec<(Option<Detector>, String, Regex)>,
}

impl Scanner {
    /// The scanner of `builtins` and the tenant's `patterns` (`(id, regex)`, compiled
    /// with payload capture's limits: `crate::redaction::compile_pattern`).
    pub fn new(
        builtins: &[Detector],
        patterns: &[(String, String)],
    ) -> Result<Scanner, regex::Error> {
        let mut detectors = Vec::new();
        for detector in builtins {
            detectors.push((
                Some(*detector),
                detector.as_str().to_owned(),
                Regex::new(detector.pattern())?,
            ));
        }
        for (id, pattern) in patterns {
            detectors.push((
                None,
                id.clone(),
                crate::redaction::compile_pattern(pattern)?,
            ));
        }
        let set = RegexSet::new(detectors.iter().map(|(_, _, regex)| regex.as_str()))?;
        Ok(Scanner { set, detectors })
    }

    /// Appends what `text` holds to `out`.
    pub fn scan(&self, text: &str, out: &mut Vec<Finding>) {
        // Without a deadline the scan cannot fail.
        let _ = self.scan_within(text, out, None);
    }

    /// Appends what `text` holds to `out`, unless `deadline` passes first: a text longer
    /// than [`WINDOW`] is searched a window at a time, the deadline read between windows.
    pub fn scan_within(
        &self,
        text: &str,
        out: &mut Vec<Finding>,
        deadline: Option<Instant>,
    ) -> Result<(), TimedOut> {
        let passed = || deadline.is_some_and(|deadline| Instant::now() >= deadline);
        if passed() {
            return Err(TimedOut);
        }
        if text.len() <= WINDOW {
            for index in self.set.matches(text).iter() {
                self.search(index, text, 0..text.len(), text.len(), out, &passed)?;
            }
            return Ok(());
        }
        // Where each detector's next search starts: after its last match, which may
        // reach into a later window.
        let mut resume = vec![0; self.detectors.len()];
        let mut start = 0;
        while start < text.len() {
            let end = char_boundary(text, start + WINDOW);
            // A window's matches start in `start..end`; they are searched in a haystack
            // reaching `OVERLAP` further, and further still when one reaches its end.
            let reach = char_boundary(text, end + OVERLAP);
            for index in self.set.matches_at(&text[..reach], start).iter() {
                let from = resume[index].max(start);
                resume[index] = self.search(index, text, from..end, reach, out, &passed)?;
            }
            start = end;
            if start < text.len() && passed() {
                return Err(TimedOut);
            }
        }
        Ok(())
    }

    /// Detector `index`'s matches that start in `starts`, searched in `text[..reach]`
    /// (grown while a match reaches its end); returns where its next search starts.
    fn search(
        &self,
        index: usize,
        text: &str,
        starts: Range<usize>,
        mut reach: usize,
        out: &mut Vec<Finding>,
        passed: &dyn Fn() -> bool,
    ) -> Result<usize, TimedOut> {
        let (builtin, name, regex) = &self.detectors[index];
        let mut at = starts.start;
        while at < starts.end {
            let Some(mut captures) = regex.captures_at(&text[..reach], at) else {
                return Ok(at);
            };
            // A match that reaches the haystack's end may go on in the text: searched
            // again with more of it (the deadline still read).
            while captures.get(0).is_some_and(|m| m.end() == reach) && reach < text.len() {
                if passed() {
                    return Err(TimedOut);
                }
                reach = char_boundary(text, reach + reach.max(WINDOW));
                let Some(longer) = regex.captures_at(&text[..reach], at) else {
                    break;
                };
                captures = longer;
            }
            let Some(whole) = captures.get(0) else {
                return Ok(at);
            };
            if whole.start() >= starts.end {
                // The next window's to find.
                return Ok(at);
            }
            at = if whole.is_empty() {
                char_boundary(text, whole.end() + 1)
            } else {
                whole.end()
            };
            let captured = captures.get(1).map(|c| c.as_str());
            if !builtin.is_none_or(|d| d.confirms(whole.as_str(), captured)) {
                continue;
            }
            let range = match (builtin, captures.get(1)) {
                // A generic secret's name stays; its value is the secret.
                (Some(Detector::GenericSecret), Some(value)) => value.range(),
                (Some(Detector::PrivateKey), _) => whole.start()..pem_block_end(text, whole.end()),
                _ => whole.range(),
            };
            out.push(Finding {
                detector: name.clone(),
                range,
            });
        }
        Ok(at)
    }
}

impl Scanner {
    /// Every built-in detector: what a member name must be free of before a finding's
    /// path may show it (see `super::scan`).
    pub fn every_builtin() -> &'static Scanner {
        static EVERY: std::sync::LazyLock<Scanner> = std::sync::LazyLock::new(|| {
            // The built-in patterns are constants that compile (a test holds it).
            Scanner::new(&Detector::ALL, &[]).unwrap_or_else(|_| Scanner {
                set: RegexSet::empty(),
                detectors: Vec::new(),
            })
        });
        &EVERY
    }

    /// Whether `text` holds anything this scanner finds.
    pub fn finds_any(&self, text: &str) -> bool {
        let mut out = Vec::new();
        self.scan(text, &mut out);
        !out.is_empty()
    }
}

/// The scan's deadline passed before the whole text was searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedOut;

/// The bytes of text one window searches (its matches' starts).
pub const WINDOW: usize = 64 * 1024;
/// How far past its window a search reads before it must grow: longer than any
/// built-in detector's match, so only a tenant's pattern ever grows it.
const OVERLAP: usize = 4 * 1024;

/// The first character boundary of `text` at or after `at` (its length past the end).
fn char_boundary(text: &str, mut at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// Where the PEM block whose `BEGIN` line ends at `from` ends: after its `END` line, or
/// at the end of the text when none follows (a key cut short is still all secret).
fn pem_block_end(text: &str, from: usize) -> usize {
    let rest = &text[from..];
    let Some(end_line) = rest.find("-----END") else {
        return text.len();
    };
    let after = end_line + "-----END".len();
    // The `END` line's own closing dashes, within a label's length.
    match rest[after..].find("-----") {
        Some(close) if close <= 100 => from + after + close + "-----".len(),
        _ => text.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<String> {
        let scanner = Scanner::new(&Detector::ALL, &[]).unwrap();
        let mut out = Vec::new();
        scanner.scan(text, &mut out);
        let mut names: Vec<String> = out.into_iter().map(|f| f.detector).collect();
        names.sort();
        names.dedup();
        names
    }

    /// Made-up values in each detector's format (none is a live credential).
    pub const EXAMPLES: [(&str, &str); 13] = [
        ("aws_access_key", "use AKIAQYLPMN5HHHFPZAM2 for the bucket"),
        ("github_token", "token ghp_4f8Gz0aQ2wE7rT9yU1iO3pL5kJ6hG8fD2sA0"),
        ("slack_token", "post with xoxb-2049318290-5521097643-vQ3sXz7Lk9Pw"),
        ("stripe_key", "charge via sk_live_51HxQ2rKl3mN8pQ4sT6uV"),
        ("openai_key", "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12T3BlbkFJMn34Op56Qr78St90Uv12"),
        ("anthropic_key", "sk-ant-api03-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaAA"),
        ("google_api_key", "maps key AIzaSyD4x9Q2w7E1r8T3y6U0i5O2p9A4s7D1f3G"),
        ("private_key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEow..."),
        ("generic_secret", "db_password = \"Zx8Kq2LmV9pR4tYw7Hn3\""),
        ("card_number", "pay with 4111 1111 1111 1111 today"),
        ("iban", "wire to DE89 3704 0044 0532 0130 00 please"),
        ("email", "write to ana.lopez@example.com"),
        ("phone", "call +44 20 7946 0958 tomorrow"),
    ];

    #[test]
    fn each_detector_finds_its_kind() {
        for (detector, text) in EXAMPLES {
            assert!(
                found(text).contains(&detector.to_owned()),
                "{detector} in {text}: {:?}",
                found(text)
            );
        }
    }

    #[test]
    fn the_other_formats_the_detectors_name_are_found() {
        for (detector, text) in [
            ("slack_token", "socket mode with xapp-1-A0123BCDE45-4567890123456-0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b"),
            ("slack_token", "user token xoxp-2049318290-5521097643-vQ3sXz7Lk9Pw"),
            ("phone", "call 415-555-0132 after noon"),
            ("phone", "call 415.555.0132 after noon"),
            ("phone", "call (415) 555-0132 after noon"),
            ("phone", "call +1 415 555 0132 after noon"),
        ] {
            assert_eq!(found(text), [detector.to_owned()], "{text}");
        }
    }

    #[test]
    fn look_alikes_are_not_flagged() {
        for text in [
            "order 4111 1111 1111 1112 shipped",
            "the build 2026-11-27 passed in 1.2.3",
            "password = \"changeme\"",
            "token: aaaaaaaaaaaaaaaaaaaaaaaa",
            "DE89 3704 0044 0532 0130 01",
            "see https://example.com/ana",
            "the total was 1234567890123",
            "AKIA is how an AWS key id starts",
            "order 123-456-7890 and part 415-055-0132, ISBN 978-0-306-40615-7",
            "the xapp- prefix starts a Slack app token",
        ] {
            assert_eq!(found(text), Vec::<String>::new(), "{text}");
        }
    }

    #[test]
    fn a_tenant_pattern_is_a_detector_by_its_id() {
        let scanner = Scanner::new(&[], &[("employee_id".into(), "EMP-[0-9]{6}".into())]).unwrap();
        let mut out = Vec::new();
        scanner.scan("ask EMP-004211 about it", &mut out);
        assert_eq!(
            out,
            [Finding {
                detector: "employee_id".into(),
                range: 4..14
            }]
        );
    }
}
