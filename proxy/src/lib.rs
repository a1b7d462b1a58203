//! Warden's data plane: the OpenAI-compatible LLM proxy.
//!
//! Agents point an OpenAI SDK at it. Each request is authenticated by its proxy key and
//! admitted against the enforcement state the control plane streams to it (kill switch,
//! quarantine, allowed providers and models), forwarded to the provider chosen from the
//! model, relayed back (streamed or whole), and its usage queued for the ledger. The
//! request path reads only memory.
//!
//! Only `build`, its settings and app, `config`, `otel` (the tracing settings and the
//! tracer the binary builds from them) and `allocator` are public. The modules
//! form layers, each using only those below it (`tests/module_layers.rs` fails on a
//! cycle and prints the layers).

pub(crate) mod action;
pub(crate) mod admission;
pub mod allocator;
pub(crate) mod app;
pub(crate) mod approval_claims;
pub(crate) mod batch_queue;
pub(crate) mod budget;
pub(crate) mod buffered_io;
pub(crate) mod capture;
pub mod config;
pub(crate) mod connection;
pub(crate) mod decisions;
pub(crate) mod endpoint;
pub(crate) mod event_loops;
pub(crate) mod flush;
pub(crate) mod forward;
pub(crate) mod guardrails;
pub(crate) mod headers;
pub(crate) mod idle_deadline;
pub(crate) mod idle_pool;
pub(crate) mod log_throttle;
pub(crate) mod managed_keys;
pub(crate) mod maps;
pub use managed_keys::read_secret;
pub use mcp::upstream::{fetch_definitions, ToolDefinition, UpstreamError};
pub(crate) mod budget_grants;
pub(crate) mod mcp;
pub(crate) mod metrics;
pub mod otel;
pub(crate) mod policy_gate;
pub(crate) mod rate_grants;
pub(crate) mod rate_limit;
pub(crate) mod refusal;
pub(crate) mod relay;
pub(crate) mod request_body;
pub(crate) mod resources;
pub(crate) mod respond;
pub(crate) mod routing;
pub(crate) mod service;
pub(crate) mod state;
pub(crate) mod sync;
#[cfg(test)]
mod test_fixtures;
pub(crate) mod upstream;
pub(crate) mod upstream_request;
pub(crate) mod usage;

pub use app::{build, ProxyApp, ProxySettings, ProxyStartupError};
pub use usage::spool::SetAsideBatch;
