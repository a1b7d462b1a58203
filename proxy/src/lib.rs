//! Warden's data plane: the OpenAI-compatible LLM proxy.
//!
//! Agents point an OpenAI SDK at it. Each request is authenticated by its proxy key and
//! admitted against the enforcement state the control plane streams to it (kill switch,
//! quarantine, allowed providers and models), forwarded to the provider chosen from the
//! model, relayed back (streamed or whole), and its usage queued for the ledger. The
//! request path reads only memory.

pub mod admission;
pub mod allocator;
pub mod app;
pub mod batch_queue;
pub mod budget;
pub mod buffered_io;
pub mod clock;
pub mod config;
pub mod decisions;
pub mod endpoint;
pub mod event_loops;
pub mod flush;
pub mod forward;
pub mod headers;
pub mod log_throttle;
pub mod managed_keys;
pub mod maps;
pub mod metrics;
pub mod policy_gate;
pub mod pool_peer;
pub mod rate_limit;
pub mod refusal;
pub mod relay;
pub mod request_body;
pub mod resources;
pub mod respond;
pub mod routing;
pub mod service;
pub mod state;
pub mod sync;
#[cfg(test)]
mod test_fixtures;
pub mod upstream;
pub mod upstream_request;
pub mod usage;

pub use app::{build, ProxyApp, ProxySettings};
