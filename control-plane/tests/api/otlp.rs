//! An OTLP/HTTP receiver for the trace tests: `POST /v1/traces`, decoded with the
//! official protobuf definitions (`opentelemetry-proto`), as a collector receives them.
//! Like a tracing vendor's endpoint it takes only exports carrying its key (in
//! [`KEY_HEADER`]): the tests' exporters are configured with it as operators configure
//! theirs, in the settings file's headers or `OTEL_EXPORTER_OTLP_HEADERS`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::AnyValue;
use prost::Message;
use warden_proxy::otel::{Tracer, TracingConfig};
use warden_shared::secret::Secret;

use crate::proxy::eventually;

/// One exported span, flattened with its resource's service name.
#[derive(Clone)]
pub struct ReceivedSpan {
    pub service: String,
    pub scope: String,
    pub name: String,
    /// `SERVER`, `CLIENT`, `INTERNAL`, ...
    pub kind: &'static str,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub attributes: BTreeMap<String, Attr>,
    /// `UNSET`, `OK`, `ERROR`.
    pub status: &'static str,
    pub status_message: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// An attribute's value.
#[derive(Clone, PartialEq)]
pub enum Attr {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Strs(Vec<String>),
}

impl fmt::Debug for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Str(s) => write!(f, "{s:?}"),
            Attr::Int(n) => write!(f, "{n}"),
            Attr::Float(x) => write!(f, "{x}"),
            Attr::Bool(b) => write!(f, "{b}"),
            Attr::Strs(list) => write!(f, "{list:?}"),
        }
    }
}

impl fmt::Debug for ReceivedSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?} [{}] {} parent={} {:?} {:?}",
            self.kind,
            self.name,
            self.service,
            self.span_id,
            self.parent_span_id,
            self.status,
            self.attributes
        )
    }
}

impl ReceivedSpan {
    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attributes.get(name)
    }

    pub fn str(&self, name: &str) -> &str {
        match self.attributes.get(name) {
            Some(Attr::Str(s)) => s,
            other => panic!("{name} is not a string on {self:?}: {other:?}"),
        }
    }

    pub fn int(&self, name: &str) -> i64 {
        match self.attributes.get(name) {
            Some(Attr::Int(n)) => *n,
            other => panic!("{name} is not an integer on {self:?}: {other:?}"),
        }
    }

    pub fn float(&self, name: &str) -> f64 {
        match self.attributes.get(name) {
            Some(Attr::Float(x)) => *x,
            other => panic!("{name} is not a double on {self:?}: {other:?}"),
        }
    }
}

/// The header a collector's key comes in.
pub const KEY_HEADER: &str = "x-collector-key";

#[derive(Clone, Default)]
struct Received {
    key: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    content_types: Arc<Mutex<Vec<String>>>,
    /// Exports refused for want of the key.
    refused: Arc<AtomicUsize>,
}

pub struct Collector {
    /// The base URL to configure as the OTLP endpoint (`/v1/traces` is appended).
    pub endpoint: String,
    /// The key exports must carry in [`KEY_HEADER`].
    pub key: String,
    received: Received,
}

