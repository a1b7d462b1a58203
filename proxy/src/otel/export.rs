//! Where traces go: OTLP over HTTP to the operator's collector, configured by the
//! settings file's `[tracing]` section and the standard `OTEL_` variables, which win
//! over the file as `WARDEN_` variables do.
//!
//! Export is off unless an endpoint is named (`tracing.endpoint`,
//! `tracing.traces_endpoint`, `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); off, no tracer exists and the request path
//! makes no span at all.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;
use serde::{Deserialize, Serialize};
use warden_shared::secret::Secret;

/// The `[tracing]` section of the settings file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`); `/v1/traces` is
    /// appended. Naming one turns export on.
    pub endpoint: Option<String>,
    /// The full URL spans are posted to, used as it is; wins over `endpoint`.
    pub traces_endpoint: Option<String>,
    /// `http/protobuf` (the default) or `http/json`.
    pub protocol: Option<String>,
    /// Headers sent with every export, such as a tracing vendor's API key. Never logged.
    pub headers: BTreeMap<String, Secret>,
    /// Share of the traces Warden starts that are recorded, 0.0 to 1.0 (default 1.0). A
    /// trace an agent started follows the agent's decision (its `traceparent`'s flag).
    pub sampling_ratio: Option<f64>,
    /// `service.name` of the proxy's spans (default `warden-proxy`).
    pub proxy_service_name: Option<String>,
    /// `service.name` of the control plane's spans (default `warden-control-plane`).
    pub control_plane_service_name: Option<String>,
}

/// Which plane a tracer provider serves: its default service name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plane {
    Proxy,
    ControlPlane,
}

/// Export settings once the file and the environment are read together.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceExport {
    /// Where spans are posted.
    pub url: String,
    pub protocol: Protocol,
    /// The file's headers; the exporter adds `OTEL_EXPORTER_OTLP_HEADERS` and
    /// `OTEL_EXPORTER_OTLP_TRACES_HEADERS` itself, which win on a shared name.
    headers: HashMap<String, String>,
    /// `None`: the SDK's choice, `OTEL_TRACES_SAMPLER` and its argument when set.
    sampling_ratio: Option<f64>,
    service_names: ServiceNames,
    /// Warden's batch queue size and delay, where `OTEL_BSP_*` does not set them.
    batch: BatchDefaults,
}

/// The batch processor's settings Warden chooses where the standard variables do not:
/// the specification's defaults (a queue of 2,048 spans sent every 5 s) drop spans past
/// about 400 a second, a proxy's rate of a few requests; these keep a proxy at tens of
/// thousands of requests a second (about 64 MiB at most held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchDefaults {
    max_queue_size: Option<usize>,
    scheduled_delay: Option<Duration>,
    max_export_batch_size: Option<usize>,
}

const MAX_QUEUE_SIZE: usize = 65_536;
const SCHEDULED_DELAY: Duration = Duration::from_secs(1);
const MAX_EXPORT_BATCH_SIZE: usize = 4_096;

#[derive(Debug, Clone, PartialEq)]
struct ServiceNames {
    /// `OTEL_SERVICE_NAME`: both planes of the process are named so.
    from_env: Option<String>,
    proxy: String,
    control_plane: String,
}

