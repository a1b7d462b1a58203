//! Redaction of captured payloads (spec 2.18): the rule checks the control plane applies
//! when a tenant configures capture, and the redaction the proxy applies to each request
//! body before the copy leaves its memory. One module, so a rule the control plane
//! accepts is a rule the proxy can apply.
//!
//! A rule names a value by `field_path`, dot-separated member names from the body's top.
//! Arrays met on the way are entered element by element (`messages.content` reaches the
//! content of every message), which is why the path itself never needs a selector. At
//! the end of the path the value is replaced whole by `[REDACTED:<rule id>]`, or, with a
//! `pattern`, each match of the pattern in every string inside it is, member names
//! included (`crate::json_members::rename`).
//!
//! Patterns run on the `regex` crate: matching takes time linear in the input whatever
//! the pattern (no backtracking), and compiled programs are capped in size, so no rule
//! can make redaction slow or large.

use regex::{NoExpand, Regex, RegexBuilder};
use serde_json::Value;

use crate::snapshot::RedactionRuleState;

/// Longest pattern, in characters.
pub const MAX_PATTERN_CHARS: usize = 500;
/// Compiled size limit of a pattern: one needing more is refused rather than run.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// Compiles `pattern` within the size limits, as every rule is compiled.
pub fn compile_pattern(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern)
        .size_limit(PATTERN_SIZE_LIMIT)
        .dfa_size_limit(PATTERN_SIZE_LIMIT)
        .build()
}

