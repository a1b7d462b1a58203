//! Cost views (spec 4.5): summary, by agent, by team, by model and a time series, all
//! read from the ledger's hourly rollups (see `crate::ledger`).

pub mod range;
mod store;

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::pricing::micros_to_usd;
use warden_shared::timestamp::Timestamp;

use self::range::{Granularity, Period, Range, DAY_MS};
use self::store::Totals;
use crate::api::envelope::{self, Envelope, PageQuery, Paged};
use crate::api::extract::ApiQuery;
use crate::auth::{require, Authorized};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The start of the calendar month (UTC) containing `now`: where `monthly_cost_usd` of
/// teams and tenants starts counting.
pub fn month_start(now: Timestamp) -> i64 {
    Period::Month.start(now)
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(cost_summary))
        .routes(routes!(cost_by_agent))
        .routes(routes!(cost_by_team))
        .routes(routes!(cost_by_model))
        .routes(routes!(cost_timeseries))
}

/// `from` and `to` of every view: ISO 8601 dates (whole UTC days) or date-times.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SummaryQuery {
    /// `day`, `week` or `month` (default).
    #[param(value_type = Option<String>)]
    pub period: Option<Period>,
    /// Default: the start of the current period.
    pub from: Option<String>,
    /// Default: today (inclusive).
    pub to: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CostSummary {
    pub total_cost_usd: f64,
    pub total_input_tokens: i64,
    pub total_output_tokens: i64,
    pub total_requests: i64,
    pub period: &'static str,
    #[schema(value_type = String, format = DateTime)]
    pub from: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub to: Timestamp,
}

#[utoipa::path(get, path = "/cost/summary", tag = "cost", params(SummaryQuery),
    security(("bearer" = ["cost:read"])),
    responses((status = 200, description = "Totals over the range", body = Envelope<CostSummary>)))]
async fn cost_summary(
    caller: Authorized<require::CostRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<SummaryQuery>,
) -> ApiResult<Response> {
    let now = state.clock.now();
    let period = query.period.unwrap_or(Period::Month);
    let range = range_of(
        query.from.as_deref(),
        query.to.as_deref(),
        period.start(now),
        now,
    )?;
    let totals = store::summary(state.db.pool(), &caller.tenant_id, range).await?;
    Ok(envelope::ok(CostSummary {
        total_cost_usd: micros_to_usd(totals.cost_micros),
        total_input_tokens: totals.input_tokens,
        total_output_tokens: totals.output_tokens,
        total_requests: totals.requests,
        period: period.as_str(),
        from: Timestamp::from_millis(range.from),
        to: Timestamp::from_millis(range.to),
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BreakdownQuery {
    /// Default: the start of the current month.
    pub from: Option<String>,
    /// Default: today (inclusive).
    pub to: Option<String>,
    #[param(minimum = 1, default = 1)]
    pub page: Option<i64>,
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<i64>,
}

/// `from` and `to` of the unpaged breakdowns (`by-team`, `by-model`: every row at once).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RangeQuery {
    /// Default: the start of the current month.
    pub from: Option<String>,
    /// Default: today (inclusive).
    pub to: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AgentCost {
    pub agent_id: String,
    pub agent_name: Option<String>,
    pub team: Option<String>,
    pub total_cost_usd: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub requests: i64,
}

/// Spend per agent, most expensive first, paged.
#[utoipa::path(get, path = "/cost/by-agent", tag = "cost", params(BreakdownQuery),
    security(("bearer" = ["cost:read"])),
    responses((status = 200, description = "One page of agents by cost", body = Paged<AgentCost>)))]
async fn cost_by_agent(
    caller: Authorized<require::CostRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<BreakdownQuery>,
) -> ApiResult<Response> {
    let page = PageQuery {
        page: query.page,
        limit: query.limit,
    }
    .try_into()?;
    let range = month_range(&state, query.from.as_deref(), query.to.as_deref())?;
    let (rows, total) = store::by_agent(state.db.pool(), &caller.tenant_id, range, page).await?;
    let agents = rows
        .into_iter()
        .map(|(agent_id, agent_name, team, totals)| AgentCost {
            agent_id,
            agent_name,
            team,
            total_cost_usd: micros_to_usd(totals.cost_micros),
            input_tokens: totals.input_tokens,
            output_tokens: totals.output_tokens,
            requests: totals.requests,
        })
        .collect();
    Ok(envelope::paged(agents, page, total))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TeamCost {
    /// The team's name; null for usage of agents without a team.
    pub team: Option<String>,
    pub total_cost_usd: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub requests: i64,
    /// Agents of the team that spent in the range.
    pub agent_count: i64,
}

/// Spend per team the usage was attributed to when it was recorded.
#[utoipa::path(get, path = "/cost/by-team", tag = "cost", params(RangeQuery),
    security(("bearer" = ["cost:read"])),
    responses((status = 200, description = "Teams by cost", body = Envelope<Vec<TeamCost>>)))]
async fn cost_by_team(
    caller: Authorized<require::CostRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<RangeQuery>,
) -> ApiResult<Response> {
    let range = month_range(&state, query.from.as_deref(), query.to.as_deref())?;
    let rows = store::by_team(state.db.pool(), &caller.tenant_id, range).await?;
    let teams: Vec<TeamCost> = rows
        .into_iter()
        .map(|(team, agent_count, totals)| TeamCost {
            team,
            total_cost_usd: micros_to_usd(totals.cost_micros),
            input_tokens: totals.input_tokens,
            output_tokens: totals.output_tokens,
            requests: totals.requests,
            agent_count,
        })
        .collect();
    Ok(envelope::ok(teams))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelCost {
    pub model_provider: String,
    pub model_name: String,
    pub total_cost_usd: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub requests: i64,
}

#[utoipa::path(get, path = "/cost/by-model", tag = "cost", params(RangeQuery),
    security(("bearer" = ["cost:read"])),
    responses((status = 200, description = "Models by cost", body = Envelope<Vec<ModelCost>>)))]
