//! Where traces go: OTLP over HTTP to the operator's collector, configured by the
//! settings file's `[tracing]` section and the standard `OTEL_` variables, which win
//! over the file as `WARDEN_` variables do.
//!
//! Export is off unless an endpoint is named (`tracing.endpoint`,
//! `tracing.traces_endpoint`, `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); off, no tracer exists and the request path
//! makes no span at all.
//!
//! Here the settings, read together into a [`TraceExport`]; in `build` the tracers
//! made from it.

mod build;

use std::collections::BTreeMap;
use std::time::Duration;

use opentelemetry_otlp::Protocol;
use serde::{Deserialize, Serialize};
use warden_shared::secret::Secret;

use super::batch::BatchSettings;
use super::sampler::Sampling;

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
    /// Whether spans carry the request's prompt (`gen_ai.input.messages`), for tenants
    /// whose payload capture is enabled, redacted by their rules (default false).
    /// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` wins.
    pub capture_content: Option<bool>,
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
    /// The file's headers, then `OTEL_EXPORTER_OTLP_TRACES_HEADERS` (or, without it,
    /// `OTEL_EXPORTER_OTLP_HEADERS`), which win on a shared name.
    headers: Vec<(String, String)>,
    /// How long one export may take: `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` or
    /// `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds), 10 s by default.
    timeout: Duration,
    /// `OTEL_TRACES_SAMPLER` (and its argument), else the file's `sampling_ratio`, else
    /// parent based, always on.
    sampling: Sampling,
    service_names: ServiceNames,
    /// `OTEL_BSP_*`, else Warden's defaults.
    batch: BatchSettings,
    /// Prompts on spans, where a tenant's payload capture allows (`super::content`).
    capture_content: bool,
}

/// The batch settings Warden chooses where the standard variables do not: the
/// specification's defaults (a queue of 2,048 spans sent every 5 s) drop spans past
/// about 400 a second, a proxy's rate of a few requests; these keep a proxy at tens of
/// thousands of requests a second (a queue of 65,536 spans, about 20 MiB at most held).
const MAX_QUEUE_SIZE: usize = 65_536;
const SCHEDULED_DELAY: Duration = Duration::from_secs(1);
const MAX_EXPORT_BATCH_SIZE: usize = 4_096;
/// The specification's default export timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

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
        if let Some(ratio) = self.sampling_ratio.filter(|r| !(0.0..=1.0).contains(r)) {
            return Err(format!(
                "tracing.sampling_ratio: between 0.0 and 1.0, not {ratio}"
            ));
        }
        // The standard variable wins over the file, as every OTEL_ one does.
        let sampling = match env("OTEL_TRACES_SAMPLER") {
            Some(name) => Sampling::from_env(&name, env("OTEL_TRACES_SAMPLER_ARG").as_deref())?,
            None => self
                .sampling_ratio
                .map_or_else(Sampling::default, Sampling::ratio),
        };
        let mut headers: Vec<(String, String)> = self
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), value.expose().to_owned()))
            .collect();
        let from_env = env("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            .or_else(|| env("OTEL_EXPORTER_OTLP_HEADERS"))
            .unwrap_or_default();
        for (name, value) in parse_headers(&from_env) {
            headers.retain(|(existing, _)| !existing.eq_ignore_ascii_case(&name));
            headers.push((name, value));
        }
        let timeout = match env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
            .or_else(|| env("OTEL_EXPORTER_OTLP_TIMEOUT"))
        {
            None => DEFAULT_TIMEOUT,
            Some(millis) => match millis.trim().parse::<u64>() {
                Ok(millis) if millis > 0 => Duration::from_millis(millis),
                _ => {
                    return Err(format!(
                        "tracing: the OTLP timeout is a number of milliseconds, not `{millis}`"
                    ))
                }
            },
        };
        let name = |configured: &Option<String>, default: &str| {
            configured
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| default.to_owned())
        };
        let number = |name: &str, default: u64| match env(name) {
            None => Ok(default),
            Some(text) => match text.trim().parse::<u64>() {
                Ok(value) if value > 0 => Ok(value),
                _ => Err(format!(
                    "tracing: {name} is a positive number, not `{text}`"
                )),
            },
        };
        let max_queue_size = number("OTEL_BSP_MAX_QUEUE_SIZE", MAX_QUEUE_SIZE as u64)? as usize;
        let batch = BatchSettings {
            max_queue_size,
            scheduled_delay: Duration::from_millis(number(
                "OTEL_BSP_SCHEDULE_DELAY",
                SCHEDULED_DELAY.as_millis() as u64,
            )?),
            // The specification: a batch is never larger than the queue.
            max_export_batch_size: (number(
                "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
                MAX_EXPORT_BATCH_SIZE as u64,
            )? as usize)
                .min(max_queue_size),
        };
        let capture_content = match env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT") {
            Some(value) => capture_content_from_env(&value)?,
            None => self.capture_content.unwrap_or(false),
        };
        Ok(Some(TraceExport {
            capture_content,
            url,
            protocol,
            headers,
            timeout,
            sampling,
            batch,
            service_names: ServiceNames {
                from_env: env("OTEL_SERVICE_NAME"),
                proxy: name(&self.proxy_service_name, "warden-proxy"),
                control_plane: name(&self.control_plane_service_name, "warden-control-plane"),
            },
        }))
    }
}

/// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`: `true` or `false`, as the
/// GenAI instrumentations read it, or the newer modes of those that also emit events:
/// `SPAN_ONLY` and `SPAN_AND_EVENT` put content on spans, `NO_CONTENT` and `EVENT_ONLY`
/// do not (Warden emits no events).
fn capture_content_from_env(value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "span_only" | "span_and_event" => Ok(true),
        "false" | "no_content" | "event_only" => Ok(false),
        other => Err(format!(
            "tracing: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is `true`, `false`, \
             `span_only`, `span_and_event`, `no_content` or `event_only`, not `{other}`"
        )),
    }
}

/// The headers of `OTEL_EXPORTER_OTLP_HEADERS`: `name=value` pairs separated by commas,
/// values percent-encoded (the W3C Baggage format the specification names); a pair
/// without a name or a value is skipped.
fn parse_headers(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            let (name, value) = (name.trim(), value.trim());
            let value = percent_decode(value).unwrap_or_else(|| value.to_owned());
            (!name.is_empty() && !value.is_empty()).then(|| (name.to_owned(), value))
        })
        .collect()
}

/// `value` with its `%XX` escapes decoded; `None` when one is malformed or the result is
/// not UTF-8.
fn percent_decode(value: &str) -> Option<String> {
    let mut out = Vec::with_capacity(value.len());
    let mut bytes = value.bytes();
    while let Some(byte) = bytes.next() {
        if byte == b'%' {
            let high = char::from(bytes.next()?).to_digit(16)?;
            let low = char::from(bytes.next()?).to_digit(16)?;
            out.push((high * 16 + low) as u8);
        } else {
            out.push(byte);
        }
    }
    String::from_utf8(out).ok()
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
        assert_eq!(export.sampling, Sampling::ratio(0.25));
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
            export.sampling,
            Sampling::from_env("always_off", None).unwrap(),
            "OTEL_TRACES_SAMPLER wins over the file"
        );
        assert_eq!(export.service_name(Plane::Proxy), "gateway");
        assert_eq!(export.batch.max_queue_size, MAX_QUEUE_SIZE);
        assert_eq!(export.batch.scheduled_delay, SCHEDULED_DELAY);
        let export = config
            .resolve(env_of(&[
                ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
                ("OTEL_BSP_SCHEDULE_DELAY", "250"),
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
            ]))
            .unwrap()
            .unwrap();
        assert_eq!(export.batch.max_queue_size, 100);
        assert_eq!(export.batch.scheduled_delay, Duration::from_millis(250));
        assert_eq!(
            export.batch.max_export_batch_size, 100,
            "a batch no larger than the queue"
        );
        assert_eq!(
            export.sampling,
            Sampling::from_env("traceidratio", Some("0.5")).unwrap()
        );
    }

    #[test]
    fn headers_and_timeout_come_from_the_file_and_the_variables() {
        let mut config = TracingConfig {
            endpoint: Some("http://c:4318".into()),
            ..TracingConfig::default()
        };
        config
            .headers
            .insert("x-api-key".into(), Secret::new("from-file"));
        config
            .headers
            .insert("x-team".into(), Secret::new("gateway"));
        let export = config.resolve(env_of(&[])).unwrap().unwrap();
        assert_eq!(export.timeout, DEFAULT_TIMEOUT);
        assert_eq!(export.headers.len(), 2);
        let export = config
            .resolve(env_of(&[
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "X-Api-Key=from%20env, dd-site = eu ,=nameless,empty=",
                ),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ]))
            .unwrap()
            .unwrap();
        let mut headers = export.headers.clone();
        headers.sort();
        assert_eq!(
            headers,
            [
                ("X-Api-Key".to_owned(), "from env".to_owned()),
                ("dd-site".to_owned(), "eu".to_owned()),
                ("x-team".to_owned(), "gateway".to_owned()),
            ],
            "the variable wins on a shared name, its values decoded"
        );
        assert_eq!(export.timeout, Duration::from_millis(2500));
        let export = config
            .resolve(env_of(&[
                ("OTEL_EXPORTER_OTLP_HEADERS", "a=general"),
                ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "b=traces"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
                ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "700"),
            ]))
            .unwrap()
            .unwrap();
        assert!(export
            .headers
            .contains(&("b".to_owned(), "traces".to_owned())));
        assert!(
            !export.headers.iter().any(|(name, _)| name == "a"),
            "the signal's own wins"
        );
        assert_eq!(export.timeout, Duration::from_millis(700));
        let refused = config
            .resolve(env_of(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")]))
            .unwrap_err();
        assert!(refused.contains("milliseconds"), "{refused}");
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
        let on = TracingConfig {
            endpoint: Some("http://c:4318".into()),
            ..TracingConfig::default()
        };
        assert!(with(on.clone(), &[("OTEL_TRACES_SAMPLER", "xray")]).contains("xray"));
        assert!(with(on.clone(), &[("OTEL_BSP_SCHEDULE_DELAY", "1s")]).contains("SCHEDULE"));
        assert!(with(on, &[("OTEL_BSP_MAX_QUEUE_SIZE", "0")]).contains("QUEUE"));
        let scheme = TracingConfig {
            endpoint: Some("collector:4318".into()),
            ..TracingConfig::default()
        };
        assert!(with(scheme, &[]).contains("http://"));
    }

    #[test]
    fn content_on_spans_is_off_unless_asked_and_the_variable_wins() {
        let base = TracingConfig {
            endpoint: Some("http://c:4318".into()),
            ..TracingConfig::default()
        };
        let on = TracingConfig {
            capture_content: Some(true),
            ..base.clone()
        };
        let capture = |config: &TracingConfig, env: &[(&str, &str)]| {
            config
                .resolve(env_of(env))
                .map(|e| e.unwrap().capture_content)
        };
        const VAR: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
        assert_eq!(capture(&base, &[]), Ok(false));
        assert_eq!(capture(&on, &[]), Ok(true));
        assert_eq!(capture(&base, &[(VAR, "true")]), Ok(true));
        assert_eq!(capture(&base, &[(VAR, "SPAN_AND_EVENT")]), Ok(true));
        assert_eq!(capture(&on, &[(VAR, "False")]), Ok(false));
        assert_eq!(capture(&on, &[(VAR, "EVENT_ONLY")]), Ok(false));
        assert!(capture(&base, &[(VAR, "yes please")])
            .unwrap_err()
            .contains("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"));
    }
}
