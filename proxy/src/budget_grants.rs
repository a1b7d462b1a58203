//! Budgets shared by every proxy (see `crate::budget`): a request whose budgets'
//! allowances on this proxy do not cover it asks the control plane for more
//! (`POST /internal/v1/budget-grants`), and a round every second gives back what the
//! ledger acknowledged or what lay unused, and renews allowances in use.
//!
//! When the control plane does not answer within a second, the scopes asked for are
//! counted by this proxy alone for `budget::allowance::ALONE_FOR_MS` (as every proxy did before
//! allowances: each up to the threshold), counted in
//! `warden_proxy_budget_grant_failures_total`.

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounter;
use serde::Deserialize;
use serde_json::json;
use warden_shared::clock::Clock;

use crate::budget::{Budgets, Shortfall};
use crate::flush::ask_for_data;

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
    failures: IntCounter,
}

/// The control plane's answer for one scope.
#[derive(Debug, Deserialize)]
struct ScopeGrant {
    tenant_id: String,
    scope: String,
    granted_micros: i64,
    committed_micros: i64,
}

impl BudgetGrants {
    pub fn new(
        client: reqwest::Client,
        control_plane: &str,
        service_token: &str,
        holder: &str,
        failures: IntCounter,
    ) -> BudgetGrants {
        BudgetGrants {
            client,
            url: format!("{control_plane}/internal/v1/budget-grants"),
            service_token: service_token.to_owned(),
            holder: holder.to_owned(),
            failures,
        }
    }

    /// Asks for what `short` needs in `month`; the grants are added to `budgets`. Returns
    /// the shortfall the control plane had no room for (with the scope's committed
    /// money), if any; when it does not answer, the scopes are counted alone.
    pub async fn ask(
        &self,
        budgets: &Budgets,
        tenant_id: &str,
        month: i64,
        short: &[Shortfall],
        now_ms: i64,
    ) -> Option<(Shortfall, i64)> {
        let scopes: Vec<_> = short
            .iter()
            .map(|s| {
                json!({ "tenant_id": tenant_id, "scope": s.scope, "block_micros": s.block_micros,
                        "need_micros": s.need_micros, "release_micros": s.release_micros })
            })
            .collect();
        match self.send(month, scopes).await {
            Ok(answers) => {
                let grants: Vec<(&str, i64)> = answers
                    .iter()
                    .map(|a| (a.scope.as_str(), a.granted_micros))
                    .collect();
                budgets.apply_grants(tenant_id, month, &grants, now_ms);
                short.iter().find_map(|asked| {
                    let answer = answers.iter().find(|a| a.scope == asked.scope)?;
                    (answer.granted_micros < asked.need_micros)
                        .then(|| (asked.clone(), answer.committed_micros))
                })
            }
            Err(error) => {
                tracing::warn!(%error, "cannot ask the control plane for a budget's allowance; counting its scopes here alone for a while");
                self.failures.inc();
                let scopes: Vec<&str> = short.iter().map(|s| s.scope.as_str()).collect();
                budgets.count_alone(tenant_id, &scopes, now_ms);
                None
            }
        }
    }

    async fn send(
        &self,
        month: i64,
        scopes: Vec<serde_json::Value>,
    ) -> Result<Vec<ScopeGrant>, String> {
        let body = json!({ "holder": self.holder, "month": month, "scopes": scopes });
        #[derive(Deserialize)]
        struct Grants {
            scopes: Vec<ScopeGrant>,
        }
        let grants: Grants = ask_for_data(
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
                    .map(|(tenant_id, scope, _, renewal)| {
                        json!({ "tenant_id": tenant_id, "scope": scope,
                                "block_micros": renewal.block_micros, "need_micros": 0,
                                "release_micros": renewal.release_micros })
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
                        self.failures.inc();
                    }
                }
            }
        }
    }
}