impl Collector {
    pub async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let key = format!("key-{}", rand::random::<u64>());
        let received = Received {
            key: key.clone(),
            ..Received::default()
        };
        #[allow(clippy::disallowed_methods)] // A test's receiver, not an API route.
        let router = Router::new()
            .route("/v1/traces", post(export))
            .with_state(received.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });
        Collector {
            endpoint: format!("http://{addr}"),
            key,
            received,
        }
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        let refused = self.received.refused.load(Ordering::Relaxed);
        assert_eq!(refused, 0, "exports came without the collector's key");
        self.received.spans.lock().unwrap().clone()
    }

    /// `OTEL_EXPORTER_OTLP_HEADERS` for this collector.
    pub fn headers_variable(&self) -> String {
        format!("{KEY_HEADER}={}", self.key)
    }

    /// The content types exports came with.
    pub fn content_types(&self) -> Vec<String> {
        self.received.content_types.lock().unwrap().clone()
    }

    /// Waits (up to 20 s) for a span `found` accepts, and returns it.
    pub async fn span(&self, what: &str, found: impl Fn(&ReceivedSpan) -> bool) -> ReceivedSpan {
        let seen = eventually(Duration::from_secs(20), || {
            let hit = self.spans().into_iter().find(|span| found(span));
            async move { hit }
        })
        .await;
        assert!(found(&seen), "{what}");
        seen
    }

    /// The proxy's tracer exporting to this receiver, as `[tracing] endpoint` makes it.
    pub fn tracer(&self) -> Tracer {
        self.tracer_with_key(&self.key)
    }

    /// The proxy's tracer sending `key`: this receiver refuses its exports unless it is
    /// the receiver's own.
    pub fn tracer_with_key(&self, key: &str) -> Tracer {
        tracer_from(self.settings(key))
    }

    /// The proxy's tracer that also exports prompts (`tracing.capture_content`).
    pub fn tracer_with_content(&self) -> Tracer {
        tracer_from(TracingConfig {
            capture_content: Some(true),
            ..self.settings(&self.key)
        })
    }

    /// `[tracing]` pointing at this receiver with `key`.
    fn settings(&self, key: &str) -> TracingConfig {
        TracingConfig {
            endpoint: Some(self.endpoint.clone()),
            headers: [(KEY_HEADER.to_owned(), Secret::new(key))].into(),
            ..TracingConfig::default()
        }
    }

    /// Exports what `tracer` holds until trace `trace_id` has `count` spans: flushed again
    /// on each look, since a request's span ends only after its answer reached the client.
    pub async fn flushed(
        &self,
        tracer: &Tracer,
        trace_id: &str,
        count: usize,
    ) -> Vec<ReceivedSpan> {
        let spans = eventually(Duration::from_secs(10), || async {
            flush(tracer).await;
            let spans = self.trace(trace_id);
            (spans.len() >= count).then_some(spans)
        })
        .await;
        assert_eq!(spans.len(), count, "{spans:#?}");
        spans
    }

    /// The spans of trace `trace_id`.
    pub fn trace(&self, trace_id: &str) -> Vec<ReceivedSpan> {
        self.spans()
            .into_iter()
            .filter(|span| span.trace_id == trace_id)
            .collect()
    }
}

/// Exports what `tracer` holds and waits for the exporting thread to have sent it.
pub async fn flush(tracer: &Tracer) {
    let tracer = tracer.clone();
    let flushed = tokio::task::spawn_blocking(move || tracer.flush(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(flushed, "the exporting thread took the spans");
}

fn tracer_from(settings: TracingConfig) -> Tracer {
    let export = settings.resolve(|_| None).unwrap().unwrap();
    export.tracer().unwrap()
}

async fn export(State(received): State<Received>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let key = headers.get(KEY_HEADER).map(|v| v.as_bytes());
    if key != Some(received.key.as_bytes()) {
        received.refused.fetch_add(1, Ordering::Relaxed);
        return StatusCode::UNAUTHORIZED;
    }
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    received.content_types.lock().unwrap().push(content_type);
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut spans = received.spans.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.as_ref())
            .map(|v| match attr(v) {
                Attr::Str(s) => s,
                other => format!("{other:?}"),
            })
            .unwrap_or_default();
        for scope in resource.scope_spans {
            let scope_name = scope.scope.map(|s| s.name).unwrap_or_default();
            for span in scope.spans {
                let status = span.status.unwrap_or_default();
                spans.push(ReceivedSpan {
                    service: service.clone(),
                    scope: scope_name.clone(),
                    name: span.name,
                    kind: match span.kind {
                        1 => "INTERNAL",
                        2 => "SERVER",
                        3 => "CLIENT",
                        4 => "PRODUCER",
                        5 => "CONSUMER",
                        _ => "UNSPECIFIED",
                    },
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .into_iter()
                        .filter_map(|kv| Some((kv.key, attr(&kv.value?))))
                        .collect(),
                    status: match status.code {
                        1 => "OK",
                        2 => "ERROR",
                        _ => "UNSET",
                    },
                    status_message: status.message,
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                });
            }
        }
    }
    StatusCode::OK
}

fn attr(value: &AnyValue) -> Attr {
    match &value.value {
        Some(Any::StringValue(s)) => Attr::Str(s.clone()),
        Some(Any::IntValue(n)) => Attr::Int(*n),
        Some(Any::DoubleValue(x)) => Attr::Float(*x),
        Some(Any::BoolValue(b)) => Attr::Bool(*b),
        Some(Any::ArrayValue(list)) => Attr::Strs(
            list.values
                .iter()
                .map(|v| match attr(v) {
                    Attr::Str(s) => s,
                    other => format!("{other:?}"),
                })
                .collect(),
        ),
        other => Attr::Str(format!("{other:?}")),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