impl TracingConfig {
    /// The export these settings and `env` (the process's variables, or a test's) ask
    /// for; `None` when tracing is off. `Err` names a setting that cannot work.
    pub fn resolve(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<TraceExport>, String> {
        let env = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        let url = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT").map(|base| traces_url(&base)))
            .or_else(|| self.traces_endpoint.clone().filter(|u| !u.is_empty()))
            .or_else(|| {
                let base = self.endpoint.as_deref().filter(|u| !u.is_empty())?;
                Some(traces_url(base))
            });
        let Some(url) = url.filter(|_| !disabled) else {
            return Ok(None);
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "tracing: the OTLP endpoint must be an http:// or https:// URL, not `{url}`"
            ));
        }
        let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .or_else(|| self.protocol.clone());
        let protocol = match protocol.as_deref().map(str::trim) {
            None | Some("http/protobuf") => Protocol::HttpBinary,
            Some("http/json") => Protocol::HttpJson,
            Some("grpc") => {
                return Err(
                    "tracing: OTLP over gRPC is not built in; point Warden at the \
                            collector's OTLP/HTTP port (4318) with `http/protobuf`"
                        .to_owned(),
                )
            }
            Some(other) => {
                return Err(format!(
                    "tracing: protocol `{other}`: `http/protobuf` or `http/json`"
                ))
            }
        };
        let sampling_ratio = match self.sampling_ratio {
            Some(ratio) if !(0.0..=1.0).contains(&ratio) => {
                return Err(format!(
                    "tracing.sampling_ratio: between 0.0 and 1.0, not {ratio}"
                ))
            }
            // The standard variable wins over the file, as every OTEL_ one does.
            _ if env("OTEL_TRACES_SAMPLER").is_some() => None,
            ratio => ratio,
        };
        let headers = self
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), value.expose().to_owned()))
            .collect();
        let name = |configured: &Option<String>, default: &str| {
            configured
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| default.to_owned())
        };
        let unset = |name: &str| env(name).is_none();
        let batch = BatchDefaults {
            max_queue_size: unset("OTEL_BSP_MAX_QUEUE_SIZE").then_some(MAX_QUEUE_SIZE),
            scheduled_delay: unset("OTEL_BSP_SCHEDULE_DELAY").then_some(SCHEDULED_DELAY),
            max_export_batch_size: unset("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
                .then_some(MAX_EXPORT_BATCH_SIZE),
        };
        Ok(Some(TraceExport {
            url,
            protocol,
            headers,
            sampling_ratio,
            batch,
            service_names: ServiceNames {
                from_env: env("OTEL_SERVICE_NAME"),
                proxy: name(&self.proxy_service_name, "warden-proxy"),
                control_plane: name(&self.control_plane_service_name, "warden-control-plane"),
            },
        }))
    }
}

/// `base` with the traces path, as the OTLP exporter specification appends it to
/// `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

impl TraceExport {
    /// `service.name` of `plane`'s spans.
    pub fn service_name(&self, plane: Plane) -> &str {
        let names = &self.service_names;
        names.from_env.as_deref().unwrap_or(match plane {
            Plane::Proxy => &names.proxy,
            Plane::ControlPlane => &names.control_plane,
        })
    }

