//! Builds the control plane exactly as production runs it, for `main`, tests and benches.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Request};
use axum::response::IntoResponse;
use axum::Router;
use tokio::net::TcpListener;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::TraceLayer;
use warden_shared::ids::{new_id, IdKind};

use crate::bootstrap::{self, BootstrapOutcome};
use crate::changes::chain::VerifiedLinks;
use crate::config::Config;
use crate::db::Db;
use crate::error::ApiError;
use crate::metrics::HttpMetrics;
use crate::notifications::metrics::NotificationMetrics;
use crate::notifications::send::Sender;
use crate::notifications::worker::Worker;
use crate::outbound::Guard;
use crate::proxy_state::confirm::Confirmations;
use crate::proxy_state::Publisher;
use crate::state::AppState;
use crate::throttle::Throttle;
use warden_shared::clock::Clock;

/// A bound, migrated control plane, ready to serve.
pub struct Application {
    pub addr: SocketAddr,
    pub state: AppState,
    /// What bootstrap did about the platform-admin key (print it when newly generated).
    pub bootstrap: BootstrapOutcome,
    listener: TcpListener,
    router: Router,
    stop: tokio::sync::watch::Sender<bool>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Db(#[from] crate::db::DbSetupError),
    #[error("bootstrap failed: {0}")]
    Bootstrap(String),
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the proxy state publisher: {0}")]
    Publisher(#[source] sqlx::Error),
    #[error("metrics registry: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("invalid configuration: {0}")]
    Outbound(String),
    #[error("invalid provider configuration: {0}")]
    Providers(String),
    #[error("cannot chain the audit trail's earlier events: {0}")]
    AuditChain(#[source] sqlx::Error),
}

/// Connects the database, applies migrations, bootstraps the platform-admin key and binds
/// the listener (port 0 picks a free port). Serving starts with [`Application::serve`].
pub async fn build(config: Config, clock: Clock) -> Result<Application, StartupError> {
    let providers = Arc::new(
        config
            .providers
            .catalog()
            .map_err(StartupError::Providers)?,
    );
    let db = Db::connect(
        config.database_url.expose(),
        config.database_max_connections,
    )
    .await?;
    db.migrate().await?;
    // Events written before the audit trail was a hash chain join it, once.
    let chained = crate::changes::chain::chain_unchained(&db)
        .await
        .map_err(StartupError::AuditChain)?;
    if chained > 0 {
        tracing::info!(
            chained,
            "audit events from before the hash chain were chained"
        );
    }
    let bootstrap =
        bootstrap::ensure_platform_admin(&db, &clock, config.bootstrap_platform_key.as_ref())
            .await
            .map_err(StartupError::Bootstrap)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartupError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartupError::Bind {
        addr: config.listen,
        source,
    })?;
    let service_token = match &config.service_token {
        Some(token) => token.expose().to_owned(),
        None => {
            // Only in-process services (the proxy under `warden dev`) can learn a
            // generated token; a separate proxy needs WARDEN_SERVICE_TOKEN on both sides.
            tracing::info!("no service_token configured; internal endpoints use a generated one");
            warden_shared::keys::generate_api_key()
        }
    };
    let publisher = Publisher::start(db.clone(), clock.clone())
        .await
        .map_err(StartupError::Publisher)?;
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let confirmations = Confirmations::new(
        db.clone(),
        std::time::Duration::from_millis(config.enforcement_wait_ms),
    );
    let metrics = Arc::new(HttpMetrics::new()?);
    let guard = Guard::new(&config.outbound.allow_private).map_err(StartupError::Outbound)?;
    let smtp_roots = match &config.notifications.smtp_ca_file {
        Some(path) => Some(std::fs::read(path).map_err(|error| {
            StartupError::Outbound(format!(
                "notifications.smtp_ca_file {}: {error}",
                path.display()
            ))
        })?),
        None => None,
    };
    let sender = Sender::new(
        guard,
        std::time::Duration::from_secs(config.notifications.attempt_timeout_secs.max(1)),
        smtp_roots,
    )
    .map_err(StartupError::Outbound)?;
    let notifications = if config.notifications.delivery_interval_ms > 0 {
        Some(Worker::new(
            db.clone(),
            clock.clone(),
            sender.clone(),
            std::time::Duration::from_secs(config.notifications.retry_for_secs),
            confirmations.replica_id().to_owned(),
            Arc::new(NotificationMetrics::register(metrics.registry())?),
        ))
    } else {
        None
    };
    let verified_links = Arc::new(VerifiedLinks::default());
    crate::jobs::start(
        &config,
        &crate::jobs::Context {
            db: db.clone(),
            clock: clock.clone(),
            replica_id: confirmations.replica_id().to_owned(),
            stopping: stopping.clone(),
            verified_links: verified_links.clone(),
            metrics: metrics.clone(),
        },
        confirmations.clone(),
        notifications,
    );
    let state = AppState {
        notification_sender: sender,
        publisher,
        confirmations,
        stopping,
        service_token_hash: Arc::from(warden_shared::keys::hash_credential(&service_token)),
        db,
        clock,
        throttle: Arc::new(Throttle::new(config.auth.throttle_window_secs)),
        metrics,
        health_cache: Arc::default(),
        verified_links,
        providers,
        public_url: Arc::from(config.public_url(addr)),
        config: Arc::new(config),
    };
    let router = app_router(state.clone());
    Ok(Application {
        addr,
        state,
        bootstrap,
        listener,
        router,
        stop,
    })
}

impl Application {
    /// Serves until `shutdown` resolves, then finishes in-flight requests.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let service = self
            .router
            .into_make_service_with_connect_info::<SocketAddr>();
        let stop = self.stop;
        axum::serve(self.listener, service)
            .with_graceful_shutdown(async move {
                shutdown.await;
                // Streams to proxies would otherwise keep graceful shutdown waiting.
                let _ = stop.send(true);
            })
            .await
    }
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

fn app_router(state: AppState) -> Router {
    let (router, _openapi) = crate::api::router();
    router
        .merge(crate::console::router())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::api::read_your_writes::confirm_enforcement,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::api::http_metrics::track,
        ))
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::internal("a handler panicked").into_response()
        }))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &Request<_>| {
                let request_id = request
                    .extensions()
                    .get::<RequestId>()
                    .and_then(|id| id.header_value().to_str().ok())
                    .unwrap_or_default();
                crate::telemetry::request_span(request, request_id)
            }),
        )
        .layer(SetRequestIdLayer::new(REQUEST_ID, UlidRequestId))
        .with_state(state)
}

/// Request ids are ULIDs, unless the client (or a load balancer) already sent one.
#[derive(Clone, Copy)]
struct UlidRequestId;

impl MakeRequestId for UlidRequestId {
    fn make_request_id<B>(&mut self, _request: &Request<B>) -> Option<RequestId> {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
        let id = new_id(IdKind::AuditEvent, millis);
        let id = id.trim_start_matches("evt_");
        id.parse().ok().map(RequestId::new)
    }
}

/// Listens for Ctrl-C (SIGINT) and SIGTERM from the call on; the future resolves on
/// either. Call it before announcing that the app is up: a signal that arrives before
/// its handler is installed kills the process outright (seen as `warden dev` dying of
/// SIGINT when interrupted right after its welcome text on a loaded machine).
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, Signal, SignalKind};
        let interrupt = signal(SignalKind::interrupt()).ok();
        let terminate = signal(SignalKind::terminate()).ok();
        let received = |signal: Option<Signal>| async move {
            match signal {
                Some(mut signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        async move {
            tokio::select! {
                () = received(interrupt) => {},
                () = received(terminate) => {},
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
