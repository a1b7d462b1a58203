//! Telemetry (spec 2.12, 3.1, 4.4): heartbeats that drive agent status, and usage that
//! feeds the cost ledger.

mod heartbeats;
mod usage;

pub use usage::{usage_entry, ItemError, UsageInput};

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(heartbeats::record_heartbeat))
        .routes(routes!(heartbeats::record_heartbeats))
        .routes(routes!(usage::record_usage))
        .routes(routes!(usage::record_usages))
}
