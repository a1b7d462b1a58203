//! SQL of the cost views. Every statement reads the rollups of one tenant (see
//! `crate::ledger`): per model and hour for totals, per agent and month or day (plus the
//! hours at the range's edges) for views grouped by agent or team.

use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, AnyPool, Row};

use crate::api::envelope::Page;
use crate::api::range::Range;

/// Sums of a group of rollup rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub cost_micros: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub requests: i64,
}

/// The sums every view selects, named as `totals_from_row` reads them.
macro_rules! sums {
    () => {
        "CAST(COALESCE(SUM(u.cost_micros), 0) AS BIGINT) AS cost, \
         CAST(COALESCE(SUM(u.input_tokens), 0) AS BIGINT) AS input_tokens, \
         CAST(COALESCE(SUM(u.output_tokens), 0) AS BIGINT) AS output_tokens, \
         CAST(COALESCE(SUM(u.requests), 0) AS BIGINT) AS requests"
    };
}

/// SQL, in a `SELECT .. FROM usage_days_closed m WHERE m.tenant_id = $1`: the tenant's
/// first open day (days before it are closed: in `usage_daily` and `usage_monthly`);
/// without marks every day is closed, but its month may go on. The aggregate makes the
/// select one row even without marks.
macro_rules! open_from {
    () => {
        "COALESCE(MAX(m.open_from), 9223372036854775807)"
    };
}

/// The per-agent rollup rows of a range, each part of it from the coarsest rollup that
/// holds it exactly:
/// - whole months: their closed days from `usage_monthly`;
/// - the month the range ends in, when the range holds every closed day of it (as a
///   month to date does): from `usage_monthly` too; otherwise its days from
///   `usage_daily`, as are the days before the range's first month start;
/// - open days from `usage_daily_open`, and the hours not yet rolled into them (from the
///   tenant's `rolled_until`: an hour or two) from `usage_hourly`;
/// - the hours before the first midnight and after the last from `usage_hourly`.
///
/// One statement, so a day closing or an hour rolling meanwhile is read from exactly one
/// place, and the last month's choice sees the same `open_from` as its rows. That choice
/// is a bound of each branch's range (empty for the branch not taken), not a condition
/// beside it: SQLite walked the whole month's daily rows to test a constant condition on
/// each (16 ms of 24 at 10,000 agents). Each part is its own branch with a plain range
/// on the primary key: as one `OR` of ranges, SQLite
/// without statistics scanned the tenant's whole hourly rollup (2 s at 10 million
/// records); likewise the unrolled hours' lower bound is one expression (the later of the
/// range's start and the mark), not two conditions, or SQLite bounds the scan by the
/// range's start. Binds `$1` tenant, `$2`..`$9` (see [`bind_agent_range`]).
macro_rules! agent_rows {
    () => {
        concat!(
            "(SELECT agent_id, team_id, requests, input_tokens, output_tokens, cost_micros \
             FROM usage_daily WHERE tenant_id = $1 AND day >= $2 AND day < $4 \
             UNION ALL \
             SELECT agent_id, team_id, requests, input_tokens, output_tokens, cost_micros \
             FROM usage_monthly WHERE tenant_id = $1 AND month >= $4 AND month < $5 \
             UNION ALL \
             SELECT agent_id, team_id, requests, input_tokens, output_tokens, cost_micros \
             FROM usage_monthly WHERE tenant_id = $1 AND month >= $5 AND month < \
             (SELECT CASE WHEN ",
            open_from!(),
            " <= $3 AND $5 < $3 THEN $5 + 1 ELSE $5 END FROM usage_days_closed m \
             WHERE m.tenant_id = $1) \
             UNION ALL \
             SELECT agent_id, team_id, requests, input_tokens, output_tokens, cost_micros \
             FROM usage_daily WHERE tenant_id = $1 AND day >= $5 AND day < \
             (SELECT CASE WHEN ",
            open_from!(),
            " > $3 THEN $3 ELSE $5 END FROM usage_days_closed m WHERE m.tenant_id = $1) \
             UNION ALL \
             SELECT agent_id, team_id, requests, input_tokens, output_tokens, cost_micros \
             FROM usage_daily_open WHERE tenant_id = $1 AND day >= $2 AND day < $3 \
             UNION ALL \
             SELECT agent_id, team_id, requests, input_tokens, output_tokens, cost_micros \
             FROM usage_hourly WHERE tenant_id = $1 AND hour < $3 AND hour >= ",
            crate::ledger::unrolled_from!("$1", "$2", "$3"),
            " UNION ALL \
             SELECT agent_id, team_id, requests, input_tokens, output_tokens, cost_micros \
             FROM usage_hourly WHERE tenant_id = $1 AND hour >= $6 AND hour < $7 \
             UNION ALL \
             SELECT agent_id, team_id, requests, input_tokens, output_tokens, cost_micros \
             FROM usage_hourly WHERE tenant_id = $1 AND hour >= $8 AND hour < $9) u"
        )
    };
}

