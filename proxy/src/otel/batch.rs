//! The proxy's span queue: finished spans go into a bounded channel (a span past its
//! size is dropped and counted, never waited for) and a thread of their own takes them
//! out in batches, each sent when it is full or its delay has passed, as the
//! specification's batch processor does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::record::SpanRecord;

/// The batch settings: `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_SCHEDULE_DELAY` and
/// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, or Warden's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSettings {
    pub max_queue_size: usize,
    pub scheduled_delay: Duration,
    pub max_export_batch_size: usize,
}

/// Where a batch goes.
pub trait Sink: Send + 'static {
    /// Sends `batch`; `Err` says why it was lost.
    fn export(&mut self, batch: &[SpanRecord]) -> Result<(), String>;
}

enum Message {
    Span(SpanRecord),
    /// Send what is queued now, then say so.
    Flush(SyncSender<()>),
}

/// The sending side, shared by every request.
#[derive(Debug)]
pub struct SpanQueue {
    sender: SyncSender<Message>,
    dropped: AtomicU64,
    failed: Arc<AtomicU64>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Message::Span(_) => "Span",
            Message::Flush(_) => "Flush",
        })
    }
}

impl SpanQueue {
    /// A queue whose spans `sink` receives on a thread named `name`.
    pub fn start(
        settings: BatchSettings,
        sink: impl Sink,
        name: &str,
    ) -> Result<SpanQueue, String> {
        let (sender, receiver) = sync_channel(settings.max_queue_size.max(1));
        let failed = Arc::new(AtomicU64::new(0));
        let worker = Worker {
            receiver,
            sink,
            settings,
            failed: failed.clone(),
        };
        thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || worker.run())
            .map_err(|error| format!("tracing: starting the exporting thread: {error}"))?;
        Ok(SpanQueue {
            sender,
            dropped: AtomicU64::new(0),
            failed,
        })
    }

    /// Queues a finished span; a full queue drops it (the collector is behind).
    pub fn push(&self, record: SpanRecord) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.sender.try_send(Message::Span(record))
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Spans dropped for a full queue, and spans whose export failed.
    pub fn lost(&self) -> (u64, u64) {
        (
            self.dropped.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }

    /// Sends what is queued and waits for it, at most `timeout` (blocking: at exit).
    pub fn flush(&self, timeout: Duration) -> bool {
        let (done, finished) = sync_channel(1);
        let deadline = Instant::now() + timeout;
        // The queue may be full: wait for room, up to the deadline.
        let mut message = Message::Flush(done);
        loop {
            match self.sender.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    message = back;
                    thread::sleep(Duration::from_millis(5));
                }
                Err(TrySendError::Full(_)) => return false,
            }
        }
        finished
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_ok()
    }
}

struct Worker<S> {
    receiver: Receiver<Message>,
    sink: S,
    settings: BatchSettings,
    failed: Arc<AtomicU64>,
}