/// Whether `path` is dot-separated member names (letters, digits, `_`, `-`), with no
/// empty name and no array selector.
pub fn field_path_is_valid(path: &str) -> bool {
    path.split('.').all(|name| {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

/// A tenant's rules, compiled once per configuration.
#[derive(Debug)]
pub struct Redactor {
    rules: Vec<Rule>,
}

#[derive(Debug)]
struct Rule {
    path: Vec<String>,
    pattern: Option<Regex>,
    placeholder: String,
}

impl Redactor {
    /// Compiles `rules`; the error names the first rule that cannot be applied.
    pub fn compile(rules: &[RedactionRuleState]) -> Result<Redactor, String> {
        let rules = rules
            .iter()
            .map(|rule| {
                if !field_path_is_valid(&rule.field_path) {
                    return Err(format!("rule {}: field_path is not a name path", rule.id));
                }
                let pattern = rule
                    .pattern
                    .as_deref()
                    .map(compile_pattern)
                    .transpose()
                    .map_err(|error| format!("rule {}: {error}", rule.id))?;
                Ok(Rule {
                    path: rule.field_path.split('.').map(str::to_owned).collect(),
                    pattern,
                    placeholder: format!("[REDACTED:{}]", rule.id),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Redactor { rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Applies every rule to `value`; returns how many values were changed.
    pub fn redact(&self, value: &mut Value) -> usize {
        self.rules
            .iter()
            .map(|rule| at_path(value, &rule.path, rule))
            .sum()
    }
}

fn at_path(value: &mut Value, path: &[String], rule: &Rule) -> usize {
    match (path.split_first(), value) {
        (None, value) => replace(value, rule),
        (Some((name, rest)), Value::Object(members)) => members
            .get_mut(name.as_str())
            .map_or(0, |member| at_path(member, rest, rule)),
        (Some(_), Value::Array(items)) => items.iter_mut().map(|i| at_path(i, path, rule)).sum(),
        (Some(_), _) => 0,
    }
}

/// The value at the end of a rule's path: replaced whole, or its strings' matches.
fn replace(value: &mut Value, rule: &Rule) -> usize {
    match &rule.pattern {
        None => {
            *value = Value::String(rule.placeholder.clone());
            1
        }
        Some(pattern) => in_strings(value, pattern, &rule.placeholder),
    }
}

fn in_strings(value: &mut Value, pattern: &Regex, placeholder: &str) -> usize {
    match value {
        Value::String(text) => {
            let replaced = pattern.replace_all(text, NoExpand(placeholder));
            match replaced {
                std::borrow::Cow::Borrowed(_) => 0,
                std::borrow::Cow::Owned(changed) => {
                    *text = changed;
                    1
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .map(|item| in_strings(item, pattern, placeholder))
            .sum(),
        Value::Object(members) => {
            let in_values: usize = members
                .values_mut()
                .map(|member| in_strings(member, pattern, placeholder))
                .sum();
            // A name is text the provider reads too.
            let renames: Vec<(String, String)> = members
                .keys()
                .filter_map(
                    |name| match pattern.replace_all(name, NoExpand(placeholder)) {
                        std::borrow::Cow::Owned(changed) => Some((name.clone(), changed)),
                        std::borrow::Cow::Borrowed(_) => None,
                    },
                )
                .collect();
            let in_names = renames.len();
            crate::json_members::rename(members, renames);
            in_values + in_names
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rule(id: &str, field_path: &str, pattern: Option<&str>) -> RedactionRuleState {
        RedactionRuleState {
            id: id.into(),
            field_path: field_path.into(),
            pattern: pattern.map(str::to_owned),
        }
    }

    fn redacted(rules: &[RedactionRuleState], mut body: Value) -> (Value, usize) {
        let redactor = Redactor::compile(rules).expect("rules compile");
        let count = redactor.redact(&mut body);
        (body, count)
    }

    #[test]
    fn a_path_through_arrays_reaches_every_element() {
        let body = json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "my card is 4111 1111 1111 1111"},
            ],
        });
        let (out, count) = redacted(&[rule("all", "messages.content", None)], body);
        assert_eq!(count, 2);
        assert_eq!(out["messages"][0]["content"], json!("[REDACTED:all]"));
        assert_eq!(out["messages"][1]["content"], json!("[REDACTED:all]"));
        assert_eq!(out["messages"][1]["role"], json!("user"));
        assert_eq!(out["model"], json!("gpt-4o"));
    }

    #[test]
    fn a_pattern_replaces_only_its_matches_in_nested_strings() {
        let body = json!({
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "mail a@b.example or c@d.example"},
                    {"type": "image_url", "image_url": {"url": "https://x.example/i.png"}},
                ]},
            ],
        });
        let (out, count) = redacted(
            &[rule("email", "messages.content", Some(r"[\w.]+@[\w.]+"))],
            body,
        );
        assert_eq!(count, 1);
        assert_eq!(
            out["messages"][0]["content"][0]["text"],
            json!("mail [REDACTED:email] or [REDACTED:email]")
        );
        assert_eq!(
            out["messages"][0]["content"][1]["image_url"]["url"],
            json!("https://x.example/i.png")
        );
    }

    #[test]
    fn a_pattern_reaches_member_names_too() {
        let body = json!({ "metadata": { "ana@b.example": "owner", "team": "c@d.example" } });
        let (out, count) = redacted(&[rule("email", "metadata", Some(r"[\w.]+@[\w.]+"))], body);
        assert_eq!(count, 2);
        assert_eq!(
            out,
            json!({ "metadata": { "[REDACTED:email]": "owner", "team": "[REDACTED:email]" } })
        );
    }

    #[test]
    fn a_placeholder_is_literal_and_a_missing_path_changes_nothing() {
        let (out, count) = redacted(
            &[
                rule("$1", "user", Some("(secret)")),
                rule("x", "metadata.absent.deeper", None),
                rule("y", "model.name", None),
            ],
            json!({"model": "m", "user": "a secret here"}),
        );
        assert_eq!(count, 1);
        assert_eq!(out["user"], json!("a [REDACTED:$1] here"));
        assert_eq!(out["model"], json!("m"));
    }

    #[test]
    fn whole_values_of_any_type_are_replaced() {
        let (out, count) = redacted(
            &[rule("t", "tools", None), rule("n", "metadata.n", None)],
            json!({"tools": [{"a": 1}], "metadata": {"n": 5}}),
        );
        assert_eq!(count, 2);
        assert_eq!(
            out,
            json!({"tools": "[REDACTED:t]", "metadata": {"n": "[REDACTED:n]"}})
        );
    }

    #[test]
    fn rules_that_cannot_be_applied_are_refused() {
        assert!(Redactor::compile(&[rule("a", "messages[*].content", None)]).is_err());
        assert!(Redactor::compile(&[rule("a", "messages..content", None)]).is_err());
        assert!(Redactor::compile(&[rule("a", "x", Some("(unclosed"))]).is_err());
        // Within 500 characters, yet far beyond the compiled size limit.
        assert!(Redactor::compile(&[rule("a", "x", Some(r"\w{1000}\w{1000}\w{1000}"))]).is_err());
    }

    #[test]
    fn a_pattern_that_backtracks_elsewhere_runs_in_linear_time() {
        let evil = rule("evil", "input", Some("(a+)+$"));
        let text = format!("{}b", "a".repeat(100_000));
        let started = std::time::Instant::now();
        let (_, count) = redacted(&[evil], json!({ "input": text }));
        assert_eq!(count, 0);
        // A backtracking engine takes longer than the universe's age here.
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
