//! Warden's control plane: the management API over SQLite or PostgreSQL.
//!
//! `main.rs` is a thin CLI; everything it starts is built by [`startup::build`], which
//! tests and benchmarks call too, so they exercise exactly what production runs.

pub mod anomalies;
pub mod api;
pub mod auth;
pub mod bootstrap;
pub mod changes;
pub mod config;
pub mod console;
pub mod db;
pub mod error;
pub mod gauges;
pub mod health;
pub mod jobs;
pub mod lease;
pub mod ledger;
pub mod metrics;
pub mod notifications;
pub mod outbound;
pub mod periodic;
pub mod plans;
pub mod proxy_state;
pub mod startup;
pub mod state;
pub mod telemetry;
pub mod tenancy;
pub mod throttle;
pub mod validate;
