//! SQL of approvals. Every statement filters by tenant. A pending approval past its
//! `expires_at` reads as `expired` in every statement (`STATUS`), whether or not anything
//! has rewritten it yet.

use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};
use warden_shared::policy::Releases;
use warden_shared::timestamp::Timestamp;

use super::Approval;
use crate::api::envelope::Page;
use crate::db::{json_column, WriteTx};

/// The status as of `$now` (bound under that name's position by each statement).
macro_rules! status_at {
    ($now:literal) => {
        concat!(
            "CASE WHEN status = 'pending' AND expires_at <= ",
            $now,
            " THEN 'expired' ELSE status END"
        )
    };
}

macro_rules! select_approvals {
    ($now:literal) => {
        concat!(
            "SELECT id, policy_id, agent_id, team_id, request_context, ",
            status_at!($now),
            " AS status, reviewer_id, reason, expires_at, resolved_at, grant_until, created_at, \
             releases, action_digest, consumed_at, \
             (SELECT ag.name FROM agents ag WHERE ag.id = approvals.agent_id \
              AND ag.tenant_id = approvals.tenant_id) AS agent_name, \
             (SELECT p.name FROM policies p WHERE p.id = approvals.policy_id \
              AND p.tenant_id = approvals.tenant_id) AS policy_name \
             FROM approvals"
        )
    };
}

/// Which of a tenant's approvals a list or count is about.
#[derive(Debug, Clone, Copy, Default)]
pub struct Selection<'a> {
    /// Only those with this status (as of now).
    pub status: Option<&'a str>,
    /// Only those of this agent.
    pub agent_id: Option<&'a str>,
    /// Only those decided or expired: none still pending.
    pub decided: bool,
}

/// The condition of a [`Selection`], bound as `$3` status, `$4` agent, `$5` decided.
macro_rules! selected {
    () => {
        concat!(
            " WHERE tenant_id = $1 AND ($3 IS NULL OR ",
            status_at!("$2"),
            " = $3) AND ($4 IS NULL OR agent_id = $4) AND ($5 = 0 OR ",
            status_at!("$2"),
            " <> 'pending')"
        )
    };
}

pub async fn list<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    selection: Selection<'_>,
    page: Page,
    now: Timestamp,
) -> Result<Vec<Approval>, sqlx::Error> {
    sqlx::query(concat!(
        select_approvals!("$2"),
        selected!(),
        " ORDER BY id DESC LIMIT $6 OFFSET $7"
    ))
    .bind(tenant_id)
    .bind(now.as_millis())
    .bind(selection.status)
    .bind(selection.agent_id)
    .bind(i32::from(selection.decided))
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(db)
    .await?
    .iter()
    .map(approval_from_row)
    .collect()
}

/// The tenant's `limit` oldest pending approvals, the one waiting longest first: the
/// reviewers' queue.
pub async fn oldest_pending<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    limit: i64,
    now: Timestamp,
) -> Result<Vec<Approval>, sqlx::Error> {
    sqlx::query(concat!(
        select_approvals!("$2"),
        " WHERE tenant_id = $1 AND ",
        status_at!("$2"),
        " = 'pending' ORDER BY id LIMIT $3"
    ))
    .bind(tenant_id)
    .bind(now.as_millis())
    .bind(limit)
    .fetch_all(db)
    .await?
    .iter()
    .map(approval_from_row)
    .collect()
}

pub async fn count<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    selection: Selection<'_>,
    now: Timestamp,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(concat!("SELECT COUNT(*) FROM approvals", selected!()))
        .bind(tenant_id)
        .bind(now.as_millis())
        .bind(selection.status)
        .bind(selection.agent_id)
        .bind(i32::from(selection.decided))
        .fetch_one(db)
        .await
}

pub async fn get<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    id: i64,
    now: Timestamp,
) -> Result<Option<Approval>, sqlx::Error> {
    sqlx::query(concat!(
        select_approvals!("$2"),
        " WHERE tenant_id = $1 AND id = $3"
    ))
    .bind(tenant_id)
    .bind(now.as_millis())
    .bind(id)
    .fetch_optional(db)
    .await?
    .as_ref()
    .map(approval_from_row)
    .transpose()
}

/// What a decision writes.
pub struct Decision<'a> {
    pub status: &'a str,
    pub reviewer_id: &'a str,
    pub reason: Option<&'a str>,
    pub grant_until: Option<i64>,
}

