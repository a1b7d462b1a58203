//! The cost ledger: append usage records and fold them into the hourly rollups, in the
//! caller's transaction, a whole batch at a time.
//!
//! Records are never updated or deleted (except with their tenant). Cost views read the
//! rollups, never the records (see `rollups` for the three levels).
//! A batch costs a handful of multi-row statements, not a few per record: agents are
//! looked up once per batch, idempotency keys are claimed by one insert that reports which
//! were new, rollup increments are summed in memory first (`rollups`), and records and
//! rollups are written with multi-row `INSERT`s.

use std::collections::{HashMap, HashSet};

use sqlx::Row;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::pricing;
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use crate::db::WriteTx;

mod rollups;

/// Milliseconds in an hour, the rollups' bucket.
pub const HOUR_MS: i64 = 3_600_000;
/// Milliseconds in a UTC day, the daily rollups' bucket.
pub const DAY_MS: i64 = 24 * HOUR_MS;

/// Bound parameters per multi-row statement on SQLite. SQLite resolves each `$N`
/// parameter by a linear search of the statement's parameter names, so binding costs
/// grow with the square of a statement's size; a few hundred keeps that negligible.
const SQLITE_PARAMS_PER_STATEMENT: usize = 480;
/// On PostgreSQL binding is linear and each statement is a round trip, so a 1,000-record
/// batch goes in a handful of statements (the protocol allows 65,535 parameters).
const POSTGRES_PARAMS_PER_STATEMENT: usize = 16_000;

/// One usage event to record.
#[derive(Debug, Clone)]
pub struct UsageEntry<'a> {
    pub tenant_id: &'a str,
    pub agent_id: &'a str,
    pub provider: Provider,
    pub model_name: &'a str,
    pub request_type: &'a str,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// The cost as reported; computed from the price table when `None`.
    pub cost_micros: Option<i64>,
    pub recorded_at: Timestamp,
    pub source: UsageSource,
    /// The proxy's id of this record: recorded at most once per tenant.
    pub idempotency_key: Option<&'a str>,
}

/// Who measured a usage record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageSource {
    /// The proxy, from the provider's answer. Usage it served before an agent was
    /// deleted still counts.
    Proxy,
    /// The agent itself, through the telemetry endpoints, which accept only live agents.
    Telemetry,
}

impl UsageSource {
    pub const fn as_str(self) -> &'static str {
        match self {
            UsageSource::Proxy => "proxy",
            UsageSource::Telemetry => "telemetry",
        }
    }
}

/// What became of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Recorded {
        id: String,
        cost_micros: i64,
        /// False when the model is not in the price table and no cost was given.
        priced: bool,
    },
    /// Its idempotency key was recorded before (or earlier in the same batch).
    Duplicate,
    /// The tenant has no such agent.
    UnknownAgent,
}

/// Records `entries`, returning one outcome per entry in order. `batch_id` labels the
/// idempotency keys written for entries that carry one.
pub async fn record_batch(
    tx: &mut WriteTx,
    batch_id: &str,
    entries: &[UsageEntry<'_>],
    now: Timestamp,
) -> Result<Vec<Outcome>, sqlx::Error> {
    let teams = agent_teams(tx, entries).await?;
    let mut outcomes = Vec::with_capacity(entries.len());
    let mut in_batch: HashSet<(&str, &str)> = HashSet::new();
    let mut candidates = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let team = teams.get(&(entry.tenant_id.to_owned(), entry.agent_id.to_owned()));
        let outcome = match team {
            Some((_, deleted)) if *deleted && entry.source != UsageSource::Proxy => {
                Outcome::UnknownAgent
            }
            None => Outcome::UnknownAgent,
            Some(_) => match entry.idempotency_key {
                Some(key) if !in_batch.insert((entry.tenant_id, key)) => Outcome::Duplicate,
                _ => {
                    let team_id = team.and_then(|(team_id, _)| team_id.clone());
                    candidates.push((index, entry, team_id));
                    // Filled in below, once the key claim says whether it is new.
                    Outcome::Duplicate
                }
            },
        };
        outcomes.push(outcome);
    }
    let claimed = claim_keys(tx, batch_id, &candidates, now).await?;
    let mut records = Vec::with_capacity(candidates.len());
    for (index, entry, team_id) in candidates {
        if let Some(key) = entry.idempotency_key {
            if !claimed.contains(&(entry.tenant_id, key)) {
                continue;
            }
        }
        let (cost_micros, priced) = cost_of(entry);
        let id = new_id(IdKind::Usage, entry.recorded_at.as_millis());
        outcomes[index] = Outcome::Recorded {
            id: id.clone(),
            cost_micros,
            priced,
        };
        records.push((entry, id, team_id, cost_micros, priced));
    }
    insert_records(tx, &records).await?;
    rollups::add(tx, &records).await?;
    Ok(outcomes)
}

fn cost_of(entry: &UsageEntry<'_>) -> (i64, bool) {
    match (
        entry.cost_micros,
        pricing::find_price(entry.provider, entry.model_name),
    ) {
        (Some(cost), _) => (cost, true),
        (None, Some(price)) => (
            pricing::cost_micros(price, entry.input_tokens, entry.output_tokens),
            true,
        ),
        (None, None) => (0, false),
    }
}

/// An entry about to be written: its id, team, cost and whether it was priced.
type Record<'e, 'a> = (&'e UsageEntry<'a>, String, Option<String>, i64, bool);

