//! Follows the control plane's state stream (`/internal/v1/proxy-state`) and applies every
//! message to the in-memory state.
//!
//! On connect the proxy says which version it holds, so after a short outage it receives
//! only the deltas it missed. Whenever the stream breaks, goes silent for longer than
//! three heartbeats, or cannot be opened, the proxy keeps serving from what it has and
//! reconnects with exponential backoff (250 ms doubling to 10 s).
//!
//! The proxy follows under an instance id of its own and acknowledges each version it
//! has applied (`POST /internal/v1/proxy-acks`), as soon as it has applied it: a
//! management write that changes what proxies enforce answers once every connected proxy
//! has acknowledged it (read-your-writes, see the control plane's `proxy_state::confirm`).

use std::sync::Arc;
use std::time::Duration;

use warden_shared::snapshot::StreamMessage;

use crate::flush::post_json;
use crate::metrics::ProxyMetrics;
use crate::state::EnforcementState;
use warden_shared::clock::system_now_ms;

/// Silence after which the stream is presumed dead (the control plane beats every 10 s).
const SILENCE_LIMIT: Duration = Duration::from_secs(35);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

pub struct StreamSource {
    pub url: String,
    /// Where applied versions are acknowledged.
    pub acks_url: String,
    /// This proxy's instance id, new at every start.
    pub proxy_id: String,
    pub service_token: String,
}

/// How long an acknowledgement may take before the proxy gives up on it; a write waiting
/// for it is bounded anyway, and the next version's acknowledgement covers this one.
const ACK_TIMEOUT: Duration = Duration::from_secs(2);

/// The follower's own thread (see [`spawn_follower`]); dropping this ends it. It holds
/// no state of its own: the proxy keeps what it applied.
pub struct Follower {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Follows the stream on a thread of its own, with its own single-threaded runtime and
/// HTTP client, until the returned [`Follower`] is dropped. Everything the enforcement state holds is
/// allocated while applying the stream; on one thread it comes from one allocator
/// arena. Followed from the runtime's worker threads, a snapshot of 100,000 keys left
/// the proxy anywhere between 100 and 190 MiB resident, depending on how the load
/// happened to spread over glibc's per-thread arenas; on one thread, about 100 to 120.
pub fn spawn_follower(
    source: StreamSource,
    state: Arc<EnforcementState>,
    metrics: ProxyMetrics,
) -> std::io::Result<Follower> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("warden-state".into())
        .spawn(move || {
            runtime.block_on(async move {
                let client = match reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .build()
                {
                    Ok(client) => client,
                    Err(error) => {
                        tracing::error!(%error, "cannot build the state stream's HTTP client");
                        return;
                    }
                };
                tokio::select! {
                    () = follow_forever(source, client, state, metrics) => {}
                    _ = stopped => {}
                }
            });
        })?;
    Ok(Follower { stop: Some(stop) })
}

/// Follows the stream until the task is dropped.
pub async fn follow_forever(
    source: StreamSource,
    client: reqwest::Client,
    state: Arc<EnforcementState>,
    metrics: ProxyMetrics,
) {
    let mut backoff = Duration::from_millis(250);
    loop {
        match follow_once(&source, &client, &state, &metrics).await {
            // The stream delivered something before it ended: reconnect promptly.
            Ok(true) => backoff = Duration::from_millis(250),
            Ok(false) => {}
            Err(error) => tracing::warn!(%error, retry_in = ?backoff, "state stream interrupted"),
        }
        metrics.stream_reconnects.inc();
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection; true when at least one message was applied.
async fn follow_once(
    source: &StreamSource,
    client: &reqwest::Client,
    state: &EnforcementState,
    metrics: &ProxyMetrics,
) -> Result<bool, String> {
    let mut request = client
        .get(&source.url)
        .bearer_auth(&source.service_token)
        .query(&[("proxy", source.proxy_id.as_str())]);
    if state.is_loaded() {
        request = request.query(&[("since", state.version())]);
    }
    let mut response = request.send().await.map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("the control plane answered {}", response.status()));
    }
    let mut pending: Vec<u8> = Vec::new();
    // How much of `pending` is known to hold no newline: a snapshot arrives in thousands
    // of chunks, and rescanning it all for each would be quadratic.
    let mut scanned = 0;
    let mut applied = false;
    // Acknowledged as held when connecting (`since`); a snapshot or delta moves it on.
    let mut acked = if state.is_loaded() {
        state.version()
    } else {
        -1
    };
    loop {
        let chunk = tokio::time::timeout(SILENCE_LIMIT, response.chunk())
            .await
            .map_err(|_| "no heartbeat from the control plane".to_owned())?
            .map_err(|e| e.to_string())?;
        let Some(chunk) = chunk else {
            return Ok(applied);
        };
        pending.extend_from_slice(&chunk);
        let mut snapshot_applied = false;
        while let Some(offset) = pending[scanned..].iter().position(|b| *b == b'\n') {
            let end = scanned + offset;
            scanned = 0;
            // Parsed where it lies: a snapshot line is tens of megabytes at 100,000 keys.
            let message: StreamMessage = serde_json::from_slice(&pending[..end])
                .map_err(|e| format!("unreadable state message: {e}"))?;
            pending.drain(..=end);
            snapshot_applied |= matches!(message, StreamMessage::Snapshot(_));
            state.apply(message, system_now_ms());
            applied = true;
            metrics.snapshot_version.set(state.version());
            metrics.keys_loaded.set(state.key_count() as i64);
        }
        scanned = pending.len();
        // Do not keep a snapshot's worth of buffer for the small deltas that follow.
        if pending.capacity() > 1 << 20 && pending.len() < 1 << 16 {
            pending.shrink_to_fit();
        }
        if snapshot_applied {
            crate::allocator::release_freed_pages();
        }
        if applied && state.version() > acked {
            acked = state.version();
            acknowledge(source, client, acked).await;
        }
    }
}

/// Tells the control plane this proxy has applied every change up to `version`.
async fn acknowledge(source: &StreamSource, client: &reqwest::Client, version: i64) {
    let ack = warden_shared::wire::ProxyAck {
        proxy: source.proxy_id.clone(),
        version,
    };
    // Serializing two plain fields into memory cannot fail.
    let body = serde_json::to_vec(&ack).unwrap_or_default();
    let sent = post_json(
        client,
        &source.acks_url,
        &source.service_token,
        body.into(),
        ACK_TIMEOUT,
    )
    .await;
    match sent {
        Ok(response) if response.status().is_success() => {}
        Ok(response) => {
            tracing::warn!(version, status = %response.status(), "state acknowledgement refused")
        }
        Err(error) => tracing::warn!(version, %error, "cannot acknowledge the state version"),
    }
}
