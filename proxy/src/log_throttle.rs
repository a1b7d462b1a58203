//! One log line per interval for an event that can repeat thousands of times a second
//! (a full usage queue, a failing `accept`, an unresolvable provider, a provider breaking
//! off its streams): a line for each would flood the log and spend the CPU an overloaded
//! proxy is short of. The line that
//! gets through says how many times the event happened since the last one; metrics
//! count every occurrence where it matters.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The usual interval between lines of one throttled event.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Lets one line per interval through for one kind of event.
pub struct LogThrottle {
    interval_ms: i64,
    /// When the next line may be written, in [`monotonic_ms`] (0: at the first event).
    next_line_at_ms: AtomicI64,
    /// Events since the last line, the current one included.
    unlogged: AtomicU64,
}

impl LogThrottle {
    pub const fn new(interval: Duration) -> Self {
        LogThrottle {
            // An interval of more than 292 million years is not a use.
            interval_ms: interval.as_millis() as i64,
            next_line_at_ms: AtomicI64::new(0),
            unlogged: AtomicU64::new(0),
        }
    }

    /// Counts an event now; returns how many events the line to write now should report,
    /// or `None` when this one waits for a later line.
    pub fn hit(&self) -> Option<u64> {
        self.hit_at(monotonic_ms())
    }

    /// [`Self::hit`] at `now_ms` on the [`monotonic_ms`] clock.
    fn hit_at(&self, now_ms: i64) -> Option<u64> {
        self.unlogged.fetch_add(1, Ordering::Relaxed);
        let next = self.next_line_at_ms.load(Ordering::Relaxed);
        // Of the threads that see the interval over, the one that moves it on writes.
        let claimed = now_ms >= next
            && self
                .next_line_at_ms
                .compare_exchange(
                    next,
                    now_ms + self.interval_ms,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok();
        claimed.then(|| self.unlogged.swap(0, Ordering::Relaxed))
    }
}

/// Milliseconds since the first call in this process. Monotonic: a wall clock set back
/// would silence a throttled event until it caught up.
fn monotonic_ms() -> i64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let elapsed = START.get_or_init(Instant::now).elapsed().as_millis();
    i64::try_from(elapsed).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_reports_every_event_since_the_last() {
        let throttle = LogThrottle::new(Duration::from_secs(10));
        assert_eq!(
            throttle.hit_at(1_000),
            Some(1),
            "the first event is logged at once"
        );
        for at in 1_001..1_100 {
            assert_eq!(throttle.hit_at(at), None);
        }
        assert_eq!(throttle.hit_at(10_999), None);
        assert_eq!(
            throttle.hit_at(11_000),
            Some(101),
            "the next line counts every event since the last"
        );
        assert_eq!(throttle.hit_at(11_001), None);
    }

    #[test]
    fn the_first_event_is_logged_at_any_time() {
        let throttle = LogThrottle::new(LOG_INTERVAL);
        assert_eq!(throttle.hit(), Some(1));
        assert_eq!(throttle.hit(), None);
    }
}
