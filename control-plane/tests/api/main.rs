//! Integration tests of the control plane over real HTTP, one binary for the crate.
//!
//! Every test runs twice, on SQLite and on PostgreSQL (see `helpers::db_test!`), against
//! the application built by `startup::build` and bound to port 0.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[macro_use]
mod helpers;

mod admin;
mod agents;
mod anomalies;
mod approvals;
mod audit_trail;
mod auth;
mod bad_input;
mod billing;
mod budget_grants;
mod budgets;
mod compliance;
mod console;
mod container_run;
mod cost;
mod database_outage;
mod deploy_files;
mod dev_mode;
mod health;
mod ingest_edges;
mod internal;
mod isolation;
mod jobs_handover;
mod kill_switch;
mod mcp_servers;
mod notifications;
mod object_bodies;
mod ops;
mod otlp;
mod oversight;
mod payload_capture;
mod policies;
mod policy_decisions;
mod proxy;
mod proxy_keys;
mod proxy_state;
mod python;
mod rate_grants;
mod replica_process;
mod risk;
mod scopes;
mod security_controls;
mod servers;
mod sso;
mod teams;
mod telemetry;
mod traces_export;
