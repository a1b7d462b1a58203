//! Costs for a finance lead: spend over a range by hour, day or week as a chart with its
//! table, spend by agent, team, model and provider over the same range, the budget
//! limits burning down against their thresholds, and a CSV of every table shown. The
//! range and the filters are the URL's (`/cost/timeseries`'s query), so a view can be
//! shared; every number comes from the API's cost services.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use warden_shared::scopes::Scope;
use warden_shared::timestamp::Timestamp;

use super::chart::BarChart;
use super::filters::Filters;
use super::page::{self, Layout, PageError};
use super::session::Signed;
use crate::api::audit_trail::service::csv_cell;
use crate::api::budget::{self, BudgetScopeStatus};
use crate::api::cost::{
    self, AgentCost, BreakdownQuery, CostPoint, ModelCost, ModelQuery, RangeQuery, TeamCost,
    TimeseriesQuery,
};
use crate::api::envelope::Page;
use crate::api::range::{month_start, DAY_MS};
use crate::auth::{require, Caller};
use crate::state::AppState;

/// The agents a page lists, most expensive first (the API's largest page).
const TOP_AGENTS: i64 = 100;

/// Everything the page shows, read once for the page and once for a CSV.
struct Costs {
    series: Vec<CostPoint>,
    agents: Vec<AgentCost>,
    agents_total: i64,
    teams: Vec<TeamCost>,
    models: Vec<ModelCost>,
    providers: Vec<ModelCost>,
}

#[derive(Template)]
#[template(path = "costs.html")]
struct CostsPage {
    layout: Layout,
    costs: Costs,
    chart: BarChart,
    total: f64,
    budgets: Option<Vec<Burn>>,
    granularity: String,
    from: String,
    to: String,
    agent_id: String,
    team: String,
    /// The query string of what is shown, for the CSV links.
    shown: String,
    filtered: bool,
}

/// A budget limit burning down this month.
struct Burn {
    status: BudgetScopeStatus,
    /// The spend at this month's pace by its end.
    projected: f64,
    /// The projection crosses the block threshold.
    will_block: bool,
}

/// `GET /console/costs`.
pub async fn show(
    State(state): State<AppState>,
    signed: Signed<require::CostRead>,
    filters: Filters<TimeseriesQuery>,
) -> Result<Response, PageError> {
    let (from, to) = range_of(&state, &filters);
    let budgets = async {
        match signed.caller.has(Scope::Admin) {
            true => burn_down(&state, &signed.caller).await.map(Some),
            false => Ok(None),
        }
    };
    let (costs, budgets, layout) = tokio::try_join!(
        read(&state, &signed.caller, &filters.query, &from, &to),
        budgets,
        async { Ok(signed.layout(&state, "costs").await?) },
    )?;
    let granularity = match filters.get("granularity") {
        "" => "day",
        given => given,
    };
    let page = CostsPage {
        layout,
        chart: BarChart::of(&costs.series, granularity),
        total: costs.series.iter().map(|p| p.cost_usd).sum(),
        costs,
        budgets,
        granularity: granularity.to_owned(),
        shown: shown(&filters, &from, &to),
        filtered: !filters.get("agent_id").is_empty() || !filters.get("team").is_empty(),
        agent_id: filters.get("agent_id").to_owned(),
        team: filters.get("team").to_owned(),
        from,
        to,
    };
    Ok(page::render(&page))
}

