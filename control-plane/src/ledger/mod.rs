//! The cost ledger: append usage records and fold them into the hourly rollups, in the
//! caller's transaction, a whole batch at a time.
//!
//! Records are never updated or deleted (except with their tenant). Cost views read the
//! rollups, never the records (see `rollups` for the three levels).
//! A batch costs a handful of multi-row statements, not a few per record: agents are
//! looked up once per batch, records are appended by one insert that skips record ids
//! seen before and reports which rows are new, rollup increments for those are summed in
//! memory first (`rollups`), and written with multi-row upserts.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use sqlx::Row;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::registry::Provider;
use warden_shared::snapshot::ScopeSpend;
use warden_shared::timestamp::Timestamp;

use crate::db::bulk::{for_backend, is_postgres, json_array, placeholders, rows_per_statement};
use crate::db::{is_unique_violation, WriteTx};

/// SQL: the first hour of a tenant's usage not yet rolled into the daily tables (see
/// `days`), but not before `$from`, as one expression: a single lower bound, so SQLite
/// bounds its index scan with it (two bounds and it took the first, scanning whole
/// ranges). `$none` stands for a tenant without marks (no unrolled hours: pass the range's
/// end, or a value past every hour).
macro_rules! unrolled_from {
    ($tenant:literal, $from:literal, $none:literal) => {
        concat!(
            "(SELECT CASE WHEN COALESCE(MAX(m.rolled_until), ",
            $none,
            ") > ",
            $from,
            " THEN COALESCE(MAX(m.rolled_until), ",
            $none,
            ") ELSE ",
            $from,
            " END FROM usage_days_closed m WHERE m.tenant_id = ",
            $tenant,
            ")"
        )
    };
}
pub(crate) use unrolled_from;

mod alerts;
mod days;
mod rollups;
pub mod spend;

pub use days::{close_days, open_for_new_tenant, CLOSE_GRACE_MS, ROLL_GRACE_MS};

/// Milliseconds in an hour, the rollups' bucket.
pub const HOUR_MS: i64 = 3_600_000;
/// Milliseconds in a UTC day, the daily rollups' bucket.
pub const DAY_MS: i64 = 24 * HOUR_MS;

/// The UTC midnight that starts the day of `ms`.
pub fn start_of_day(ms: i64) -> i64 {
    ms - ms.rem_euclid(DAY_MS)
}

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
    /// The cost as reported or priced (`telemetry::usage_entry`); `None`: the model has
    /// no price, and the record is kept at cost 0, marked unpriced.
    pub cost_micros: Option<i64>,
    pub recorded_at: Timestamp,
    pub source: UsageSource,
    /// The proxy's id of this record: recorded at most once per tenant.
    pub idempotency_key: Option<&'a str>,
    /// The proxy key the request came with (usage the proxy measured).
    pub api_key_id: Option<&'a str>,
    /// The policies' decision on the request, written on the record (usage the proxy
    /// measured, when its tenant has enabled policies).
    pub decision: Option<EntryDecision<'a>>,
}

/// A forwarded request's policy decision, as columns of its usage record (migration
/// 0019): the API lists it among the evaluation records.
#[derive(Debug, Clone, Copy)]
pub struct EntryDecision<'a> {
    /// Drawn from `policy_decisions`' sequence (see `api::policies`).
    pub id: i64,
    /// The result set its results are the members of.
    pub set_id: i64,
    pub evaluated_at: Timestamp,
    /// The model as the agent asked for it, when that is not `model_name`.
    pub requested_model: Option<&'a str>,
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

/// What recording a batch did.
#[derive(Debug)]
pub struct Recorded {
    /// One per entry, in order.
    pub outcomes: Vec<Outcome>,
    /// The new month-to-date totals of the budget scopes the batch added to.
    pub spend: Vec<ScopeSpend>,
}

