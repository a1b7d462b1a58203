//! Counters of `rate_limit` policies and of proxy keys' own `rate_limit_override`:
//! requests and tokens per limiter and bucket (agent, team, tenant or key) in fixed
//! one-minute windows, in this proxy's memory.
//!
//! A request is counted when it is admitted (the check and the count happen together
//! under the window's lock, so concurrent requests on one proxy cannot all pass on the
//! last unit of headroom); its tokens are added to the window it started in when it
//! ends. A refusal by another policy gives its count back.
//!
//! **Several replicas**: a policy's requests-per-minute limit is shared by every proxy:
//! each admits against the allowance the control plane granted it for the bucket and
//! minute (`crate::rate_grants`), and counts the rest of the limit as made elsewhere, so
//! N proxies together admit at most the limit. Token limits, tool-call limits and keys'
//! own limits are counted by each proxy alone (N proxies: up to N × the limit), as is a
//! minute in which the control plane could not be asked. Windows are UTC minutes on
//! every replica, so they line up. `Retry-After` is the seconds left in the current
//! minute.

use std::sync::{Arc, Mutex};

use warden_shared::policy::minute_limit_reached;
use warden_shared::snapshot::ProxyKeyState;

use crate::maps::FastMap;
use crate::refusal::Refusal;

/// What a window counts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limiter {
    /// A `rate_limit` policy, by id.
    Policy(i64),
    /// Proxy keys' own limits (`rate_limit_override`), bucketed by key id.
    Key,
}

/// Windows by limiter, then by the id of the bucket (agent, team or key id; empty for the
/// tenant or a request without a team or key: a policy counts per one kind, so the id
/// alone names the bucket within it). A lookup borrows the id: the request path
/// allocates only for a bucket's first request.
#[derive(Default)]
pub struct RateWindows {
    windows: FastMap<Limiter, FastMap<String, Arc<Mutex<Window>>>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Window {
    /// Unix minute the counts belong to.
    minute: i64,
    requests: i64,
    tokens: i64,
    share: Share,
    /// The next minute's allowance, asked ahead (`crate::rate_grants`): the share the
    /// window starts that minute with.
    next: Option<Share>,
}

/// Whose requests a window's limit counts (see `crate::rate_grants`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Share {
    /// This proxy's alone: no allowance asked for yet, or a key's own limit.
    #[default]
    Local,
    /// Every proxy's: this one admits against the `allotted` requests the control plane
    /// granted it of `limit` this minute; `spent` once a grant gave nothing (the limit
    /// is reached across the proxies: no more asking this minute).
    Granted {
        limit: i64,
        allotted: i64,
        spent: bool,
    },
    /// The control plane could not be asked this minute: this proxy's alone until the
    /// next.
    Unshared,
}

impl Window {
    /// The window moved on to `minute` if that is later than its own. An earlier
    /// `minute` leaves it as it is: a request whose clock was read just before the minute
    /// turned, and counted just after another event loop turned it, counts in the new
    /// minute; turning the window back would drop the new minute's counts and allowance.
    fn at(&mut self, minute: i64) -> &mut Window {
        if minute > self.minute {
            let share = match self.next {
                Some(next) if minute == self.minute + 1 => next,
                _ => Share::Local,
            };
            *self = Window {
                minute,
                share,
                ..Window::default()
            };
        }
        self
    }

    /// Whether the allowance must grow before the next request: none asked for yet, or
    /// used up while the limit is not reached.
    fn short(&self) -> bool {
        match self.share {
            Share::Local => true,
            Share::Granted {
                allotted, spent, ..
            } => !spent && self.requests >= allotted,
            Share::Unshared => false,
        }
    }

    /// The requests counted as the limit sees them: under a grant, the requests the
    /// other proxies may admit (the limit less this one's allowance) count as made.
    fn requests_seen(&self) -> i64 {
        match self.share {
            Share::Granted {
                limit, allotted, ..
            } => self.requests + (limit - allotted).max(0),
            Share::Local | Share::Unshared => self.requests,
        }
    }
}

/// A request counted in a window: its tokens go to the same window when it ends, without
/// looking the window up again.
#[derive(Debug)]
pub struct Counted {
    window: Arc<Mutex<Window>>,
    minute: i64,
    /// The window's limit is shared and this proxy's allowance was used up when the
    /// request was counted, but the control plane had not said the limit is reached:
    /// requests concurrent with this one took what its ask brought.
    short: bool,
}

