//! Budgets shared by every proxy (see `crate::budget`): a request whose budgets'
//! allowances on this proxy do not cover it asks the control plane for more
//! (`POST /internal/v1/budget-grants`), and a round every second gives back what the
//! ledger acknowledged or what lay unused, and renews allowances in use.
//!
//! A scope's requests share one ask: a request short in a scope that is being asked
//! for waits for that ask and then checks again, so a burst of requests that finds a
//! budget's allowance used up (or, after a start or a new limit, not yet granted) makes
//! one request to the control plane, not one each (each a write transaction there).
//! A grant is an eighth of the room left, which covers many requests.
//!
//! When the control plane does not answer within a second, the scopes asked for are
//! counted by this proxy alone for `budget::allowance::ALONE_FOR_MS` (as every proxy did before
//! allowances: each up to the threshold), counted in
//! `warden_proxy_budget_grant_failures_total`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::IntCounter;
use tokio::sync::watch;
use warden_shared::clock::Clock;
use warden_shared::wire::{self, paths, BudgetGrantRequest, ScopeGrant, ScopeGrantRequest};

use crate::budget::{Budgets, Shortfall};
use crate::flush::ask_for_data;
use crate::rate_limit::lock;

/// How long a request waits for a grant before its scopes are counted alone.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// How often allowances are given back and renewed.
const ROUND: Duration = Duration::from_secs(1);
/// Most scopes in one request (the control plane's limit).
const MAX_SCOPES: usize = 500;

#[derive(Clone)]
pub struct BudgetGrants {
    client: reqwest::Client,
    url: String,
    service_token: String,
    /// This proxy's instance id: whose allowance it is.
    holder: String,
    counters: BudgetGrantCounters,
    asking: Arc<Asking>,
}

/// The metrics of a proxy's budget asks.
#[derive(Clone)]
pub struct BudgetGrantCounters {
    /// Asks the control plane did not answer (asks and renewals).
    pub failures: IntCounter,
    /// Asks sent by requests short of an allowance.
    pub asks: IntCounter,
}

/// The scopes (tenant id, scope) being asked for, each with the receiving end of a
/// channel whose sender is dropped when its ask has ended.
#[derive(Default)]
struct Asking(Mutex<HashMap<(String, String), watch::Receiver<()>>>);

/// What came of a request's ask.
pub enum Asked {
    /// Granted what was asked for, or counted alone: check again.
    Granted,
    /// The control plane has no room for this shortfall; the scope's committed money.
    NoRoom(Shortfall, i64),
    /// Another request was asking for one of the scopes; its ask has ended: check again.
    Waited,
}

/// An ask on its way: its scopes leave [`Asking`] and their waiters wake when it ends,
/// answered or not (a request dropped while asking included).
struct OnItsWay<'a> {
    asking: &'a Asking,
    scopes: Vec<(String, String)>,
    _ended: watch::Sender<()>,
}

impl Drop for OnItsWay<'_> {
    fn drop(&mut self) {
        let mut asking = lock(&self.asking.0);
        for scope in &self.scopes {
            asking.remove(scope);
        }
    }
}

impl BudgetGrants {
    pub fn new(
        client: reqwest::Client,
        control_plane: &str,
        service_token: &str,
        holder: &str,
        counters: BudgetGrantCounters,
    ) -> BudgetGrants {
        BudgetGrants {
            client,
            url: format!("{control_plane}{}", paths::BUDGET_GRANTS),
            service_token: service_token.to_owned(),
            holder: holder.to_owned(),
            counters,
            asking: Arc::default(),
        }
    }

