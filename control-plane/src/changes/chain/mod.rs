//! The audit trail's hash chain: each tenant's events, in the order they were appended,
//! each carrying the SHA-256 of its own fields and of the event before it.
//!
//! **Encoding.** An event's hash is SHA-256 (lowercase hex) over the JSON array
//! `[seq, id, tenant_id, event_type, actor, target_type, target_id, details,
//! occurred_at, prev_hash]`, written by serde_json with no white space, where `details`
//! is the stored details text (itself JSON with sorted keys) as a string and `prev_hash`
//! is the previous event's hash, or 64 zeros for a tenant's first event. Every field is
//! in it, so altering any field of any event, deleting, inserting or reordering events
//! breaks the chain where it happened; [`verify`] walks a chain and reports the first
//! broken link (`verify.rs`: walks, and the links verified so far).
//!
//! **Appending.** The writer updates its tenant's `audit_heads` row inside the write's
//! transaction, which locks it, so appends of one tenant are serialized across
//! connections and replicas and the chain has no gaps or forks; a rolled-back write
//! rolls its link back with it. The head this process last wrote is remembered: the
//! append moves the head on only if it is still that one (`WHERE seq = .. AND hash =
//! ..`), one statement; when another connection or replica appended meanwhile, it reads
//! the head under the lock and appends after it.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::Row;
use utoipa::ToSchema;
use warden_shared::keys::hex;

use crate::db::WriteTx;

mod verify;

pub use verify::{
    chained_tenants, check, verify, verify_after, BrokenLink, Verification, Verified, VerifiedLinks,
};

/// The `prev_hash` of a tenant's first event.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The heads this process last wrote, by tenant: a guess the append checks.
fn heads() -> &'static Mutex<HashMap<String, Head>> {
    static HEADS: OnceLock<Mutex<HashMap<String, Head>>> = OnceLock::new();
    HEADS.get_or_init(Mutex::default)
}

fn remember(tenant_id: &str, head: Head) {
    if let Ok(mut heads) = heads().lock() {
        heads.insert(tenant_id.to_owned(), head);
    }
}

/// An event as read back, its chain fields aside.
struct StoredEvent {
    id: String,
    tenant_id: String,
    event_type: String,
    actor: String,
    target_type: String,
    target_id: String,
    details: String,
    occurred_at: i64,
}

impl StoredEvent {
    fn read(row: &sqlx::any::AnyRow) -> Result<StoredEvent, sqlx::Error> {
        Ok(StoredEvent {
            id: row.try_get("id")?,
            tenant_id: row.try_get("tenant_id")?,
            event_type: row.try_get("event_type")?,
            actor: row.try_get("actor")?,
            target_type: row.try_get("target_type")?,
            target_id: row.try_get("target_id")?,
            details: row.try_get("details")?,
            occurred_at: row.try_get("occurred_at")?,
        })
    }

    fn as_new(&self) -> NewEvent<'_> {
        NewEvent {
            id: &self.id,
            tenant_id: &self.tenant_id,
            event_type: &self.event_type,
            actor: &self.actor,
            target_type: &self.target_type,
            target_id: &self.target_id,
            details: &self.details,
            occurred_at: self.occurred_at,
        }
    }
}

/// An event to append: every field its hash covers but its place in the chain.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    pub id: &'a str,
    pub tenant_id: &'a str,
    pub event_type: &'a str,
    pub actor: &'a str,
    pub target_type: &'a str,
    pub target_id: &'a str,
    pub details: &'a str,
    pub occurred_at: i64,
}

impl NewEvent<'_> {
    /// The event's hash at `seq` after `prev_hash` (see the module's documentation for
    /// the encoding).
    pub fn hash(&self, seq: i64, prev_hash: &str) -> String {
        let encoded = serde_json::json!([
            seq,
            self.id,
            self.tenant_id,
            self.event_type,
            self.actor,
            self.target_type,
            self.target_id,
            self.details,
            self.occurred_at,
            prev_hash,
        ])
        .to_string();
        hex(&Sha256::digest(encoded.as_bytes()))
    }
}

const INSERT_EVENT: &str = "INSERT INTO audit_events \
     (id, tenant_id, event_type, actor, target_id, target_type, details, occurred_at, \
      seq, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

