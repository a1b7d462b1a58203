//! The stream load generator of `streams.sh`: streamed chat completions over HTTP/1.1
//! connections, timing each stream's first body byte and its end, checking that it ends
//! with `[DONE]`.
//!
//! - `stream-load steady URL KEYS CONCURRENCY WARMUP_S DURATION_S`: CONCURRENCY
//!   keep-alive connections, begun evenly over the warm-up's first second, each sending
//!   one stream after another. Streams that start within the warm-up are not timed;
//!   throughput counts the streams that end within the DURATION_S after it.
//! - `stream-load burst URL KEYS CONNECTIONS WITHIN_MS`: CONNECTIONS new connections,
//!   begun evenly within WITHIN_MS, each sending one stream. A stream's first byte is
//!   timed from the moment its connection was begun, so a connection that waited for a
//!   SYN retransmission (a second) shows in it.
//!
//! KEYS is a file of proxy keys, one per line, sent in turn as bearer tokens (`-`: none).
//! Prints one line of `name=value` pairs (milliseconds where named `_ms`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The steady load's connections begin spread over this much of the warm-up.
const STAGGER: Duration = Duration::from_secs(1);

const BODY: &str =
    r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Say hello"}]}"#;

/// Where and how to send the streams.
struct Target {
    uri: Uri,
    host: String,
    keys: Vec<String>,
}

/// One stream: when it began, its first body byte after that, and when it ended.
struct Sample {
    started: Instant,
    first_byte: Duration,
    ended: Instant,
}

impl Target {
    fn load(url: &str, keys: &str) -> Target {
        let uri: Uri = url
            .parse()
            .expect("a URL such as http://127.0.0.1:9100/v1/...");
        let authority = uri.authority().expect("a URL with a host").to_string();
        let keys = if keys == "-" {
            Vec::new()
        } else {
            std::fs::read_to_string(keys)
                .expect("a file of keys")
                .lines()
                .filter(|line| !line.is_empty())
                .map(str::to_owned)
                .collect()
        };
        Target {
            uri,
            host: authority,
            keys,
        }
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let tcp = TcpStream::connect(&self.host)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let (sender, connection) = http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(connection);
        Ok(sender)
    }

    /// Sends one stream on `sender` and reads it to its end; `begun` is when its timing
    /// starts.
    async fn stream(
        &self,
        sender: &mut SendRequest<Full<Bytes>>,
        n: usize,
        begun: Instant,
    ) -> Result<Sample, String> {
        let mut request = Request::post(self.uri.clone())
            .header("host", &self.host)
            .header("content-type", "application/json");
        if !self.keys.is_empty() {
            let key = &self.keys[n % self.keys.len()];
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let request = request.body(Full::new(Bytes::from_static(BODY.as_bytes())));
        sender.ready().await.map_err(|e| format!("ready: {e}"))?;
        let response = sender
            .send_request(request.map_err(|e| e.to_string())?)
            .await
            .map_err(|e| format!("send: {e}"))?;
        if response.status() != StatusCode::OK {
            return Err(format!("status {}", response.status()));
        }
        let mut body = response.into_body();
        let mut first_byte = None;
        let mut tail: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("body: {e}"))?;
            if let Ok(data) = frame.into_data() {
                if data.is_empty() {
                    continue;
                }
                first_byte.get_or_insert_with(|| begun.elapsed());
                // The last few bytes are enough to see the end of the stream.
                tail.extend_from_slice(&data);
                if tail.len() > 64 {
                    tail.drain(..tail.len() - 64);
                }
            }
        }
        let done = tail.windows(6).any(|w| w == b"[DONE]");
        match (first_byte, done) {
            (Some(first_byte), true) => Ok(Sample {
                started: begun,
                first_byte,
                ended: Instant::now(),
            }),
            _ => Err("stream ended without [DONE]".to_owned()),
        }
    }
}

/// What the tasks found: samples and errors (with the first error's text).
#[derive(Default)]
struct Found {
    samples: Vec<Sample>,
    errors: usize,
    first_error: Option<String>,
}

impl Found {
    fn add(&mut self, result: Result<Sample, String>) {
        match result {
            Ok(sample) => self.samples.push(sample),
            Err(error) => {
                self.errors += 1;
                self.first_error.get_or_insert(error);
            }
        }
    }

    fn merge(&mut self, other: Found) {
        self.samples.extend(other.samples);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at].as_secs_f64() * 1e3
}

