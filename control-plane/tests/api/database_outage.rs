//! PostgreSQL restarted while agents send traffic: the proxy keeps serving from memory
//! with no 5xx of its own, the control plane reports not ready and answers writes with
//! 503 `database_unavailable` (changing nothing), recovers by itself, and the usage and
//! decisions of the outage land exactly once afterwards.
//!
//! The test starts a PostgreSQL server of its own (initdb on a free port, as the
//! `postgres` user when run as root), so it can stop and start it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use warden_control_plane::config::Secret;

use crate::helpers::{create_policy, expect_error, expect_status, Backend, TestApp};
use crate::proxy::{eventually, simple_chat, stays, MockProvider, TestProxy};

/// A PostgreSQL server in a folder of its own, stopped and removed when dropped.
struct OwnPostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

impl OwnPostgres {
    fn start() -> OwnPostgres {
        let bin = postgres_bin();
        let dir = tempfile::tempdir().unwrap();
        if is_root() {
            // PostgreSQL refuses to run as root: its folder belongs to `postgres`.
            let chown = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(chown.success());
        }
        let mut server = OwnPostgres { dir, bin, port: 0 };
        server.run(
            "initdb",
            &["-A", "trust", "-U", "postgres", "--no-sync", "-D"],
        );
        // PostgreSQL cannot listen on port 0 and say which port it got: the port is
        // chosen before it starts, and chosen again if another process took it first.
        for _ in 0..5 {
            server.port = unused_port();
            if server.try_start().is_ok() {
                return server;
            }
        }
        panic!("PostgreSQL did not start: {}", server.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// One of PostgreSQL's programs, as `postgres` when the tests run as root.
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    /// Runs `program` with `args` and the data folder last; it must succeed.
    fn run(&self, program: &str, args: &[&str]) {
        if let Err(output) = self.try_run(program, args) {
            panic!("{output}");
        }
    }

    /// Runs `program` with `args` and the data folder last; its output if it fails.
    fn try_run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let output = self
            .command(program)
            .args(args)
            .arg(self.data())
            .output()
            .unwrap();
        if output.status.success() {
            return Ok(());
        }
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }

    fn try_start(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log");
        let log = log.to_str().unwrap();
        self.try_run("pg_ctl", &["-w", "-l", log, "-o", &options, "start", "-D"])
    }

    /// Starts the stopped server again on its port, as after a restart or failover.
    fn start_again(&self) {
        if let Err(output) = self.try_start() {
            panic!("{output}{}", self.log());
        }
    }

    /// A fast shutdown: sessions are ended (`57P01`), as in a restart or failover.
    fn stop(&self) {
        self.run("pg_ctl", &["-w", "-m", "fast", "stop", "-D"]);
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args(["-m", "immediate", "stop", "-D"])
            .arg(self.data())
            .output();
    }
}

/// A port nothing listened on a moment ago.
fn unused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .unwrap()
        .port()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.starts_with(b"0\n"))
}

/// The newest PostgreSQL server programs installed (Debian keeps them off the PATH).
fn postgres_bin() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path().join("bin"))
                .filter(|bin| bin.join("pg_ctl").exists())
                .collect()
        })
        .unwrap_or_default();
    found.sort_by_key(|bin| {
        bin.parent()
            .and_then(Path::file_name)
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
    });
    found
        .pop()
        .expect("PostgreSQL's server programs (pg_ctl, initdb) under /usr/lib/postgresql")
}

/// What the agents saw, counted as they go.
#[derive(Default)]
struct Seen {
    served: AtomicI64,
    refused: AtomicI64,
    other: AtomicI64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_restart_under_traffic_loses_and_doubles_nothing() {
    restart_under_traffic(1, 1).await;
}

/// The same with the scale-out topology: two control planes and three proxies (two
/// following the first, one the second) on the restarted database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_restart_under_traffic_with_two_control_planes_and_three_proxies() {
    restart_under_traffic(2, 3).await;
}

