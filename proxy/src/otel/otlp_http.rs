//! The OTLP/HTTP exporters. `http/protobuf`: each batch (the proxy's records from its
//! span queue, or the SDK's spans from the control plane's batch processor) is encoded
//! by [`super::protobuf`] and posted to the collector on the exporting thread, with a
//! blocking client (a connection kept alive between batches). `http/json`, a debugging
//! format, goes through the reference exporter.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use reqwest_mcp::blocking::Client;

use super::batch::Sink;
use super::protobuf::{encode_records, encode_request, EncodedResource};
use super::record::SpanRecord;

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
        // lives on the batch processor's.
        let client = std::thread::spawn(move || Client::builder().timeout(timeout).build())
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
        let response = self
            .client
            .post(&self.url)
            .headers(self.headers.clone())
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

    /// The proxy's exporter: its records, of `scope`, under `resource`.
    pub fn for_records(
        mut self,
        resource: &Resource,
        scope: InstrumentationScope,
    ) -> RecordExporter {
        self.resource = EncodedResource::new(resource);
        RecordExporter {
            exporter: self,
            scope,
        }
    }
}

/// The proxy's records posted as OTLP/HTTP protobuf.
#[derive(Debug)]
pub struct RecordExporter {
    exporter: ProtobufExporter,
    scope: InstrumentationScope,
}

impl Sink for RecordExporter {
    fn export(&mut self, batch: &[SpanRecord]) -> Result<(), String> {
        let exporter = &self.exporter;
        let mut body = exporter.buffer();
        encode_records(&mut body, &exporter.resource, &self.scope, batch);
        exporter.post(body)
    }
}

/// The proxy's records posted by the reference exporter (`http/json`), converted to
/// the SDK's spans first.
#[derive(Debug)]
pub struct JsonRecordExporter {
    pub exporter: opentelemetry_otlp::SpanExporter,
    pub scope: InstrumentationScope,
}

impl Sink for JsonRecordExporter {
    fn export(&mut self, batch: &[SpanRecord]) -> Result<(), String> {
        let spans = batch
            .iter()
            .map(|record| record.to_span_data(&self.scope))
            .collect();
        futures_executor::block_on(self.exporter.export(spans)).map_err(|error| error.to_string())
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