/// Decides the approval if it is still pending at `now`; false if it was not.
pub async fn decide(
    tx: &mut WriteTx,
    tenant_id: &str,
    id: i64,
    decision: &Decision<'_>,
    now: Timestamp,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE approvals SET status = $3, reviewer_id = $4, reason = $5, resolved_at = $6, \
         grant_until = $7, dedupe_key = NULL \
         WHERE tenant_id = $1 AND id = $2 AND status = 'pending' AND expires_at > $6",
    )
    .bind(tenant_id)
    .bind(id)
    .bind(decision.status)
    .bind(decision.reviewer_id)
    .bind(decision.reason)
    .bind(now.as_millis())
    .bind(decision.grant_until)
    .execute(&mut **tx)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// What the proxy asks to be approved.
pub struct Request<'a> {
    pub tenant_id: &'a str,
    pub policy_id: i64,
    pub agent_id: &'a str,
    pub team_id: Option<&'a str>,
    pub provider: &'a str,
    pub model: &'a str,
    pub request_context: &'a serde_json::Value,
    pub releases: Releases,
    pub action_digest: Option<&'a str>,
}

/// A pending approval that lapsed undecided, marked `expired` by the statement that
/// found it.
#[derive(Debug, Clone)]
pub struct Lapsed {
    pub tenant_id: String,
    pub id: i64,
    pub policy_id: i64,
    pub agent_id: String,
}

/// What [`request`] did: the new approval's id, and the pending one for the same
/// request that had lapsed and gave way to it.
#[derive(Debug, Default)]
pub struct Requested {
    pub created: Option<i64>,
    /// The pending approval the request waits on: the one created, or the one already
    /// pending for the same thing; `None` when a decision still stands.
    pub pending: Option<i64>,
    pub lapsed: Vec<Lapsed>,
}

/// Queues a pending approval for `request` unless one is pending for the same agent,
/// policy, provider and model (and action, for an approval bound to it), a reviewer
/// denied that within `denial_hold_ms`, or an approval of it is still in force.
pub async fn request(
    tx: &mut WriteTx,
    request: &Request<'_>,
    now: Timestamp,
    ttl_ms: i64,
    denial_hold_ms: i64,
) -> Result<Requested, sqlx::Error> {
    // An approval bound to the action is one per action: approving `delete_branch` of
    // `feature-x` says nothing of `main`, which waits for a decision of its own.
    let action = request
        .action_digest
        .filter(|_| request.releases.is_bound_to_action());
    let mut dedupe_key = format!(
        "{}|{}|{}|{}",
        request.agent_id, request.policy_id, request.provider, request.model
    );
    if let Some(digest) = action {
        dedupe_key = format!("{dedupe_key}|{}|{digest}", request.releases.as_str());
    }
    // A lapsed pending approval gives way to a new one.
    let lapsed = sqlx::query(
        "UPDATE approvals SET status = 'expired', dedupe_key = NULL \
         WHERE tenant_id = $1 AND dedupe_key = $2 AND status = 'pending' AND expires_at <= $3 \
         RETURNING tenant_id, id, policy_id, agent_id",
    )
    .bind(request.tenant_id)
    .bind(&dedupe_key)
    .bind(now.as_millis())
    .fetch_all(&mut **tx)
    .await?
    .iter()
    .map(lapsed_from_row)
    .collect::<Result<Vec<_>, _>>()?;
    // Decided already: a denial still holding, or a grant still in force (a request
    // held before the grant reached the proxy is reported after the decision). For an
    // action, only a decision about that action, and a grant not used up.
    let decided: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM approvals WHERE tenant_id = $1 AND agent_id = $2 \
         AND policy_id = $3 AND provider = $4 AND model = $5 \
         AND ($8 IS NULL OR (action_digest = $8 AND releases = $9)) \
         AND ((status = 'denied' AND resolved_at > $6) \
         OR (status = 'approved' AND grant_until > $7 AND consumed_at IS NULL))",
    )
    .bind(request.tenant_id)
    .bind(request.agent_id)
    .bind(request.policy_id)
    .bind(request.provider)
    .bind(request.model)
    .bind(now.as_millis() - denial_hold_ms)
    .bind(now.as_millis())
    .bind(action)
    .bind(request.releases.as_str())
    .fetch_one(&mut **tx)
    .await?;
    if decided > 0 {
        return Ok(Requested {
            created: None,
            pending: None,
            lapsed,
        });
    }
    let created = sqlx::query_scalar(
        "INSERT INTO approvals (tenant_id, policy_id, agent_id, team_id, provider, model, \
         request_context, status, dedupe_key, expires_at, created_at, releases, action_digest) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9, $10, $11, $12) \
         ON CONFLICT (tenant_id, dedupe_key) DO NOTHING RETURNING id",
    )
    .bind(request.tenant_id)
    .bind(request.policy_id)
    .bind(request.agent_id)
    .bind(request.team_id)
    .bind(request.provider)
    .bind(request.model)
    .bind(request.request_context.to_string())
    .bind(&dedupe_key)
    .bind(now.as_millis() + ttl_ms)
    .bind(now.as_millis())
    .bind(request.releases.as_str())
    .bind(request.action_digest)
    .fetch_optional(&mut **tx)
    .await?;
    let pending = match created {
        Some(id) => Some(id),
        None => {
            sqlx::query_scalar(
                "SELECT id FROM approvals WHERE tenant_id = $1 AND dedupe_key = $2 \
                 AND status = 'pending'",
            )
            .bind(request.tenant_id)
            .bind(&dedupe_key)
            .fetch_optional(&mut **tx)
            .await?
        }
    };
    Ok(Requested {
        created,
        pending,
        lapsed,
    })
}

