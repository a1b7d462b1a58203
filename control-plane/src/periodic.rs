//! Background rounds: a task run now and then until the app stops.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tracing::Instrument;

/// Runs `round` first after `first_after`, then every `period`, until `stopping` turns
/// true (or its sender is gone). A round that overruns delays the next, never doubles it.
/// Each round is a span, `round {name}`, which a trace shows with its database queries.
pub async fn every<F, Fut>(
    name: &'static str,
    first_after: Duration,
    period: Duration,
    mut stopping: watch::Receiver<bool>,
    mut round: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + first_after, period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            changed = stopping.changed() => {
                if changed.is_err() || *stopping.borrow() {
                    return;
                }
                continue;
            }
        }
        round()
            .instrument(tracing::info_span!("round", otel.name = %format!("round {name}")))
            .await;
    }
}
