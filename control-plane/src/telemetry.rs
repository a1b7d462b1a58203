//! Structured logging (JSON lines in production, readable lines for people) and, when
//! an OTLP endpoint is configured (`warden_proxy::otel::export`), traces: each API
//! request a SERVER span named by its route, each background round a span, and each
//! database query inside them a CLIENT child span. [`Traces`] holds the tracer providers
//! of the planes a process runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use axum::http::Request;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Span as _, SpanKind, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};
use warden_proxy::otel::{Plane, Tracer};

use crate::config::{Config, LogFormat};

/// The tracers of the planes this process runs, when tracing is on (the `tracing`
/// settings, or the standard `OTEL_` variables): the proxy's own, the control plane's
/// through the SDK.
pub struct Traces {
    proxy: Option<Tracer>,
    control_plane: Option<SdkTracerProvider>,
}

impl Traces {
    pub fn start(config: &Config, planes: &[Plane]) -> Result<Traces, String> {
        let mut traces = Traces {
            proxy: None,
            control_plane: None,
        };
        let Some(export) = config.trace_export()? else {
            return Ok(traces);
        };
        if planes.contains(&Plane::Proxy) {
            traces.proxy = Some(export.tracer()?);
        }
        if planes.contains(&Plane::ControlPlane) {
            traces.control_plane = Some(export.provider()?);
        }
        Ok(traces)
    }

    /// The proxy's tracer, when this process runs the proxy with tracing on.
    pub fn proxy_tracer(&self) -> Option<Tracer> {
        self.proxy.clone()
    }

    /// Logs, and the control plane's spans when this process runs it with tracing on.
    pub fn init_logs(&self, config: &Config) {
        init(
            config.log_format,
            &config.log_level,
            self.control_plane.as_ref(),
            config.database_url.expose(),
        );
    }

    /// Sends what is still buffered, at exit (blocking: on a thread of its own).
    pub async fn shut_down(self) {
        if let Some(tracer) = self.proxy {
            let _ =
                tokio::task::spawn_blocking(move || tracer.flush(Duration::from_secs(10))).await;
        }
        if let Some(provider) = self.control_plane {
            let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        }
    }
}

/// Installs the global subscriber: logs at `level` (`log_level`: `error`, `warn`, `info`,
/// `debug`, or any `tracing` filter; `RUST_LOG`, when set, overrides it), and spans to
/// `traces` when tracing is on, queries named for the database at `database_url`.
pub fn init(
    format: LogFormat,
    level: &str,
    traces: Option<&SdkTracerProvider>,
    database_url: &str,
) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::try_new(format!("{level},sqlx=warn,tower_http=warn"))
            .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn"))
    });
    // Colours only for a terminal: a file or a pipe gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let logs = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_ansi(ansi)
            .boxed(),
        LogFormat::Pretty => tracing_subscriber::fmt::layer()
            .compact()
            .with_ansi(ansi)
            .boxed(),
    };
    let registry = tracing_subscriber::registry().with(logs.with_filter(filter));
    let Some(provider) = traces else {
        let _ = registry.try_init();
        return;
    };
    let scope = InstrumentationScope::builder("warden-control-plane")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let tracer = provider.tracer_with_scope(scope);
    // Warden's own spans only: requests and rounds (their log lines become span events).
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer.clone())
        // The conventions' attributes only: no source locations, threads or busy times.
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(Targets::new().with_target("warden_control_plane", Level::INFO));
    let queries = QuerySpans {
        tracer,
        system: if database_url.starts_with("postgres") {
            "postgresql"
        } else {
            "sqlite"
        },
    }
    .with_filter(Targets::new().with_target("sqlx::query", Level::TRACE));
    if registry.with(spans).with(queries).try_init().is_ok() {
        EXPORTING.store(true, Ordering::Relaxed);
    }
}

/// True once [`init`] installed the trace export.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// The span of one API request: its id and (recorded by `auth::Authorized` once the
/// credential is known) its tenant, on every log line of the request. When traces are
/// exported it is also a SERVER span in the HTTP conventions, under the caller's
/// `traceparent` when it sent one, named for its route once matched
/// (`api::http_metrics`); the logs do not carry those fields otherwise.
pub fn request_span<B>(request: &Request<B>, request_id: &str) -> tracing::Span {
    if !EXPORTING.load(Ordering::Relaxed) {
        return tracing::info_span!(
            "request",
            request_id = %request_id,
            tenant_id = tracing::field::Empty,
        );
    }
    let span = tracing::info_span!(
        "request",
        request_id = %request_id,
        tenant_id = tracing::field::Empty,
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %request.method(),
        url.path = %request.uri().path(),
        http.route = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
    );
    let parent = TraceContextPropagator::new()
        .extract(&opentelemetry_http::HeaderExtractor(request.headers()));
    if parent.has_active_span() {
        let _ = span.set_parent(parent);
    }
    span
}

/// Turns sqlx's record of each finished query (`sqlx::query` events: the statement, its
/// rows and how long it took) into a CLIENT span under the span that ran it, started
/// back then. A query outside any span (none of a request or round) makes none; so do
/// SQLite's, which sqlx runs on a thread of its own, outside the caller's span.
struct QuerySpans {
    tracer: SdkTracer,
    system: &'static str,
}

impl<S: Subscriber> Layer<S> for QuerySpans {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        let parent = opentelemetry::Context::current();
        if !parent.has_active_span() {
            return;
        }
        let mut query = QueryFields::default();
        event.record(&mut query);
        let ended = SystemTime::now();
        let took = Duration::try_from_secs_f64(query.elapsed_secs).unwrap_or_default();
        let text = if query.statement.trim().is_empty() {
            query.summary.trim_end_matches(" …").to_owned()
        } else {
            query.statement.trim().to_owned()
        };
        let name = query.summary.trim_end_matches(" …").to_owned();
        let mut attributes = vec![
            KeyValue::new("db.system.name", self.system),
            // Static SQL with bound parameters: never a value.
            KeyValue::new("db.query.text", text),
            KeyValue::new("db.response.returned_rows", query.rows_returned),
        ];
        if query.rows_affected > 0 {
            attributes.push(KeyValue::new(
                "warden.db.rows_affected",
                query.rows_affected,
            ));
        }
        let mut span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_start_time(ended.checked_sub(took).unwrap_or(ended))
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        span.end_with_timestamp(ended);
    }
}

/// The fields of a `sqlx::query` event.
#[derive(Default)]
struct QueryFields {
    summary: String,
    statement: String,
    rows_returned: i64,
    rows_affected: i64,
    elapsed_secs: f64,
}

impl Visit for QueryFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "summary" => value.clone_into(&mut self.summary),
            "db.statement" => value.clone_into(&mut self.statement),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        let value = i64::try_from(value).unwrap_or(i64::MAX);
        match field.name() {
            "rows_returned" => self.rows_returned = value,
            "rows_affected" => self.rows_affected = value,
            _ => {}
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if field.name() == "elapsed_secs" {
            self.elapsed_secs = value;
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}
