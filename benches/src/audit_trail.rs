//! The audit trail at size: seeds a tenant's chain of EVENTS events, then measures
//! (1) `GET /audit-trail` pages (first page, an `event_type` filter, a `target_id`
//! filter) as ratios to `/healthz` against the same server; (2) the streamed CSV export
//! of the whole trail: events per second and how far the process's resident memory grew;
//! (3) what the hash chain adds to a write: the same write transaction (a team row and
//! its audit event) with the chained append and with a plain insert of the event, in
//! turns in the same process; (4) verifying the whole chain.
//!
//! Run: `cargo run --release -p warden-benches --bin audit-trail -- [EVENTS] [REQUESTS]
//! [WRITES]` (defaults 1000000 200 2000; SQLite in a temporary folder, or
//! `WARDEN_BENCH_DATABASE_URL` for a dedicated, empty PostgreSQL database).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use serde_json::json;
use warden_benches::BenchServer;
use warden_control_plane::changes::chain::{self, NewEvent, GENESIS};
use warden_control_plane::changes::{self, AuditEvent, Author, Proxies};
use warden_control_plane::db::Db;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::timestamp::Timestamp;

const SEED_BATCH: usize = 500;
const EVENT_TYPES: [&str; 5] = [
    "agent.registered",
    "agent.updated",
    "policy.violated",
    "agent.blocked",
    "team.created",
];

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let events = args.next().flatten().unwrap_or(1_000_000);
    let requests = args.next().flatten().unwrap_or(200);
    let writes = args.next().flatten().unwrap_or(2000);
    let server = BenchServer::start(1024 * 1024).await;
    let (tenant_id, key) = server.create_tenant("enterprise", 10).await;
    println!("audit-trail: {events} events, database {}", server.backend);

    let started = Instant::now();
    seed(&server.db, &tenant_id, events).await;
    println!(
        "seeded in {:.1} s ({:.0} events/s)",
        started.elapsed().as_secs_f64(),
        events as f64 / started.elapsed().as_secs_f64()
    );

    println!("right after seeding:");
    pages(&server, &key, requests).await;
    // A bulk load leaves PostgreSQL's visibility map unset (index-only scans then read
    // the table) and statistics stale; in steady state autovacuum has done this.
    let maintenance = server.maintain().await;
    println!("after {maintenance} (what autovacuum does in steady state):");
    pages(&server, &key, requests).await;
    export(&server, &key).await;
    append_cost(&server.db, &tenant_id, writes).await;

    let started = Instant::now();
    let verified = chain::verify(server.db.pool(), &tenant_id).await.unwrap();
    assert!(verified.valid, "{verified:?}");
    println!(
        "verify: {} events in {:.1} s ({:.0} events/s)",
        verified.events_checked,
        started.elapsed().as_secs_f64(),
        verified.events_checked as f64 / started.elapsed().as_secs_f64()
    );
}

/// Appends `events` chained events after the tenant's existing ones, directly, in
/// multi-row statements: each event's hash links it to the one before.
async fn seed(db: &Db, tenant_id: &str, events: usize) {
    let (mut seq, mut previous): (i64, String) =
        sqlx::query_as("SELECT seq, hash FROM audit_heads WHERE tenant_id = $1")
            .bind(tenant_id)
            .fetch_optional(db.pool())
            .await
            .unwrap()
            .unwrap_or((0, GENESIS.to_owned()));
    let start = Timestamp::from_millis(1_700_000_000_000);
    let mut written = 0;
    while written < events {
        let size = SEED_BATCH.min(events - written);
        let mut rows = Vec::with_capacity(size);
        for i in written..written + size {
            seq += 1;
            let at = start.as_millis() + i as i64 * 1_000;
            let id = new_id(IdKind::AuditEvent, at);
            let event_type = EVENT_TYPES[i % EVENT_TYPES.len()];
            let target = format!("agt_{:026}", i % 1000);
            let details = json!({ "n": i }).to_string();
            let hash = NewEvent {
                id: &id,
                tenant_id,
                event_type,
                actor: "system",
                target_type: "agent",
                target_id: &target,
                details: &details,
                occurred_at: at,
            }
            .hash(seq, &previous);
            rows.push((
                id,
                event_type,
                target,
                details,
                at,
                seq,
                previous,
                hash.clone(),
            ));
            previous = hash;
        }
        let placeholders: Vec<String> = (0..size)
            .map(|r| {
                let b = r * 11;
                format!(
                    "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
                    b + 1,
                    b + 2,
                    b + 3,
                    b + 4,
                    b + 5,
                    b + 6,
                    b + 7,
                    b + 8,
                    b + 9,
                    b + 10,
                    b + 11
                )
            })
            .collect();
        let sql = format!(
            "INSERT INTO audit_events (id, tenant_id, event_type, actor, target_id, target_type, \
             details, occurred_at, seq, prev_hash, hash) VALUES {}",
            placeholders.join(", ")
        );
        let mut query = sqlx::query(&sql);
        for (id, event_type, target, details, at, seq, prev, hash) in &rows {
            query = query
                .bind(id)
                .bind(tenant_id)
                .bind(*event_type)
                .bind("system")
                .bind(target)
                .bind("agent")
                .bind(details)
                .bind(*at)
                .bind(*seq)
                .bind(prev)
                .bind(hash);
        }
        let mut tx = db.begin_write().await.unwrap();
        query.execute(&mut *tx).await.unwrap();
        sqlx::query("UPDATE audit_heads SET seq = $2, hash = $3 WHERE tenant_id = $1")
            .bind(tenant_id)
            .bind(seq)
            .bind(&previous)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        written += size;
    }
}