async fn cost_by_model(
    caller: Authorized<require::CostRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<RangeQuery>,
) -> ApiResult<Response> {
    let range = month_range(&state, query.from.as_deref(), query.to.as_deref())?;
    let rows = store::by_model(state.db.pool(), &caller.tenant_id, range).await?;
    let models: Vec<ModelCost> = rows
        .into_iter()
        .map(|(model_provider, model_name, totals)| ModelCost {
            model_provider,
            model_name,
            total_cost_usd: micros_to_usd(totals.cost_micros),
            input_tokens: totals.input_tokens,
            output_tokens: totals.output_tokens,
            requests: totals.requests,
        })
        .collect();
    Ok(envelope::ok(models))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TimeseriesQuery {
    /// `hour`, `day` (default) or `week` (weeks start on Monday, UTC).
    #[param(value_type = Option<String>)]
    pub granularity: Option<Granularity>,
    /// Default: 30 days ago.
    pub from: Option<String>,
    /// Default: today (inclusive).
    pub to: Option<String>,
    pub agent_id: Option<String>,
    /// Team name.
    pub team: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CostPoint {
    #[schema(value_type = String, format = DateTime)]
    pub timestamp: Timestamp,
    pub cost_usd: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub requests: i64,
}

/// At most this many buckets in one series.
const MAX_BUCKETS: i64 = 2_000;

/// Spend per bucket over the range; buckets without usage are present with zeros.
#[utoipa::path(get, path = "/cost/timeseries", tag = "cost", params(TimeseriesQuery),
    security(("bearer" = ["cost:read"])),
    responses((status = 200, description = "One point per bucket", body = Envelope<Vec<CostPoint>>)))]
async fn cost_timeseries(
    caller: Authorized<require::CostRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<TimeseriesQuery>,
) -> ApiResult<Response> {
    let now = state.clock.now();
    let granularity = query.granularity.unwrap_or(Granularity::Day);
    let default_from = Granularity::Day.bucket(now.as_millis()) - 30 * DAY_MS;
    let range = range_of(
        query.from.as_deref(),
        query.to.as_deref(),
        default_from,
        now,
    )?;
    let first = granularity.bucket(range.from);
    if (range.to - first) / granularity.step() > MAX_BUCKETS {
        return Err(ApiError::validation(
            "granularity",
            format!("granularity: the range holds more than {MAX_BUCKETS} buckets; choose a coarser one"),
        ));
    }
    let team_id = match &query.team {
        Some(name) => {
            match crate::api::teams::find_team_id_by_name(state.db.pool(), &caller.tenant_id, name)
                .await?
            {
                Some(id) => Some(id),
                // An unknown team has spent nothing: every bucket is zero.
                None => return Ok(envelope::ok(zero_series(first, range, granularity))),
            }
        }
        None => None,
    };
    let hours = store::hourly(
        state.db.pool(),
        &caller.tenant_id,
        range,
        query.agent_id.as_deref(),
        team_id.as_deref(),
    )
    .await?;
    let mut buckets: BTreeMap<i64, Totals> = BTreeMap::new();
    let mut start = first;
    while start < range.to {
        buckets.insert(start, Totals::default());
        start += granularity.step();
    }
    for (hour, totals) in hours {
        let bucket = buckets.entry(granularity.bucket(hour)).or_default();
        bucket.cost_micros += totals.cost_micros;
        bucket.input_tokens += totals.input_tokens;
        bucket.output_tokens += totals.output_tokens;
        bucket.requests += totals.requests;
    }
    let points: Vec<CostPoint> = buckets
        .into_iter()
        .map(|(at, totals)| point(at, totals))
        .collect();
    Ok(envelope::ok(points))
}

fn zero_series(first: i64, range: Range, granularity: Granularity) -> Vec<CostPoint> {
    let mut points = Vec::new();
    let mut start = first;
    while start < range.to {
        points.push(point(start, Totals::default()));
        start += granularity.step();
    }
    points
}

fn point(at: i64, totals: Totals) -> CostPoint {
    CostPoint {
        timestamp: Timestamp::from_millis(at),
        cost_usd: micros_to_usd(totals.cost_micros),
        input_tokens: totals.input_tokens,
        output_tokens: totals.output_tokens,
        requests: totals.requests,
    }
}

/// The range of the breakdown views: this month up to today unless given.
fn month_range(state: &AppState, from: Option<&str>, to: Option<&str>) -> ApiResult<Range> {
    let now = state.clock.now();
    range_of(from, to, Period::Month.start(now), now)
}

/// Resolves `from` / `to` with their defaults: `default_from`, and the end of today.
fn range_of(
    from: Option<&str>,
    to: Option<&str>,
    default_from: i64,
    now: Timestamp,
) -> ApiResult<Range> {
    let from = match from {
        Some(text) => range::parse_start("from", text)?,
        None => default_from,
    };
    let to = match to {
        Some(text) => range::parse_end("to", text)?,
        None => Granularity::Day.bucket(now.as_millis()) + DAY_MS,
    };
    range::resolve(from, to)
}
