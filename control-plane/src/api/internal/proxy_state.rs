//! `GET /internal/v1/proxy-state`: the stream a proxy follows to learn what to enforce.
//!
//! Newline-delimited JSON (`warden_shared::snapshot::StreamMessage`): first a full
//! snapshot, or, when the proxy says which version it has (`since`) and the outbox still
//! holds every change after it, only the deltas it missed; then a delta for every new
//! change as the publisher sees it, and a heartbeat every `HEARTBEAT` while nothing
//! changes. A stream that falls behind the publisher is sent a fresh snapshot. Streams
//! end when the server shuts down, and proxies reconnect (to another replica, or to this
//! one when it is back).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use futures_util::Stream;
use tokio::sync::{broadcast, mpsc};
use warden_shared::snapshot::{Delta, ScopeSpend, StreamMessage};

use crate::error::ApiResult;
use crate::proxy_state::{load, spend};
use crate::state::AppState;

/// How often a quiet stream says it is alive; proxies reconnect after three missed.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// The lines of a proxy's stream from `since` on: what it needs first is read before
/// this returns (so a database failure is an error answer, not a cut stream), the rest
/// is written by a task that follows the publisher until the proxy hangs up.
pub async fn stream_proxy_state(
    state: &AppState,
    since: Option<i64>,
    proxy: Option<&str>,
) -> ApiResult<impl Stream<Item = Result<Bytes, Infallible>>> {
    // Subscribe before reading, so no delta published meanwhile is missed; those already
    // covered by what is read first are skipped by version.
    let deltas = state.publisher.subscribe();
    let spend = state.publisher.subscribe_spend();
    let pool = state.db.pool().clone();
    let first = catch_up(
        &pool,
        since,
        state.publisher.current_month(),
        state.publisher.now_ms(),
    )
    .await?;
    // Registered before the first line is sent: a write committed from now on waits
    // for this proxy too.
    let registered = match proxy {
        Some(proxy) => Some(
            state
                .confirmations
                .open_stream(proxy, since.unwrap_or(-1))
                .await?,
        ),
        None => None,
    };
    let (lines, body) = mpsc::channel::<Result<Bytes, Infallible>>(16);
    let confirmations = state.confirmations.clone();
    let source = Source {
        pool,
        deltas,
        spend,
        publisher: state.publisher.clone(),
    };
    let stopping = state.stopping.clone();
    tokio::spawn(async move {
        follow(source, first, lines, stopping).await;
        if let Some(stream_id) = registered {
            confirmations.close_stream(&stream_id).await;
        }
    });
    let mut body = body;
    Ok(futures_util::stream::poll_fn(move |cx| body.poll_recv(cx)))
}

/// What a proxy at `since` needs first: the deltas after it and all of this month's
/// spend, or a full snapshot (which holds the spend).
async fn catch_up(
    pool: &sqlx::AnyPool,
    since: Option<i64>,
    month: i64,
    now_ms: i64,
) -> ApiResult<Vec<StreamMessage>> {
    let current = load::current_version(pool).await?;
    if let Some(since) = since.filter(|since| (0..=current).contains(since)) {
        let complete = since == current
            || load::oldest_retained(pool)
                .await?
                .is_some_and(|oldest| oldest <= since + 1);
        if complete {
            let mut messages = Vec::new();
            let mut at = since;
            while let Some(delta) = load::delta_since(pool, at, now_ms).await? {
                at = delta.version;
                messages.push(StreamMessage::Delta(delta));
            }
            if messages.is_empty() {
                messages.push(StreamMessage::Heartbeat { version: since });
            }
            messages.push(StreamMessage::Spend {
                scopes: spend::since(pool, month, i64::MIN).await?,
            });
            return Ok(messages);
        }
    }
    Ok(vec![StreamMessage::Snapshot(
        load::snapshot(pool, month, now_ms).await?,
    )])
}

/// Where a stream's messages come from.
struct Source {
    pool: sqlx::AnyPool,
    deltas: broadcast::Receiver<Arc<Delta>>,
    spend: broadcast::Receiver<Arc<Vec<ScopeSpend>>>,
    publisher: crate::proxy_state::Publisher,
}

/// Writes `first`, then every newer delta and the heartbeats, until the proxy hangs up.
async fn follow(
    mut source: Source,
    first: Vec<StreamMessage>,
    lines: mpsc::Sender<Result<Bytes, Infallible>>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let pool = source.pool.clone();
    let mut version = 0;
    for message in first {
        version = version_of(&message).unwrap_or(version);
        if !send(&lines, &message).await {
            return;
        }
    }
    let mut heartbeat =
        tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    loop {
        let month = source.publisher.current_month();
        let message = tokio::select! {
            received = source.deltas.recv() => match received {
                Ok(delta) if delta.version <= version => continue,
                Ok(delta) => StreamMessage::Delta(Delta::clone(&delta)),
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    match load::snapshot(&pool, month, source.publisher.now_ms()).await {
                        Ok(snapshot) => StreamMessage::Snapshot(snapshot),
                        Err(error) => {
                            tracing::warn!(%error, "cannot reload a snapshot for a lagging proxy");
                            return;
                        }
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            received = source.spend.recv() => match received {
                Ok(scopes) => StreamMessage::Spend { scopes: Vec::clone(&scopes) },
                // Updates were missed: send all of the month's spend instead.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    match spend::since(&pool, month, i64::MIN).await {
                        Ok(scopes) => StreamMessage::Spend { scopes },
                        Err(error) => {
                            tracing::warn!(%error, "cannot reload spend for a lagging proxy");
                            return;
                        }
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = heartbeat.tick() => StreamMessage::Heartbeat { version },
            // The server is shutting down: end the stream; the proxy reconnects.
            _ = async { stopping.wait_for(|stop| *stop).await.map(|_| ()) } => return,
            // The proxy hung up: it no longer counts as connected.
            () = lines.closed() => return,
        };
        version = version_of(&message).unwrap_or(version);
        if !send(&lines, &message).await {
            return;
        }
    }
}

/// The state version a message brings the proxy to; spend carries none.
fn version_of(message: &StreamMessage) -> Option<i64> {
    match message {
        StreamMessage::Snapshot(snapshot) => Some(snapshot.version),
        StreamMessage::Delta(delta) => Some(delta.version),
        StreamMessage::Heartbeat { version } => Some(*version),
        StreamMessage::Spend { .. } => None,
    }
}

/// False when the proxy is gone.
async fn send(lines: &mpsc::Sender<Result<Bytes, Infallible>>, message: &StreamMessage) -> bool {
    let mut line = match serde_json::to_vec(message) {
        Ok(line) => line,
        Err(error) => {
            tracing::error!(%error, "cannot encode a proxy state message");
            return false;
        }
    };
    line.push(b'\n');
    lines.send(Ok(Bytes::from(line))).await.is_ok()
}
