//! The `warden` binary: `warden dev` for newcomers (both planes, SQLite), and
//! `warden control-plane` and `warden proxy` in production.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use warden_control_plane::bootstrap::BootstrapOutcome;
use warden_control_plane::changes::chain;
use warden_control_plane::config::{Config, LogFormat, Secret};
use warden_control_plane::startup::{self, Application};
use warden_control_plane::telemetry::Traces;
use warden_proxy::otel::Plane;
use warden_proxy::{ProxyApp, ProxySettings};
use warden_shared::clock::Clock;

#[derive(Parser)]
#[command(name = "warden", version, about = "Governance for fleets of AI agents")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Everything on this machine: SQLite in a data folder, the API on 127.0.0.1:8080.
    Dev {
        /// Folder for the SQLite database; created when missing.
        #[arg(long, default_value = "warden-data")]
        data_dir: PathBuf,
        /// Port of the management API.
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Port of the proxy (the OpenAI base URL agents use).
        #[arg(long, default_value_t = 8081)]
        proxy_port: u16,
    },
    /// The production control plane, configured by a TOML file and WARDEN_ variables.
    ControlPlane {
        /// Optional TOML file; WARDEN_ variables override it.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// The production proxy alone: follows the control plane at `proxy.control_plane_url`
    /// with `service_token` (WARDEN_SERVICE_TOKEN), serves agents on `proxy.listen`.
    Proxy {
        /// Optional TOML file; WARDEN_ variables override it.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Applies the database migrations `database_url` needs and exits: an upgrade's
    /// first step (a control plane also migrates when it starts).
    Migrate {
        /// Optional TOML file; WARDEN_ variables override it.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Asks a running plane's readiness endpoint and succeeds on a 2xx answer within two
    /// seconds: a container's health check, as the image has no shell or curl.
    Probe {
        /// `control-plane` (the default) or `proxy`: that plane's `/readyz` on this
        /// machine, at the port its configuration listens on; or a URL to ask.
        target: Option<String>,
        /// Optional TOML file; WARDEN_ variables override it.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// The audit trail, read straight from the database `database_url` names.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// The proxy's usage batches set aside in its spool (the ledger refused them or
    /// failed on them repeatedly): list, replay to the control plane, or discard.
    Spool {
        #[command(subcommand)]
        command: SpoolCommand,
        /// Optional TOML file (`proxy.usage_spool_dir`, `proxy.control_plane_url`,
        /// `service_token`); WARDEN_ variables override it.
        #[arg(long, global = true)]
        config: Option<PathBuf>,
        /// The spool folder, instead of `proxy.usage_spool_dir` (`warden dev` uses
        /// `warden-data/usage-spool`).
        #[arg(long, global = true)]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum SpoolCommand {
    /// Lists the batches set aside: id, records, bytes.
    List,
    /// Posts batches to the control plane again; each acknowledged one leaves the folder
    /// (its records are counted once, whatever was counted before).
    Replay {
        /// Batch ids; every batch set aside without them.
        batch_ids: Vec<String>,
    },
    /// Deletes batches for good: their usage never reaches the ledger.
    Discard {
        /// Batch ids to delete (`--all` for every one).
        batch_ids: Vec<String>,
        /// Every batch set aside.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Verifies each tenant's hash chain and reports the first broken link; exits with
    /// failure when a chain is broken.
    Verify {
        /// Optional TOML file; WARDEN_ variables override it.
        #[arg(long)]
        config: Option<PathBuf>,
        /// One tenant's chain; every tenant's without it.
        #[arg(long)]
        tenant: Option<String>,
    },
}

/// jemalloc, for the reasons in [`warden_proxy::allocator`].
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    warden_proxy::allocator::configure();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Dev {
            data_dir,
            port,
            proxy_port,
        } => runtime(0).and_then(|rt| rt.block_on(run_dev(data_dir, port, proxy_port))),
        Command::ControlPlane { config } => {
            runtime(0).and_then(|rt| rt.block_on(run_control_plane(config)))
        }
        Command::Migrate { config } => runtime(1).and_then(|rt| rt.block_on(migrate(config))),
        Command::Probe { target, config } => {
            runtime(1).and_then(|rt| rt.block_on(probe(target, config)))
        }
        Command::Audit {
            command: AuditCommand::Verify { config, tenant },
        } => runtime(1).and_then(|rt| rt.block_on(verify_audit(config, tenant))),
        Command::Spool {
            command,
            config,
            dir,
        } => runtime(1).and_then(|rt| rt.block_on(spool(command, config, dir))),
        // Its configuration first: it sizes the runtime.
        Command::Proxy { config } => Config::load(config.as_deref())
            .map_err(|e| e.to_string())
            .and_then(|config| {
                runtime(config.proxy.worker_threads).and_then(|rt| rt.block_on(run_proxy(config)))
            }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("warden: {error}");
            ExitCode::FAILURE
        }
    }
}

/// A multi-threaded tokio runtime of `threads` workers; 0 = tokio's default (one per
/// core, or `TOKIO_WORKER_THREADS`).
fn runtime(threads: usize) -> Result<tokio::runtime::Runtime, String> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if threads > 0 {
        builder.worker_threads(threads);
    }
    builder
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

async fn run_dev(data_dir: PathBuf, port: u16, proxy_port: u16) -> Result<(), String> {
    std::fs::create_dir_all(&data_dir)
        .map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
    let mut config = Config::load(None).map_err(|e| e.to_string())?;
    config.listen = ([127, 0, 0, 1], port).into();
    config.database_url = Secret::new(format!("sqlite://{}", data_dir.join("warden.db").display()));
    config.log_format = LogFormat::Pretty;
    // Both planes run in this process, so they can share a token made up now.
    let service_token = config
        .service_token
        .get_or_insert_with(|| Secret::new(warden_shared::keys::generate_api_key()))
        .clone();
    let traces = Traces::start(&config, &[Plane::ControlPlane, Plane::Proxy])?;
    traces.init_logs(&config);
    let mut proxy = config.proxy.clone();
    let providers = config.providers.clone();
    let allow_private = config.outbound.allow_private.clone();
    let app = startup::build(config, Clock::system())
        .await
        .map_err(|e| e.to_string())?;
    proxy.listen = ([127, 0, 0, 1], proxy_port).into();
    proxy.control_plane_url = format!("http://{}", app.addr);
    // Unless configured, the usage spool lives with the rest of the data.
    if proxy.usage_spool_dir == warden_proxy::config::ProxyConfig::default().usage_spool_dir {
        proxy.usage_spool_dir = data_dir.join("usage-spool");
    }
    let proxy = warden_proxy::build(ProxySettings {
        proxy,
        providers,
        service_token,
        allow_private,
        clock: Clock::system(),
        tracer: traces.proxy_tracer(),
    })
    .await
    .map_err(|e| e.to_string())?;
    // Listening for Ctrl-C before the welcome says it stops us.
    let shutdown = startup::shutdown_signal();
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let stopped = |mut stopping: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    };
    let welcome = welcome_text(&app, &proxy, &data_dir);
    let proxy_ready = format!("http://{}/readyz", proxy.addr);
    let control_plane = tokio::spawn(app.serve(stopped(stopping.clone())));
    let proxy = tokio::spawn(proxy.serve(stopped(stopping)));
    // The welcome once the proxy has the control plane's state, so that the first
    // request a newcomer sends to either is served.
    wait_until_ready(&proxy_ready).await;
    print!("{welcome}");
    shutdown.await;
    let _ = stop.send(true);
    let (served, proxied) = tokio::join!(control_plane, proxy);
    served
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    proxied
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    traces.shut_down().await;
    println!("warden: stopped cleanly");
    Ok(())
}

/// `warden spool`: the batches set aside in the proxy's usage spool.
async fn spool(
    command: SpoolCommand,
    config: Option<PathBuf>,
    dir: Option<PathBuf>,
) -> Result<(), String> {
    use warden_proxy::SetAsideBatch;
    let config = Config::load(config.as_deref()).map_err(|e| e.to_string())?;
    let dir = dir.unwrap_or_else(|| config.proxy.usage_spool_dir.clone());
    let listed = SetAsideBatch::list(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let chosen = |ids: &[String], all: bool| -> Result<Vec<String>, String> {
        if all || ids.is_empty() {
            return Ok(listed.iter().map(|b| b.batch_id.clone()).collect());
        }
        match ids
            .iter()
            .find(|id| !listed.iter().any(|b| &b.batch_id == *id))
        {
            Some(missing) => Err(format!(
                "no batch {missing} is set aside in {}",
                dir.display()
            )),
            None => Ok(ids.to_vec()),
        }
    };
    match command {
        SpoolCommand::List => {
            println!("{} batch(es) set aside in {}", listed.len(), dir.display());
            for batch in &listed {
                let records = batch.records.map_or("?".to_owned(), |n| n.to_string());
                println!(
                    "{}\t{records} records\t{} bytes",
                    batch.batch_id, batch.bytes
                );
            }
            Ok(())
        }
        SpoolCommand::Discard { batch_ids, all } => {
            if batch_ids.is_empty() && !all {
                return Err("name the batches to discard, or pass --all".to_owned());
            }
            for batch_id in chosen(&batch_ids, all)? {
                SetAsideBatch::discard(&dir, &batch_id).map_err(|e| format!("{batch_id}: {e}"))?;
                println!("{batch_id}: discarded");
            }
            Ok(())
        }
        SpoolCommand::Replay { batch_ids } => {
            let token = config
                .service_token
                .as_ref()
                .ok_or("replay needs the service token (WARDEN_SERVICE_TOKEN)")?;
            let url = format!(
                "{}{}",
                config.proxy.control_plane_url.trim_end_matches('/'),
                warden_shared::wire::paths::USAGE_BATCHES
            );
            let client = reqwest::Client::new();
            let mut failed = 0;
            for batch_id in chosen(&batch_ids, false)? {
                let body =
                    SetAsideBatch::read(&dir, &batch_id).map_err(|e| format!("{batch_id}: {e}"))?;
                let sent = client
                    .post(&url)
                    .bearer_auth(token.expose())
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body)
                    .send()
                    .await;
                match sent {
                    Ok(response) if response.status().is_success() => {
                        #[derive(serde::Deserialize)]
                        struct Answer {
                            data: warden_shared::wire::BatchAck,
                        }
                        let ack = response
                            .json::<Answer>()
                            .await
                            .map_err(|e| format!("{batch_id}: an unreadable answer: {e}"))?
                            .data;
                        println!(
                            "{batch_id}: accepted {}, duplicates {}, dropped {}, rejected {}",
                            ack.accepted, ack.duplicates, ack.dropped, ack.rejected
                        );
                        SetAsideBatch::discard(&dir, &batch_id)
                            .map_err(|e| format!("{batch_id}: {e}"))?;
                    }
                    Ok(response) => {
                        failed += 1;
                        let status = response.status();
                        let text = response.text().await.unwrap_or_default();
                        println!("{batch_id}: not taken ({status}): {text}");
                    }
                    Err(error) => {
                        failed += 1;
                        println!("{batch_id}: cannot reach {url}: {error}");
                    }
                }
            }
            if failed > 0 {
                return Err(format!("{failed} batch(es) stay set aside"));
            }
            Ok(())
        }
    }
}

async fn migrate(config: Option<PathBuf>) -> Result<(), String> {
    let config = Config::load(config.as_deref()).map_err(|e| e.to_string())?;
    let db = warden_control_plane::db::Db::connect(config.database_url.expose(), 2)
        .await
        .map_err(|e| e.to_string())?;
    db.migrate().await.map_err(|e| e.to_string())?;
    println!("warden: the database is migrated");
    Ok(())
}

async fn probe(target: Option<String>, config: Option<PathBuf>) -> Result<(), String> {
    let url = match target.as_deref() {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => url.to_owned(),
        plane => {
            let config = Config::load(config.as_deref()).map_err(|e| e.to_string())?;
            let listen = match plane {
                None | Some("control-plane") => config.listen,
                Some("proxy") => config.proxy.listen,
                Some(other) => {
                    return Err(format!(
                        "probe what? `{other}` is neither control-plane, proxy nor a URL"
                    ))
                }
            };
            // A plane listening on every address answers on the loopback one.
            let host = match listen.ip() {
                ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_owned(),
                ip if ip.is_unspecified() => "[::1]".to_owned(),
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
                ip => ip.to_string(),
            };
            format!("http://{host}:{}/readyz", listen.port())
        }
    };
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(2))
        .build()
        .map_err(|e| e.to_string())?;
    let response = client
        .get(&url)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    match response.status().is_success() {
        true => Ok(()),
        false => Err(format!("{url}: {}", response.status())),
    }
}

async fn verify_audit(config: Option<PathBuf>, tenant: Option<String>) -> Result<(), String> {
    let config = Config::load(config.as_deref()).map_err(|e| e.to_string())?;
    let db = warden_control_plane::db::Db::connect(config.database_url.expose(), 2)
        .await
        .map_err(|e| e.to_string())?;
    let tenants = match tenant {
        Some(tenant) => vec![tenant],
        None => sqlx::query_scalar("SELECT id FROM tenants ORDER BY id")
            .fetch_all(db.pool())
            .await
            .map_err(|e| e.to_string())?,
    };
    let mut broken = 0;
    for tenant in &tenants {
        let found = chain::verify(db.pool(), tenant)
            .await
            .map_err(|e| e.to_string())?;
        match (&found.broken, &found.head) {
            (None, Some(head)) => println!(
                "{tenant}: intact, {} events, head {} {}",
                found.events_checked, head.seq, head.hash
            ),
            (None, None) => println!("{tenant}: no events"),
            (Some(link), _) => {
                broken += 1;
                println!(
                    "{tenant}: BROKEN at seq {} ({}): {} ({} events intact before it)",
                    link.seq,
                    link.event_id.as_deref().unwrap_or("no event"),
                    link.reason,
                    found.events_checked
                );
            }
        }
    }
    if broken > 0 {
        return Err(format!("{broken} of {} chains are broken", tenants.len()));
    }
    Ok(())
}

async fn run_proxy(config: Config) -> Result<(), String> {
    let traces = Traces::start(&config, &[Plane::Proxy])?;
    traces.init_logs(&config);
    let service_token = config
        .service_token
        .clone()
        .ok_or("the proxy needs the control plane's service token (WARDEN_SERVICE_TOKEN)")?;
    let proxy = warden_proxy::build(ProxySettings {
        proxy: config.proxy,
        providers: config.providers,
        service_token,
        allow_private: config.outbound.allow_private,
        clock: Clock::system(),
        tracer: traces.proxy_tracer(),
    })
    .await
    .map_err(|e| e.to_string())?;
    let shutdown = startup::shutdown_signal();
    tracing::info!(addr = %proxy.addr, "proxy listening");
    let served = proxy.serve(shutdown).await.map_err(|e| e.to_string());
    traces.shut_down().await;
    served
}

async fn run_control_plane(file: Option<PathBuf>) -> Result<(), String> {
    let config = Config::load(file.as_deref()).map_err(|e| e.to_string())?;
    let traces = Traces::start(&config, &[Plane::ControlPlane])?;
    traces.init_logs(&config);
    let app = startup::build(config, Clock::system())
        .await
        .map_err(|e| e.to_string())?;
    let shutdown = startup::shutdown_signal();
    tracing::info!(addr = %app.addr, "control plane listening");
    if let BootstrapOutcome::GeneratedKey(key) = &app.bootstrap {
        // Printed once, on the first start against an empty database, and never stored.
        println!("platform-admin key (shown once, store it now): {key}");
    }
    let served = app.serve(shutdown).await.map_err(|e| e.to_string());
    traces.shut_down().await;
    served
}

/// Waits (up to 30 s) until `url` answers 2xx; a plane that is slower to be ready is
/// still welcomed, and answers for itself.
async fn wait_until_ready(url: &str) {
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let ready = client.get(url).send().await;
        if ready.is_ok_and(|answer| answer.status().is_success()) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn welcome_text(app: &Application, proxy: &ProxyApp, data_dir: &std::path::Path) -> String {
    use std::fmt::Write;
    let mut text = String::new();
    let base = format!("http://{}", app.addr);
    let proxy_base = format!("http://{}", proxy.addr);
    text.push('\n');
    let _ = writeln!(
        text,
        "  Warden is running (development mode, SQLite in {})",
        data_dir.display()
    );
    text.push('\n');
    let _ = writeln!(
        text,
        "  Console          {base}/console   (sign up, or sign in)"
    );
    let _ = writeln!(text, "  Management API   {base}/api/v1");
    let _ = writeln!(
        text,
        "  API reference    {base}/docs   (the OpenAPI document: {base}/api/v1/openapi.json)"
    );
    let _ = writeln!(text, "  Health           {base}/healthz  {base}/readyz");
    let _ = writeln!(text, "  Metrics          {base}/metrics");
    let _ = writeln!(
        text,
        "  Proxy (OpenAI)   {proxy_base}/v1   (metrics: {proxy_base}/metrics)"
    );
    let _ = writeln!(
        text,
        "  Proxy (Claude)   {proxy_base}   (the Anthropic SDKs' base URL: no /v1)"
    );
    text.push('\n');
    match &app.bootstrap {
        BootstrapOutcome::GeneratedKey(key) => {
            let _ = writeln!(text, "  Platform-admin key (shown once, store it now):");
            let _ = writeln!(text, "    {key}");
        }
        BootstrapOutcome::ConfiguredKeyInstalled => {
            let _ = writeln!(
                text,
                "  Platform-admin key: the one in WARDEN_BOOTSTRAP_PLATFORM_KEY"
            );
        }
        BootstrapOutcome::AlreadyBootstrapped => {
            let _ = writeln!(
                text,
                "  Platform-admin key: printed on this data folder's first start."
            );
            let _ = writeln!(text, "  (Delete {} to start afresh.)", data_dir.display());
        }
    }
    text.push('\n');
    let _ = writeln!(
        text,
        "  Try:  curl -s -X POST {base}/api/v1/auth/signup -H 'content-type: application/json' \\"
    );
    let _ = writeln!(
        text,
        "          -d '{{\"email\":\"you@example.com\",\"password\":\"a-long-password\",\"company_name\":\"Acme\"}}'");
    text.push('\n');
    let _ = writeln!(text, "  Ctrl-C stops Warden.");
    text.push('\n');
    text
}
