//! The proxy's span queue: finished spans go into a bounded channel (a span past its
//! size is dropped and counted, never waited for) and a thread of their own takes them
//! out in batches, each sent when it is full or its delay has passed, as the
//! specification's batch processor does.
//!
//! The thread sleeps until a batch is due: a request queueing a span wakes it only when
//! its span fills a batch (at 20,000 spans a second, five times a second), never for a
//! span alone, which would cost a wake-up (a futex call and a context switch) a request.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, RecvTimeoutError, Sender, SyncSender};
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

/// What wakes the exporting thread before its delay is over.
enum Wake {
    /// A batch's worth of spans is queued.
    BatchFull,
    /// Send what is queued now, then say so.
    Flush(SyncSender<()>),
}

/// The counts the queue and its thread share.
#[derive(Debug, Default)]
struct Counts {
    /// Spans in the channel.
    queued: AtomicUsize,
    /// Whether the thread was told a batch is full and has not started taking it yet.
    woken: AtomicBool,
    dropped: AtomicU64,
    failed: AtomicU64,
}

/// The sending side, shared by every request.
#[derive(Debug)]
pub struct SpanQueue {
    spans: SyncSender<SpanRecord>,
    /// Used only to wake the thread: a few times a second at most.
    wake: Sender<Wake>,
    counts: Arc<Counts>,
    batch_size: usize,
}

impl std::fmt::Debug for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Wake::BatchFull => "BatchFull",
            Wake::Flush(_) => "Flush",
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
        let (spans, receiver) = sync_channel(settings.max_queue_size.max(1));
        let (wake, woken) = channel();
        let counts = Arc::new(Counts::default());
        let batch_size = settings.max_export_batch_size.max(1);
        let worker = Worker {
            spans: receiver,
            woken,
            sink,
            delay: settings.scheduled_delay,
            batch_size,
            counts: counts.clone(),
        };
        thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || worker.run())
            .map_err(|error| format!("tracing: starting the exporting thread: {error}"))?;
        Ok(SpanQueue {
            spans,
            wake,
            counts,
            batch_size,
        })
    }

    /// Queues a finished span; a full queue drops it (the collector is behind).
    pub fn push(&self, record: SpanRecord) {
        let counts = &self.counts;
        if self.spans.try_send(record).is_err() {
            counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let queued = counts.queued.fetch_add(1, Ordering::Relaxed) + 1;
        if queued >= self.batch_size && !counts.woken.swap(true, Ordering::AcqRel) {
            self.wake(Wake::BatchFull);
        }
    }

    fn wake(&self, why: Wake) -> bool {
        self.wake.send(why).is_ok()
    }

    /// Spans dropped for a full queue, and spans whose export failed.
    pub fn lost(&self) -> (u64, u64) {
        (
            self.counts.dropped.load(Ordering::Relaxed),
            self.counts.failed.load(Ordering::Relaxed),
        )
    }

    /// Sends what is queued and waits for it, at most `timeout` (blocking: at exit).
    pub fn flush(&self, timeout: Duration) -> bool {
        let (done, finished) = sync_channel(1);
        self.wake(Wake::Flush(done)) && finished.recv_timeout(timeout).is_ok()
    }
}

struct Worker<S> {
    spans: Receiver<SpanRecord>,
    woken: Receiver<Wake>,
    sink: S,
    delay: Duration,
    batch_size: usize,
    counts: Arc<Counts>,
}

impl<S: Sink> Worker<S> {
    fn run(mut self) {
        let mut batch: Vec<SpanRecord> = Vec::with_capacity(self.batch_size.min(4096));
        let mut deadline = Instant::now() + self.delay;
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.woken.recv_timeout(wait) {
                Ok(Wake::BatchFull) => self.export_queued(&mut batch),
                Ok(Wake::Flush(done)) => {
                    self.export_queued(&mut batch);
                    let _ = done.send(());
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.export_queued(&mut batch);
                    deadline = Instant::now() + self.delay;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.export_queued(&mut batch);
                    return;
                }
            }
        }
    }

    /// Exports what is queued, a batch at a time, until less than a batch is left.
    fn export_queued(&mut self, batch: &mut Vec<SpanRecord>) {
        loop {
            // Cleared first: a span queued from now on may wake the thread again.
            self.counts.woken.store(false, Ordering::Release);
            while batch.len() < self.batch_size {
                match self.spans.try_recv() {
                    Ok(record) => batch.push(record),
                    Err(_) => break,
                }
            }
            if batch.is_empty() {
                return;
            }
            let taken = batch.len();
            self.counts.queued.fetch_sub(taken, Ordering::Relaxed);
            batch.iter_mut().for_each(SpanRecord::add_content);
            if let Err(error) = self.sink.export(batch) {
                let before = self
                    .counts
                    .failed
                    .fetch_add(taken as u64, Ordering::Relaxed);
                // The first failure, then one line a thousand spans lost: a collector
                // that is down does not flood the log.
                if before == 0 || before / 1000 != (before + taken as u64) / 1000 {
                    tracing::warn!(
                        spans = taken,
                        lost_so_far = before + taken as u64,
                        "exporting traces failed: {error}"
                    );
                }
            }
            batch.clear();
            if taken < self.batch_size {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::SystemTime;

    use opentelemetry::trace::{SpanId, SpanKind, TraceId};

    use super::super::record::Field;
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
            name: Field::Static("chat gpt-4o"),
            ..SpanRecord::new(
                TraceId::from(u128::from(n) + 1),
                SpanId::from(n + 1),
                SpanKind::Client,
                SystemTime::now(),
            )
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
