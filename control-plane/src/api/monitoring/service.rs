//! The rules of the overview: "now" for the derived status, and which statuses count
//! where.

use super::store;
use super::Overview;
use crate::auth::Caller;
use crate::error::ApiResult;
use crate::state::AppState;

/// The tenant's live agents by their status as of now; a status the overview does not
/// name counts as `unknown`.
pub async fn monitoring_overview(state: &AppState, caller: &Caller) -> ApiResult<Overview> {
    let counts = store::agents_by_status(
        state.db.pool(),
        &caller.tenant_id,
        state.clock.now().as_millis(),
    )
    .await?;
    let mut overview = Overview::default();
    for (status, agents) in counts {
        overview.total_agents += agents;
        match status.as_str() {
            "healthy" => overview.healthy += agents,
            "degraded" => overview.degraded += agents,
            "down" => overview.down += agents,
            _ => overview.unknown += agents,
        }
    }
    Ok(overview)
}
