//! The rollup levels the ledger maintains, each summed in memory per batch and added to
//! its table with one multi-row upsert per chunk.
//!
//! - `usage_hourly`: tenant, hour, agent, team, provider, model. The finest level: one
//!   agent's hours, and the edges of ranges that do not start or end at midnight.
//! - `usage_daily`: tenant, day, agent, team, for views grouped by agent or team. Only
//!   for closed days (see `days`): a batch adds to it only its records of those.
//! - `usage_daily_open`: the same for open days, so today's per-agent sums are one row
//!   per agent; closing a day moves its rows into `usage_daily`. Finished hours are
//!   rolled into it in the background: a batch adds to it only its late records (of
//!   hours before the tenant's `rolled_until`).
//! - `usage_monthly`: tenant, calendar month, agent, team: the closed days of each month
//!   summed, so a month grouped by agent reads one row per agent. A batch adds to it
//!   what it adds to `usage_daily` (late records); closing a day adds the day's rows.
//! - `usage_model_hourly`: tenant, hour, provider, model and source, without the agent,
//!   for the summary, the by-model view, unfiltered time series and proxy statistics.
//!
//! A month of a 1,000-agent tenant using four models is up to 2.9 million hourly rows, but
//! 30,000 daily rows and a few thousand model-hour rows: that is what keeps the cost views
//! fast at any volume.

use std::collections::HashMap;

use warden_shared::timestamp::Timestamp;

use super::days::Marks;
use super::{Record, DAY_MS, HOUR_MS};
use crate::db::bulk::{for_backend, placeholders, rows_per_statement};
use crate::db::WriteTx;

/// One rollup table.
#[derive(Debug, Clone, Copy)]
enum Level {
    AgentHourly,
    AgentDaily,
    AgentDailyOpen,
    AgentMonthly,
    ModelHourly,
}

const LEVELS: [Level; 5] = [
    Level::AgentHourly,
    Level::AgentDaily,
    Level::AgentDailyOpen,
    Level::AgentMonthly,
    Level::ModelHourly,
];

impl Level {
    /// The start of the level's bucket that holds time `at`.
    fn bucket(self, at: i64) -> i64 {
        match self {
            Level::AgentHourly | Level::ModelHourly => at - at.rem_euclid(HOUR_MS),
            Level::AgentDaily | Level::AgentDailyOpen => at - at.rem_euclid(DAY_MS),
            Level::AgentMonthly => Timestamp::from_millis(at).month_start(),
        }
    }

    fn per_agent(self) -> bool {
        !matches!(self, Level::ModelHourly)
    }

    fn per_model(self) -> bool {
        !matches!(
            self,
            Level::AgentDaily | Level::AgentDailyOpen | Level::AgentMonthly
        )
    }

    /// The upsert for `rows` rows: key columns, then the four sums.
    /// The upsert of `values` rows (see [`placeholders`]).
    fn upsert_sql(self, values: &str) -> String {
        let (table, key) = match self {
            Level::AgentHourly => (
                "usage_hourly",
                "tenant_id, hour, agent_id, team_id, model_provider, model_name",
            ),
            Level::AgentDaily => ("usage_daily", "tenant_id, day, agent_id, team_id"),
            Level::AgentDailyOpen => ("usage_daily_open", "tenant_id, day, agent_id, team_id"),
            Level::AgentMonthly => ("usage_monthly", "tenant_id, month, agent_id, team_id"),
            Level::ModelHourly => (
                "usage_model_hourly",
                "tenant_id, hour, model_provider, model_name, source",
            ),
        };
        format!(
            "INSERT INTO {table} ({key}, requests, input_tokens, output_tokens, cost_micros) \
             VALUES {values} ON CONFLICT ({key}) \
             DO UPDATE SET requests = {table}.requests + excluded.requests, \
             input_tokens = {table}.input_tokens + excluded.input_tokens, \
             output_tokens = {table}.output_tokens + excluded.output_tokens, \
             cost_micros = {table}.cost_micros + excluded.cost_micros"
        )
    }

    /// Whether a batch adds a record of time `at` to the level, given its tenant's marks
    /// (see `days`): daily rows take only hours already rolled, split between closed and
    /// open days.
    fn holds(self, at: i64, marks: Marks) -> bool {
        match self {
            Level::AgentDaily | Level::AgentMonthly => {
                at < marks.rolled_until && at < marks.open_from
            }
            Level::AgentDailyOpen => at < marks.rolled_until && at >= marks.open_from,
            Level::AgentHourly | Level::ModelHourly => true,
        }
    }

    fn per_source(self) -> bool {
        matches!(self, Level::ModelHourly)
    }

    /// Bound values per row: tenant, bucket, the level's dimensions, four sums.
    fn columns(self) -> usize {
        2 + 2 * usize::from(self.per_agent())
            + 2 * usize::from(self.per_model())
            + usize::from(self.per_source())
            + 4
    }
}

/// Tenant, bucket start, agent, team (`""` for none), provider, model, source;
/// dimensions a level does not have are left empty.
type Key<'k> = (
    &'k str,
    i64,
    &'k str,
    &'k str,
    &'k str,
    &'k str,
    &'static str,
);

