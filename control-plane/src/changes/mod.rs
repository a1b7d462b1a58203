//! Recording a write: its audit event, the outbox row that tells the proxies when it
//! changes what they enforce, and the deliveries of the notification event it raises
//! (`crate::notifications`), all inside the write's own transaction.
//!
//! This is the only way to write any of them. A service function names both decisions in one
//! call (`Proxies::Unaffected` must be said out loud), so it cannot audit a change and
//! forget the proxies, nor tell the proxies of a change nobody can read in the trail.

mod audit;
pub mod chain;
mod outbox;

use std::cell::Cell;
use std::future::Future;

use warden_shared::timestamp::Timestamp;

use crate::db::WriteTx;
use crate::notifications::outbox::{Happened, Raised};

pub use audit::AuditEvent;
pub use outbox::ChangeKind;

/// What a change means to the proxies' enforcement state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxies {
    /// Nothing the proxies hold changed (names, descriptions, reads of the ledger).
    Unaffected,
    /// The proxies must re-read the entity the audit event targets, of this kind.
    Reload(ChangeKind),
}

/// Who made a change: the tenant whose trail records it and the actor (a key id, a user,
/// `proxy` or `system`).
#[derive(Debug, Clone, Copy)]
pub struct Author<'a> {
    pub tenant_id: &'a str,
    pub actor: &'a str,
}

impl<'a> Author<'a> {
    /// What the proxies observed and reported (violations, approvals asked, tool calls
    /// refused, changed tool definitions): the actor is `proxy`.
    pub fn proxy(tenant_id: &'a str) -> Author<'a> {
        Author {
            tenant_id,
            actor: "proxy",
        }
    }
}

/// Records `event` in the author's trail and, for `Proxies::Reload`, an outbox row for
/// the event's target; returns the outbox version when one was written.
pub async fn record(
    tx: &mut WriteTx,
    author: Author<'_>,
    at: Timestamp,
    event: AuditEvent<'_>,
    proxies: Proxies,
) -> Result<Option<i64>, sqlx::Error> {
    let version = match proxies {
        Proxies::Unaffected => None,
        Proxies::Reload(kind) => Some(outbox::record(tx, kind, event.target_id, at).await?),
    };
    let audit_event_id = audit::record(tx, author.tenant_id, author.actor, at, &event).await?;
    let raised = Raised {
        tenant_id: author.tenant_id,
        actor: author.actor,
        at,
        audit_event_id: &audit_event_id,
        event: Happened {
            event_type: event.event_type,
            target_type: event.target_type,
            target_id: event.target_id,
            details: &event.details,
        },
    };
    crate::notifications::outbox::enqueue(tx, &raised).await?;
    if let Some(version) = version {
        // Outside a tracked request (a background job) there is nobody to wait.
        let _ = WRITTEN.try_with(|written| written.set(written.get().max(Some(version))));
    }
    Ok(version)
}

tokio::task_local! {
    /// The newest proxy change version the request being served has recorded.
    static WRITTEN: Cell<Option<i64>>;
}

/// Runs `work` (the handling of one request) and returns its output with the newest
/// version of the proxies' changes it recorded, if it recorded any: what the request
/// must wait for the proxies to apply before it answers (`crate::api::read_your_writes`).
pub async fn tracking<F: Future>(work: F) -> (F::Output, Option<i64>) {
    WRITTEN
        .scope(Cell::new(None), async move {
            let output = work.await;
            (output, WRITTEN.with(Cell::get))
        })
        .await
}
