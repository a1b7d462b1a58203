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
//! broken link.
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

use futures_util::TryStreamExt;
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::{AnyPool, Row};
use utoipa::ToSchema;
use warden_shared::keys::hex;

use crate::db::WriteTx;

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

/// What [`verify`] found.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Verification {
    /// True when every event links to the one before it and the head is the last one.
    pub valid: bool,
    pub events_checked: i64,
    /// The chain's head as recorded; null for a tenant without events.
    pub head: Option<Head>,
    /// The first broken link, when the chain is not valid.
    pub broken: Option<BrokenLink>,
}

/// Where and how a chain breaks.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BrokenLink {
    /// The position where the break shows (the seq expected there).
    pub seq: i64,
    /// The event found there, if any.
    pub event_id: Option<String>,
    /// `hash_mismatch` (the event's fields do not give its hash: altered),
    /// `prev_hash_mismatch` (it does not follow the event before it: removed, inserted
    /// or reordered events), `missing_event` (a gap in the sequence), `unchained_event`
    /// (an event without a link), `head_mismatch` (the last event is not the recorded
    /// head: events removed from the end).
    pub reason: String,
}

/// The columns a walk reads.
macro_rules! chain_columns {
    () => {
        "id, tenant_id, event_type, actor, target_type, target_id, details, occurred_at, \
         seq, prev_hash, hash"
    };
}

/// Walks `tenant_id`'s chain from its first event, in constant memory, and reports the
/// first broken link.
pub async fn verify(pool: &AnyPool, tenant_id: &str) -> Result<Verification, sqlx::Error> {
    walk_to_head(pool, tenant_id, Walk::from_genesis()).await
}

/// Verifies `tenant_id`'s chain as far as its events after `verified`, a link that an
/// earlier walk verified from the first event: that link is checked again (its fields
/// still give its hash, so the chain up to it was not rewritten), then each event after
/// it, then that no event is unchained and the last is the head. Where that finds a
/// break, the whole chain is walked, so the report names the first broken link.
///
/// What it does not see is an event before `verified` altered in place, leaving its
/// successors' links as they were: only a walk from the first event does.
pub async fn verify_after(
    pool: &AnyPool,
    tenant_id: &str,
    verified: &Head,
) -> Result<Verification, sqlx::Error> {
    let verification = walk_to_head(pool, tenant_id, Walk::resuming(verified)).await?;
    match verification.valid {
        true => Ok(verification),
        false => verify(pool, tenant_id).await,
    }
}

/// Appends met on the way before a walk reports the head behind it.
const HEAD_CHASES: usize = 3;

/// Walks on from where `walk` stands to the chain's head. The head is read after the
/// events, so an event appended during the walk shows as a head past the walk's end: the
/// walk then goes on to it (a few times at most) instead of reporting the chain cut
/// short; an event past the head is a break.
async fn walk_to_head(
    pool: &AnyPool,
    tenant_id: &str,
    mut walk: Walk,
) -> Result<Verification, sqlx::Error> {
    let mut chases = 0;
    let head = loop {
        // The chain's index (tenant, seq) gives the events in order, without a sort.
        let events = sqlx::query(concat!(
            "SELECT ",
            chain_columns!(),
            " FROM audit_events WHERE tenant_id = $1 AND seq >= $2 ORDER BY seq"
        ))
        .bind(tenant_id)
        .bind(walk.read_from)
        .fetch(pool);
        walk = walk.over(events).await?;
        let head = read_head(pool, tenant_id).await?;
        let behind = head
            .as_ref()
            .is_some_and(|head| head.seq >= walk.expected_seq);
        if walk.broken.is_some() || !behind || chases == HEAD_CHASES {
            break head;
        }
        chases += 1;
        walk.read_from = walk.expected_seq;
    };
    let unchained = sqlx::query(concat!(
        "SELECT ",
        chain_columns!(),
        " FROM audit_events WHERE tenant_id = $1 AND seq IS NULL LIMIT 1"
    ))
    .bind(tenant_id)
    .fetch(pool);
    Ok(walk.over(unchained).await?.finish(head))
}

async fn read_head(pool: &AnyPool, tenant_id: &str) -> Result<Option<Head>, sqlx::Error> {
    sqlx::query("SELECT seq, hash FROM audit_heads WHERE tenant_id = $1")
        .bind(tenant_id)
        .fetch_optional(pool)
        .await?
        .map(|row| -> Result<Head, sqlx::Error> {
            Ok(Head {
                seq: row.try_get("seq")?,
                hash: row.try_get("hash")?,
            })
        })
        .transpose()
}

/// A walk along a chain: the link it expects next, and the first break it found.
struct Walk {
    /// The lowest `seq` it reads next.
    read_from: i64,
    checked: i64,
    previous: String,
    expected_seq: i64,
    /// A link the walk resumes from, checked again before those after it.
    resumed: Option<Head>,
    broken: Option<BrokenLink>,
}

impl Walk {
    fn from_genesis() -> Walk {
        Walk {
            // Every chained event, so one before the first shows as a break.
            read_from: i64::MIN,
            checked: 0,
            previous: GENESIS.to_owned(),
            expected_seq: 1,
            resumed: None,
            broken: None,
        }
    }

    /// A walk whose events up to `verified` were verified: it expects that event again.
    fn resuming(verified: &Head) -> Walk {
        Walk {
            read_from: verified.seq,
            checked: verified.seq - 1,
            previous: String::new(),
            expected_seq: verified.seq,
            resumed: Some(verified.clone()),
            broken: None,
        }
    }