impl Counted {
    /// Gives the request back (another policy refused it); the counts of a minute that
    /// has passed stay as they are.
    pub fn give_back(&self) {
        let mut window = lock(&self.window);
        if window.minute == self.minute {
            window.requests -= 1;
        }
    }

    /// Whether this proxy's allowance was used up, not the limit (see the field).
    pub fn short_of_allowance(&self) -> bool {
        self.short
    }

    /// Adds the finished request's tokens to the minute it started in.
    pub fn add_tokens(&self, tokens: i64) {
        let mut window = lock(&self.window);
        if window.minute == self.minute {
            window.tokens += tokens;
        }
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
    /// The counts before this request, and the request counted in the same step.
    pub fn count_request(
        &self,
        limiter: Limiter,
        bucket: &str,
        now_ms: i64,
    ) -> ((i64, i64), Counted) {
        let minute = minute_of(now_ms);
        let window = self.window(limiter, bucket);
        let (before, short, minute) = {
            let mut counts = lock(&window);
            let counts = counts.at(minute);
            let before = (counts.requests_seen(), counts.tokens);
            let short = matches!(counts.share, Share::Granted { allotted, spent: false, .. }
                if counts.requests >= allotted);
            counts.requests += 1;
            (before, short, counts.minute)
        };
        (
            before,
            Counted {
                window,
                minute,
                short,
            },
        )
    }

    /// Counts a request against its key's own limits (`rate_limit_override`), which apply
    /// on top of the tenant's `rate_limit` policies: a key can be held tighter than its
    /// tenant's policies, never looser. `Ok(None)` for a key without limits; a refused
    /// request is not counted.
    pub fn count_key_request(
        &self,
        key: &ProxyKeyState,
        now_ms: i64,
    ) -> Result<Option<Counted>, Refusal> {
        if key.requests_per_minute.is_none() && key.tokens_per_minute.is_none() {
            return Ok(None);
        }
        let (counts, counted) = self.count_request(Limiter::Key, &key.id, now_ms);
        let Some(reason) =
            minute_limit_reached(counts, key.requests_per_minute, key.tokens_per_minute)
        else {
            return Ok(Some(counted));
        };
        counted.give_back();
        Err(Refusal::RateLimited {
            policy_id: None,
            reason: reason.to_owned(),
            retry_after_secs: retry_after_secs(now_ms),
        })
    }

    fn window(&self, limiter: Limiter, bucket: &str) -> Arc<Mutex<Window>> {
        if let Some(buckets) = self.windows.get(&limiter) {
            if let Some(window) = buckets.get(bucket) {
                return window.clone();
            }
        }
        let buckets = self.windows.entry(limiter).or_default();
        let window = buckets.entry(bucket.to_owned()).or_default().clone();
        window
    }

    /// The minute whose allowance must grow before this bucket's next request: one
    /// not asked for yet, or spent; `None` when it has some left, when the limit is
    /// reached across the proxies, or when this minute is counted locally.
    pub fn needs_grant(&self, limiter: Limiter, bucket: &str, now_ms: i64) -> Option<i64> {
        let minute = minute_of(now_ms);
        let window = self.window(limiter, bucket);
        let mut window = lock(&window);
        let window = window.at(minute);
        window.short().then_some(window.minute)
    }

    /// Whether `minute`'s allowance must still grow, read without starting that minute
    /// (a request that saw the bucket short may come after the grant it would have
    /// waited for): yes when the window is not at that minute.
    pub fn still_needs_grant(&self, limiter: Limiter, bucket: &str, minute: i64) -> bool {
        let window = self.window(limiter, bucket);
        let window = lock(&window);
        window.minute != minute || window.short()
    }

    /// Adds `granted` requests of `limit` to the bucket's allowance for `minute`: the
    /// current one, or the next (asked ahead).
    pub fn add_grant(&self, limiter: Limiter, bucket: &str, minute: i64, limit: i64, granted: i64) {
        let window = self.window(limiter, bucket);
        let mut window = lock(&window);
        let share = if window.minute == minute {
            &mut window.share
        } else if window.minute + 1 == minute {
            window.next.get_or_insert(Share::Local)
        } else {
            return; // The minute is over.
        };
        let allotted = match *share {
            Share::Granted { allotted, .. } => allotted,
            Share::Local | Share::Unshared => 0,
        };
        *share = Share::Granted {
            limit,
            allotted: allotted + granted,
            spent: granted == 0,
        };
    }

    /// Whether the bucket admitted requests in `minute` (asked ahead for the next only
    /// then: a bucket falling idle holds no allowance past the minute after its last).
    pub fn used_in(&self, limiter: Limiter, bucket: &str, minute: i64) -> bool {
        let Some(window) = self
            .windows
            .get(&limiter)
            .and_then(|buckets| buckets.get(bucket).map(|w| w.clone()))
        else {
            return false;
        };
        let window = lock(&window);
        window.minute == minute && window.requests > 0
    }

    /// Counts the bucket's `minute` on this proxy alone (the control plane did not
    /// answer).
    pub fn unshare(&self, limiter: Limiter, bucket: &str, minute: i64) {
        let window = self.window(limiter, bucket);
        let mut window = lock(&window);
        if window.minute == minute {
            window.share = Share::Unshared;
        }
    }

    /// Drops windows of minutes before `minute` (called now and then, not per request).
    pub fn forget_before(&self, minute: i64) {
        self.windows.retain(|_, buckets| {
            buckets.retain(|_, window| {
                let window = lock(window);
                // A window of the minute before keeps the allowance asked ahead for this
                // one until its first request.
                window.minute >= minute || (window.minute + 1 == minute && window.next.is_some())
            });
            !buckets.is_empty()
        });
    }
}

/// A window's counts (and the asks for them, `crate::rate_grants`) stay consistent even
/// if a holder panicked: every update is one step.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_counted_after_the_minute_turned_counts_in_the_new_minute() {
        let windows = RateWindows::default();
        let p1 = Limiter::Policy(1);
        windows.count_request(p1, "agt_a", 60_000);
        let (_, new) = windows.count_request(p1, "agt_a", 120_000);
        windows.add_grant(p1, "agt_a", 2, 10, 5);
        // Its clock read at 119,999 ms, on another event loop, before the minute turned.
        let (counts, late) = windows.count_request(p1, "agt_a", 119_999);
        assert_eq!(
            counts,
            (1 + 5, 0),
            "the new minute's count and allowance stay"
        );
        new.add_tokens(100);
        late.add_tokens(200);
        assert_eq!(windows.count_request(p1, "agt_a", 120_001).0, (2 + 5, 300));
        late.give_back();
        assert_eq!(windows.count_request(p1, "agt_a", 120_002).0, (2 + 5, 300));
        // Asked with that stale clock, the allowance to grow is the new minute's.
        windows.add_grant(p1, "agt_a", 2, 10, 0);
        assert_eq!(windows.needs_grant(p1, "agt_a", 119_999), None);
    }

    #[test]
    fn windows_count_per_minute_and_give_back() {
        let windows = RateWindows::default();
        let p1 = Limiter::Policy(1);
        let (counts, first) = windows.count_request(p1, "agt_a", 60_000);
        assert_eq!(counts, (0, 0));
        let (counts, second) = windows.count_request(p1, "agt_a", 61_000);
        assert_eq!(counts, (1, 0));
        first.add_tokens(500);
        second.give_back();
        assert_eq!(windows.count_request(p1, "agt_a", 119_999).0, (1, 500));
        assert_eq!(windows.count_request(p1, "agt_b", 119_999).0, (0, 0));
        assert_eq!(
            windows
                .count_request(Limiter::Policy(2), "agt_a", 119_999)
                .0,
            (0, 0)
        );
        // A new minute starts from nothing, and a late request of the last one changes
        // nothing in it.
        assert_eq!(windows.count_request(p1, "agt_a", 120_000).0, (0, 0));
        first.add_tokens(700);
        second.give_back();
        assert_eq!(windows.count_request(p1, "agt_a", 120_001).0, (1, 0));
        assert_eq!(retry_after_secs(119_001), 1);
        assert_eq!(retry_after_secs(60_000), 60);
        windows.forget_before(2);
        assert_eq!(windows.count_request(p1, "agt_b", 120_000).0, (0, 0));
    }

    #[test]
    fn a_keys_own_limits_count_apart_from_policies_and_refusals_are_not_counted() {
        let windows = RateWindows::default();
        let unlimited = crate::test_fixtures::key("key_free", "ten_a", "agt_a");
        assert!(matches!(
            windows.count_key_request(&unlimited, 60_000),
            Ok(None)
        ));

        let mut limited = (*crate::test_fixtures::key("key_a", "ten_a", "agt_a")).clone();
        limited.requests_per_minute = Some(2);
        limited.tokens_per_minute = Some(1_000);
        // A policy counting per key keeps its own windows for the same key.
        windows.count_request(Limiter::Policy(1), "key_a", 60_000);
        let first = windows.count_key_request(&limited, 60_000);
        assert!(matches!(first, Ok(Some(_))));
        assert!(matches!(
            windows.count_key_request(&limited, 60_001),
            Ok(Some(_))
        ));
        let third = windows.count_key_request(&limited, 60_002);
        let Err(refusal) = third else {
            panic!("the third request of the minute must be refused: {third:?}");
        };
        assert_eq!(refusal.status(), 429);
        assert_eq!(refusal.code(), "rate_limit_exceeded");
        assert_eq!(refusal.retry_after_secs(), Some(60));
        // The refusal itself was not counted: the next minute starts from nothing and
        // tokens of a request count against the tokens per minute.
        limited.requests_per_minute = None;
        let Ok(Some(counted)) = windows.count_key_request(&limited, 120_000) else {
            panic!("a new minute must admit the key");
        };
        counted.add_tokens(1_000);
        assert!(windows.count_key_request(&limited, 120_500).is_err());
        assert_eq!(
            windows.count_request(Limiter::Key, "key_a", 120_600).0,
            (1, 1_000)
        );
    }

    #[test]
    fn a_shared_window_tells_an_allowance_used_up_from_a_limit_reached() {
        let windows = RateWindows::default();
        let p1 = Limiter::Policy(1);
        let short = |bucket, at| windows.count_request(p1, bucket, at).1.short_of_allowance();
        assert_eq!(windows.needs_grant(p1, "agt_a", 60_000), Some(1));
        windows.add_grant(p1, "agt_a", 1, 100, 2);
        assert_eq!(windows.needs_grant(p1, "agt_a", 60_000), None);
        // Two granted: the first two are within the allowance, the third is not (seen
        // as the 101st of 100, but only this proxy's allowance is used up).
        let (counts, first) = windows.count_request(p1, "agt_a", 60_001);
        assert_eq!(counts.0, 98);
        assert!(!first.short_of_allowance());
        assert!(!short("agt_a", 60_002));
        let (counts, third) = windows.count_request(p1, "agt_a", 60_003);
        assert_eq!(counts.0, 100);
        assert!(third.short_of_allowance());
        third.give_back();
        assert_eq!(windows.needs_grant(p1, "agt_a", 60_004), Some(1));
        // The control plane has nothing more: the limit is reached, not the allowance.
        windows.add_grant(p1, "agt_a", 1, 100, 0);
        assert_eq!(windows.needs_grant(p1, "agt_a", 60_005), None);
        assert!(!short("agt_a", 60_006));
        // A window counted here alone is never short.
        assert_eq!(windows.needs_grant(p1, "agt_b", 60_007), Some(1));
        windows.unshare(p1, "agt_b", 1);
        assert_eq!(windows.needs_grant(p1, "agt_b", 60_007), None);
        assert!(!short("agt_b", 60_007));
    }

    #[test]
    fn an_allowance_asked_ahead_starts_the_next_minute_only() {
        let windows = RateWindows::default();
        let p1 = Limiter::Policy(1);
        assert_eq!(windows.needs_grant(p1, "agt_a", 60_000), Some(1));
        windows.add_grant(p1, "agt_a", 1, 100, 5);
        assert!(!windows.used_in(p1, "agt_a", 1));
        windows.count_request(p1, "agt_a", 60_001);
        assert!(windows.used_in(p1, "agt_a", 1));
        // Asked ahead for minute 2: minute 1's allowance is unchanged, and the window
        // outlives minute 1's forgetting until minute 2 begins for it.
        windows.add_grant(p1, "agt_a", 2, 100, 7);
        assert_eq!(windows.count_request(p1, "agt_a", 60_002).0 .0, 96);
        windows.forget_before(2);
        assert_eq!(windows.needs_grant(p1, "agt_a", 120_000), None);
        assert_eq!(windows.count_request(p1, "agt_a", 120_001).0 .0, 93);
        // Nothing asked ahead, or a minute skipped: the window starts with no allowance.
        assert_eq!(windows.needs_grant(p1, "agt_a", 180_000), Some(3));
        windows.add_grant(p1, "agt_a", 4, 100, 7);
        assert_eq!(windows.needs_grant(p1, "agt_a", 300_000), Some(5));
        // A grant for a minute past is dropped.
        windows.add_grant(p1, "agt_a", 4, 100, 7);
        assert_eq!(windows.needs_grant(p1, "agt_a", 300_001), Some(5));
    }
}
