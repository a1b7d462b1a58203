//! Which traces are recorded: the OpenTelemetry samplers an operator names with
//! `OTEL_TRACES_SAMPLER` (and `OTEL_TRACES_SAMPLER_ARG`), or the settings file's
//! `sampling_ratio`. The proxy decides with [`Sampling::sampled`] itself, the control
//! plane through the SDK's equivalent ([`Sampling::sdk`]); both decide alike.

use opentelemetry::trace::{SpanContext, TraceId};
use opentelemetry_sdk::trace::Sampler;

/// A sampler: `root` decides for traces Warden starts, and for all when not
/// `parent_based`; parent based, a trace an agent started follows the agent's decision
/// (its `traceparent`'s sampled flag).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    pub root: Root,
    pub parent_based: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Root {
    AlwaysOn,
    AlwaysOff,
    /// The share of traces recorded, 0.0 to 1.0, by their id.
    Ratio(f64),
}

impl Default for Sampling {
    /// `parentbased_always_on`, the specification's default.
    fn default() -> Sampling {
        Sampling {
            root: Root::AlwaysOn,
            parent_based: true,
        }
    }
}

impl Sampling {
    /// The sampler `OTEL_TRACES_SAMPLER` names, with `OTEL_TRACES_SAMPLER_ARG` its ratio
    /// (1.0 when absent, as the specification says). A sampler this build does not have
    /// (`jaeger_remote`, `xray`) or a ratio that is not one is refused.
    pub fn from_env(name: &str, argument: Option<&str>) -> Result<Sampling, String> {
        let ratio = || match argument.map(str::trim) {
            None => Ok(Root::Ratio(1.0)),
            Some(text) => match text.parse::<f64>() {
                Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(Root::Ratio(ratio)),
                _ => Err(format!(
                    "tracing: OTEL_TRACES_SAMPLER_ARG is a ratio between 0.0 and 1.0, not `{text}`"
                )),
            },
        };
        let (root, parent_based) = match name.trim() {
            "always_on" => (Root::AlwaysOn, false),
            "always_off" => (Root::AlwaysOff, false),
            "traceidratio" => (ratio()?, false),
            "parentbased_always_on" => (Root::AlwaysOn, true),
            "parentbased_always_off" => (Root::AlwaysOff, true),
            "parentbased_traceidratio" => (ratio()?, true),
            other => {
                return Err(format!(
                    "tracing: OTEL_TRACES_SAMPLER `{other}` is not one of always_on, always_off, \
                     traceidratio, parentbased_always_on, parentbased_always_off, \
                     parentbased_traceidratio"
                ))
            }
        };
        Ok(Sampling { root, parent_based })
    }

    /// The settings file's ratio: parent based, by trace id.
    pub fn ratio(ratio: f64) -> Sampling {
        Sampling {
            root: Root::Ratio(ratio),
            parent_based: true,
        }
    }

    /// Whether a new span of trace `trace_id`, child of `parent` when the agent sent
    /// one, is recorded.
    pub fn sampled(&self, parent: Option<&SpanContext>, trace_id: TraceId) -> bool {
        match parent {
            Some(parent) if self.parent_based => parent.is_sampled(),
            _ => match self.root {
                Root::AlwaysOn => true,
                Root::AlwaysOff => false,
                Root::Ratio(ratio) => by_ratio(ratio, trace_id),
            },
        }
    }

    /// The SDK's sampler deciding alike.
    pub fn sdk(&self) -> Sampler {
        let root = match self.root {
            Root::AlwaysOn => Sampler::AlwaysOn,
            Root::AlwaysOff => Sampler::AlwaysOff,
            Root::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
        };
        if self.parent_based {
            Sampler::ParentBased(Box::new(root))
        } else {
            root
        }
    }
}

/// The SDK's `TraceIdRatioBased` rule (the specification leaves it to SDKs): the trace
/// id's low 64 bits, halved, below the ratio of 2^63. The same rule in both planes and
/// in other SDKs following it keeps a trace whole across services.
fn by_ratio(ratio: f64, trace_id: TraceId) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
    let low = u128::from_be_bytes(trace_id.to_bytes()) as u64;
    (low >> 1) < bound
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{Link, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceState};
    use opentelemetry::Context;
    use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};

    use super::*;

    fn parent(sampled: bool) -> SpanContext {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        SpanContext::new(
            TraceId::from(7),
            SpanId::from(9),
            flags,
            true,
            TraceState::NONE,
        )
    }

    /// The SDK's decision for the same span.
    fn sdk_decides(sampling: &Sampling, parent: Option<&SpanContext>, trace_id: TraceId) -> bool {
        let context = match parent {
            Some(parent) => Context::new().with_remote_span_context(parent.clone()),
            None => Context::new(),
        };
        let links: [Link; 0] = [];
        let result = sampling.sdk().should_sample(
            Some(&context),
            trace_id,
            "chat gpt-4o",
            &SpanKind::Client,
            &[],
            &links,
        );
        result.decision == SamplingDecision::RecordAndSample
    }

    #[test]
    fn every_sampler_decides_as_the_sdks() {
        let samplers = [
            "always_on",
            "always_off",
            "traceidratio",
            "parentbased_always_on",
            "parentbased_always_off",
            "parentbased_traceidratio",
        ];
        let mut sampled_by_ratio = 0;
        for name in samplers {
            for argument in [None, Some("0.25"), Some("0"), Some("1")] {
                let sampling = Sampling::from_env(name, argument).unwrap();
                for n in 0..400u128 {
                    // Ids spread over the whole range, as random ones are.
                    let trace_id =
                        TraceId::from(n.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
                    for parent in [None, Some(parent(true)), Some(parent(false))] {
                        let ours = sampling.sampled(parent.as_ref(), trace_id);
                        assert_eq!(
                            ours,
                            sdk_decides(&sampling, parent.as_ref(), trace_id),
                            "{name} {argument:?} {n} {parent:?}"
                        );
                        if name == "traceidratio" && argument == Some("0.25") && ours {
                            sampled_by_ratio += 1;
                        }
                    }
                }
            }
        }
        // 400 ids, three parents each: about a quarter.
        assert!((200..400).contains(&sampled_by_ratio), "{sampled_by_ratio}");
    }

    #[test]
    fn the_default_and_the_files_ratio_follow_the_agent() {
        assert!(Sampling::default().sampled(None, TraceId::from(1)));
        assert!(!Sampling::default().sampled(Some(&parent(false)), TraceId::from(1)));
        let none = Sampling::ratio(0.0);
        assert!(!none.sampled(None, TraceId::from(u128::MAX)));
        assert!(none.sampled(Some(&parent(true)), TraceId::from(u128::MAX)));
    }

    #[test]
    fn samplers_that_cannot_work_are_refused() {
        for (name, argument) in [
            ("jaeger_remote", None),
            ("xray", None),
            ("traceidratio", Some("half")),
            ("parentbased_traceidratio", Some("1.5")),
        ] {
            assert!(Sampling::from_env(name, argument).is_err(), "{name}");
        }
        assert_eq!(
            Sampling::from_env("traceidratio", None).unwrap().root,
            Root::Ratio(1.0)
        );
    }
}
