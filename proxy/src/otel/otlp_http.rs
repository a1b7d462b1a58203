//! The OTLP/HTTP exporters. `http/protobuf`: each batch (the proxy's spans, encoded by
//! its span queue, or the SDK's spans from the control plane's batch processor, encoded
//! here) is written by [`super::protobuf`] and posted to the collector on the exporting
//! thread, with a blocking client (a connection kept alive between batches).
//! `http/json`, a debugging format: the proxy's batches are decoded and written as
//! JSON; the control plane's go through the reference exporter.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::InstrumentationScope;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use prost::Message;
use reqwest_mcp::blocking::{Body, Client};

use super::batch::Sink;
use super::buffers::Buffers;
use super::priority;
use super::protobuf::{encode_request, frame_spans, EncodedResource};

pub struct ProtobufExporter {
    client: Client,
    url: String,
    headers: HeaderMap,
    resource: EncodedResource,
    /// The last request's size: the next one's buffer starts that large.
    last_size: AtomicUsize,
    shut_down: AtomicBool,
}

impl fmt::Debug for ProtobufExporter {
    /// The headers may hold a vendor's API key: not shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtobufExporter")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl ProtobufExporter {
    /// An exporter posting to `url` with `headers`, each post given `timeout`.
    pub fn new(
        url: &str,
        headers: &[(String, String)],
        timeout: Duration,
    ) -> Result<ProtobufExporter, String> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            let name = HeaderName::try_from(name.as_str())
                .map_err(|_| format!("tracing: `{name}` is not a header name"))?;
            let value = HeaderValue::try_from(value.as_str())
                .map_err(|_| format!("tracing: the value of header `{name}` is not valid"))?;
            map.insert(name, value);
        }
        map.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        // A blocking client owns a runtime of its own, which may be neither built nor
        // dropped on an async runtime's thread: it is built on a thread of its own, and
        // lives on the batch processor's. Its runtime's thread, which posts, starts
        // with the lower priority of the thread that builds it.
        let client = std::thread::spawn(move || {
            priority::yield_to_requests();
            Client::builder().timeout(timeout).build()
        })
        .join()
        .map_err(|_| "tracing: building the HTTP client panicked".to_owned())?
        .map_err(|error| format!("tracing: {error}"))?;
        Ok(ProtobufExporter {
            client,
            url: url.to_owned(),
            headers: map,
            resource: EncodedResource::default(),
            last_size: AtomicUsize::new(0),
            shut_down: AtomicBool::new(false),
        })
    }

    /// A buffer for the next request: as large as the last one was.
    fn buffer(&self) -> Vec<u8> {
        Vec::with_capacity(self.last_size.load(Ordering::Relaxed))
    }

    fn post(&self, body: Vec<u8>) -> Result<(), String> {
        self.last_size.store(body.len(), Ordering::Relaxed);
        self.post_as(body.into(), None)
    }

    /// Posts `body`, of `content_type` when it is not protobuf.
    fn post_as(&self, body: Body, content_type: Option<&'static str>) -> Result<(), String> {
        let mut headers = self.headers.clone();
        if let Some(content_type) = content_type {
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(content_type),
            );
        }
        let response = self
            .client
            .post(&self.url)
            .headers(headers)
            .body(body)
            .send()
            .map_err(|error| format!("OTLP export to {}: {}", self.url, error.without_url()))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        Err(format!(
            "OTLP export to {}: the collector answered {status}",
            self.url
        ))
    }

    /// The proxy's exporter: its spans, of `scope`, under `resource`, posted as
    /// `format`.
    pub fn for_records(
        mut self,
        resource: &Resource,
        scope: InstrumentationScope,
        format: RecordFormat,
    ) -> RecordExporter {
        self.resource = EncodedResource::new(resource);
        RecordExporter {
            exporter: self,
            scope,
            format,
            bodies: Buffers::new(2),
        }
    }
}

/// How the proxy's spans are posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordFormat {
    /// `http/protobuf`.
    Protobuf,
    /// `http/json`, a debugging format: the protobuf request decoded into the
    /// generated messages and written as OTLP's JSON, as the reference exporter writes
    /// it (hex ids, the enums as numbers).
    Json,
}

/// The proxy's spans, encoded on the request threads, posted as OTLP/HTTP.
#[derive(Debug)]
pub struct RecordExporter {
    exporter: ProtobufExporter,
    scope: InstrumentationScope,
    format: RecordFormat,
    /// The requests' bodies, kept for the next ones (`Buffers`: a batch's megabytes
    /// written into pages already there).
    bodies: Buffers,
}