type AnyQuery<'q> = Query<'q, Any, AnyArguments<'q>>;

/// Binds the tenant and the parts of `range` that [`agent_rows!`] reads.
fn bind_agent_range<'q>(query: AnyQuery<'q>, tenant_id: &'q str, range: Range) -> AnyQuery<'q> {
    let split = range.split_days();
    let months = split.months();
    query
        .bind(tenant_id)
        .bind(split.days.from)
        .bind(split.days.to)
        .bind(months.months.from)
        .bind(months.last.from)
        .bind(split.head.from)
        .bind(split.head.to)
        .bind(split.tail.from)
        .bind(split.tail.to)
}

pub async fn summary(pool: &AnyPool, tenant_id: &str, range: Range) -> Result<Totals, sqlx::Error> {
    let row = sqlx::query(concat!(
        "SELECT ",
        sums!(),
        " FROM usage_model_hourly u WHERE u.tenant_id = $1 AND u.hour >= $2 AND u.hour < $3"
    ))
    .bind(tenant_id)
    .bind(range.from)
    .bind(range.to)
    .fetch_one(pool)
    .await?;
    totals_from_row(&row)
}

/// One row per agent: id, name, current team name and sums; most expensive first.
/// One page of agents by cost, and the number of agents that spent in the range.
pub async fn by_agent(
    pool: &AnyPool,
    tenant_id: &str,
    range: Range,
    page: Page,
) -> Result<(Vec<AgentTotals>, i64), sqlx::Error> {
    // Aggregate first, then look up names for the (at most one page of) agents: the
    // join then touches one row per agent, whatever the planner thinks of the rollups.
    // The window count numbers the groups before LIMIT, so the total needs no second
    // pass over the rollups.
    let query = sqlx::query(concat!(
        "SELECT g.agent_id, a.name AS agent_name, tm.name AS team_name, g.agent_total, \
         g.cost, g.input_tokens, g.output_tokens, g.requests FROM (SELECT u.agent_id, \
         COUNT(*) OVER () AS agent_total, ",
        sums!(),
        " FROM ",
        agent_rows!(),
        " GROUP BY u.agent_id ORDER BY cost DESC, u.agent_id LIMIT $10 OFFSET $11) g \
         LEFT JOIN agents a ON a.tenant_id = $1 AND a.id = g.agent_id \
         LEFT JOIN teams tm ON tm.tenant_id = $1 AND tm.id = a.team_id \
         ORDER BY g.cost DESC, g.agent_id"
    ));
    let rows = bind_agent_range(query, tenant_id, range)
        .bind(page.limit)
        .bind(page.offset())
        .fetch_all(pool)
        .await?;
    let total = match rows.first() {
        Some(row) => row.try_get("agent_total")?,
        // A page past the end carries no count: count separately.
        None if page.offset() > 0 => agent_count(pool, tenant_id, range).await?,
        None => 0,
    };
    let agents = rows
        .iter()
        .map(|row| {
            Ok((
                row.try_get("agent_id")?,
                row.try_get("agent_name")?,
                row.try_get("team_name")?,
                totals_from_row(row)?,
            ))
        })
        .collect::<Result<_, sqlx::Error>>()?;
    Ok((agents, total))
}

/// Agent id, agent name, team name, sums.
pub type AgentTotals = (String, Option<String>, Option<String>, Totals);

async fn agent_count(pool: &AnyPool, tenant_id: &str, range: Range) -> Result<i64, sqlx::Error> {
    let query = sqlx::query(concat!(
        "SELECT COUNT(DISTINCT u.agent_id) AS agents FROM ",
        agent_rows!()
    ));
    bind_agent_range(query, tenant_id, range)
        .fetch_one(pool)
        .await?
        .try_get("agents")
}

/// One row per team the usage was attributed to (`None`: agents without a team), with
/// the number of agents that spent in the range.
pub async fn by_team(
    pool: &AnyPool,
    tenant_id: &str,
    range: Range,
) -> Result<Vec<(Option<String>, i64, Totals)>, sqlx::Error> {
    let query = sqlx::query(concat!(
        "SELECT g.team_id, tm.name AS team_name, g.agent_count, g.cost, g.input_tokens, \
         g.output_tokens, g.requests FROM (SELECT u.team_id, \
         COUNT(DISTINCT u.agent_id) AS agent_count, ",
        sums!(),
        " FROM ",
        agent_rows!(),
        " GROUP BY u.team_id) g \
         LEFT JOIN teams tm ON tm.tenant_id = $1 AND tm.id = g.team_id \
         ORDER BY g.cost DESC, g.team_id"
    ));
    let rows = bind_agent_range(query, tenant_id, range)
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get("team_name")?,
                row.try_get("agent_count")?,
                totals_from_row(row)?,
            ))
        })
        .collect()
}

