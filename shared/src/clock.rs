//! The source of time of both planes, injectable so tests control it without sleeping:
//! rate windows, budget periods, expiries and leases read it instead of the system clock.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::timestamp::Timestamp;

/// Either the system clock or a manual clock that tests move by hand.
#[derive(Clone, Debug)]
pub struct Clock(Option<Arc<AtomicI64>>);

impl Clock {
    pub fn system() -> Self {
        Clock(None)
    }

    /// A clock frozen at `start` until [`Clock::advance`] moves it.
    pub fn manual(start: Timestamp) -> Self {
        Clock(Some(Arc::new(AtomicI64::new(start.as_millis()))))
    }

    pub fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.now_ms())
    }

    /// Unix milliseconds now.
    pub fn now_ms(&self) -> i64 {
        match &self.0 {
            Some(manual) => manual.load(Ordering::SeqCst),
            None => system_now_ms(),
        }
    }

    /// Moves a manual clock forward; does nothing to the system clock.
    pub fn advance(&self, millis: i64) {
        if let Some(manual) = &self.0 {
            manual.fetch_add(millis, Ordering::SeqCst);
        }
    }
}

/// Unix milliseconds by the system clock, for what tests need not move (ids, the age of
/// a snapshot); 0 if the clock stands before 1970.
pub fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