/// Uses up a single-use approval of `digest`: true for the one caller that claims it
/// while it is in force; every other claim, on any replica, finds it used.
pub async fn consume(
    tx: &mut WriteTx,
    tenant_id: &str,
    id: i64,
    digest: &str,
    now: Timestamp,
) -> Result<bool, sqlx::Error> {
    let claimed = sqlx::query(
        "UPDATE approvals SET consumed_at = $4 WHERE tenant_id = $1 AND id = $2 \
         AND action_digest = $3 AND releases = 'action' AND status = 'approved' \
         AND grant_until > $4 AND consumed_at IS NULL",
    )
    .bind(tenant_id)
    .bind(id)
    .bind(digest)
    .bind(now.as_millis())
    .execute(&mut **tx)
    .await?;
    Ok(claimed.rows_affected() == 1)
}

/// Marks up to `limit` pending approvals of any tenant whose time ran out by `now` as
/// `expired` (reads already show them so) and returns them. The outer `status` check is
/// what PostgreSQL re-checks on a row another replica's expiry changed meanwhile (the
/// subquery's list is not read again), so each approval expires, and is announced, once.
pub async fn expire_lapsed(
    tx: &mut WriteTx,
    now: Timestamp,
    limit: i64,
) -> Result<Vec<Lapsed>, sqlx::Error> {
    sqlx::query(
        "UPDATE approvals SET status = 'expired', dedupe_key = NULL \
         WHERE status = 'pending' AND id IN (SELECT id FROM approvals \
         WHERE status = 'pending' AND expires_at <= $1 ORDER BY expires_at LIMIT $2) \
         RETURNING tenant_id, id, policy_id, agent_id",
    )
    .bind(now.as_millis())
    .bind(limit)
    .fetch_all(&mut **tx)
    .await?
    .iter()
    .map(lapsed_from_row)
    .collect()
}

fn lapsed_from_row(row: &AnyRow) -> Result<Lapsed, sqlx::Error> {
    Ok(Lapsed {
        tenant_id: row.try_get("tenant_id")?,
        id: row.try_get("id")?,
        policy_id: row.try_get("policy_id")?,
        agent_id: row.try_get("agent_id")?,
    })
}

fn approval_from_row(row: &AnyRow) -> Result<Approval, sqlx::Error> {
    let context: String = row.try_get("request_context")?;
    let status: String = row.try_get("status")?;
    let grant_until: Option<i64> = row.try_get("grant_until")?;
    let releases: String = row.try_get("releases")?;
    Ok(Approval {
        id: row.try_get("id")?,
        policy_id: row.try_get("policy_id")?,
        agent_id: row.try_get("agent_id")?,
        agent_name: row.try_get("agent_name")?,
        policy_name: row.try_get("policy_name")?,
        team_id: row.try_get("team_id")?,
        request_context: json_column(&context),
        granted_until: grant_until
            .filter(|_| status == "approved")
            .map(Timestamp::from_millis),
        status,
        reviewer_id: row.try_get("reviewer_id")?,
        reason: row.try_get("reason")?,
        expires_at: Timestamp::from_millis(row.try_get("expires_at")?),
        resolved_at: row
            .try_get::<Option<i64>, _>("resolved_at")?
            .map(Timestamp::from_millis),
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        covers: super::covers(&releases).to_owned(),
        releases,
        action_digest: row.try_get("action_digest")?,
        consumed_at: row
            .try_get::<Option<i64>, _>("consumed_at")?
            .map(Timestamp::from_millis),
    })
}
