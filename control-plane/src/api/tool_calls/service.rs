//! Reading tool calls: the query's filters as stored values.

use super::{store, ToolCall, ToolCallQuery};
use crate::api::envelope::Page;
use crate::auth::Caller;
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::Text;

pub async fn list(
    state: &AppState,
    caller: &Caller,
    query: &ToolCallQuery,
    page: Page,
) -> ApiResult<(Vec<ToolCall>, i64)> {
    let filter = store::Filter {
        agent_id: query.agent_id.as_ref().map(Text::as_str),
        server: query.server.as_ref().map(Text::as_str),
        tool: query.tool.as_ref().map(Text::as_str),
        decision: query.decision.as_ref().map(Text::as_str),
        outcome: query.outcome.as_ref().map(Text::as_str),
        since: query.since.map_or(0, |since| since.as_millis()),
    };
    Ok(store::list(state.db.pool(), &caller.tenant_id, &filter, page).await?)
}