async fn pages(server: &BenchServer, key: &str, requests: usize) {
    let base = &server.base;
    let rows = [
        ("GET /healthz (baseline)", format!("{base}/healthz")),
        ("first page", format!("{base}/api/v1/audit-trail?limit=20")),
        (
            "event_type filter",
            format!("{base}/api/v1/audit-trail?event_type=agent.blocked&limit=20"),
        ),
        (
            "target_id filter",
            format!("{base}/api/v1/audit-trail?target_id=agt_{:026}&limit=20", 7),
        ),
        (
            "from/to, one day",
            format!("{base}/api/v1/audit-trail?from=2023-11-15&to=2023-11-15&limit=20"),
        ),
    ];
    println!(
        "{:<26} {:>9} {:>9} {:>8}",
        "GET /audit-trail", "p50 ms", "p99 ms", "p99 ×"
    );
    let mut baseline = 0.0;
    for (name, url) in rows {
        let mut samples = Vec::with_capacity(requests);
        for _ in 0..requests {
            let started = Instant::now();
            let response = server
                .client
                .get(&url)
                .bearer_auth(key)
                .send()
                .await
                .unwrap();
            assert!(
                response.status().is_success(),
                "{name}: {}",
                response.status()
            );
            response.bytes().await.unwrap();
            samples.push(started.elapsed());
        }
        samples.sort();
        let p50 = millis(samples[samples.len() / 2]);
        let p99 = millis(samples[(samples.len() * 99 / 100).min(samples.len() - 1)]);
        if baseline == 0.0 {
            baseline = p99;
        }
        println!("{name:<26} {p50:>9.2} {p99:>9.2} {:>7.1}x", p99 / baseline);
    }
}

async fn export(server: &BenchServer, key: &str) {
    let rss_before = resident_kib();
    let started = Instant::now();
    let mut response = server
        .client
        .get(format!(
            "{}/api/v1/audit-trail/export?format=csv",
            server.base
        ))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
    let (mut bytes, mut lines, mut peak) = (0usize, 0usize, rss_before);
    while let Some(chunk) = response.chunk().await.unwrap() {
        bytes += chunk.len();
        lines += chunk.iter().filter(|b| **b == b'\n').count();
        peak = peak.max(resident_kib());
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "export (csv): {} events, {:.1} MiB in {seconds:.1} s: {:.0} events/s; resident memory {:.1} MiB before, peak {:.1} MiB (+{:.1} MiB)",
        lines - 1,
        bytes as f64 / 1048576.0,
        (lines - 1) as f64 / seconds,
        rss_before as f64 / 1024.0,
        peak as f64 / 1024.0,
        (peak - rss_before) as f64 / 1024.0
    );
}

/// The same write with the chained append and with a plain insert of its event,
/// alternating, so both see the same database and machine state.
async fn append_cost(db: &Db, tenant_id: &str, writes: usize) {
    let mut chained = Vec::with_capacity(writes);
    let mut plain = Vec::with_capacity(writes);
    for i in 0..writes {
        let name = format!("bench-team-{i}");
        let started = Instant::now();
        let mut tx = db.begin_write().await.unwrap();
        insert_team(&mut tx, tenant_id, &name, i).await;
        let event = AuditEvent {
            event_type: "team.created",
            target_type: "team",
            target_id: &name,
            details: json!({ "name": name }),
        };
        if i % 2 == 0 {
            let author = Author {
                tenant_id,
                actor: "system",
            };
            changes::record(
                &mut tx,
                author,
                Timestamp::from_millis(now_ms()),
                event,
                Proxies::Unaffected,
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
            chained.push(started.elapsed());
        } else {
            // The event as it was written before the chain: one insert, no head.
            sqlx::query(
                "INSERT INTO audit_events (id, tenant_id, event_type, actor, target_id, \
                 target_type, details, occurred_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(new_id(IdKind::AuditEvent, now_ms()))
            .bind(tenant_id)
            .bind(event.event_type)
            .bind("system")
            .bind(event.target_id)
            .bind(event.target_type)
            .bind(event.details.to_string())
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .unwrap();
            tx.commit().await.unwrap();
            plain.push(started.elapsed());
        }
    }
    // The unchained rows would break the chain: remove them before it is verified.
    sqlx::query("DELETE FROM audit_events WHERE tenant_id = $1 AND seq IS NULL")
        .bind(tenant_id)
        .execute(db.pool())
        .await
        .unwrap();
    let mean = |samples: &[Duration]| {
        samples.iter().sum::<Duration>().as_secs_f64() * 1e6 / samples.len() as f64
    };
    let p50 = |samples: &mut Vec<Duration>| {
        samples.sort();
        samples[samples.len() / 2].as_secs_f64() * 1e6
    };
    let (chained_mean, plain_mean) = (mean(&chained), mean(&plain));
    println!(
        "write transaction (team row + its audit event), {} each: chained mean {chained_mean:.0} µs p50 {:.0} µs; plain mean {plain_mean:.0} µs p50 {:.0} µs; chained / plain {:.2}x",
        writes / 2,
        p50(&mut chained),
        p50(&mut plain),
        chained_mean / plain_mean
    );
}

async fn insert_team(
    tx: &mut warden_control_plane::db::WriteTx,
    tenant_id: &str,
    name: &str,
    i: usize,
) {
    sqlx::query("INSERT INTO teams (id, tenant_id, name, created_at) VALUES ($1, $2, $3, $4)")
        .bind(format!("team_bench{i:020}"))
        .bind(tenant_id)
        .bind(name)
        .bind(now_ms())
        .execute(&mut **tx)
        .await
        .unwrap();
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// This process's resident memory, in KiB.
fn resident_kib() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}