async fn steady(target: Arc<Target>, concurrency: usize, warmup: Duration, duration: Duration) {
    let start = Instant::now();
    let (measured_from, end) = (start + warmup, start + warmup + duration);
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let target = target.clone();
            tokio::spawn(async move {
                // Begun together, the connections' streams would start and end in
                // lockstep, a thousand at once, and the streams ending in the window
                // would come in whole waves (13 or 14 in 10 s: a 7 % step). Spread over
                // the first second of the warm-up, they end evenly.
                tokio::time::sleep(
                    warmup
                        .min(STAGGER)
                        .mul_f64(task as f64 / concurrency as f64),
                )
                .await;
                let mut found = Found::default();
                let mut sender = None;
                let mut n = task;
                while Instant::now() < end {
                    let mut ready = match sender.take() {
                        Some(ready) => ready,
                        None => match target.connect().await {
                            Ok(ready) => ready,
                            Err(error) => {
                                found.add(Err(error));
                                tokio::time::sleep(Duration::from_millis(10)).await;
                                continue;
                            }
                        },
                    };
                    let result = target.stream(&mut ready, n, Instant::now()).await;
                    n += concurrency;
                    if result.is_ok() {
                        sender = Some(ready);
                    }
                    found.add(result);
                }
                found
            })
        })
        .collect();
    let mut found = Found::default();
    for task in tasks {
        found.merge(task.await.unwrap());
    }
    // Throughput: the streams that ended within the measured window (those that started
    // in the warm-up included); timings: the streams that started in it. `completed`
    // counts every stream of the run, the warm-up's included, as the CPU measured around
    // the whole run does.
    let completed = found.samples.len() as f64;
    let ended = found
        .samples
        .iter()
        .filter(|s| s.ended >= measured_from && s.ended <= end)
        .count();
    found.samples.retain(|s| s.started >= measured_from);
    report(
        &found,
        &[
            ("streams_per_s", ended as f64 / duration.as_secs_f64()),
            ("completed", completed),
        ],
    );
}

async fn burst(target: Arc<Target>, connections: usize, within: Duration) {
    let start = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|task| {
            let target = target.clone();
            let at = start + within.mul_f64(task as f64 / connections as f64);
            tokio::spawn(async move {
                tokio::time::sleep_until(at.into()).await;
                let begun = Instant::now();
                let result = match target.connect().await {
                    Ok(mut sender) => target.stream(&mut sender, task, begun).await,
                    Err(error) => Err(error),
                };
                let mut found = Found::default();
                found.add(result);
                found
            })
        })
        .collect();
    let mut found = Found::default();
    for task in tasks {
        found.merge(task.await.unwrap());
    }
    // A SYN retransmission waits a second: a first byte later than that waited for one.
    let waited = found
        .samples
        .iter()
        .filter(|s| s.first_byte >= Duration::from_secs(1))
        .count();
    report(&found, &[("first_byte_over_1s", waited as f64)]);
}

fn report(found: &Found, extra: &[(&str, f64)]) {
    let mut first: Vec<Duration> = found.samples.iter().map(|s| s.first_byte).collect();
    let mut whole: Vec<Duration> = found
        .samples
        .iter()
        .map(|s| s.ended.duration_since(s.started))
        .collect();
    first.sort_unstable();
    whole.sort_unstable();
    let mut line = format!(
        "streams={} errors={} first_p50_ms={:.1} first_p99_ms={:.1} first_max_ms={:.1} end_p50_ms={:.1} end_p99_ms={:.1}",
        found.samples.len(),
        found.errors,
        percentile(&first, 0.50),
        percentile(&first, 0.99),
        percentile(&first, 1.0),
        percentile(&whole, 0.50),
        percentile(&whole, 0.99),
    );
    for (name, value) in extra {
        line.push_str(&format!(" {name}={value:.1}"));
    }
    println!("{line}");
    if let Some(error) = &found.first_error {
        eprintln!("first error: {error}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |at: usize| -> u64 {
        args.get(at)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("argument {at} must be a number"))
    };
    let usage = "stream-load steady URL KEYS CONCURRENCY WARMUP_S DURATION_S | burst URL KEYS CONNECTIONS WITHIN_MS";
    let (Some(mode), Some(url), Some(keys)) = (args.first(), args.get(1), args.get(2)) else {
        panic!("{usage}");
    };
    let target = Arc::new(Target::load(url, keys));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    match mode.as_str() {
        "steady" => runtime.block_on(steady(
            target,
            number(3) as usize,
            Duration::from_secs(number(4)),
            Duration::from_secs(number(5)),
        )),
        "burst" => runtime.block_on(burst(
            target,
            number(3) as usize,
            Duration::from_millis(number(4)),
        )),
        _ => panic!("{usage}"),
    }
}