/// Records `entries`. `batch_id` labels the records that carry an idempotency key (the
/// proxy's); `now` dates the spend rows the batch changes.
pub async fn record_batch(
    tx: &mut WriteTx,
    batch_id: &str,
    entries: &[UsageEntry<'_>],
    now: Timestamp,
) -> Result<Recorded, sqlx::Error> {
    let mut tenants: Vec<&str> = entries.iter().map(|entry| entry.tenant_id).collect();
    tenants.sort_unstable();
    tenants.dedup();
    hold_tenants(tx, &tenants).await?;
    // Then, before the batch holds any other row: see `days`.
    let marks = days::lock_marks_for_batch(tx, &tenants).await?;
    let teams = agent_teams(tx, entries).await?;
    let mut outcomes = Vec::with_capacity(entries.len());
    let mut in_batch: HashSet<(&str, &str)> = HashSet::new();
    let mut candidates = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let team = teams
            .get(entry.tenant_id)
            .and_then(|agents| agents.get(entry.agent_id));
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
                    // Filled in below, once the insert says whether it is new.
                    Outcome::Duplicate
                }
            },
        };
        outcomes.push(outcome);
    }
    let mut records = Vec::with_capacity(candidates.len());
    for (index, entry, team_id) in candidates {
        let (cost_micros, priced) = cost_of(entry);
        let id = new_id(IdKind::Usage, entry.recorded_at.as_millis());
        records.push(Candidate {
            index,
            record: (entry, id, team_id, cost_micros, priced),
        });
    }
    let inserted = insert_records(tx, batch_id, &records).await?;
    let mut recorded = Vec::with_capacity(records.len());
    for (candidate, new) in records.into_iter().zip(inserted) {
        let (_, id, _, cost_micros, priced) = &candidate.record;
        if new {
            outcomes[candidate.index] = Outcome::Recorded {
                id: id.clone(),
                cost_micros: *cost_micros,
                priced: *priced,
            };
            recorded.push(candidate.record);
        }
    }
    rollups::add(tx, &recorded, &marks).await?;
    let spend = spend::add(tx, &recorded, now).await?;
    Ok(Recorded { outcomes, spend })
}

/// Locks the rows of `tenants` (sorted) against deletion until `tx` ends (PostgreSQL;
/// SQLite runs one write transaction at a time). This is what a foreign key to
/// `tenants` would do for every row the batch writes, once per tenant instead: the
/// tables written per record have no such key (migration 0039). A tenant deleted
/// before the lock has no agents left, so its entries come out `UnknownAgent`; a
/// deletion that comes after waits, then deletes what the batch wrote.
async fn hold_tenants(tx: &mut WriteTx, tenants: &[&str]) -> Result<(), sqlx::Error> {
    if !is_postgres(tx) {
        return Ok(());
    }
    sqlx::query(
        "SELECT id FROM tenants WHERE id IN (SELECT json_array_elements_text($1::json)) \
         ORDER BY id FOR KEY SHARE",
    )
    .bind(json_array(tenants))
    .fetch_all(&mut **tx)
    .await?;
    Ok(())
}

/// A record about to be inserted and the position of its entry.
struct Candidate<'e, 'a> {
    index: usize,
    record: Record<'e, 'a>,
}

fn cost_of(entry: &UsageEntry<'_>) -> (i64, bool) {
    entry.cost_micros.map_or((0, false), |cost| (cost, true))
}

/// An entry about to be written: its id, team, cost and whether it was priced.
type Record<'e, 'a> = (&'e UsageEntry<'a>, String, Option<String>, i64, bool);

/// Team id and deleted flag of every agent the entries name, by tenant, then agent.
/// SQL (PostgreSQL): the agents of tenant `$1` among the ids of the JSON array `$2`.
const AGENTS_OF_JSON_IDS: &str = "SELECT a.id, a.team_id, a.deleted_at \
     FROM json_array_elements_text($2::json) AS wanted (id) \
     JOIN agents a ON a.id = wanted.id WHERE a.tenant_id = $1";

type AgentTeams<'e> = HashMap<&'e str, HashMap<String, (Option<String>, bool)>>;

