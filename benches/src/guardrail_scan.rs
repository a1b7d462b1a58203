//! The guardrail detectors' speed (`warden_shared::guardrail`): chat bodies of 1 KiB,
//! 16 KiB and 256 KiB of prose with one e-mail address, each parsed as the proxy parses
//! it (the baseline) and scanned by a guardrail with every detector and one tenant
//! pattern. Prints the scan's MB/s and its time as a ratio to parsing the same body.
//!
//! Run: `cargo run --release -p warden-benches --bin guardrail-scan -- [ROUNDS]`
//! (default 200).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_shared::guardrail::{scan_json, Detector, Scanner};

const PROSE: &str = "The deployment of build 41 finished at 10:42 on 2026-11-27; the \
    canary served 1,204 requests with a p99 of 182 ms and no errors. Next we roll out to \
    the second region, then review the cost report with the finance team on Thursday. ";

fn body(bytes: usize) -> Value {
    let mut text = String::with_capacity(bytes + PROSE.len());
    while text.len() < bytes {
        text.push_str(PROSE);
    }
    text.push_str(" Questions to ana.lopez@example.com.");
    json!({ "model": "gpt-4o", "messages": [
        { "role": "system", "content": "You are a release assistant." },
        { "role": "user", "content": text } ] })
}

fn main() {
    let rounds: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let scanner = Scanner::new(
        &Detector::ALL,
        &[("employee_id".to_owned(), "EMP-[0-9]{6}".to_owned())],
    )
    .unwrap();
    println!("guardrail-scan: every detector and one tenant pattern, {rounds} rounds each");
    for size in [1 << 10, 16 << 10, 256 << 10] {
        let bytes = serde_json::to_vec(&body(size)).unwrap();
        let parse = time(rounds, || {
            black_box(serde_json::from_slice::<Value>(&bytes).unwrap());
        });
        // Scanned in place, as the proxy does (without `redact` nothing changes).
        let mut value: Value = serde_json::from_slice(&bytes).unwrap();
        let deadline = Instant::now() + Duration::from_secs(3600);
        let mut found = 0;
        let scan = time(rounds, || {
            found = scan_json(&mut value, &scanner, false, deadline)
                .unwrap()
                .len();
        });
        let megabytes = bytes.len() as f64 / 1e6;
        println!(
            "  {:>4} KiB body: scan {:>7.1} µs ({:>6.1} MB/s), parse {:>7.1} µs; scan/parse {:.2}x; {found} finding",
            size >> 10,
            scan.as_secs_f64() * 1e6,
            megabytes / scan.as_secs_f64(),
            parse.as_secs_f64() * 1e6,
            scan.as_secs_f64() / parse.as_secs_f64(),
        );
    }
}

/// The median of `rounds` runs of `work`.
fn time(rounds: u32, mut work: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let started = Instant::now();
            work();
            started.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}
