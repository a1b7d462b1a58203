//! A bounded queue whose consumer wakes once per batch, not once per item.
//!
//! The request path queues a usage record (and with policies, sometimes a decision) per
//! request. A consumer waiting in `recv` is woken by every item, and one that waits with a
//! deadline registers a timer for each: at thousands of requests a second that was a task
//! wakeup and a timer per request. Here the consumer waits for the first item only, then
//! sleeps until the batch interval ends or a producer sees a batch's worth queued, and
//! takes what is there without waiting again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::error::{TryRecvError, TrySendError};
use tokio::sync::{mpsc, Notify};

/// A queue of `capacity` items, delivered in batches of at most `batch_size`.
pub fn batch_queue<T>(capacity: usize, batch_size: usize) -> (BatchSender<T>, BatchReceiver<T>) {
    let (queue, receiver) = mpsc::channel(capacity.max(1));
    let full = Arc::new(Notify::new());
    let batch_size = batch_size.max(1);
    (
        BatchSender {
            queue,
            full: full.clone(),
            batch_size,
        },
        BatchReceiver {
            queue: receiver,
            full,
            batch_size,
        },
    )
}

/// The producers' handle.
pub struct BatchSender<T> {
    queue: mpsc::Sender<T>,
    full: Arc<Notify>,
    batch_size: usize,
}

// Derived `Clone` would require `T: Clone`.
impl<T> Clone for BatchSender<T> {
    fn clone(&self) -> Self {
        BatchSender {
            queue: self.queue.clone(),
            full: self.full.clone(),
            batch_size: self.batch_size,
        }
    }
}

impl<T> BatchSender<T> {
    /// Queues `item` without waiting; gives it back when the queue is full or closed.
    pub fn try_send(&self, item: T) -> Result<(), TrySendError<T>> {
        self.queue.try_send(item)?;
        // The consumer waits holding a batch's first item: with this many more queued,
        // the batch is full.
        let queued = self.queue.max_capacity() - self.queue.capacity();
        if queued + 1 >= self.batch_size {
            // Coalesces: one stored wakeup however many producers see the batch full.
            self.full.notify_one();
        }
        Ok(())
    }
}

/// The consumer's handle.
pub struct BatchReceiver<T> {
    queue: mpsc::Receiver<T>,
    full: Arc<Notify>,
    batch_size: usize,
}

impl<T> BatchReceiver<T> {
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// One item, if any is queued, without waiting.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        self.queue.try_recv()
    }

    /// Fills `batch` with the next batch: waits for a first item, then up to `interval`
    /// for more (less once a batch's worth is queued). `false` when every sender is gone
    /// and the queue is empty.
    pub async fn next_batch(&mut self, batch: &mut Vec<T>, interval: Duration) -> bool {
        batch.clear();
        let Some(first) = self.queue.recv().await else {
            return false;
        };
        batch.push(first);
        let deadline = tokio::time::Instant::now() + interval;
        // A wakeup may be left over from a batch already taken: hence the loop.
        while self.queue.len() + 1 < self.batch_size {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => break,
                () = self.full.notified() => {}
            }
        }
        while batch.len() < self.batch_size {
            match self.try_recv() {
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    const LONG: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn a_full_batch_goes_at_once_and_the_rest_waits_for_the_next() {
        let (sender, mut receiver) = batch_queue(100, 3);
        for item in 0..5 {
            sender.try_send(item).expect("room");
        }
        let mut batch = Vec::new();
        let started = Instant::now();
        assert!(receiver.next_batch(&mut batch, LONG).await);
        assert_eq!(batch, [0, 1, 2]);
        assert!(started.elapsed() < Duration::from_secs(5), "did not wait");

        // Two left: a producer filling the batch ends the wait.
        let producer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            sender.try_send(5).expect("room");
            sender
        });
        assert!(receiver.next_batch(&mut batch, LONG).await);
        assert_eq!(batch, [3, 4, 5]);
        assert!(started.elapsed() < Duration::from_secs(5), "did not wait");
        drop(producer.await.expect("producer"));
        assert!(!receiver.next_batch(&mut batch, LONG).await, "closed");
    }

    #[tokio::test]
    async fn a_partial_batch_goes_when_the_interval_ends() {
        let (sender, mut receiver) = batch_queue(100, 10);
        sender.try_send("a").expect("room");
        let late = sender.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            late.try_send("b").expect("room");
        });
        let mut batch = Vec::new();
        let started = Instant::now();
        assert!(
            receiver
                .next_batch(&mut batch, Duration::from_millis(200))
                .await
        );
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(batch, ["a", "b"], "what arrived within the interval");
        drop(sender);
        assert!(
            !receiver
                .next_batch(&mut batch, Duration::from_millis(10))
                .await
        );
    }

    #[tokio::test]
    async fn a_full_queue_gives_the_item_back() {
        let (sender, _receiver) = batch_queue(2, 10);
        sender.try_send(1).expect("room");
        sender.try_send(2).expect("room");
        assert!(matches!(sender.try_send(3), Err(TrySendError::Full(3))));
    }
}