/// `planes` control planes and `proxies` proxies (spread over them, the first taking
/// the rest) on a PostgreSQL of the test's own, restarted while agents work.
async fn restart_under_traffic(planes: usize, proxies: usize) {
    let postgres = OwnPostgres::start();
    let url = postgres.url();
    let mut apps = Vec::new();
    for _ in 0..planes {
        let url = url.clone();
        let app = TestApp::spawn_with(Backend::Postgres, |config| {
            config.database_url = Secret::new(url);
        })
        .await;
        apps.push(app);
    }
    let app = &apps[0];
    let provider = MockProvider::start().await;
    let mut followers = Vec::new();
    for index in 0..proxies {
        let plane = &apps[(proxies - 1 - index) % planes];
        followers.push(TestProxy::start(plane, &provider).await);
    }
    let proxy = &followers[0];
    let (tenant, key, _) = proxy
        .tenant_with_key(app, json!({ "developer_label": "steady" }))
        .await;
    for other in &followers[1..] {
        assert_eq!(other.chat_answer(&key, "gpt-4o-mini").await.0, 200);
    }
    let warmed = (proxies - 1) as i64;
    let admin = tenant.admin_key.clone();
    // Requests for gpt-4.1 are refused by a policy: their decisions travel apart.
    create_policy(
        app,
        &admin,
        json!({ "name": "mini only", "policy_type": "model_allowlist",
                "config": { "allowed_models": ["gpt-4o-mini*"] } }),
    )
    .await;
    let agents_before =
        expect_status(app.get("/agents", &admin).await, 200).await["meta"]["total"].clone();

    // Agents at work, before, during and after the outage.
    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut traffic = tokio::task::JoinSet::new();
    for follower in &followers {
        let (seen, stop) = (seen.clone(), stop.clone());
        let (client, base, key) = (follower.client.clone(), follower.base.clone(), key.clone());
        traffic.spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let model = if n % 5 == 0 { "gpt-4.1" } else { "gpt-4o-mini" };
                let answer = client
                    .post(format!("{base}/v1/chat/completions"))
                    .bearer_auth(&key)
                    .json(&simple_chat(model))
                    .send()
                    .await
                    .map(|r| r.status().as_u16());
                let counter = match answer {
                    Ok(200) => &seen.served,
                    Ok(403) => &seen.refused,
                    _ => &seen.other,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
    }
    // Agents at work before the outage too.
    eventually(Duration::from_secs(5), || async {
        (seen.served.load(Ordering::Relaxed) >= 10).then_some(())
    })
    .await;

    postgres.stop();
    let outage = Instant::now();
    // Not ready, by itself and quickly.
    // Every control plane's readiness, the least ready first.
    let ready = || {
        let apps = &apps;
        async move {
            let mut statuses = Vec::new();
            for app in apps {
                let answer = app.client.get(format!("{}/readyz", app.base)).send();
                statuses.push(answer.await.unwrap().status().as_u16());
            }
            statuses.into_iter().max().unwrap()
        }
    };
    eventually(Duration::from_secs(10), || async {
        (ready().await == 503).then_some(())
    })
    .await;
    // A management write is refused clearly and changes nothing.
    let refused = app
        .post("/agents", &admin, json!({ "name": "during-the-outage" }))
        .await;
    let body = expect_error(refused, 503, "database_unavailable").await;
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("nothing was changed"));
    let served_during = seen.served.load(Ordering::Relaxed);
    eventually(Duration::from_secs(5), || async {
        (seen.served.load(Ordering::Relaxed) > served_during + 5).then_some(())
    })
    .await;

    postgres.start_again();
    let down_for = outage.elapsed();
    eventually(Duration::from_secs(30), || async {
        (ready().await == 200).then_some(())
    })
    .await;
    // And after it.
    let served_after = seen.served.load(Ordering::Relaxed);
    eventually(Duration::from_secs(5), || async {
        (seen.served.load(Ordering::Relaxed) >= served_after + 10).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = traffic.join_next().await {
        done.unwrap();
    }

    let refused = seen.refused.load(Ordering::Relaxed);
    assert_eq!(
        seen.other.load(Ordering::Relaxed),
        0,
        "no other answer than 200 and 403"
    );
    // The warm-up requests on the other proxies are usage too.
    let served = seen.served.load(Ordering::Relaxed) + warmed;
    assert!(served > 0 && refused > 0);
    // Every request of the outage lands, once: usage (with its decision) and the
    // refusals' decisions.
    eventually(Duration::from_secs(45), || async {
        (app.count_rows("usage_records", &tenant.id).await == served).then_some(())
    })
    .await;
    let failed = || async {
        expect_status(
            app.get("/policy-evaluations?result=fail", &admin).await,
            200,
        )
        .await["meta"]["total"]
            .as_i64()
            .unwrap()
    };
    eventually(Duration::from_secs(45), || async {
        (failed().await == refused).then_some(())
    })
    .await;
    stays(
        Duration::from_secs(1),
        "usage and decisions counted once",
        || async {
            app.count_rows("usage_records", &tenant.id).await == served && failed().await == refused
        },
    )
    .await;
    let summary = expect_status(app.get("/cost/summary", &admin).await, 200).await;
    assert_eq!(summary["data"]["total_requests"], json!(served));
    for follower in &followers {
        let metrics = follower.metrics().await;
        assert_eq!(
            crate::helpers::metric(&metrics, "warden_proxy_usage_batches_set_aside_total"),
            Some(0.0),
            "an outage sets no batch aside"
        );
    }
    let agents_after =
        expect_status(app.get("/agents", &admin).await, 200).await["meta"]["total"].clone();
    assert_eq!(agents_after, agents_before);
    // Writes work again.
    expect_status(
        app.post("/agents", &admin, json!({ "name": "after-the-outage" }))
            .await,
        201,
    )
    .await;
    eprintln!(
        "database down {down_for:?} under {planes} control plane(s) and {proxies} proxies: \
         {served} requests served, {refused} refused by policy, all recorded once"
    );
}

/// Read-your-writes the moment PostgreSQL returns: two control planes and three proxies
/// under traffic, the database stopped long enough for every stream's lease to lapse and
/// started again, and an agent blocked as soon as a write goes through, several outages
/// in a row. A block that says `applied` must be enforced by every proxy at once; one
/// that cannot confirm it in time says `pending`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_moment_postgresql_returns_says_applied_only_when_every_proxy_enforces_it() {
    let postgres = OwnPostgres::start();
    let url = postgres.url();
    let mut apps = Vec::new();
    for _ in 0..2 {
        let url = url.clone();
        let app = TestApp::spawn_with(Backend::Postgres, |config| {
            config.database_url = Secret::new(url);
        })
        .await;
        apps.push(app);
    }
    let provider = MockProvider::start().await;
    let mut proxies = Vec::new();
    for plane in [1, 0, 0] {
        proxies.push(TestProxy::start(&apps[plane], &provider).await);
    }
    let (tenant, key, created) = proxies[0]
        .tenant_with_key(&apps[0], json!({ "developer_label": "returning" }))
        .await;
    let admin = tenant.admin_key.clone();
    let agent = created["agent_id"].as_str().unwrap().to_owned();
    let status = |proxy: &TestProxy| {
        let request = proxy
            .client
            .post(format!("{}/v1/chat/completions", proxy.base))
            .bearer_auth(&key)
            .json(&simple_chat("gpt-4o-mini"))
            .send();
        async move { request.await.unwrap().status().as_u16() }
    };
    for proxy in &proxies {
        eventually(Duration::from_secs(5), || async {
            (status(proxy).await == 200).then_some(())
        })
        .await;
    }

    // Agents at work throughout, through every proxy.
    let stop = Arc::new(AtomicBool::new(false));
    let mut traffic = tokio::task::JoinSet::new();
    for proxy in &proxies {
        let (client, base, key, stop) = (
            proxy.client.clone(),
            proxy.base.clone(),
            key.clone(),
            stop.clone(),
        );
        traffic.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let _ = client
                    .post(format!("{base}/v1/chat/completions"))
                    .bearer_auth(&key)
                    .json(&simple_chat("gpt-4o-mini"))
                    .send()
                    .await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
    }

    let (mut applied, mut pending) = (0, 0);
    for outage in 0..3 {
        postgres.stop();
        let down = Instant::now();
        // Longer than a lease (1 s): every stream's lease lapses meanwhile.
        eventually(Duration::from_secs(10), || async {
            let answer = apps[0]
                .client
                .get(format!("{}/readyz", apps[0].base))
                .send();
            (answer.await.unwrap().status() == 503).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1_500).saturating_sub(down.elapsed())).await;
        postgres.start_again();
        let writer = &apps[outage % 2];
        let blocked = write(writer, &admin, &agent, "block").await;
        assert_eq!(blocked.status(), 204, "{blocked:?}");
        let said = blocked
            .headers()
            .get("warden-enforcement")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        if said == "applied" {
            applied += 1;
            for (index, proxy) in proxies.iter().enumerate() {
                assert_eq!(
                    status(proxy).await,
                    403,
                    "outage {outage}: proxy {index} serves an agent blocked with `applied`"
                );
            }
        } else {
            assert!(said.starts_with("pending"), "{said}");
            pending += 1;
        }
        // Every proxy enforces it soon, whatever the answer said.
        for proxy in &proxies {
            eventually(Duration::from_secs(10), || async {
                (status(proxy).await == 403).then_some(())
            })
            .await;
        }
        let unblocked = write(writer, &admin, &agent, "unblock").await;
        assert_eq!(unblocked.status(), 204);
        for proxy in &proxies {
            eventually(Duration::from_secs(10), || async {
                (status(proxy).await == 200).then_some(())
            })
            .await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = traffic.join_next().await {
        done.unwrap();
    }
    eprintln!("blocks the moment PostgreSQL returned: {applied} applied, {pending} pending");
}

/// `POST /agents/{agent}/{action}`, sent again only while the database is still out of
/// reach (503).
async fn write(app: &TestApp, admin: &str, agent: &str, action: &str) -> reqwest::Response {
    let body = if action == "block" {
        json!({ "reason": "the database is back" })
    } else {
        json!({})
    };
    loop {
        let response = app
            .post(&format!("/agents/{agent}/{action}"), admin, body.clone())
            .await;
        if response.status() != 503 {
            return response;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
