//! Guardrails: offline detectors of secrets and personal data in what agents send
//! (`detect`, with the checks that confirm a match in `checks`), run over every string of
//! a JSON body with a deadline (`scan`).

pub mod checks;
pub mod detect;
pub mod scan;

pub use detect::{Detector, Finding, Scanner};
pub use scan::{scan_json, Hit, ScanError};
