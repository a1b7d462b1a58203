//! The tracers an export's settings make: the proxy's (Warden's sampler, its span queue
//! and exporting thread) and the control plane's (the SDK's batch processor), both
//! posting OTLP/HTTP through `super::super::otlp_http`.

use std::collections::HashMap;

use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{
    BatchConfig, BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;

use super::super::batch::SpanQueue;
use super::super::otlp_http::{ProtobufExporter, RecordFormat};
use super::super::Tracer;
use super::{Plane, TraceExport};

impl TraceExport {
    /// The SDK batch processor's settings: the same as the proxy's queue.
    fn batch_config(&self) -> BatchConfig {
        BatchConfigBuilder::default()
            .with_max_queue_size(self.batch.max_queue_size)
            .with_scheduled_delay(self.batch.scheduled_delay)
            .with_max_export_batch_size(self.batch.max_export_batch_size)
            .build()
    }

    fn resource(&self, plane: Plane) -> Resource {
        Resource::builder()
            .with_service_name(self.service_name(plane).to_owned())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build()
    }

    /// The reference exporter, for `http/json`.
    fn json_exporter(&self) -> Result<SpanExporter, String> {
        SpanExporter::builder()
            .with_http()
            .with_endpoint(self.url.clone())
            .with_protocol(self.protocol)
            .with_headers(self.headers.iter().cloned().collect::<HashMap<_, _>>())
            .with_timeout(self.timeout)
            .build()
            .map_err(|error| format!("tracing: {error}"))
    }

    /// The proxy's tracer: Warden's sampler, its span queue and exporting thread.
    pub fn tracer(&self) -> Result<Tracer, String> {
        // The exporters' client (reqwest 0.13, without a TLS provider of its own) uses
        // the process default: ring, as everything else here.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let resource = self.resource(Plane::Proxy);
        let scope = InstrumentationScope::builder("warden-proxy")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let name = "warden-spans";
        let format = match self.protocol {
            Protocol::HttpJson => RecordFormat::Json,
            _ => RecordFormat::Protobuf,
        };
        let exporter = ProtobufExporter::new(&self.url, &self.headers, self.timeout)?
            .for_records(&resource, scope, format);
        let queue = SpanQueue::start(self.batch, exporter, name)?;
        Ok(Tracer::new(queue, self.sampling, self.capture_content))
    }

    /// The control plane's tracer provider, exporting its spans in batches from a
    /// thread of its own. Shut it down at exit, so that the last batch leaves.
    pub fn provider(&self) -> Result<SdkTracerProvider, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let batch = self.batch_config();
        let processor = match self.protocol {
            Protocol::HttpJson => BatchSpanProcessor::builder(self.json_exporter()?)
                .with_batch_config(batch)
                .build(),
            _ => {
                let exporter = ProtobufExporter::new(&self.url, &self.headers, self.timeout)?;
                BatchSpanProcessor::builder(exporter)
                    .with_batch_config(batch)
                    .build()
            }
        };
        Ok(SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(self.resource(Plane::ControlPlane))
            .with_sampler(self.sampling.sdk())
            .build())
    }
}
