//! The contract between Warden's planes: key format, scopes, identifiers and timestamps.
//!
//! This crate is pure data and pure functions. It depends on no runtime, web framework,
//! database driver or proxy framework, so the control plane and the proxy can both use it
//! and agree by construction.

pub mod action;
pub mod budget;
pub mod catalog;
pub mod clock;
pub mod guardrail;
pub mod ids;
pub mod json_members;
pub mod keys;
pub mod managed;
pub mod mcp;
pub mod outbound;
pub mod policy;
pub mod pricing;
pub mod redaction;
pub mod registry;
pub mod scopes;
pub mod secret;
pub mod snapshot;
pub mod timestamp;
pub mod wire;