/// Team id and deleted flag of every agent the entries name, per tenant (looked up with
/// the entries' own text: no key built per record).
async fn agent_teams<'e>(
    tx: &mut WriteTx,
    entries: &[UsageEntry<'e>],
) -> Result<AgentTeams<'e>, sqlx::Error> {
    let mut by_tenant: HashMap<&str, HashSet<&str>> = HashMap::new();
    let mut previous = None;
    for entry in entries {
        // A batch's records mostly repeat the previous one's agent.
        if previous == Some((entry.tenant_id, entry.agent_id)) {
            continue;
        }
        previous = Some((entry.tenant_id, entry.agent_id));
        by_tenant
            .entry(entry.tenant_id)
            .or_default()
            .insert(entry.agent_id);
    }
    let mut teams: AgentTeams<'e> = HashMap::new();
    let postgres = is_postgres(tx);
    for (tenant_id, agents) in by_tenant {
        let agents: Vec<&str> = agents.into_iter().collect();
        let found = teams.entry(tenant_id).or_default();
        // PostgreSQL gets the ids as one JSON array joined to the agents: a list of a
        // thousand parameters (or `id = ANY(...)`) was planned, without fresh statistics,
        // as a scan of the tenant's agents comparing each with the whole list (25 ms a
        // batch, the ledger's most expensive statement); a join probes the primary key
        // or hashes, whatever the statistics. SQLite probes its index for an `IN` list.
        let chunk_len = if postgres {
            agents.len().max(1)
        } else {
            rows_per_statement(tx, 1) - 1
        };
        for chunk in agents.chunks(chunk_len) {
            let rows = if postgres {
                sqlx::query(AGENTS_OF_JSON_IDS)
                    .bind(tenant_id)
                    .bind(json_array(chunk))
                    .fetch_all(&mut **tx)
                    .await?
            } else {
                let values = placeholders(tx, 1, chunk.len(), 2);
                let sql = for_backend(
                    tx,
                    format!(
                        "SELECT id, team_id, deleted_at FROM agents WHERE tenant_id = $1 AND id IN {values}"
                    ),
                );
                let query = sqlx::query(&sql).bind(tenant_id);
                let query = chunk.iter().fold(query, |query, agent| query.bind(*agent));
                query.fetch_all(&mut **tx).await?
            };
            for row in rows {
                let deleted = row.try_get::<Option<i64>, _>("deleted_at")?.is_some();
                found.insert(
                    row.try_get::<String, _>("id")?,
                    (row.try_get::<Option<String>, _>("team_id")?, deleted),
                );
            }
        }
    }
    Ok(teams)
}

/// Bound values per usage record.
const RECORD_COLUMNS: usize = 20;

/// Appends `records`, skipping those whose record id the tenant already has; returns,
/// for each, whether it was new. The unique index decides, so a concurrent batch with
/// the same record cannot slip in between a check and an insert.
///
/// On PostgreSQL the records are first inserted plainly, under a savepoint: a record is
/// resent only when an acknowledgement was lost, so nearly every batch is all new, and
/// a plain insert costs PostgreSQL a quarter to a third less than `ON CONFLICT DO
/// NOTHING`'s speculative insertion (checked index first, then confirmed). A unique
/// violation rolls back to the savepoint and inserts again skipping what is there (a
/// concurrent batch's same record waits for that batch either way). A query probing the
/// index for the batch's ids first would get a generic plan, made while the table was
/// small, that scans the table. SQLite writes one transaction at a time and skips
/// duplicates in the one statement.
async fn insert_records(
    tx: &mut WriteTx,
    batch_id: &str,
    records: &[Candidate<'_, '_>],
) -> Result<Vec<bool>, sqlx::Error> {
    if is_postgres(tx) && !records.is_empty() {
        sqlx::query("SAVEPOINT new_records")
            .execute(&mut **tx)
            .await?;
        match write_records(tx, batch_id, records, OnConflict::Fail).await {
            Ok(inserted) => {
                sqlx::query("RELEASE SAVEPOINT new_records")
                    .execute(&mut **tx)
                    .await?;
                return Ok(inserted);
            }
            Err(error) if is_unique_violation(&error) => {
                sqlx::query("ROLLBACK TO SAVEPOINT new_records")
                    .execute(&mut **tx)
                    .await?;
            }
            Err(error) => return Err(error),
        }
    }
    write_records(tx, batch_id, records, OnConflict::Skip).await
}

