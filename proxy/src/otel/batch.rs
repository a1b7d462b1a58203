//! The proxy's span queue. A finished span is encoded into OTLP protobuf on the thread
//! that finished it, into the buffer of that thread's shard, and freed there; a thread
//! of its own (the exporting thread) posts the buffers: one as soon as it holds a
//! batch, and what the shards hold once a batch's delay has passed, as the
//! specification's batch processor does. Past `max_queue_size` spans held or on their
//! way a span is dropped and counted, never waited for.
//!
//! Encoded where it was made, a span is read from a warm cache and freed into the
//! allocator's cache of the thread that allocated it: handed to the exporting thread as
//! a record, its reading, its frees and the allocations that its frees left the request
//! thread without cost about 2,000 instructions a span more (`instructions.sh
//! LOAD=plain TRACED=1`, 2026-12-02). A span that carries content (a prompt, redacted by
//! the tenant's rules) still goes to the exporting thread as a record: the redaction's
//! parse is not the request's to pay.
//!
//! The exporting thread sleeps until a batch is due: a request wakes it only when its
//! span fills a shard's batch (at 20,000 spans a second, about five times a second).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use super::buffers::Buffers;
use super::priority;
use super::protobuf::encode_span_field;
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
    /// Sends `count` spans, encoded one after another by [`encode_span_field`] in the
    /// `parts`; `Err` says why they were lost.
    fn export(&mut self, parts: &[&[u8]], count: usize) -> Result<(), String>;
}

/// Encoded spans: a shard's buffer, or a batch on its way.
#[derive(Debug, Default)]
struct Encoded {
    spans: Vec<u8>,
    count: usize,
}

impl Encoded {
    /// The spans held, handed over; a kept buffer (or one as large) takes their place.
    fn hand_over(&mut self, buffers: &Buffers) -> Encoded {
        let spans = buffers.take(self.spans.capacity());
        std::mem::replace(self, Encoded { spans, count: 0 })
    }
}

/// A thread's shard: the spans it encoded and not yet handed over.
#[derive(Debug, Default)]
struct Shard {
    encoded: Encoded,
    /// Where a span's message is written before it is copied behind its length.
    scratch: Vec<u8>,
}

/// What wakes the exporting thread before its delay is over.
enum Wake {
    /// A shard's batch.
    Batch(Encoded),
    /// Send what is held now, then say so.
    Flush(SyncSender<()>),
}

/// The counts the queue and its thread share.
#[derive(Debug, Default)]
struct Counts {
    /// Spans held in shards, on their way, or queued as records.
    held: AtomicUsize,
    dropped: AtomicU64,
    failed: AtomicU64,
}

/// The sending side, shared by every request.
#[derive(Debug)]
pub struct SpanQueue {
    shards: Arc<[Mutex<Shard>]>,
    /// Spans with content, encoded on the exporting thread.
    records: SyncSender<SpanRecord>,
    /// A few times a second at most.
    wake: Sender<Wake>,
    counts: Arc<Counts>,
    /// The buffers of batches sent, for the shards' next ones.
    buffers: Buffers,
    batch_size: usize,
    max_held: usize,
}

impl std::fmt::Debug for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Wake::Batch(_) => "Batch",
            Wake::Flush(_) => "Flush",
        })
    }
}

/// A shard's lock. Encoding a span does not panic; were a thread to panic while it held
/// the lock, the shard would stay usable rather than stop every later span.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The shard of the calling thread: threads are numbered as they first finish a span.
fn shard_index(shards: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|index| *index) % shards
}