impl<S: Sink> Worker<S> {
    fn run(mut self) {
        let max = self.settings.max_export_batch_size.max(1);
        let mut batch: Vec<SpanRecord> = Vec::with_capacity(max.min(4096));
        let mut deadline = Instant::now() + self.settings.scheduled_delay;
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.receiver.recv_timeout(wait) {
                Ok(Message::Span(record)) => {
                    batch.push(record);
                    // Under steady load the channel is never empty: the delay is
                    // checked on every span, not only when waiting times out.
                    if batch.len() >= max || Instant::now() >= deadline {
                        self.export(&mut batch);
                        deadline = Instant::now() + self.settings.scheduled_delay;
                    }
                }
                Ok(Message::Flush(done)) => {
                    self.export(&mut batch);
                    let _ = done.send(());
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.export(&mut batch);
                    deadline = Instant::now() + self.settings.scheduled_delay;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.export(&mut batch);
                    return;
                }
            }
        }
    }

    fn export(&mut self, batch: &mut Vec<SpanRecord>) {
        let max = self.settings.max_export_batch_size.max(1);
        for chunk in batch.chunks(max) {
            if let Err(error) = self.sink.export(chunk) {
                let before = self.failed.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                // The first failure, then one in a thousand batches' worth: a collector
                // that is down does not flood the log.
                if before == 0 || before / 1000 != (before + chunk.len() as u64) / 1000 {
                    tracing::warn!(
                        spans = chunk.len(),
                        lost_so_far = before + chunk.len() as u64,
                        "exporting traces failed: {error}"
                    );
                }
            }
        }
        batch.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::sync::Mutex;
    use std::time::SystemTime;

    use opentelemetry::trace::{SpanId, SpanKind, TraceId};

    use super::*;

    #[derive(Clone, Default)]
    struct Collected(Arc<Mutex<Vec<usize>>>);

    impl Sink for Collected {
        fn export(&mut self, batch: &[SpanRecord]) -> Result<(), String> {
            self.0.lock().unwrap().push(batch.len());
            Ok(())
        }
    }

    /// A collector that takes nothing, and answers only once its gate opens.
    struct Refusing(Receiver<()>);

    impl Sink for Refusing {
        fn export(&mut self, _: &[SpanRecord]) -> Result<(), String> {
            let _ = self.0.recv();
            Err("refused".into())
        }
    }

    fn record(n: u64) -> SpanRecord {
        SpanRecord {
            trace_id: TraceId::from(u128::from(n) + 1),
            span_id: SpanId::from(n + 1),
            parent: None,
            trace_state: None,
            name: Cow::Borrowed("chat gpt-4o"),
            kind: SpanKind::Client,
            start: SystemTime::now(),
            end: SystemTime::now(),
            attributes: Vec::new(),
            caller: None,
            error: None,
        }
    }

    fn settings(queue: usize, delay_ms: u64, batch: usize) -> BatchSettings {
        BatchSettings {
            max_queue_size: queue,
            scheduled_delay: Duration::from_millis(delay_ms),
            max_export_batch_size: batch,
        }
    }

    #[test]
    fn full_batches_leave_at_once_and_the_rest_after_the_delay() {
        let sink = Collected::default();
        let queue = SpanQueue::start(settings(100, 200, 4), sink.clone(), "t").unwrap();
        for n in 0..10 {
            queue.push(record(n));
        }
        let started = Instant::now();
        while sink.0.lock().unwrap().iter().sum::<usize>() < 10 {
            assert!(started.elapsed() < Duration::from_secs(5), "all sent");
            thread::sleep(Duration::from_millis(5));
        }
        let batches = sink.0.lock().unwrap().clone();
        assert_eq!(&batches[..2], &[4, 4], "full batches first");
        assert_eq!(batches.iter().sum::<usize>(), 10);
        assert_eq!(queue.lost(), (0, 0));
    }

    #[test]
    fn a_flush_sends_what_is_queued_before_the_delay() {
        let sink = Collected::default();
        let queue = SpanQueue::start(settings(100, 60_000, 512), sink.clone(), "t").unwrap();
        queue.push(record(1));
        queue.push(record(2));
        assert!(queue.flush(Duration::from_secs(5)));
        assert_eq!(*sink.0.lock().unwrap(), [2]);
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_failures_are_counted() {
        let (gate, closed) = sync_channel(0);
        let queue = SpanQueue::start(settings(1, 60_000, 1), Refusing(closed), "t").unwrap();
        for n in 0..50 {
            queue.push(record(n));
        }
        // The exporting thread waits in the sink with one span, one more is queued.
        drop(gate);
        assert!(queue.flush(Duration::from_secs(5)));
        let (dropped, failed) = queue.lost();
        assert!(dropped >= 48, "a queue of one overflows: {dropped}");
        assert_eq!(dropped + failed, 50, "each span sent or counted");
    }
}
