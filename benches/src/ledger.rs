//! The cost ledger under load: ingest throughput through the proxy's internal batch
//! endpoint, then latency of the cost views over the seeded data, as ratios to
//! `/healthz` measured against the same server in the same process.
//!
//! Run: `cargo run --release -p warden-benches --bin ledger -- [RECORDS] [AGENTS] [DAYS]
//! [SENDERS] [END_MINUTE]` (defaults 200000 1000 90 2, now; SQLite in a temporary
//! folder, or set `WARDEN_BENCH_DATABASE_URL` to a dedicated, empty PostgreSQL
//! database). `SENDERS` batches are in flight at once, as when several proxies flush
//! together. `END_MINUTE` (0-1439) ends the seeded days at that minute of today (UTC)
//! instead of now: the views read the current day's usage from hourly rollups, so late
//! in the day (1410, say) is their worst case.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use warden_benches::{BenchServer, BATCH};
use warden_shared::clock::Clock;
use warden_shared::timestamp::Timestamp;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let records = args.next().flatten().unwrap_or(200_000);
    let agents = args.next().flatten().unwrap_or(1000);
    let days = args.next().flatten().unwrap_or(90);
    let senders = args.next().flatten().unwrap_or(2).max(1);
    let end_minute = args.next().flatten().map(|m| m.min(1439) as i64);
    let real_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let now = match end_minute {
        Some(minute) => real_now - real_now.rem_euclid(86_400_000) + minute * 60_000,
        None => real_now,
    };
    let span = (days as i64) * 86_400_000;
    // The server's clock replays the `days` days as the records arrive, so the ledger
    // closes each finished day as it would in production, instead of every record
    // being a late arrival for a day closed long ago.
    let clock = Clock::manual(Timestamp::from_millis(now - span));
    let server = BenchServer::start_with_clock(8 * 1024 * 1024, clock.clone()).await;
    let (base, client) = (&server.base, &server.client);
    let (tenant_id, key) = server.create_tenant("enterprise_plus", agents).await;
    let agent_ids = server.register_agents(&key, agents, 20).await;

    let ingest = warden_benches::ingest_usage(
        &server,
        &tenant_id,
        &agent_ids,
        records,
        (now - span, now),
        &clock,
        warden_benches::Seeding {
            senders,
            close_each_day: false,
        },
    )
    .await;
    println!(
        "ledger: {records} usage records, {agents} agents, {days} days, database {}, ending {}",
        server.backend,
        Timestamp::from_millis(now)
    );
    println!(
        "ingest of replayed history through /internal/v1/usage-batches: {:.0} records/s ({:.1} s, batches of {BATCH}, {senders} in flight; nearly every record a new hourly row)",
        records as f64 / ingest.as_secs_f64(),
        ingest.as_secs_f64()
    );

    // Catch up with the present: close what the server's own minutely round has not.
    clock.advance(now - clock.now().as_millis());
    let closing = Instant::now();
    let closed = warden_control_plane::ledger::close_days(&server.db, clock.now())
        .await
        .unwrap();
    println!(
        "closing the last {closed} days into the daily rollup: {:.0} ms",
        ms(closing.elapsed())
    );

    // Live usage, as proxies at full speed send it: every record of the present hour,
    // so each batch adds to rollup rows that exist (a second tenant, fresh tables of
    // its own rows).
    let (live_tenant, live_key) = server.create_tenant("enterprise_plus", agents).await;
    let live_agents = server.register_agents(&live_key, agents, 20).await;
    let at = clock.now().as_millis();
    let live = warden_benches::ingest_usage(
        &server,
        &live_tenant,
        &live_agents,
        records,
        (at, at),
        &clock,
        warden_benches::Seeding {
            senders,
            close_each_day: false,
        },
    )
    .await;
    println!(
        "ingest of live usage (the present hour, as proxies send it): {:.0} records/s ({:.1} s, batches of {BATCH}, {senders} in flight)",
        records as f64 / live.as_secs_f64(),
        live.as_secs_f64()
    );

    let from = Timestamp::from_millis(now - 30 * 86_400_000).to_string();
    let from = &from[..10];
    let views = [
        ("GET /healthz (baseline)", format!("{base}/healthz")),
        (
            "GET /cost/summary (30 d)",
            format!("{base}/api/v1/cost/summary?from={from}"),
        ),
        (
            "GET /cost/by-agent (30 d)",
            format!("{base}/api/v1/cost/by-agent?from={from}"),
        ),
        (
            "GET /cost/timeseries (30 d)",
            format!("{base}/api/v1/cost/timeseries?from={from}"),
        ),
    ];
    println!("cost views right after the ingest:");
    measure_views(client, &key, &views).await;
    // The ingest rewrote each rollup row many times; in steady state autovacuum (or
    // SQLite's page reuse) has cleaned the dead versions and refreshed statistics.
    let maintenance = server.maintain().await;
    println!("cost views after {maintenance} (what autovacuum does in steady state):");
    measure_views(client, &key, &views).await;
}

/// 200 sequential requests of each view: p50, p99 and p99 as a ratio to the first.
async fn measure_views(client: &reqwest::Client, key: &str, views: &[(&str, String)]) {
    println!(
        "{:<30} {:>10} {:>10} {:>10}",
        "request", "p50 ms", "p99 ms", "p99 ratio"
    );
    let mut baseline = 0.0;
    for (name, url) in views {
        let mut samples = Vec::with_capacity(200);
        for _ in 0..200 {
            let t = Instant::now();
            let response = client.get(url).bearer_auth(key).send().await.unwrap();
            assert!(
                response.status().is_success(),
                "{name}: {}",
                response.status()
            );
            response.bytes().await.unwrap();
            samples.push(t.elapsed());
        }
        samples.sort();
        let p50 = ms(samples[100]);
        let p99 = ms(samples[198]);
        if baseline == 0.0 {
            baseline = p99;
        }
        println!(
            "{name:<30} {p50:>10.2} {p99:>10.2} {:>9.1}x",
            p99 / baseline
        );
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