/// How many rows of `columns` bound values fit one statement of `tx`'s backend.
pub(crate) fn rows_per_statement(tx: &mut WriteTx, columns: usize) -> usize {
    let params = if tx.backend_name() == "PostgreSQL" {
        POSTGRES_PARAMS_PER_STATEMENT
    } else {
        SQLITE_PARAMS_PER_STATEMENT
    };
    (params / columns).max(1)
}

/// `($1, $2, ...), ($n+1, ...)`: placeholders only, built from counts, never from input.
pub(crate) fn placeholders(rows: usize, columns: usize, first: usize) -> String {
    let mut sql = String::with_capacity(rows * columns * 5);
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for column in 0..columns {
            if column > 0 {
                sql.push_str(", ");
            }
            sql.push('$');
            sql.push_str(&(first + row * columns + column).to_string());
        }
        sql.push(')');
    }
    sql
}

/// Inserts the idempotency keys of `candidates`, skipping those recorded before, and
/// returns the keys that were new. The primary key decides, so a concurrent batch with
/// the same record cannot slip in between a check and an insert.
async fn claim_keys<'e>(
    tx: &mut WriteTx,
    batch_id: &str,
    candidates: &[(usize, &'e UsageEntry<'e>, Option<String>)],
    now: Timestamp,
) -> Result<HashSet<(&'e str, &'e str)>, sqlx::Error> {
    let keyed: Vec<(&str, &str)> = candidates
        .iter()
        .filter_map(|(_, entry, _)| entry.idempotency_key.map(|key| (entry.tenant_id, key)))
        .collect();
    let mut claimed = HashSet::with_capacity(keyed.len());
    for chunk in keyed.chunks(rows_per_statement(tx, 4)) {
        let sql = format!(
            "INSERT INTO usage_ingest_keys (tenant_id, record_id, batch_id, received_at) \
             VALUES {} ON CONFLICT (tenant_id, record_id) DO NOTHING RETURNING tenant_id, record_id",
            placeholders(chunk.len(), 4, 1)
        );
        let mut query = sqlx::query(&sql);
        for (tenant_id, key) in chunk {
            query = query
                .bind(*tenant_id)
                .bind(*key)
                .bind(batch_id)
                .bind(now.as_millis());
        }
        let new: HashSet<(String, String)> = query
            .fetch_all(&mut **tx)
            .await?
            .iter()
            .map(|row| Ok((row.try_get("tenant_id")?, row.try_get("record_id")?)))
            .collect::<Result<_, sqlx::Error>>()?;
        claimed.extend(chunk.iter().copied().filter(|(tenant_id, key)| {
            new.contains(&((*tenant_id).to_owned(), (*key).to_owned()))
        }));
    }
    Ok(claimed)
}

/// Team id and deleted flag of every agent the entries name, per tenant.
async fn agent_teams(
    tx: &mut WriteTx,
    entries: &[UsageEntry<'_>],
) -> Result<HashMap<(String, String), (Option<String>, bool)>, sqlx::Error> {
    let mut by_tenant: HashMap<&str, HashSet<&str>> = HashMap::new();
    for entry in entries {
        by_tenant
            .entry(entry.tenant_id)
            .or_default()
            .insert(entry.agent_id);
    }
    let mut teams = HashMap::new();
    for (tenant_id, agents) in by_tenant {
        let agents: Vec<&str> = agents.into_iter().collect();
        for chunk in agents.chunks(rows_per_statement(tx, 1) - 1) {
            let sql = format!(
                "SELECT id, team_id, deleted_at FROM agents WHERE tenant_id = $1 AND id IN {}",
                placeholders(1, chunk.len(), 2)
            );
            let mut query = sqlx::query(&sql).bind(tenant_id);
            for agent in chunk {
                query = query.bind(*agent);
            }
            for row in query.fetch_all(&mut **tx).await? {
                let deleted = row.try_get::<Option<i64>, _>("deleted_at")?.is_some();
                teams.insert(
                    (tenant_id.to_owned(), row.try_get::<String, _>("id")?),
                    (row.try_get::<Option<String>, _>("team_id")?, deleted),
                );
            }
        }
    }
    Ok(teams)
}

async fn insert_records(tx: &mut WriteTx, records: &[Record<'_, '_>]) -> Result<(), sqlx::Error> {
    for chunk in records.chunks(rows_per_statement(tx, 13)) {
        let sql = format!(
            "INSERT INTO usage_records (id, tenant_id, agent_id, team_id, model_provider, \
             model_name, request_type, input_tokens, output_tokens, cost_micros, priced, \
             recorded_at, source) VALUES {}",
            placeholders(chunk.len(), 13, 1)
        );
        let mut query = sqlx::query(&sql);
        for (entry, id, team_id, cost_micros, priced) in chunk {
            query = query
                .bind(id.as_str())
                .bind(entry.tenant_id)
                .bind(entry.agent_id)
                .bind(team_id.as_deref())
                .bind(entry.provider.as_str())
                .bind(entry.model_name)
                .bind(entry.request_type)
                .bind(entry.input_tokens)
                .bind(entry.output_tokens)
                .bind(*cost_micros)
                .bind(i64::from(*priced))
                .bind(entry.recorded_at.as_millis())
                .bind(entry.source.as_str());
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::placeholders;

    #[test]
    fn placeholders_number_rows_after_the_first_parameter() {
        assert_eq!(placeholders(2, 2, 1), "($1, $2), ($3, $4)");
        assert_eq!(placeholders(1, 3, 2), "($2, $3, $4)");
    }
}
