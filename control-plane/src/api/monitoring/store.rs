//! SQL of the monitoring overview. Every statement filters by tenant.

use sqlx::{AnyPool, Row};

/// The tenant's live agents counted by derived status as of `now_ms` (see
/// `crate::effective_status!`), one `(status, agents)` pair per status present.
pub async fn agents_by_status(
    pool: &AnyPool,
    tenant_id: &str,
    now_ms: i64,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query(concat!(
        "SELECT ",
        crate::effective_status!("$2"),
        " AS status, COUNT(*) AS agents FROM agents a \
         WHERE a.tenant_id = $1 AND a.deleted_at IS NULL GROUP BY 1"
    ))
    .bind(tenant_id)
    .bind(now_ms)
    .fetch_all(pool)
    .await?
    .iter()
    .map(|row| Ok((row.try_get("status")?, row.try_get("agents")?)))
    .collect()
}
