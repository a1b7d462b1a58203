//! The limit on a provider's silence while it streams an answer, kept with one timer a
//! stream.
//!
//! pingora's `read_timeout` arms a timer for every read that waits (a boxed future
//! registered with its timer thread, then dropped): a stream of 50 events paid that 50
//! times, 1.6 % of the proxy's CPU at 1,000 streams (`perf`, 2026-11-29). Here a read
//! only notes when it returned; the one timer fires a silence's length after the last
//! read it knows of, and, if a read came since, is set again from that read instead of
//! expiring.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::{sleep_until, Instant, Sleep};

#[derive(Debug)]
pub struct IdleDeadline {
    limit: Duration,
    last_read: Instant,
    /// Armed at the first read that waits; boxed so that the exchange holding it can
    /// move.
    timer: Option<Pin<Box<Sleep>>>,
    /// The instant the timer is set for, kept beside the reads' own state: before it the
    /// timer cannot have fired, which a look at the boxed timer would tell at the price
    /// of a cache miss on every wait (3 % of the proxy's user time at 1,000 streams).
    armed: Option<Instant>,
    /// The waker the timer was last polled with: the one it wakes.
    waker: Option<Waker>,
}

impl IdleDeadline {
    /// A deadline of `limit` of silence, counted from now.
    pub fn new(limit: Duration) -> IdleDeadline {
        IdleDeadline {
            limit,
            last_read: Instant::now(),
            timer: None,
            armed: None,
            waker: None,
        }
    }

    /// Notes that a read returned: the silence starts again.
    pub fn read(&mut self) {
        self.last_read = Instant::now();
    }

    /// Ready once `limit` has passed since the last read; to be polled while a read
    /// waits.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        // The timer wakes the waker it was last polled with. Polling it at every wait
        // (a task budget's charge and a waker's registration) cost as much as pingora's
        // timers; it needs a poll only for another waker, or once it may have fired
        // (tokio fires a timer at its instant or after, never before).
        let same_waker = self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
        if same_waker && self.armed.is_some_and(|armed| Instant::now() < armed) {
            return Poll::Pending;
        }
        let deadline = self.last_read + self.limit;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(sleep_until(deadline)));
        self.armed.get_or_insert(deadline);
        if !same_waker {
            self.waker = Some(cx.waker().clone());
        }
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // The timer was set from an earlier read; the silence is counted from the
            // last one.
            if Instant::now() >= deadline {
                return Poll::Ready(());
            }
            timer.as_mut().reset(deadline);
            self.armed = Some(deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::task::{Context, Waker};
    use std::time::Duration;

    use super::IdleDeadline;

    async fn expired(deadline: &mut IdleDeadline) {
        poll_fn(|cx| deadline.poll_expired(cx)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn it_expires_a_silence_after_the_last_read_not_the_first() {
        let limit = Duration::from_secs(10);
        let mut deadline = IdleDeadline::new(limit);
        let start = tokio::time::Instant::now();
        // Reads every 4 s arm the timer once, at the first wait.
        for _ in 0..5 {
            let waited = tokio::time::timeout(Duration::from_secs(4), expired(&mut deadline));
            assert!(
                waited.await.is_err(),
                "a read within the limit keeps it alive"
            );
            deadline.read();
        }
        expired(&mut deadline).await;
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(30),
            "20 s of reads, 10 s of silence"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_with_another_waker_is_woken_at_the_deadline() {
        let mut deadline = IdleDeadline::new(Duration::from_secs(10));
        let start = tokio::time::Instant::now();
        // First polled by a waker that wakes nothing (a wait given up).
        let mut elsewhere = Context::from_waker(Waker::noop());
        assert!(deadline.poll_expired(&mut elsewhere).is_pending());
        let woken = tokio::time::timeout(Duration::from_secs(60), expired(&mut deadline));
        assert!(woken.await.is_ok(), "the timer wakes the waker now waiting");
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silence_from_the_start_expires_at_the_limit() {
        let mut deadline = IdleDeadline::new(Duration::from_secs(3));
        let start = tokio::time::Instant::now();
        expired(&mut deadline).await;
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }
}
