//! Verifying a chain: a walk from its first event, or from a link an earlier walk
//! verified (the one this process keeps per tenant, [`VerifiedLinks`]), to its head.

use std::collections::HashMap;
use std::sync::Mutex;

use futures_util::TryStreamExt;
use serde::Serialize;
use sqlx::{AnyPool, Row};
use utoipa::ToSchema;

use super::{Head, StoredEvent, GENESIS};

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