impl SpanQueue {
    /// A queue whose spans `sink` receives on a thread named `name`.
    pub fn start(
        settings: BatchSettings,
        sink: impl Sink,
        name: &str,
    ) -> Result<SpanQueue, String> {
        let max_held = settings.max_queue_size.max(1);
        let (records, receiver) = sync_channel(max_held);
        let (wake, woken) = channel();
        let counts = Arc::new(Counts::default());
        let batch_size = settings.max_export_batch_size.max(1);
        // Four a core: the event loops' threads each have one of their own, and the
        // runtime's other threads seldom share one.
        let cores = thread::available_parallelism().map_or(1, |n| n.get());
        let shards: Arc<[Mutex<Shard>]> = (0..cores * 4).map(|_| Mutex::default()).collect();
        // Each shard's next buffer and a batch or two on their way.
        let buffers = Buffers::new(shards.len() + 2);
        let worker = Worker {
            records: receiver,
            woken,
            shards: shards.clone(),
            sink,
            delay: settings.scheduled_delay,
            batch_size,
            counts: counts.clone(),
            buffers: buffers.clone(),
            largest: 0,
            pending: Shard::default(),
        };
        thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                priority::yield_to_requests();
                worker.run()
            })
            .map_err(|error| format!("tracing: starting the exporting thread: {error}"))?;
        Ok(SpanQueue {
            shards,
            records,
            wake,
            counts,
            buffers,
            batch_size,
            max_held,
        })
    }

    /// Queues a finished span; a full queue drops it (the collector is behind).
    pub fn push(&self, record: SpanRecord) {
        let counts = &self.counts;
        if counts.held.fetch_add(1, Ordering::Relaxed) >= self.max_held {
            counts.held.fetch_sub(1, Ordering::Relaxed);
            counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if record.content.is_some() {
            if self.records.try_send(record).is_err() {
                self.lose(1);
            }
            return;
        }
        let full = {
            let mut shard = lock(&self.shards[shard_index(self.shards.len())]);
            let Shard { encoded, scratch } = &mut *shard;
            encode_span_field(&mut encoded.spans, scratch, &record);
            encoded.count += 1;
            (encoded.count >= self.batch_size).then(|| encoded.hand_over(&self.buffers))
        };
        drop(record);
        if let Some(batch) = full {
            let count = batch.count;
            if self.wake.send(Wake::Batch(batch)).is_err() {
                self.lose(count);
            }
        }
    }

    /// `count` spans held that will not be sent: dropped.
    fn lose(&self, count: usize) {
        self.counts.held.fetch_sub(count, Ordering::Relaxed);
        self.counts
            .dropped
            .fetch_add(count as u64, Ordering::Relaxed);
    }

    /// Spans dropped for a full queue, and spans whose export failed.
    pub fn lost(&self) -> (u64, u64) {
        (
            self.counts.dropped.load(Ordering::Relaxed),
            self.counts.failed.load(Ordering::Relaxed),
        )
    }

    /// Sends what is held and waits for it, at most `timeout` (blocking: at exit).
    pub fn flush(&self, timeout: Duration) -> bool {
        let (done, finished) = sync_channel(1);
        self.wake.send(Wake::Flush(done)).is_ok() && finished.recv_timeout(timeout).is_ok()
    }
}

struct Worker<S> {
    records: Receiver<SpanRecord>,
    woken: Receiver<Wake>,
    shards: Arc<[Mutex<Shard>]>,
    sink: S,
    delay: Duration,
    batch_size: usize,
    counts: Arc<Counts>,
    buffers: Buffers,
    /// The most bytes a request sent since the last delay's round.
    largest: usize,
    /// What this thread gathers from the shards and the records until it sends it.
    pending: Shard,
}

