//! Budgets shared by every proxy: a proxy admits a request only within the money the
//! control plane granted it for each budget scope that covers the request and the
//! month, and asks for more when what it holds does not cover the request.
//!
//! The rule that bounds N proxies: a grant is made only while the scope's month-to-date
//! spend in the ledger plus what every live proxy holds stays within the budget's block
//! threshold. A proxy's holding covers its requests in flight and its finished requests
//! the ledger has not acknowledged, so spend that is not in the ledger yet is always in
//! some holding; a proxy gives back (`release_micros`) only what the ledger has
//! acknowledged, or what it holds unused. Until a release arrives the same money is in
//! both the ledger and the holding: counted twice for that moment, which can refuse a
//! request that fits but never admits one that does not. Each grant is at most an
//! eighth of the room left (or what the request needs, if more), so the allowance
//! proxies hold unused when the budget is reached stays small; a proxy gives back what
//! it has not used for a few seconds.
//!
//! A holding renewed by no request for [`LAPSE_MS`] has lapsed: its proxy stopped, or has
//! not reached a control plane for that long and counts alone (it stops relying on a
//! holding well before it lapses here).

use warden_shared::timestamp::Timestamp;
use warden_shared::wire::{BudgetGrantRequest, BudgetGrants, ScopeGrant};

use super::{invalid, store};
use crate::error::ApiResult;
use crate::state::AppState;

/// How long a holding counts without being renewed.
pub const LAPSE_MS: i64 = 60_000;
/// Longest tenant id, scope or holder name.
const MAX_NAME: usize = 200;
/// Most scopes in one request.
const MAX_SCOPES: usize = 500;
/// Largest amount of money in a request, in micro-dollars ($1 billion).
const MAX_MICROS: i64 = 1_000_000_000_000_000;

pub async fn grant(state: &AppState, request: BudgetGrantRequest) -> ApiResult<BudgetGrants> {
    check(&request)?;
    let month = Timestamp::from_millis(request.month).month_start();
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    // A tenant deleted meanwhile gets nothing (and has no rows to write to).
    let live =
        store::live_tenants(&mut tx, request.scopes.iter().map(|s| s.tenant_id.as_str())).await?;
    // Scope order, so concurrent grants lock shared rows in the same order.
    let mut order: Vec<usize> = (0..request.scopes.len()).collect();
    order.sort_unstable_by(|a, b| {
        let (a, b) = (&request.scopes[*a], &request.scopes[*b]);
        (&a.tenant_id, &a.scope).cmp(&(&b.tenant_id, &b.scope))
    });
    let mut answers: Vec<Option<ScopeGrant>> = request.scopes.iter().map(|_| None).collect();
    for index in order {
        let asked = &request.scopes[index];
        let answer = if live.contains(&asked.tenant_id) {
            let key = store::GrantKey {
                tenant_id: &asked.tenant_id,
                scope: &asked.scope,
                month,
                holder: &request.holder,
            };
            let figures = store::budget_figures(&mut tx, &key, now, LAPSE_MS).await?;
            let own = (figures.own - asked.release_micros).max(0);
            let room = asked.block_micros - figures.spend - figures.others - own;
            let granted = grant_size(asked.need_micros, room);
            store::hold_budget(&mut tx, &key, own + granted, now).await?;
            ScopeGrant {
                tenant_id: asked.tenant_id.clone(),
                scope: asked.scope.clone(),
                granted_micros: granted,
                held_micros: own + granted,
                committed_micros: figures.spend + figures.others + own + granted,
            }
        } else {
            ScopeGrant {
                tenant_id: asked.tenant_id.clone(),
                scope: asked.scope.clone(),
                granted_micros: 0,
                held_micros: 0,
                committed_micros: 0,
            }
        };
        answers[index] = Some(answer);
    }
    tx.commit().await?;
    Ok(BudgetGrants {
        scopes: answers.into_iter().flatten().collect(),
    })
}

/// A grant gives at most this fraction of the room left beyond what is needed.
const GRANT_SHARE_DIVISOR: i64 = 8;

/// What a proxy that needs `need` gets from `room`: nothing when it does not fit (a
/// request is admitted whole or not at all), else the need or an eighth of the room,
/// whichever is more.
fn grant_size(need: i64, room: i64) -> i64 {
    if need <= 0 || room < need {
        0
    } else {
        need.max(room / GRANT_SHARE_DIVISOR)
    }
}

fn check(request: &BudgetGrantRequest) -> ApiResult<()> {
    let chars = |text: &str| text.chars().count();
    if request.holder.is_empty() || chars(&request.holder) > MAX_NAME {
        return invalid("holder", "1 to 200 characters");
    }
    if request.month < 0 {
        return invalid("month", "an instant of the month, in Unix milliseconds");
    }
    if request.scopes.is_empty() || request.scopes.len() > MAX_SCOPES {
        return invalid("scopes", "1 to 500 scopes");
    }
    for (index, asked) in request.scopes.iter().enumerate() {
        let name = |part: &str| format!("scopes[{index}].{part}");
        if chars(&asked.tenant_id) > MAX_NAME {
            return invalid(&name("tenant_id"), "at most 200 characters");
        }
        if !is_budget_scope(&asked.scope) {
            return invalid(
                &name("scope"),
                "tenant, team:<id>, agent:<id> or key:<id>, at most 200 characters",
            );
        }
        for (part, value) in [
            ("block_micros", asked.block_micros),
            ("need_micros", asked.need_micros),
            ("release_micros", asked.release_micros),
        ] {
            if !(0..=MAX_MICROS).contains(&value) {
                return invalid(&name(part), "from 0 to 10^15 micro-dollars");
            }
        }
    }
    Ok(())
}

fn is_budget_scope(scope: &str) -> bool {
    if scope.chars().count() > MAX_NAME {
        return false;
    }
    scope == warden_shared::budget::TENANT_SCOPE
        || ["team:", "agent:", "key:"]
            .iter()
            .any(|prefix| scope.strip_prefix(prefix).is_some_and(|id| !id.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::grant_size;

    #[test]
    fn a_grant_is_the_need_or_an_eighth_of_the_room_and_never_past_it() {
        assert_eq!(grant_size(100, 8_000), 1_000);
        assert_eq!(grant_size(2_000, 8_000), 2_000);
        assert_eq!(grant_size(100, 100), 100);
        assert_eq!(grant_size(101, 100), 0);
        assert_eq!(grant_size(0, 8_000), 0);
        assert_eq!(grant_size(100, -50), 0);
    }
}