/// `GET /console/costs/export/{table}`: one table of the page (`series`, `agents`,
/// `teams`, `models` or `providers`) as CSV, for the same URL's filters.
pub async fn export(
    State(state): State<AppState>,
    signed: Signed<require::CostRead>,
    Path(table): Path<String>,
    filters: Filters<TimeseriesQuery>,
) -> Result<Response, PageError> {
    let (from, to) = range_of(&state, &filters);
    let costs = read(&state, &signed.caller, &filters.query, &from, &to).await?;
    let money = |usd: f64| format!("{usd:.6}");
    let mut rows: Vec<Vec<String>> = Vec::new();
    match table.as_str() {
        "series" => {
            rows.push(header(&[
                "timestamp",
                "cost_usd",
                "input_tokens",
                "output_tokens",
                "requests",
            ]));
            for point in &costs.series {
                rows.push(vec![
                    point.timestamp.to_string(),
                    money(point.cost_usd),
                    point.input_tokens.to_string(),
                    point.output_tokens.to_string(),
                    point.requests.to_string(),
                ]);
            }
        }
        "agents" => {
            rows.push(header(&[
                "agent_id",
                "agent_name",
                "team",
                "cost_usd",
                "input_tokens",
                "output_tokens",
                "requests",
            ]));
            for agent in &costs.agents {
                rows.push(vec![
                    agent.agent_id.clone(),
                    agent.agent_name.clone().unwrap_or_default(),
                    agent.team.clone().unwrap_or_default(),
                    money(agent.total_cost_usd),
                    agent.input_tokens.to_string(),
                    agent.output_tokens.to_string(),
                    agent.requests.to_string(),
                ]);
            }
        }
        "teams" => {
            rows.push(header(&[
                "team",
                "cost_usd",
                "input_tokens",
                "output_tokens",
                "requests",
                "agent_count",
            ]));
            for team in &costs.teams {
                rows.push(vec![
                    team.team.clone().unwrap_or_default(),
                    money(team.total_cost_usd),
                    team.input_tokens.to_string(),
                    team.output_tokens.to_string(),
                    team.requests.to_string(),
                    team.agent_count.to_string(),
                ]);
            }
        }
        "models" | "providers" => {
            let models = if table == "models" {
                &costs.models
            } else {
                &costs.providers
            };
            rows.push(header(&[
                "model_provider",
                "model_name",
                "cost_usd",
                "input_tokens",
                "output_tokens",
                "requests",
            ]));
            for model in models {
                rows.push(vec![
                    model.model_provider.clone(),
                    model.model_name.clone(),
                    money(model.total_cost_usd),
                    model.input_tokens.to_string(),
                    model.output_tokens.to_string(),
                    model.requests.to_string(),
                ]);
            }
        }
        _ => {
            return Err(PageError::new(
                StatusCode::NOT_FOUND,
                "There is no such table.",
            ))
        }
    }
    let body: String = rows
        .iter()
        .map(|row| {
            let cells: Vec<String> = row.iter().map(|cell| csv_cell(cell)).collect();
            cells.join(",") + "\r\n"
        })
        .collect();
    let filename = format!("warden-costs-{table}-{from}-{to}.csv");
    Ok((
        [
            (CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
            (CACHE_CONTROL, "no-store".to_owned()),
        ],
        body,
    )
        .into_response())
}

fn header(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

/// The range the whole page shows: the URL's, or this month up to today (as the API's
/// breakdowns and the budgets count).
fn range_of(state: &AppState, filters: &Filters<TimeseriesQuery>) -> (String, String) {
    let today = state.clock.now().as_millis();
    let date = |ms: i64| Timestamp::from_millis(ms).to_string()[..10].to_owned();
    let from = match filters.get("from") {
        "" => date(month_start(Timestamp::from_millis(today))),
        given => given.to_owned(),
    };
    let to = match filters.get("to") {
        "" => date(today),
        given => given.to_owned(),
    };
    (from, to)
}

/// The query string of what the page shows, with its range made explicit.
fn shown(filters: &Filters<TimeseriesQuery>, from: &str, to: &str) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for name in ["granularity", "agent_id", "team"] {
        let value = filters.get(name);
        if !value.is_empty() {
            query.append_pair(name, value);
        }
    }
    query.append_pair("from", from);
    query.append_pair("to", to);
    query.finish()
}

/// Reads the page's five views at once, each on its own connection: they are
/// independent, and the two grouped by agent and by team take most of the time.
async fn read(
    state: &AppState,
    caller: &Caller,
    query: &TimeseriesQuery,
    from: &str,
    to: &str,
) -> Result<Costs, PageError> {
    let range = || RangeQuery {
        from: Some(from.to_owned()),
        to: Some(to.to_owned()),
    };
    let series_query = TimeseriesQuery {
        granularity: query.granularity,
        from: Some(from.to_owned()),
        to: Some(to.to_owned()),
        agent_id: query.agent_id.clone(),
        team: query.team.clone(),
    };
    let agents_query = BreakdownQuery {
        from: Some(from.to_owned()),
        to: Some(to.to_owned()),
        page: None,
        limit: None,
    };
    let top = Page {
        page: 1,
        limit: TOP_AGENTS,
    };
    let models_query = ModelQuery {
        from: Some(from.to_owned()),
        to: Some(to.to_owned()),
        agent_id: query.agent_id.clone(),
        team: query.team.clone(),
    };
    let teams_query = range();
    let (series, (agents, agents_total), teams, models) = tokio::try_join!(
        cost::service::cost_timeseries(state, caller, &series_query),
        cost::service::cost_by_agent(state, caller, &agents_query, top),
        cost::service::cost_by_team(state, caller, &teams_query),
        cost::service::cost_by_model(state, caller, &models_query),
    )?;
    let providers = by_provider(&models);
    Ok(Costs {
        series,
        agents,
        agents_total,
        teams,
        models,
        providers,
    })
}

/// The models' sums per provider, most expensive first.
fn by_provider(models: &[ModelCost]) -> Vec<ModelCost> {
    let mut providers: Vec<ModelCost> = Vec::new();
    for model in models {
        match providers
            .iter_mut()
            .find(|p| p.model_provider == model.model_provider)
        {
            Some(provider) => {
                provider.total_cost_usd += model.total_cost_usd;
                provider.input_tokens += model.input_tokens;
                provider.output_tokens += model.output_tokens;
                provider.requests += model.requests;
            }
            None => providers.push(ModelCost {
                model_provider: model.model_provider.clone(),
                model_name: String::new(),
                total_cost_usd: model.total_cost_usd,
                input_tokens: model.input_tokens,
                output_tokens: model.output_tokens,
                requests: model.requests,
            }),
        }
    }
    providers.sort_by(|a, b| b.total_cost_usd.total_cmp(&a.total_cost_usd));
    providers
}

/// Each budget limit with this month's projection at its pace so far.
async fn burn_down(state: &AppState, caller: &Caller) -> Result<Vec<Burn>, PageError> {
    let now = state.clock.now().as_millis();
    let month = month_start(Timestamp::from_millis(now));
    let next = month_start(Timestamp::from_millis(month + 32 * DAY_MS));
    let elapsed = ((now - month) as f64 / (next - month) as f64).clamp(1.0 / 744.0, 1.0);
    let scopes = budget::service::budget_status(state, caller).await?.scopes;
    Ok(scopes
        .into_iter()
        .map(|status| {
            let projected = status.current_spend_usd / elapsed;
            let will_block =
                projected >= status.monthly_limit_usd * status.block_threshold_pct as f64 / 100.0;
            Burn {
                status,
                projected,
                will_block,
            }
        })
        .collect())
}