/// Sums per provider and model, optionally of one agent and/or one team id. Without
/// either, the per-model rollups answer; with one, the per-agent hours (led by the
/// agent's own index when there is an agent).
pub async fn by_model(
    pool: &AnyPool,
    tenant_id: &str,
    range: Range,
    agent_id: Option<&str>,
    team_id: Option<&str>,
) -> Result<Vec<(String, String, Totals)>, sqlx::Error> {
    let sql = match (agent_id, team_id) {
        (None, None) => concat!(
            "SELECT u.model_provider, u.model_name, ",
            sums!(),
            " FROM usage_model_hourly u WHERE u.tenant_id = $1 AND u.hour >= $2 AND u.hour < $3 \
             AND $4 IS NULL AND $5 IS NULL \
             GROUP BY u.model_provider, u.model_name ORDER BY cost DESC, u.model_provider, u.model_name"
        ),
        // As in [`hourly`]: a plain equality per case, so each plan can use its index.
        (Some(_), _) => concat!(
            "SELECT u.model_provider, u.model_name, ",
            sums!(),
            " FROM usage_hourly u WHERE u.tenant_id = $1 AND u.hour >= $2 AND u.hour < $3 \
             AND u.agent_id = $4 AND ($5 IS NULL OR u.team_id = $5) \
             GROUP BY u.model_provider, u.model_name ORDER BY cost DESC, u.model_provider, u.model_name"
        ),
        (None, Some(_)) => concat!(
            "SELECT u.model_provider, u.model_name, ",
            sums!(),
            " FROM usage_hourly u WHERE u.tenant_id = $1 AND u.hour >= $2 AND u.hour < $3 \
             AND $4 IS NULL AND u.team_id = $5 \
             GROUP BY u.model_provider, u.model_name ORDER BY cost DESC, u.model_provider, u.model_name"
        ),
    };
    let rows = sqlx::query(sql)
        .bind(tenant_id)
        .bind(range.from)
        .bind(range.to)
        .bind(agent_id)
        .bind(team_id)
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get("model_provider")?,
                row.try_get("model_name")?,
                totals_from_row(row)?,
            ))
        })
        .collect()
}

/// Sums per hour, optionally for one agent and/or one team id. Without either, the
/// per-model rollups answer: they hold a few rows per hour instead of one per agent.
pub async fn hourly(
    pool: &AnyPool,
    tenant_id: &str,
    range: Range,
    agent_id: Option<&str>,
    team_id: Option<&str>,
) -> Result<Vec<(i64, Totals)>, sqlx::Error> {
    let sql = match (agent_id, team_id) {
        (None, None) => concat!(
            "SELECT u.hour, ",
            sums!(),
            " FROM usage_model_hourly u WHERE u.tenant_id = $1 AND u.hour >= $2 \
             AND u.hour < $3 AND $4 IS NULL AND $5 IS NULL GROUP BY u.hour ORDER BY u.hour"
        ),
        // The agent's own index (tenant, agent, hour) leads; the team narrows it further.
        (Some(_), _) => concat!(
            "SELECT u.hour, ",
            sums!(),
            " FROM usage_hourly u WHERE u.tenant_id = $1 AND u.hour >= $2 AND u.hour < $3 \
             AND u.agent_id = $4 AND ($5 IS NULL OR u.team_id = $5) \
             GROUP BY u.hour ORDER BY u.hour"
        ),
        (None, Some(_)) => concat!(
            "SELECT u.hour, ",
            sums!(),
            " FROM usage_hourly u WHERE u.tenant_id = $1 AND u.hour >= $2 AND u.hour < $3 \
             AND $4 IS NULL AND u.team_id = $5 GROUP BY u.hour ORDER BY u.hour"
        ),
    };
    let rows = sqlx::query(sql)
        .bind(tenant_id)
        .bind(range.from)
        .bind(range.to)
        .bind(agent_id)
        .bind(team_id)
        .fetch_all(pool)
        .await?;
    hours_from_rows(&rows)
}

fn hours_from_rows(rows: &[AnyRow]) -> Result<Vec<(i64, Totals)>, sqlx::Error> {
    rows.iter()
        .map(|row| Ok((row.try_get("hour")?, totals_from_row(row)?)))
        .collect()
}

fn totals_from_row(row: &AnyRow) -> Result<Totals, sqlx::Error> {
    Ok(Totals {
        cost_micros: row.try_get("cost")?,
        input_tokens: row.try_get("input_tokens")?,
        output_tokens: row.try_get("output_tokens")?,
        requests: row.try_get("requests")?,
    })
}
