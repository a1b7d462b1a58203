//! Counters of `rate_limit` policies: requests and tokens per policy and bucket (agent,
//! team, tenant or key) in fixed one-minute windows, in this proxy's memory.
//!
//! A request is counted when it is admitted (the check and the count happen together
//! under the window's lock, so concurrent requests on one proxy cannot all pass on the
//! last unit of headroom); its tokens are added to the window it started in when it
//! ends. A refusal by another policy gives its count back.
//!
//! **Several replicas**: each proxy counts what it forwards, so behind N replicas a
//! limit of L per minute lets through up to N × L. Windows are UTC minutes on every
//! replica, so they line up; set L to the per-replica share when replicas split an
//! agent's traffic, or route an agent to one replica. `Retry-After` is the seconds left
//! in the current minute.

use std::sync::Mutex;

use dashmap::DashMap;

/// Windows by policy, then by bucket: a lookup borrows the bucket name (the request path
/// allocates a key only for a bucket's first request).
#[derive(Default)]
pub struct RateWindows {
    windows: DashMap<i64, DashMap<String, Mutex<Window>>>,
}

#[derive(Default, Clone, Copy)]
struct Window {
    /// Unix minute the counts belong to.
    minute: i64,
    requests: i64,
    tokens: i64,
}

impl Window {
    fn at(&mut self, minute: i64) -> &mut Window {
        if self.minute != minute {
            *self = Window {
                minute,
                ..Window::default()
            };
        }
        self
    }
}

pub fn minute_of(now_ms: i64) -> i64 {
    now_ms.div_euclid(60_000)
}

/// Seconds until the next minute starts (at least 1).
pub fn retry_after_secs(now_ms: i64) -> u64 {
    let left_ms = 60_000 - now_ms.rem_euclid(60_000);
    u64::try_from((left_ms + 999) / 1000).unwrap_or(1).max(1)
}

impl RateWindows {
    /// The counts before this request, and counts the request in the same step.
    pub fn count_request(&self, policy_id: i64, bucket: &str, now_ms: i64) -> (i64, i64) {
        let minute = minute_of(now_ms);
        let count = |window: &Mutex<Window>| {
            let mut window = lock(window);
            let window = window.at(minute);
            let before = (window.requests, window.tokens);
            window.requests += 1;
            before
        };
        if let Some(buckets) = self.windows.get(&policy_id) {
            if let Some(window) = buckets.get(bucket) {
                return count(&window);
            }
        }
        let buckets = self.windows.entry(policy_id).or_default();
        let window = buckets.entry(bucket.to_owned()).or_default();
        count(&window)
    }

    /// The window of `policy_id` and `bucket`, if it was ever counted.
    fn with_window(&self, policy_id: i64, bucket: &str, f: impl FnOnce(&mut Window)) {
        if let Some(buckets) = self.windows.get(&policy_id) {
            if let Some(window) = buckets.get(bucket) {
                f(&mut lock(&window));
            }
        }
    }

    /// Gives back a request counted by [`RateWindows::count_request`] in `minute`.
    pub fn uncount_request(&self, policy_id: i64, bucket: &str, minute: i64) {
        self.with_window(policy_id, bucket, |window| {
            if window.minute == minute {
                window.requests -= 1;
            }
        });
    }

    /// Adds a finished request's tokens to the minute it started in.
    pub fn add_tokens(&self, policy_id: i64, bucket: &str, minute: i64, tokens: i64) {
        self.with_window(policy_id, bucket, |window| {
            if window.minute == minute {
                window.tokens += tokens;
            }
        });
    }

    /// Drops windows of minutes before `minute` (called now and then, not per request).
    pub fn forget_before(&self, minute: i64) {
        self.windows.retain(|_, buckets| {
            buckets.retain(|_, window| lock(window).minute >= minute);
            !buckets.is_empty()
        });
    }
}

fn lock(window: &Mutex<Window>) -> std::sync::MutexGuard<'_, Window> {
    match window.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_count_per_minute_and_give_back() {
        let windows = RateWindows::default();
        assert_eq!(windows.count_request(1, "agent:a", 60_000), (0, 0));
        assert_eq!(windows.count_request(1, "agent:a", 61_000), (1, 0));
        windows.add_tokens(1, "agent:a", 1, 500);
        windows.uncount_request(1, "agent:a", 1);
        assert_eq!(windows.count_request(1, "agent:a", 119_999), (1, 500));
        assert_eq!(windows.count_request(1, "agent:b", 119_999), (0, 0));
        // A new minute starts from nothing.
        assert_eq!(windows.count_request(1, "agent:a", 120_000), (0, 0));
        assert_eq!(retry_after_secs(119_001), 1);
        assert_eq!(retry_after_secs(60_000), 60);
        windows.forget_before(2);
        assert_eq!(windows.count_request(1, "agent:b", 120_000), (0, 0));
    }
}
