//! Scanning a JSON body: every string in it, wherever it is (a prompt, a system message,
//! a tool's arguments, an embedding's input), member names included, so no text a
//! provider reads is skipped. A finding names its detector and the field's path
//! (`messages[0].content`), never the text it matched: a member name is shown in a path
//! only when neither the guardrail's detectors nor any built-in one finds anything in it,
//! and is `*` otherwise, so a secret used as a name never comes back in a refusal, a
//! header or a record. With `redact`, each match is replaced in place by
//! `[REDACTED:<detector>]`, in names as in values (`crate::json_members::rename`).
//!
//! A scan has a deadline, read between strings and, in a long string, between windows
//! of it (`Scanner::scan_within`): past it, the scan stops with [`ScanError::TimedOut`],
//! and the caller refuses the request (guardrails fail closed).

use std::fmt::Write as _;
use std::ops::Range;
use std::time::Instant;

use serde_json::Value;

use super::{Finding, Scanner};

/// What a scan found in one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub detector: String,
    /// The field's path, names that are not safe to show written `*`.
    pub path: String,
    /// Found in the member's name rather than its value.
    pub in_name: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanError {
    /// The deadline passed before every field was scanned.
    TimedOut,
}

/// Longest member name a path shows.
const MAX_SHOWN_NAME: usize = 64;

/// Scans every string of `value`, names included; with `redact`, replaces what was found.
pub fn scan_json(
    value: &mut Value,
    scanner: &Scanner,
    redact: bool,
    deadline: Instant,
) -> Result<Vec<Hit>, ScanError> {
    let mut walk = Walk {
        scanner,
        redact,
        deadline,
        path: String::new(),
        names: Vec::new(),
        hits: Vec::new(),
    };
    walk.value(value)?;
    Ok(walk.hits)
}

struct Walk<'s> {
    scanner: &'s Scanner,
    redact: bool,
    deadline: Instant,
    /// The current field's path, names as they are.
    path: String,
    /// Where each member name sits in `path`: shown or hidden only when a hit is named.
    names: Vec<Range<usize>>,
    hits: Vec<Hit>,
}

impl Walk<'_> {
    fn value(&mut self, value: &mut Value) -> Result<(), ScanError> {
        match value {
            Value::String(text) => {
                if let Some(redacted) = self.text(text, false)? {
                    *text = redacted;
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter_mut().enumerate() {
                    let length = self.path.len();
                    // Writing to a String cannot fail.
                    let _ = write!(self.path, "[{index}]");
                    self.value(item)?;
                    self.path.truncate(length);
                }
            }
            Value::Object(members) => {
                let mut renames = Vec::new();
                for (name, member) in members.iter_mut() {
                    let length = self.path.len();
                    if !self.path.is_empty() {
                        self.path.push('.');
                    }
                    let start = self.path.len();
                    self.path.push_str(name);
                    self.names.push(start..self.path.len());
                    let scanned = self.text(name, true).and_then(|renamed| {
                        renames.extend(renamed.map(|new| (name.clone(), new)));
                        self.value(member)
                    });
                    self.names.pop();
                    self.path.truncate(length);
                    scanned?;
                }
                crate::json_members::rename(members, renames);
            }
            _ => {}
        }
        Ok(())
    }

    /// Scans one string (a value, or with `in_name` the name last put on the path) and
    /// records its hits; with `redact`, returns it redacted when something was found.
    fn text(&mut self, text: &str, in_name: bool) -> Result<Option<String>, ScanError> {
        let mut found = Vec::new();
        self.scanner
            .scan_within(text, &mut found, Some(self.deadline))
            .map_err(|_| ScanError::TimedOut)?;
        if found.is_empty() {
            return Ok(None);
        }
        let path = self.shown_path();
        for finding in &found {
            self.hits.push(Hit {
                detector: finding.detector.clone(),
                path: path.clone(),
                in_name,
            });
        }
        Ok(self.redact.then(|| redacted(text, found)))
    }

    /// The path with each name that is not safe to show written `*`.
    fn shown_path(&self) -> String {
        let mut shown = String::with_capacity(self.path.len());
        let mut at = 0;
        for range in &self.names {
            shown.push_str(&self.path[at..range.start]);
            let name = &self.path[range.clone()];
            if self.may_show(name) {
                shown.push_str(name);
            } else {
                shown.push('*');
            }
            at = range.end;
        }
        shown.push_str(&self.path[at..]);
        shown
    }

    /// Whether a member name may appear in a finding's path: short, printable, and
    /// nothing in it that this guardrail or any built-in detector would find.
    fn may_show(&self, name: &str) -> bool {
        name.len() <= MAX_SHOWN_NAME
            && !name.chars().any(char::is_control)
            && !self.scanner.finds_any(name)
            && !Scanner::every_builtin().finds_any(name)
    }
}

/// `text` with each finding replaced (overlapping ones merged into the first's name).
fn redacted(text: &str, mut found: Vec<Finding>) -> String {
    found.sort_by_key(|f| (f.range.start, std::cmp::Reverse(f.range.end)));
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for finding in found {
        if finding.range.start < at {
            at = at.max(finding.range.end);
            continue;
        }
        out.push_str(&text[at..finding.range.start]);
        out.push_str("[REDACTED:");
        out.push_str(&finding.detector);
        out.push(']');
        at = finding.range.end;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests;
