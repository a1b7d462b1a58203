//! The audit trail's SQL: reading a tenant's events, a page at a time or in order for an
//! export. Writing them is `crate::changes`'s alone.

use sqlx::any::AnyRow;
use sqlx::{AnyPool, Row};
use warden_shared::timestamp::Timestamp;

use super::AuditEventView;
use crate::api::envelope::COUNT_LIMIT;

/// What a list or export is limited to. Absent filters are left out of the SQL, so
/// each query uses the index its filters match.
#[derive(Debug, Default)]
pub struct Filter<'a> {
    pub event_type: Option<&'a str>,
    pub target_id: Option<&'a str>,
    pub actor: Option<&'a str>,
    pub from: Option<i64>,
    pub to: Option<i64>,
}

const COLUMNS: &str = "SELECT id, tenant_id, event_type, actor, target_type, target_id, \
     details, occurred_at, seq, prev_hash, hash FROM audit_events";

impl Filter<'_> {
    /// The `WHERE` clause (static fragments only; `$1` is the tenant) and how many
    /// parameters it binds.
    fn clause(&self) -> (String, usize) {
        let mut clause = String::from(" WHERE tenant_id = $1");
        let mut parameters = 1;
        let mut add = |present: bool, condition: &str| {
            if present {
                parameters += 1;
                clause.push_str(&condition.replace('?', &format!("${parameters}")));
            }
        };
        add(self.event_type.is_some(), " AND event_type = ?");
        add(self.target_id.is_some(), " AND target_id = ?");
        add(self.actor.is_some(), " AND actor = ?");
        add(self.from.is_some(), " AND occurred_at >= ?");
        add(self.to.is_some(), " AND occurred_at < ?");
        (clause, parameters)
    }

    fn bind<'q>(
        &'q self,
        query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
        tenant_id: &'q str,
    ) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
        let mut query = query.bind(tenant_id);
        if let Some(event_type) = self.event_type {
            query = query.bind(event_type);
        }
        if let Some(target_id) = self.target_id {
            query = query.bind(target_id);
        }
        if let Some(actor) = self.actor {
            query = query.bind(actor);
        }
        if let Some(from) = self.from {
            query = query.bind(from);
        }
        if let Some(to) = self.to {
            query = query.bind(to);
        }
        query
    }
}

/// One page of the tenant's events, newest first.
pub async fn list(
    pool: &AnyPool,
    tenant_id: &str,
    filter: &Filter<'_>,
    limit: i64,
    offset: i64,
) -> Result<Vec<AuditEventView>, sqlx::Error> {
    let (clause, parameters) = filter.clause();
    let sql = format!(
        "{COLUMNS}{clause} ORDER BY occurred_at DESC, seq DESC LIMIT ${} OFFSET ${}",
        parameters + 1,
        parameters + 2
    );
    let rows = filter
        .bind(sqlx::query(&sql), tenant_id)
        .bind(limit)
        .bind(offset)
        .fetch_all(pool)
        .await?;
    rows.iter().map(event_from_row).collect()
}

/// How many events match, and whether that is only a floor. The whole trail's count is
/// its chain head's seq (a chain has no gaps), one row read; a filtered count stops at
/// [`COUNT_LIMIT`], so a page of a filter that matches millions stays fast.
pub async fn count(
    pool: &AnyPool,
    tenant_id: &str,
    filter: &Filter<'_>,
) -> Result<(i64, bool), sqlx::Error> {
    let (clause, parameters) = filter.clause();
    // The tenant is the only parameter: no filter.
    if parameters == 1 {
        let head: Option<i64> =
            sqlx::query_scalar("SELECT seq FROM audit_heads WHERE tenant_id = $1")
                .bind(tenant_id)
                .fetch_optional(pool)
                .await?;
        return Ok((head.unwrap_or(0), false));
    }
    let sql = format!(
        "SELECT COUNT(*) FROM (SELECT 1 FROM audit_events{clause} LIMIT ${}) matching",
        parameters + 1
    );
    let counted: i64 = filter
        .bind(sqlx::query(&sql), tenant_id)
        .bind(COUNT_LIMIT + 1)
        .fetch_one(pool)
        .await?
        .try_get(0)?;
    Ok((counted.min(COUNT_LIMIT), counted > COUNT_LIMIT))
}

/// Up to `limit` of the tenant's events after `after_seq`, oldest first: an export reads
/// the trail in these pieces, holding one at a time.
pub async fn after(
    pool: &AnyPool,
    tenant_id: &str,
    filter: &Filter<'_>,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<AuditEventView>, sqlx::Error> {
    let (clause, parameters) = filter.clause();
    let sql = format!(
        "{COLUMNS}{clause} AND seq > ${} ORDER BY seq LIMIT ${}",
        parameters + 1,
        parameters + 2
    );
    let rows = filter
        .bind(sqlx::query(&sql), tenant_id)
        .bind(after_seq)
        .bind(limit)
        .fetch_all(pool)
        .await?;
    rows.iter().map(event_from_row).collect()
}

fn event_from_row(row: &AnyRow) -> Result<AuditEventView, sqlx::Error> {
    let actor: String = row.try_get("actor")?;
    let details: String = row.try_get("details")?;
    Ok(AuditEventView {
        id: row.try_get("id")?,
        event_type: row.try_get("event_type")?,
        actor_type: actor_type(&actor).to_owned(),
        actor,
        target_type: row.try_get("target_type")?,
        target_id: row.try_get("target_id")?,
        tenant_id: row.try_get("tenant_id")?,
        details: serde_json::from_str(&details).unwrap_or(serde_json::Value::Null),
        timestamp: Timestamp::from_millis(row.try_get("occurred_at")?),
        seq: row.try_get::<Option<i64>, _>("seq")?.unwrap_or_default(),
        prev_hash: row
            .try_get::<Option<String>, _>("prev_hash")?
            .unwrap_or_default(),
        hash: row
            .try_get::<Option<String>, _>("hash")?
            .unwrap_or_default(),
    })
}

/// What kind of actor an actor string names: `api_key:<id>`, `user:<id>`, `proxy`,
/// `system`.
fn actor_type(actor: &str) -> &str {
    actor.split_once(':').map_or(actor, |(kind, _)| kind)
}
