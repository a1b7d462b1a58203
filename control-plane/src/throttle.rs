//! Fixed-window attempt counters that slow down brute force on signup and login.
//!
//! The counters live in this process's memory: with several control-plane replicas each
//! counts on its own, so the effective limit is the configured one times the replica
//! count. That still turns an online guessing attack from millions of tries into a few.

use std::collections::HashMap;
use std::sync::Mutex;

/// Counts attempts per key (e.g. `login-email:ops@example.com`) in fixed windows.
#[derive(Debug)]
pub struct Throttle {
    window_ms: i64,
    buckets: Mutex<HashMap<String, Window>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started_ms: i64,
    count: u32,
}

/// Above this many tracked keys, expired windows are swept on the next call.
const SWEEP_THRESHOLD: usize = 10_000;

impl Throttle {
    pub fn new(window_secs: u64) -> Self {
        Throttle {
            window_ms: i64::try_from(window_secs.max(1)).unwrap_or(i64::MAX / 1000) * 1000,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Records one attempt for `key`. Returns `Err(retry_after_secs)` when the attempt
    /// exceeds `limit` in the current window (the attempt is then not counted).
    pub fn attempt(&self, key: &str, limit: u32, now_ms: i64) -> Result<(), u64> {
        let Ok(mut buckets) = self.buckets.lock() else {
            // A poisoned lock means a panic elsewhere; failing open keeps login usable.
            return Ok(());
        };
        if buckets.len() > SWEEP_THRESHOLD {
            let window_ms = self.window_ms;
            buckets.retain(|_, window| now_ms - window.started_ms < window_ms);
        }
        let window = buckets.entry(key.to_owned()).or_insert(Window {
            started_ms: now_ms,
            count: 0,
        });
        if now_ms - window.started_ms >= self.window_ms {
            *window = Window {
                started_ms: now_ms,
                count: 0,
            };
        }
        if window.count >= limit {
            let remaining_ms = window.started_ms + self.window_ms - now_ms;
            return Err(u64::try_from(remaining_ms.max(1000) / 1000).unwrap_or(1));
        }
        window.count += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_after_the_limit_until_the_window_ends() {
        let throttle = Throttle::new(60);
        assert!(throttle.attempt("k", 2, 0).is_ok());
        assert!(throttle.attempt("k", 2, 1_000).is_ok());
        assert_eq!(throttle.attempt("k", 2, 2_000), Err(58));
        assert!(throttle.attempt("other", 2, 2_000).is_ok());
        assert!(throttle.attempt("k", 2, 60_000).is_ok());
    }
}