    /// Checks each of `events` in turn, until the first break.
    async fn over(
        mut self,
        mut events: impl futures_util::Stream<Item = Result<sqlx::any::AnyRow, sqlx::Error>> + Unpin,
    ) -> Result<Walk, sqlx::Error> {
        while self.broken.is_none() {
            let Some(row) = events.try_next().await? else {
                break;
            };
            self.step(&row)?;
        }
        Ok(self)
    }

    fn step(&mut self, row: &sqlx::any::AnyRow) -> Result<(), sqlx::Error> {
        let id: String = row.try_get("id")?;
        let broken = |seq: i64, reason: &str| BrokenLink {
            seq,
            event_id: Some(id.clone()),
            reason: reason.to_owned(),
        };
        let (Some(seq), Some(prev_hash), Some(hash)) = (
            row.try_get::<Option<i64>, _>("seq")?,
            row.try_get::<Option<String>, _>("prev_hash")?,
            row.try_get::<Option<String>, _>("hash")?,
        ) else {
            self.broken = Some(broken(self.expected_seq, "unchained_event"));
            return Ok(());
        };
        if seq != self.expected_seq {
            self.broken = Some(broken(self.expected_seq, "missing_event"));
            return Ok(());
        }
        let stored = StoredEvent::read(row)?;
        if stored.as_new().hash(seq, &prev_hash) != hash {
            self.broken = Some(broken(seq, "hash_mismatch"));
            return Ok(());
        }
        let follows = match self.resumed.take() {
            // The resumed link is the one verified before: the same hash.
            Some(verified) => verified.hash == hash,
            None => prev_hash == self.previous,
        };
        if !follows {
            self.broken = Some(broken(seq, "prev_hash_mismatch"));
            return Ok(());
        }
        self.checked += 1;
        self.expected_seq += 1;
        self.previous = hash;
        Ok(())
    }

    /// The verification: the first break, or whether the walk ended at `head`.
    fn finish(self, head: Option<Head>) -> Verification {
        if let Some(broken) = self.broken {
            return invalid(self.checked, head, broken);
        }
        if self.resumed.is_some() {
            // The link it resumed from is gone.
            let broken = BrokenLink {
                seq: self.expected_seq,
                event_id: None,
                reason: "missing_event".to_owned(),
            };
            return invalid(self.checked, head, broken);
        }
        let ends_at_head = match &head {
            None => self.checked == 0,
            Some(head) => head.seq == self.checked && head.hash == self.previous,
        };
        if !ends_at_head {
            let broken = BrokenLink {
                seq: self.checked + 1,
                event_id: None,
                reason: "head_mismatch".to_owned(),
            };
            return invalid(self.checked, head, broken);
        }
        Verification {
            valid: true,
            events_checked: self.checked,
            head,
            broken: None,
        }
    }
}

fn invalid(checked: i64, head: Option<Head>, broken: BrokenLink) -> Verification {
    Verification {
        valid: false,
        events_checked: checked,
        head,
        broken: Some(broken),
    }
}

/// The link up to which each tenant's chain was last verified by a walk from its first
/// event, and when that walk was, so that a check soon after needs to verify only what
/// was appended since ([`verify_after`]). Kept in the process, apart from the database
/// the chain lives in.
#[derive(Debug, Default)]
pub struct VerifiedLinks(Mutex<HashMap<String, Verified>>);

/// See [`VerifiedLinks`].
#[derive(Debug, Clone)]
pub struct Verified {
    pub link: Head,
    /// When the chain was last walked from its first event (Unix ms).
    pub walked_at: i64,
}

impl VerifiedLinks {
    pub fn get(&self, tenant_id: &str) -> Option<Verified> {
        self.0.lock().ok()?.get(tenant_id).cloned()
    }

    pub fn set(&self, tenant_id: &str, verified: Option<Verified>) {
        if let Ok(mut links) = self.0.lock() {
            match verified {
                Some(verified) => links.insert(tenant_id.to_owned(), verified),
                None => links.remove(tenant_id),
            };
        }
    }
}

/// Verifies `tenant_id`'s chain: every event when `whole`, when no walk from the first
/// event is known, or when the last is `walk_every_ms` old or older; else what was
/// appended since the link `links` holds ([`verify_after`]). Keeps the newly verified
/// link (or forgets it, for a broken chain). Returns the verification and when the walk
/// it builds on was (Unix ms).
pub async fn check(
    pool: &AnyPool,
    links: &VerifiedLinks,
    tenant_id: &str,
    now_ms: i64,
    walk_every_ms: i64,
    whole: bool,
) -> Result<(Verification, i64), sqlx::Error> {
    let recent = links
        .get(tenant_id)
        .filter(|verified| !whole && now_ms - verified.walked_at < walk_every_ms);
    let (verification, walked_at) = match recent {
        Some(verified) => (
            verify_after(pool, tenant_id, &verified.link).await?,
            verified.walked_at,
        ),
        None => (verify(pool, tenant_id).await?, now_ms),
    };
    let verified = match (&verification.valid, &verification.head) {
        (true, Some(head)) => Some(Verified {
            link: head.clone(),
            walked_at,
        }),
        _ => None,
    };
    links.set(tenant_id, verified);
    Ok((verification, walked_at))
}

/// The tenants that have an audit chain.
pub async fn chained_tenants(pool: &AnyPool) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT tenant_id FROM audit_heads ORDER BY tenant_id")
        .fetch_all(pool)
        .await
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