impl<S: Sink> Worker<S> {
    fn run(mut self) {
        let mut deadline = Instant::now() + self.delay;
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.woken.recv_timeout(wait) {
                Ok(Wake::Batch(batch)) => {
                    self.send(&[&batch.spans], batch.count);
                    self.buffers.give(batch.spans);
                }
                Ok(Wake::Flush(done)) => {
                    self.send_held();
                    let _ = done.send(());
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.send_held();
                    // After a burst, buffers far larger than what was sent since are
                    // not kept: light traffic does not hold a burst's megabytes.
                    self.buffers.trim(2 * std::mem::take(&mut self.largest));
                    deadline = Instant::now() + self.delay;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.send_held();
                    return;
                }
            }
        }
    }

    /// Sends the spans with content, made into attributes here, and what the shards
    /// hold: each part as it is, in requests of at most a batch unless one part alone
    /// is more. A shard's buffer is swapped for a kept one; with nothing to send, the
    /// buffers are freed.
    fn send_held(&mut self) {
        while let Ok(mut record) = self.records.try_recv() {
            record.add_content();
            let Shard { encoded, scratch } = &mut self.pending;
            encode_span_field(&mut encoded.spans, scratch, &record);
            encoded.count += 1;
        }
        let mut parts = vec![std::mem::take(&mut self.pending.encoded)];
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            if shard.encoded.count > 0 {
                parts.push(shard.encoded.hand_over(&self.buffers));
            }
        }
        parts.retain(|part| part.count > 0);
        if parts.is_empty() {
            self.release();
            return;
        }
        let mut group: Vec<&[u8]> = Vec::new();
        let mut count = 0;
        for part in &parts {
            if count > 0 && count + part.count > self.batch_size {
                self.send(&group, count);
                (group, count) = (Vec::new(), 0);
            }
            group.push(&part.spans);
            count += part.count;
        }
        if count > 0 {
            self.send(&group, count);
        }
        for part in parts {
            self.buffers.give(part.spans);
        }
    }

    /// Frees the kept buffers and the empty shards' (a round without spans).
    fn release(&mut self) {
        self.buffers.release();
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            if shard.encoded.count == 0 {
                shard.encoded.spans = Vec::new();
            }
        }
    }

    fn send(&mut self, parts: &[&[u8]], count: usize) {
        self.counts.held.fetch_sub(count, Ordering::Relaxed);
        self.largest = self.largest.max(parts.iter().map(|part| part.len()).sum());
        if let Err(error) = self.sink.export(parts, count) {
            let before = self
                .counts
                .failed
                .fetch_add(count as u64, Ordering::Relaxed);
            // The first failure, then one line a thousand spans lost: a collector that
            // is down does not flood the log.
            if before == 0 || before / 1000 != (before + count as u64) / 1000 {
                tracing::warn!(
                    spans = count,
                    lost_so_far = before + count as u64,
                    "exporting traces failed: {error}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::SystemTime;

    use opentelemetry::trace::{SpanId, SpanKind, TraceId};

    use super::*;

    #[derive(Clone, Default)]
    struct Collected(Arc<Mutex<Vec<usize>>>);

    impl Sink for Collected {
        fn export(&mut self, _: &[&[u8]], count: usize) -> Result<(), String> {
            self.0.lock().unwrap().push(count);
            Ok(())
        }
    }

    /// A collector that takes nothing, and answers only once its gate opens.
    struct Refusing(Receiver<()>);

    impl Sink for Refusing {
        fn export(&mut self, _: &[&[u8]], _: usize) -> Result<(), String> {
            let _ = self.0.recv();
            Err("refused".into())
        }
    }

    fn record(n: u64) -> SpanRecord {
        let mut record = SpanRecord::new(
            TraceId::from(u128::from(n) + 1),
            SpanId::from(n + 1),
            SpanKind::Client,
            SystemTime::now(),
        );
        record.name(&["chat gpt-4o"]);
        record
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

    /// The exporting thread yields to the request threads (`priority`).
    #[cfg(target_os = "linux")]
    #[test]
    fn the_exporting_thread_runs_nicer_than_the_request_threads() {
        use priority::tests::{lowered_nice, nice_of_threads};
        let expected = lowered_nice();
        let queue = SpanQueue::start(
            settings(100, 60_000, 512),
            Collected::default(),
            "nicer-spans",
        )
        .unwrap();
        // The thread lowers its priority as it starts: the flush waits for that.
        assert!(queue.flush(Duration::from_secs(5)));
        assert_eq!(nice_of_threads("nicer-spans"), [expected]);
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
    fn spans_of_many_threads_all_leave_in_requests_of_a_batch() {
        let sink = Collected::default();
        let queue =
            Arc::new(SpanQueue::start(settings(1000, 60_000, 8), sink.clone(), "t").unwrap());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let queue = queue.clone();
                thread::spawn(move || (0..5).for_each(|n| queue.push(record(t * 10 + n))))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert!(queue.flush(Duration::from_secs(5)));
        let batches = sink.0.lock().unwrap().clone();
        assert_eq!(batches.iter().sum::<usize>(), 20, "{batches:?}");
        // Five a shard: two shards' spans together would pass a batch of 8.
        assert!(batches.iter().all(|&n| n <= 8), "{batches:?}");
        assert_eq!(queue.lost(), (0, 0));
    }

    #[test]
    fn sent_buffers_are_kept_for_the_next_batches_until_a_round_finds_nothing() {
        let sink = Collected::default();
        let queue = SpanQueue::start(settings(100, 60_000, 2), sink.clone(), "t").unwrap();
        for n in 0..5 {
            queue.push(record(n));
        }
        assert!(queue.flush(Duration::from_secs(5)));
        assert_eq!(sink.0.lock().unwrap().iter().sum::<usize>(), 5);
        assert!(queue.buffers.kept() >= 1, "a sent batch's buffer is kept");
        queue.push(record(6));
        assert!(queue.flush(Duration::from_secs(5)));
        assert!(queue.buffers.kept() >= 1);
        assert!(queue.flush(Duration::from_secs(5)));
        assert_eq!(queue.buffers.kept(), 0, "an idle round frees them");
        assert_eq!(queue.lost(), (0, 0));
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
