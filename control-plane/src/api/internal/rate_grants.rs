//! Rate limits shared by every proxy: a proxy admits a `rate_limit` policy's requests
//! against the allowance the control plane granted it for the bucket and minute, and
//! asks for more when it is spent. The grants of a bucket and minute never sum past the
//! limit (`store::grant_rate`), so however many proxies serve an agent, together they
//! admit at most the limit in a minute; the allowance they hold unused when it is
//! reached is the bound below it (each grant is at most an eighth of what is left).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::store;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Longest limiter or bucket name (policy and key ids, agent and team ids).
const MAX_NAME: usize = 200;
/// Most requests one grant may ask for.
const MAX_WANT: i64 = 10_000;

/// A proxy's request for more of a limit in one bucket and minute.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateGrantRequest {
    #[schema(max_length = 200)]
    pub tenant_id: String,
    /// `policy:<id>` for a `rate_limit` policy.
    #[schema(min_length = 1, max_length = 200)]
    pub limiter: String,
    /// The agent, team or key id the limit counts per; empty for the tenant.
    #[schema(max_length = 200)]
    pub bucket: String,
    /// The Unix minute (ms / 60,000).
    #[schema(minimum = 0)]
    pub minute: i64,
    /// The limit's requests per minute, as the proxy's state has it.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub limit: i64,
    /// How many requests the proxy would like.
    #[schema(minimum = 1, maximum = 10_000)]
    pub want: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RateGrant {
    /// Requests granted (0: the limit is reached this minute).
    pub granted: i64,
}

pub async fn grant(state: &AppState, request: RateGrantRequest) -> ApiResult<RateGrant> {
    let field =
        |name: &str, message: &str| Err(ApiError::validation(name, format!("{name}: {message}")));
    if request.limiter.is_empty() || request.limiter.len() > MAX_NAME {
        return field("limiter", "1 to 200 characters");
    }
    if request.bucket.len() > MAX_NAME {
        return field("bucket", "at most 200 characters");
    }
    if request.tenant_id.len() > MAX_NAME {
        return field("tenant_id", "at most 200 characters");
    }
    if !(1..=1_000_000_000).contains(&request.limit) {
        return field("limit", "from 1 to 1,000,000,000");
    }
    if !(1..=MAX_WANT).contains(&request.want) {
        return field("want", "from 1 to 10,000");
    }
    if request.minute < 0 {
        return field("minute", "a Unix minute");
    }
    let mut tx = state.db.begin_write().await?;
    // A tenant deleted meanwhile gets nothing (and has no rows to write to).
    let live = store::live_tenants(&mut tx, [request.tenant_id.as_str()]).await?;
    if live.is_empty() {
        return Ok(RateGrant { granted: 0 });
    }
    let granted = store::grant_rate(
        &mut tx,
        (
            &request.tenant_id,
            &request.limiter,
            &request.bucket,
            request.minute,
        ),
        request.limit,
        request.want,
    )
    .await?;
    tx.commit().await?;
    Ok(RateGrant { granted })
}
