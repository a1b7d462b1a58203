//! Telemetry (spec 2.12, 3.1, 4.4): heartbeats that drive agent status.

mod heartbeats;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(heartbeats::record_heartbeat))
        .routes(routes!(heartbeats::record_heartbeats))
}