/// Adds `records` to every rollup level that takes them (`marks`: each tenant's).
pub(super) async fn add(
    tx: &mut WriteTx,
    records: &[Record<'_, '_>],
    marks: &HashMap<String, Marks>,
) -> Result<(), sqlx::Error> {
    for level in LEVELS {
        let sums = sum(level, records, marks);
        if sums.is_empty() {
            continue;
        }
        let rows = rows_per_statement(tx, level.columns());
        for chunk in sums.chunks(rows) {
            let values = placeholders(tx, chunk.len(), level.columns(), 1);
            let sql = for_backend(tx, level.upsert_sql(&values));
            let mut query = sqlx::query(&sql);
            for ((tenant_id, bucket, agent_id, team_id, provider, model, source), sum) in chunk {
                query = query.bind(*tenant_id).bind(*bucket);
                if level.per_agent() {
                    query = query.bind(*agent_id).bind(*team_id);
                }
                if level.per_model() {
                    query = query.bind(*provider).bind(*model);
                }
                if level.per_source() {
                    query = query.bind(*source);
                }
                query = query.bind(sum[0]).bind(sum[1]).bind(sum[2]).bind(sum[3]);
            }
            query.execute(&mut **tx).await?;
        }
    }
    Ok(())
}

fn add_counts(sum: &mut [i64; 4], counts: [i64; 4]) {
    for (total, count) in sum.iter_mut().zip(counts) {
        *total += count;
    }
}

/// Requests, input tokens, output tokens and cost per key of `level`.
fn sum<'r>(
    level: Level,
    records: &'r [Record<'r, '_>],
    marks: &HashMap<String, Marks>,
) -> Vec<(Key<'r>, [i64; 4])> {
    let mut sums: foldhash::HashMap<Key<'r>, [i64; 4]> = foldhash::HashMapExt::new();
    let mut run: Option<(Key<'r>, [i64; 4])> = None;
    // A batch's records mostly share one tenant: its marks are looked up once per run.
    let mut tenant_marks = ("", Marks::NONE);
    for (entry, _, team_id, cost_micros, _) in records {
        let at = entry.recorded_at.as_millis();
        if tenant_marks.0 != entry.tenant_id {
            let found = marks.get(entry.tenant_id).copied().unwrap_or(Marks::NONE);
            tenant_marks = (entry.tenant_id, found);
        }
        let tenant_marks = tenant_marks.1;
        if !level.holds(at, tenant_marks) {
            continue;
        }
        let (agent_id, team_id) = if level.per_agent() {
            (entry.agent_id, team_id.as_deref().unwrap_or(""))
        } else {
            ("", "")
        };
        let (provider, model) = if level.per_model() {
            (entry.provider.as_str(), entry.model_name)
        } else {
            ("", "")
        };
        let source = if level.per_source() {
            entry.source.as_str()
        } else {
            ""
        };
        let key = (
            entry.tenant_id,
            level.bucket(at),
            agent_id,
            team_id,
            provider,
            model,
            source,
        );
        let counts = [1, entry.input_tokens, entry.output_tokens, *cost_micros];
        // A batch's records mostly share the previous one's key (one agent and model in
        // one hour): those add up without hashing the key.
        match &mut run {
            Some((last, sum)) if *last == key => add_counts(sum, counts),
            _ => {
                if let Some((last, sum)) = run.replace((key, counts)) {
                    add_counts(sums.entry(last).or_insert([0; 4]), sum);
                }
            }
        }
    }
    if let Some((last, sum)) = run {
        add_counts(sums.entry(last).or_insert([0; 4]), sum);
    }
    // Sorted, so concurrent batches lock the rollup rows they share in the same order
    // and cannot deadlock on PostgreSQL.
    let mut rows: Vec<_> = sums.into_iter().collect();
    rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    rows
}

#[cfg(test)]
mod tests {
    use warden_shared::registry::Provider;
    use warden_shared::timestamp::Timestamp;

    use super::*;
    use crate::ledger::{UsageEntry, UsageSource};

    fn entry<'a>(agent_id: &'a str, at: i64) -> UsageEntry<'a> {
        UsageEntry {
            tenant_id: "ten_a",
            agent_id,
            provider: Provider::Openai,
            model_name: "gpt-4o",
            request_type: "chat.completions",
            input_tokens: 10,
            output_tokens: 1,
            cost_micros: None,
            recorded_at: Timestamp::from_millis(at),
            source: UsageSource::Proxy,
            idempotency_key: None,
            api_key_id: None,
            decision: None,
        }
    }

    #[test]
    fn sums_add_runs_and_interleaved_keys_alike() {
        // a, a, b, a in one hour, then a in the next: the run of a is added up without
        // the map, and the a after b lands in the same sum.
        let entries = [
            entry("agt_a", 0),
            entry("agt_a", 1),
            entry("agt_b", 2),
            entry("agt_a", 3),
            entry("agt_a", HOUR_MS),
        ];
        let records: Vec<Record<'_, '_>> = entries
            .iter()
            .map(|e| (e, String::new(), None, 5, true))
            .collect();
        let marks = HashMap::new();
        let sums = sum(Level::AgentHourly, &records, &marks);
        let found: Vec<(&str, i64, [i64; 4])> = sums
            .iter()
            .map(|(key, counts)| (key.2, key.1, *counts))
            .collect();
        assert_eq!(
            found,
            [
                ("agt_a", 0, [3, 30, 3, 15]),
                ("agt_b", 0, [1, 10, 1, 5]),
                ("agt_a", HOUR_MS, [1, 10, 1, 5]),
            ]
        );
    }
}