/// On PostgreSQL the head moves and the event is inserted in one statement (a round trip
/// is most of an append's cost there); nothing is inserted unless the head moved.
const MOVE_HEAD_AND_INSERT: &str = "WITH moved AS (UPDATE audit_heads SET seq = $9, hash = $11 \
     WHERE tenant_id = $2 AND seq = $12 AND hash = $10 RETURNING 1) \
     INSERT INTO audit_events (id, tenant_id, event_type, actor, target_id, target_type, \
      details, occurred_at, seq, prev_hash, hash) \
     SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 FROM moved";

const MOVE_HEAD: &str = "UPDATE audit_heads SET seq = $2, hash = $3 \
     WHERE tenant_id = $1 AND seq = $4 AND hash = $5";

/// Appends `event` to its tenant's chain inside `tx`.
pub async fn append(tx: &mut WriteTx, event: &NewEvent<'_>) -> Result<(), sqlx::Error> {
    let tenant_id = event.tenant_id;
    let guess = heads()
        .lock()
        .ok()
        .and_then(|heads| heads.get(tenant_id).cloned());
    if let Some(last) = guess {
        let seq = last.seq + 1;
        let hash = event.hash(seq, &last.hash);
        let appended = if crate::db::bulk::is_postgres(tx) {
            insert_query(MOVE_HEAD_AND_INSERT, event, seq, &last.hash, &hash)
                .bind(last.seq)
                .execute(&mut **tx)
                .await?
                .rows_affected()
                == 1
        } else {
            let moved = sqlx::query(MOVE_HEAD)
                .bind(tenant_id)
                .bind(seq)
                .bind(&hash)
                .bind(last.seq)
                .bind(&last.hash)
                .execute(&mut **tx)
                .await?
                .rows_affected()
                == 1;
            if moved {
                insert_query(INSERT_EVENT, event, seq, &last.hash, &hash)
                    .execute(&mut **tx)
                    .await?;
            }
            moved
        };
        if appended {
            remember(tenant_id, Head { seq, hash });
            return Ok(());
        }
    }
    let (seq, previous) = next_link(tx, tenant_id).await?;
    let hash = event.hash(seq, &previous);
    insert_query(INSERT_EVENT, event, seq, &previous, &hash)
        .execute(&mut **tx)
        .await?;
    set_head(tx, tenant_id, &hash).await?;
    remember(tenant_id, Head { seq, hash });
    Ok(())
}

fn insert_query<'q>(
    sql: &'q str,
    event: &'q NewEvent<'q>,
    seq: i64,
    prev_hash: &'q str,
    hash: &'q str,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    sqlx::query(sql)
        .bind(event.id)
        .bind(event.tenant_id)
        .bind(event.event_type)
        .bind(event.actor)
        .bind(event.target_id)
        .bind(event.target_type)
        .bind(event.details)
        .bind(event.occurred_at)
        .bind(seq)
        .bind(prev_hash)
        .bind(hash)
}

/// Takes the next link of `tenant_id`'s chain: its seq and the hash it follows. The
/// head row stays locked until `tx` ends; [`set_head`] records the new link's hash.
pub async fn next_link(tx: &mut WriteTx, tenant_id: &str) -> Result<(i64, String), sqlx::Error> {
    for _ in 0..2 {
        let raised = sqlx::query("UPDATE audit_heads SET seq = seq + 1 WHERE tenant_id = $1")
            .bind(tenant_id)
            .execute(&mut **tx)
            .await?;
        if raised.rows_affected() == 1 {
            let row = sqlx::query("SELECT seq, hash FROM audit_heads WHERE tenant_id = $1")
                .bind(tenant_id)
                .fetch_one(&mut **tx)
                .await?;
            return Ok((row.try_get("seq")?, row.try_get("hash")?));
        }
        // The tenant's first event: start its chain (a concurrent first writer's row
        // wins, and this one then appends after it).
        sqlx::query(
            "INSERT INTO audit_heads (tenant_id, seq, hash) VALUES ($1, 0, $2) \
             ON CONFLICT (tenant_id) DO NOTHING",
        )
        .bind(tenant_id)
        .bind(GENESIS)
        .execute(&mut **tx)
        .await?;
    }
    Err(sqlx::Error::RowNotFound)
}