impl RecordExporter {
    /// The request's body: the spans framed under the resource and scope.
    fn body(&self, parts: &[&[u8]]) -> Result<(Vec<u8>, Option<&'static str>), String> {
        let exporter = &self.exporter;
        let mut body = self.bodies.take(exporter.last_size.load(Ordering::Relaxed));
        frame_spans(&mut body, &exporter.resource, &self.scope, parts);
        exporter.last_size.store(body.len(), Ordering::Relaxed);
        // A burst's larger bodies are not kept once requests are smaller again.
        self.bodies.trim(2 * body.len());
        if self.format == RecordFormat::Protobuf {
            return Ok((body, None));
        }
        let request = ExportTraceServiceRequest::decode(body.as_slice());
        self.bodies.give(body);
        let request =
            request.map_err(|error| format!("OTLP/JSON: the spans do not decode: {error}"))?;
        let json = serde_json::to_vec(&request)
            .map_err(|error| format!("OTLP/JSON: the spans do not serialize: {error}"))?;
        Ok((json, Some("application/json")))
    }
}

impl Sink for RecordExporter {
    fn export(&mut self, parts: &[&[u8]], _count: usize) -> Result<(), String> {
        let (body, content_type) = self.body(parts)?;
        // The client drops the body once it is sent: it comes back to `bodies`.
        self.exporter
            .post_as(self.bodies.lend(body).into(), content_type)
    }
}

impl SpanExporter for ProtobufExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        if self.shut_down.load(Ordering::Relaxed) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        if batch.is_empty() {
            return Ok(());
        }
        let mut body = self.buffer();
        encode_request(&mut body, &self.resource, &batch);
        drop(batch);
        self.post(body).map_err(OTelSdkError::InternalFailure)
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.shut_down.store(true, Ordering::Relaxed);
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = EncodedResource::new(resource);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use opentelemetry::trace::{SpanId, SpanKind, TraceId};
    use opentelemetry::InstrumentationScope;
    use opentelemetry_sdk::Resource;

    use super::super::protobuf::encode_span_field;
    use super::super::record::SpanRecord;
    use super::*;

    /// The proxy's `http/json` body is OTLP's JSON: ids in hex, fields in camel case.
    #[test]
    fn json_batches_are_otlp_json() {
        let mut record = SpanRecord::new(
            TraceId::from(0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c),
            SpanId::from(0x00f0_67aa_0ba9_02b7),
            SpanKind::Client,
            SystemTime::now(),
        );
        record.name(&["chat", " ", "gpt-4o"]);
        record.str("gen_ai.request.model", "gpt-4o");
        let (mut spans, mut scratch) = (Vec::new(), Vec::new());
        encode_span_field(&mut spans, &mut scratch, &record);
        // As `TracingConfig::tracer` does before building the client.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let exporter =
            ProtobufExporter::new("http://127.0.0.1:9/v1/traces", &[], Duration::from_secs(1))
                .unwrap()
                .for_records(
                    &Resource::builder()
                        .with_service_name("warden-proxy")
                        .build(),
                    InstrumentationScope::builder("warden-proxy").build(),
                    RecordFormat::Json,
                );
        let (body, content_type) = exporter.body(&[&spans]).unwrap();
        assert_eq!(content_type, Some("application/json"));
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let span = &json["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(span["spanId"], "00f067aa0ba902b7");
        assert_eq!(span["name"], "chat gpt-4o");
        assert_eq!(span["kind"], 3);
        assert_eq!(span["attributes"][0]["key"], "gen_ai.request.model");
        assert_eq!(span["attributes"][0]["value"]["stringValue"], "gpt-4o");
    }

    /// The client's runtime thread, which posts, yields to the request threads.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_posting_thread_runs_nicer_than_the_request_threads() {
        use super::super::priority::tests::{lowered_nice, nice_of_threads};
        let expected = lowered_nice();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let exporter =
            ProtobufExporter::new("http://127.0.0.1:9/v1/traces", &[], Duration::from_secs(1))
                .unwrap();
        // Other tests' clients may be alive too: each is built the same way.
        let nices = nice_of_threads("reqwest-internal-sync-runtime");
        assert!(
            !nices.is_empty() && nices.iter().all(|&nice| nice == expected),
            "{nices:?}"
        );
        drop(exporter);
    }
}
