//! Rate limits shared by every proxy: a proxy admits a `rate_limit` policy's requests
//! against the allowance the control plane granted it for the bucket and minute, and
//! asks for more when it is spent. The grants of a bucket and minute never sum past the
//! limit (`store::grant_rate`), so however many proxies serve an agent, together they
//! admit at most the limit in a minute; the allowance they hold unused when it is
//! reached is the bound below it (each grant is at most an eighth of what is left).
//!
//! A proxy sends its asks in batches (every bucket whose allowance ran out while its
//! previous batch was on its way): at the start of a minute each bucket asks once, and
//! ten thousand buckets must not be ten thousand write transactions.

use std::collections::{BTreeMap, HashSet};

use warden_shared::wire::{RateAsk, RateGrant, RateGrantRequest, RateGrants};

use super::{invalid, store};
use crate::error::ApiResult;
use crate::state::AppState;

/// Longest limiter or bucket name (policy and key ids, agent and team ids).
const MAX_NAME: usize = 200;
/// Most requests one ask may want.
const MAX_WANT: i64 = 10_000;
/// Most asks in one request.
const MAX_ASKS: usize = 500;

pub async fn grant(state: &AppState, request: RateGrantRequest) -> ApiResult<RateGrants> {
    check(&request)?;
    let asks = &request.asks;
    let mut tx = state.db.begin_write().await?;
    // A tenant deleted meanwhile gets nothing (and has no rows to write to).
    let live = store::live_tenants(&mut tx, asks.iter().map(|a| a.tenant_id.as_str())).await?;
    // Key order, so that concurrent batches lock shared rows in the same order.
    let mut order: Vec<usize> = (0..asks.len()).collect();
    order.sort_unstable_by_key(|&i| {
        let a = &asks[i];
        (&a.tenant_id, &a.limiter, &a.bucket, a.minute)
    });
    // One statement for the asks of each limit and want (a policy's: usually all of a
    // batch), in key order within it; the same key twice in one batch (a proxy never
    // sends that) is granted again on its own after.
    let mut groups: BTreeMap<(i64, i64), Vec<usize>> = BTreeMap::new();
    let mut seen = HashSet::new();
    let mut again = Vec::new();
    for index in order {
        let ask = &asks[index];
        if !live.contains(&ask.tenant_id) {
            continue;
        }
        if seen.insert(key(ask)) {
            groups.entry((ask.limit, ask.want)).or_default().push(index);
        } else {
            again.push(index);
        }
    }
    let mut granted = vec![0; asks.len()];
    for ((limit, want), indices) in groups {
        let keys: Vec<_> = indices.iter().map(|&i| key(&asks[i])).collect();
        let gave = store::grant_rates(&mut tx, &keys, limit, want).await?;
        for (index, gave) in indices.into_iter().zip(gave) {
            granted[index] = gave;
        }
    }
    for index in again {
        let ask = &asks[index];
        granted[index] = store::grant_rate(&mut tx, key(ask), ask.limit, ask.want).await?;
    }
    tx.commit().await?;
    Ok(RateGrants {
        grants: granted
            .into_iter()
            .map(|granted| RateGrant { granted })
            .collect(),
    })
}

/// The bucket and minute `ask` is for.
fn key(ask: &RateAsk) -> store::RateKey<'_> {
    (
        ask.tenant_id.as_str(),
        ask.limiter.as_str(),
        ask.bucket.as_str(),
        ask.minute,
    )
}

fn check(request: &RateGrantRequest) -> ApiResult<()> {
    if request.asks.is_empty() || request.asks.len() > MAX_ASKS {
        return invalid("asks", "1 to 500 asks");
    }
    let chars = |text: &str| text.chars().count();
    for (index, ask) in request.asks.iter().enumerate() {
        let name = |part: &str| format!("asks[{index}].{part}");
        if ask.limiter.is_empty() || chars(&ask.limiter) > MAX_NAME {
            return invalid(&name("limiter"), "1 to 200 characters");
        }
        if chars(&ask.bucket) > MAX_NAME {
            return invalid(&name("bucket"), "at most 200 characters");
        }
        if chars(&ask.tenant_id) > MAX_NAME {
            return invalid(&name("tenant_id"), "at most 200 characters");
        }
        if !(1..=1_000_000_000).contains(&ask.limit) {
            return invalid(&name("limit"), "from 1 to 1,000,000,000");
        }
        if !(1..=MAX_WANT).contains(&ask.want) {
            return invalid(&name("want"), "from 1 to 10,000");
        }
        if ask.minute < 0 {
            return invalid(&name("minute"), "a Unix minute");
        }
    }
    Ok(())
}