    /// A tracer provider exporting `plane`'s spans in batches, from a thread of its own
    /// (`OTEL_BSP_SCHEDULE_DELAY` and the other batch variables apply). Shut it down at
    /// exit, so that the last batch leaves.
    pub fn provider(&self, plane: Plane) -> Result<SdkTracerProvider, String> {
        // The exporter's client (reqwest 0.13, without a TLS provider of its own) uses
        // the process default: ring, as everything else here.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let exporter = SpanExporter::builder()
            .with_http()
            .with_endpoint(self.url.clone())
            .with_protocol(self.protocol)
            .with_headers(self.headers.clone())
            .build()
            .map_err(|error| format!("tracing: {error}"))?;
        let resource = Resource::builder()
            .with_service_name(self.service_name(plane).to_owned())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        // The standard variables first (the builder's default reads them), then
        // Warden's choices where they are unset.
        let mut batch = BatchConfigBuilder::default();
        if let Some(size) = self.batch.max_queue_size {
            batch = batch.with_max_queue_size(size);
        }
        if let Some(delay) = self.batch.scheduled_delay {
            batch = batch.with_scheduled_delay(delay);
        }
        if let Some(size) = self.batch.max_export_batch_size {
            batch = batch.with_max_export_batch_size(size);
        }
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch.build())
            .build();
        let mut builder = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource);
        if let Some(ratio) = self.sampling_ratio {
            builder = builder.with_sampler(Sampler::ParentBased(Box::new(
                Sampler::TraceIdRatioBased(ratio),
            )));
        }
        Ok(builder.build())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn nothing_named_is_off() {
        let config = TracingConfig::default();
        assert_eq!(config.resolve(env_of(&[])), Ok(None));
        assert_eq!(
            config.resolve(env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])),
            Ok(None)
        );
    }

    #[test]
    fn the_standard_endpoint_variables_turn_export_on() {
        let config = TracingConfig::default();
        let export = config
            .resolve(env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")]))
            .unwrap()
            .unwrap();
        assert_eq!(export.url, "http://c:4318/v1/traces");
        assert_eq!(export.protocol, Protocol::HttpBinary);
        let export = config
            .resolve(env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9/spans"),
            ]))
            .unwrap()
            .unwrap();
        assert_eq!(
            export.url, "http://t:9/spans",
            "the signal's own URL, as it is"
        );
    }

    #[test]
    fn variables_win_over_the_file() {
        let config = TracingConfig {
            endpoint: Some("http://file:4318".into()),
            protocol: Some("http/json".into()),
            sampling_ratio: Some(0.25),
            proxy_service_name: Some("edge".into()),
            ..TracingConfig::default()
        };
        let export = config.resolve(env_of(&[])).unwrap().unwrap();
        assert_eq!(export.url, "http://file:4318/v1/traces");
        assert_eq!(export.protocol, Protocol::HttpJson);
        assert_eq!(export.sampling_ratio, Some(0.25));
        assert_eq!(export.service_name(Plane::Proxy), "edge");
        assert_eq!(
            export.service_name(Plane::ControlPlane),
            "warden-control-plane"
        );
        let export = config
            .resolve(env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://env:4318"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ("OTEL_TRACES_SAMPLER", "always_off"),
                ("OTEL_SERVICE_NAME", "gateway"),
            ]))
            .unwrap()
            .unwrap();
        assert_eq!(export.url, "https://env:4318/v1/traces");
        assert_eq!(export.protocol, Protocol::HttpBinary);
        assert_eq!(
            export.sampling_ratio, None,
            "the SDK reads OTEL_TRACES_SAMPLER"
        );
        assert_eq!(export.service_name(Plane::Proxy), "gateway");
        assert_eq!(export.batch.max_queue_size, Some(MAX_QUEUE_SIZE));
        let export = config
            .resolve(env_of(&[("OTEL_BSP_MAX_QUEUE_SIZE", "100")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            export.batch.max_queue_size, None,
            "the SDK reads OTEL_BSP_*"
        );
        assert_eq!(export.batch.scheduled_delay, Some(SCHEDULED_DELAY));
    }

    #[test]
    fn the_sdk_switches_turn_it_off() {
        let config = TracingConfig {
            endpoint: Some("http://file:4318".into()),
            ..TracingConfig::default()
        };
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(config.resolve(env_of(&[off])), Ok(None), "{off:?}");
        }
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let with =
            |config: TracingConfig, env: &[(&str, &str)]| config.resolve(env_of(env)).unwrap_err();
        let on = TracingConfig {
            endpoint: Some("http://c:4318".into()),
            ..TracingConfig::default()
        };
        assert!(with(on.clone(), &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).contains("4318"));
        assert!(with(on.clone(), &[("OTEL_EXPORTER_OTLP_PROTOCOL", "udp")]).contains("udp"));
        let ratio = TracingConfig {
            sampling_ratio: Some(1.5),
            ..on
        };
        assert!(with(ratio, &[]).contains("sampling_ratio"));
        let scheme = TracingConfig {
            endpoint: Some("collector:4318".into()),
            ..TracingConfig::default()
        };
        assert!(with(scheme, &[]).contains("http://"));
    }
}
