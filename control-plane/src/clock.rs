//! The control plane's source of time, injectable so tests control it without sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use warden_shared::timestamp::Timestamp;

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
        match &self.0 {
            Some(manual) => Timestamp::from_millis(manual.load(Ordering::SeqCst)),
            None => {
                let ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                    .unwrap_or(0);
                Timestamp::from_millis(ms)
            }
        }
    }

    /// Moves a manual clock forward; does nothing to the system clock.
    pub fn advance(&self, millis: i64) {
        if let Some(manual) = &self.0 {
            manual.fetch_add(millis, Ordering::SeqCst);
        }
    }
}
