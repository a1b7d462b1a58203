//! The rules of the cost views: default ranges, the bucket limit of a time series, the
//! team a series is filtered by, and dollars from the rollups' micro-dollars.

use std::collections::BTreeMap;

use warden_shared::pricing::micros_to_usd;
use warden_shared::timestamp::Timestamp;

use super::store::{self, Totals};
use super::{
    AgentCost, BreakdownQuery, CostPoint, CostSummary, ModelCost, ModelQuery, RangeQuery,
    SummaryQuery, TeamCost, TimeseriesQuery,
};
use crate::api::envelope::Page;
use crate::api::range::{self, Granularity, Period, Range, DAY_MS};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// At most this many buckets in one series: 100 days by the hour (the console's
/// 90-day hourly view fits).
const MAX_BUCKETS: i64 = 2_400;

/// Totals over the range, by default the current period (a month unless given) up to
/// the end of today.
pub async fn cost_summary(
    state: &AppState,
    caller: &Caller,
    query: &SummaryQuery,
) -> ApiResult<CostSummary> {
    let now = state.clock.now();
    let period = query.period.unwrap_or(Period::Month);
    let range = range_of(
        query.from.as_deref(),
        query.to.as_deref(),
        period.start(now),
        now,
    )?;
    let totals = store::summary(state.db.pool(), &caller.tenant_id, range).await?;
    Ok(CostSummary {
        total_cost_usd: micros_to_usd(totals.cost_micros),
        total_input_tokens: totals.input_tokens,
        total_output_tokens: totals.output_tokens,
        total_requests: totals.requests,
        period: period.as_str(),
        from: Timestamp::from_millis(range.from),
        to: Timestamp::from_millis(range.to),
    })
}

/// One page of agents by spend, most expensive first, and how many agents spent.
pub async fn cost_by_agent(
    state: &AppState,
    caller: &Caller,
    query: &BreakdownQuery,
    page: Page,
) -> ApiResult<(Vec<AgentCost>, i64)> {
    let range = month_range(state, query.from.as_deref(), query.to.as_deref())?;
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
    Ok((agents, total))
}

pub async fn cost_by_team(
    state: &AppState,
    caller: &Caller,
    query: &RangeQuery,
) -> ApiResult<Vec<TeamCost>> {
    let range = month_range(state, query.from.as_deref(), query.to.as_deref())?;
    let rows = store::by_team(state.db.pool(), &caller.tenant_id, range).await?;
    Ok(rows
        .into_iter()
        .map(|(team, agent_count, totals)| TeamCost {
            team,
            total_cost_usd: micros_to_usd(totals.cost_micros),
            input_tokens: totals.input_tokens,
            output_tokens: totals.output_tokens,
            requests: totals.requests,
            agent_count,
        })
        .collect())
}

pub async fn cost_by_model(
    state: &AppState,
    caller: &Caller,
    query: &ModelQuery,
) -> ApiResult<Vec<ModelCost>> {
    let range = month_range(state, query.from.as_deref(), query.to.as_deref())?;
    let team_id = match &query.team {
        Some(name) => match find_team(state, caller, name).await? {
            Some(id) => Some(id),
            // An unknown team has spent nothing.
            None => return Ok(Vec::new()),
        },
        None => None,
    };
    let rows = store::by_model(
        state.db.pool(),
        &caller.tenant_id,
        range,
        query.agent_id.as_deref(),
        team_id.as_deref(),
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|(model_provider, model_name, totals)| ModelCost {
            model_provider,
            model_name,
            total_cost_usd: micros_to_usd(totals.cost_micros),
            input_tokens: totals.input_tokens,
            output_tokens: totals.output_tokens,
            requests: totals.requests,
        })
        .collect())
}

/// One point per bucket of the range (by default the last 30 days, daily), zeros
/// included; more than [`MAX_BUCKETS`] is a 422.
pub async fn cost_timeseries(
    state: &AppState,
    caller: &Caller,
    query: &TimeseriesQuery,
) -> ApiResult<Vec<CostPoint>> {
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
        Some(name) => match find_team(state, caller, name).await? {
            Some(id) => Some(id),
            // An unknown team has spent nothing: every bucket is zero.
            None => return Ok(zero_series(first, range, granularity)),
        },
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
    Ok(buckets
        .into_iter()
        .map(|(at, totals)| point(at, totals))
        .collect())
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

/// The id of the caller's team of that name, if there is one.
async fn find_team(state: &AppState, caller: &Caller, name: &str) -> ApiResult<Option<String>> {
    Ok(crate::api::teams::find_team_id_by_name(state.db.pool(), &caller.tenant_id, name).await?)
}