/// What an insert of records does with a record id the tenant already has.
#[derive(Clone, Copy)]
enum OnConflict {
    /// Fails on it (a unique violation).
    Fail,
    /// Skips it.
    Skip,
}

/// Inserts `records` in statements of as many rows as fit; returns, for each, whether
/// it was inserted.
///
/// A statement reports only how many rows it inserted. When that is all of them
/// nothing more is read; otherwise a second query asks which of the new ids are there.
/// `RETURNING id` would say it in one statement, but sqlx hands SQLite's rows over from
/// its worker thread one by one, and at a thousand rows a batch those hand-offs cost the
/// control plane more than the insert itself.
async fn write_records(
    tx: &mut WriteTx,
    batch_id: &str,
    records: &[Candidate<'_, '_>],
    on_conflict: OnConflict,
) -> Result<Vec<bool>, sqlx::Error> {
    let conflict = match on_conflict {
        OnConflict::Fail => "",
        OnConflict::Skip => " ON CONFLICT (tenant_id, record_id) DO NOTHING",
    };
    let mut inserted = Vec::with_capacity(records.len());
    for chunk in records.chunks(rows_per_statement(tx, RECORD_COLUMNS)) {
        let values = placeholders(tx, chunk.len(), RECORD_COLUMNS, 1);
        let sql = for_backend(
            tx,
            format!(
                "INSERT INTO usage_records (id, tenant_id, agent_id, team_id, model_provider, \
                 model_name, request_type, input_tokens, output_tokens, cost_micros, priced, \
                 recorded_at, source, record_id, batch_id, api_key_id, decision_id, \
                 decision_set_id, evaluated_at, requested_model) VALUES {values}{conflict}"
            ),
        );
        let mut query = sqlx::query(&sql);
        for Candidate {
            record: (entry, id, team_id, cost_micros, priced),
            ..
        } in chunk
        {
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
                .bind(entry.source.as_str())
                .bind(entry.idempotency_key)
                .bind(entry.idempotency_key.map(|_| batch_id))
                .bind(entry.api_key_id)
                .bind(entry.decision.map(|d| d.id))
                .bind(entry.decision.map(|d| d.set_id))
                .bind(entry.decision.map(|d| d.evaluated_at.as_millis()))
                .bind(entry.decision.and_then(|d| d.requested_model));
        }
        let written = query.execute(&mut **tx).await?.rows_affected();
        if usize::try_from(written).is_ok_and(|written| written == chunk.len()) {
            inserted.extend(std::iter::repeat_n(true, chunk.len()));
        } else {
            let present = present_ids(tx, chunk).await?;
            inserted.extend(chunk.iter().map(|c| present.contains(c.record.1.as_str())));
        }
    }
    Ok(inserted)
}

/// Which of the ids given to `chunk`'s records are in the ledger: each id is new, so
/// those present are the rows just inserted. Only a record with a record id can have
/// been skipped; they are found by the tenant's unique index of record ids (`id` has
/// no index of its own on PostgreSQL, migration 0039).
async fn present_ids(
    tx: &mut WriteTx,
    chunk: &[Candidate<'_, '_>],
) -> Result<HashSet<String>, sqlx::Error> {
    let mut by_tenant: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut present = HashSet::with_capacity(chunk.len());
    for Candidate {
        record: (entry, id, ..),
        ..
    } in chunk
    {
        match entry.idempotency_key {
            Some(key) => by_tenant.entry(entry.tenant_id).or_default().push(key),
            None => {
                present.insert(id.clone());
            }
        }
    }
    for (tenant_id, keys) in by_tenant {
        let values = placeholders(tx, keys.len(), 1, 2);
        let sql = for_backend(
            tx,
            format!(
                "SELECT id FROM usage_records WHERE tenant_id = $1 AND record_id IN (VALUES {values})"
            ),
        );
        let query = sqlx::query(&sql).bind(tenant_id);
        let query = keys.iter().fold(query, |query, key| query.bind(*key));
        for row in query.fetch_all(&mut **tx).await? {
            present.insert(row.try_get::<String, _>("id")?);
        }
    }
    Ok(present)
}