    /// Asks for what `short` needs in `month`, unless one of its scopes is being asked
    /// for: then waits for that ask to end. Grants are added to `budgets`; when the
    /// control plane does not answer, the scopes are counted alone.
    pub async fn ask(
        &self,
        budgets: &Budgets,
        tenant_id: &str,
        month: i64,
        short: &[Shortfall],
        now_ms: i64,
    ) -> Asked {
        let on_its_way = match self.join_or_start(budgets, tenant_id, short) {
            Ok(on_its_way) => on_its_way,
            Err(others) => {
                for mut ended in others {
                    // Its sender is dropped when the ask ends: `changed` then fails.
                    let _ = tokio::time::timeout(2 * ASK_TIMEOUT, ended.changed()).await;
                }
                return Asked::Waited;
            }
        };
        self.counters.asks.inc();
        let scopes: Vec<_> = short
            .iter()
            .map(|s| {
                let release_micros = budgets.take_release(tenant_id, &s.scope, now_ms);
                ScopeGrantRequest {
                    tenant_id: tenant_id.to_owned(),
                    scope: s.scope.clone(),
                    block_micros: s.block_micros,
                    need_micros: s.need_micros,
                    release_micros,
                }
            })
            .collect();
        let asked = match self.send(month, scopes).await {
            Ok(answers) => {
                let grants: Vec<(&str, i64)> = answers
                    .iter()
                    .map(|a| (a.scope.as_str(), a.granted_micros))
                    .collect();
                budgets.apply_grants(tenant_id, month, &grants, now_ms);
                let no_room = short.iter().find_map(|asked| {
                    let answer = answers.iter().find(|a| a.scope == asked.scope)?;
                    (answer.granted_micros < asked.need_micros)
                        .then(|| Asked::NoRoom(asked.clone(), answer.committed_micros))
                });
                no_room.unwrap_or(Asked::Granted)
            }
            Err(error) => {
                tracing::warn!(%error, "cannot ask the control plane for a budget's allowance; counting its scopes here alone for a while");
                self.counters.failures.inc();
                let scopes: Vec<&str> = short.iter().map(|s| s.scope.as_str()).collect();
                budgets.count_alone(tenant_id, &scopes, now_ms);
                Asked::Granted
            }
        };
        // What was granted is in `budgets` before the waiters look again.
        drop(on_its_way);
        asked
    }

    /// Marks `short`'s scopes as being asked for by this request, or, when some of them
    /// already are, returns those asks' ends to wait for (none: an ask was answered
    /// since the request looked, so it looks again first).
    fn join_or_start(
        &self,
        budgets: &Budgets,
        tenant_id: &str,
        short: &[Shortfall],
    ) -> Result<OnItsWay<'_>, Vec<watch::Receiver<()>>> {
        let mut asking = lock(&self.asking.0);
        let keys: Vec<(String, String)> = short
            .iter()
            .map(|s| (tenant_id.to_owned(), s.scope.clone()))
            .collect();
        let others: Vec<_> = keys
            .iter()
            .filter_map(|key| asking.get(key).cloned())
            .collect();
        // An ask answered after the request looked and before it came here (its grant
        // is added before its scopes leave `asking`, under this lock).
        if !others.is_empty() || short.iter().any(|s| budgets.answered_since(tenant_id, s)) {
            return Err(others);
        }
        let (ended, waiting) = watch::channel(());
        for key in &keys {
            asking.insert(key.clone(), waiting.clone());
        }
        Ok(OnItsWay {
            asking: &self.asking,
            scopes: keys,
            _ended: ended,
        })
    }

    async fn send(
        &self,
        month: i64,
        scopes: Vec<ScopeGrantRequest>,
    ) -> Result<Vec<ScopeGrant>, String> {
        let body = BudgetGrantRequest {
            holder: self.holder.clone(),
            month,
            scopes,
        };
        let grants: wire::BudgetGrants = ask_for_data(
            &self.client,
            &self.url,
            &self.service_token,
            &body,
            ASK_TIMEOUT,
        )
        .await?;
        Ok(grants.scopes)
    }

    /// Every second: gives back and renews allowances (see `budget::allowance`). A
    /// round that fails gives back nothing twice: what it carried stays counted at the
    /// control plane until the holding lapses there.
    pub async fn renew_forever(self, budgets: Arc<Budgets>, clock: Clock) {
        let mut ticker = tokio::time::interval(ROUND);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            self.renew(&budgets, clock.now_ms()).await;
        }
    }

    /// At shutdown: gives back what the ledger acknowledged and every unused allowance,
    /// as if each had been idle (what is still unacknowledged stays held until it lapses).
    pub async fn give_back_unused(&self, budgets: &Budgets, now_ms: i64) {
        self.renew(budgets, now_ms + crate::budget::IDLE_MS).await;
    }

    async fn renew(&self, budgets: &Budgets, now_ms: i64) {
        let mut due = budgets.renewals(now_ms);
        due.sort_unstable_by_key(|(.., month, _)| *month);
        for month_due in due.chunk_by(|a, b| a.2 == b.2) {
            for chunk in month_due.chunks(MAX_SCOPES) {
                let month = chunk[0].2;
                let scopes = chunk
                    .iter()
                    .map(|(tenant_id, scope, _, renewal)| ScopeGrantRequest {
                        tenant_id: tenant_id.clone(),
                        scope: scope.clone(),
                        block_micros: renewal.block_micros,
                        need_micros: 0,
                        release_micros: renewal.release_micros,
                    })
                    .collect();
                match self.send(month, scopes).await {
                    Ok(answers) => {
                        for answer in answers {
                            budgets.renewed(&answer.tenant_id, &answer.scope, month, now_ms);
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "cannot renew budget allowances with the control plane");
                        self.counters.failures.inc();
                    }
                }
            }
        }
    }
}