/// Records `hash` as the head of `tenant_id`'s chain (after [`next_link`]).
pub async fn set_head(tx: &mut WriteTx, tenant_id: &str, hash: &str) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE audit_heads SET hash = $2 WHERE tenant_id = $1")
        .bind(tenant_id)
        .bind(hash)
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

/// The head of a tenant's chain: its last event's seq and hash.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct Head {
    pub seq: i64,
    pub hash: String,
}

/// Chains the events written before the chain existed (no `seq`), tenant by tenant in
/// the order they occurred; run at start, it finds nothing once done.
pub async fn chain_unchained(db: &crate::db::Db) -> Result<u64, sqlx::Error> {
    let tenants: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT tenant_id FROM audit_events WHERE seq IS NULL ORDER BY tenant_id",
    )
    .fetch_all(db.pool())
    .await?;
    let mut chained = 0;
    for tenant_id in tenants {
        let mut tx = db.begin_write().await?;
        // Replicas starting together chain the same events: on PostgreSQL the rows are
        // locked as they are read, so a second chainer waits and then finds them chained
        // (read again after the lock) instead of chaining them twice. SQLite serializes
        // writers already.
        let lock = if crate::db::bulk::is_postgres(&mut tx) {
            " FOR UPDATE"
        } else {
            ""
        };
        let rows = sqlx::query(&format!(
            "SELECT id, tenant_id, event_type, actor, target_type, target_id, details, \
             occurred_at FROM audit_events WHERE tenant_id = $1 AND seq IS NULL \
             ORDER BY occurred_at, id{lock}"
        ))
        .bind(&tenant_id)
        .fetch_all(&mut *tx)
        .await?;
        for row in rows {
            let stored = StoredEvent::read(&row)?;
            let (seq, prev_hash) = next_link(&mut tx, &tenant_id).await?;
            let hash = stored.as_new().hash(seq, &prev_hash);
            sqlx::query(
                "UPDATE audit_events SET seq = $2, prev_hash = $3, hash = $4 WHERE id = $1",
            )
            .bind(&stored.id)
            .bind(seq)
            .bind(&prev_hash)
            .bind(&hash)
            .execute(&mut *tx)
            .await?;
            set_head(&mut tx, &tenant_id, &hash).await?;
            chained += 1;
        }
        tx.commit().await?;
    }
    Ok(chained)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> NewEvent<'static> {
        NewEvent {
            id: "evt_1",
            tenant_id: "ten_1",
            event_type: "agent.registered",
            actor: "api_key:key_1",
            target_type: "agent",
            target_id: "agt_1",
            details: r#"{"name":"a"}"#,
            occurred_at: 1_700_000_000_000,
        }
    }

    #[test]
    fn every_field_is_in_the_hash() {
        let base = event();
        let hash = base.hash(1, GENESIS);
        assert_eq!(hash.len(), 64);
        assert_eq!(hash, event().hash(1, GENESIS), "deterministic");
        assert_ne!(base.hash(2, GENESIS), hash, "seq");
        assert_ne!(base.hash(1, "1"), hash, "prev_hash");
        let variants = [
            NewEvent {
                id: "evt_2",
                ..base.clone()
            },
            NewEvent {
                tenant_id: "ten_2",
                ..base.clone()
            },
            NewEvent {
                event_type: "agent.deleted",
                ..base.clone()
            },
            NewEvent {
                actor: "system",
                ..base.clone()
            },
            NewEvent {
                target_type: "team",
                ..base.clone()
            },
            NewEvent {
                target_id: "agt_2",
                ..base.clone()
            },
            NewEvent {
                details: r#"{"name":"b"}"#,
                ..base.clone()
            },
            NewEvent {
                occurred_at: 1,
                ..base.clone()
            },
        ];
        for variant in variants {
            assert_ne!(variant.hash(1, GENESIS), hash, "{variant:?}");
        }
    }

    #[test]
    fn fields_cannot_be_shifted_between_each_other() {
        let a = NewEvent {
            actor: "ab",
            target_type: "c",
            ..event()
        };
        let b = NewEvent {
            actor: "a",
            target_type: "bc",
            ..event()
        };
        assert_ne!(a.hash(1, GENESIS), b.hash(1, GENESIS));
    }
}
