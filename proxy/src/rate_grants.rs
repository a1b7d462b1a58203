//! Rate limits shared by every proxy (see `crate::rate_limit`): before a request is
//! evaluated, each requests-per-minute `rate_limit` policy that covers it has an
//! allowance on this proxy for the request's bucket and minute, asked from the control
//! plane (`POST /internal/v1/rate-grants`) when there is none or it is spent. The
//! control plane never grants past the limit, whatever the number of proxies.
//!
//! A proxy asks at most once per spent allowance and request; when the control plane
//! does not answer within a second, the bucket's minute is counted by this proxy alone
//! (up to the whole limit here) and counted in `warden_proxy_rate_grant_failures_total`.
//!
//! In a minute's last seconds ([`crate::rate_limit::AHEAD_WITHIN_MS`]) the proxy asks,
//! in batches, for the next minute of every bucket it served this minute, at this
//! minute's pace ([`RateGrants::ask_ahead_forever`]): a minute's first requests then
//! find their allowance in place. Without it every bucket's first request of a minute
//! would wait on an ask of its own, thousands at once for a per-key limit.

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounter;
use serde_json::json;
use warden_shared::clock::Clock;
use warden_shared::policy::{rate_bucket_id, Policy, PolicyConfig, RequestFacts};

use crate::flush::ask_for_data;
use crate::rate_limit::{AheadAsk, Limiter, RateWindows};

/// How long a request waits for a grant before its bucket is counted locally.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// How long an ask ahead may take (no request waits on it).
const BATCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Most buckets one ask ahead names (the control plane's bound).
const MAX_BATCH: usize = 1000;

#[derive(Clone)]
pub struct RateGrants {
    client: reqwest::Client,
    url: String,
    batch_url: String,
    service_token: String,
    failures: IntCounter,
}

impl RateGrants {
    pub fn new(
        client: reqwest::Client,
        control_plane: &str,
        service_token: &str,
        failures: IntCounter,
    ) -> RateGrants {
        RateGrants {
            client,
            url: format!("{control_plane}/internal/v1/rate-grants"),
            batch_url: format!("{control_plane}/internal/v1/rate-grant-batches"),
            service_token: service_token.to_owned(),
            failures,
        }
    }

    /// Gives every shared limit covering `request` an allowance for it where it has
    /// none left (see the module documentation).
    pub async fn ensure(
        &self,
        rates: &RateWindows,
        policies: &[Policy],
        request: &RequestFacts<'_>,
        now_ms: i64,
    ) {
        for policy in policies {
            let PolicyConfig::RateLimit {
                requests_per_minute: Some(limit),
                per,
                tools,
                ..
            } = &policy.config
            else {
                continue;
            };
            let covers =
                policy
                    .scope
                    .covers_agent(request.agent_id, request.team_id, request.environment);
            if !tools.is_empty() || !covers {
                continue;
            }
            let bucket = rate_bucket_id(*per, request);
            let limiter = Limiter::Policy(policy.id);
            let Some(minute) = rates.needs_grant(limiter, bucket, now_ms) else {
                continue;
            };
            match self
                .ask(request.tenant_id, policy.id, bucket, minute, *limit)
                .await
            {
                Ok(granted) => {
                    rates.add_grant(request.tenant_id, limiter, bucket, minute, *limit, granted);
                }
                Err(error) => {
                    tracing::warn!(%error, policy_id = policy.id, "cannot ask the control plane for a rate limit's allowance; counting this minute here alone");
                    self.failures.inc();
                    rates.unshare(limiter, bucket, minute);
                }
            }
        }
    }

    /// Every second: asks ahead for the next minute of the buckets `rates` served this
    /// minute, when it is time (see the module documentation). A round that fails
    /// leaves those buckets to ask when their minute comes.
    pub async fn ask_ahead_forever(self, rates: Arc<RateWindows>, clock: Clock) {
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let due = rates.ahead_due(clock.now_ms());
            for chunk in due.chunks(MAX_BATCH) {
                match self.ask_batch(chunk).await {
                    Ok(granted) => {
                        for (asked, granted) in chunk.iter().zip(granted) {
                            rates.add_ahead(
                                asked.policy_id,
                                &asked.bucket,
                                asked.minute,
                                asked.limit,
                                granted,
                            );
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, buckets = chunk.len(), "cannot ask ahead for rate limits' allowances");
                        self.failures.inc();
                    }
                }
            }
        }
    }

    async fn ask_batch(&self, asks: &[AheadAsk]) -> Result<Vec<i64>, String> {
        let grants: Vec<serde_json::Value> = asks
            .iter()
            .map(|ask| {
                json!({ "tenant_id": ask.tenant_id, "limiter": format!("policy:{}", ask.policy_id),
                        "bucket": ask.bucket, "minute": ask.minute, "limit": ask.limit,
                        "want": ask.want })
            })
            .collect();
        #[derive(serde::Deserialize)]
        struct Grants {
            grants: Vec<Grant>,
        }
        #[derive(serde::Deserialize)]
        struct Grant {
            granted: i64,
        }
        let answer: Grants = ask_for_data(
            &self.client,
            &self.batch_url,
            &self.service_token,
            &json!({ "grants": grants }),
            BATCH_TIMEOUT,
        )
        .await?;
        if answer.grants.len() != asks.len() {
            return Err(format!(
                "{} grants answered for {} asked",
                answer.grants.len(),
                asks.len()
            ));
        }
        Ok(answer.grants.into_iter().map(|g| g.granted).collect())
    }

    async fn ask(
        &self,
        tenant_id: &str,
        policy_id: i64,
        bucket: &str,
        minute: i64,
        limit: i64,
    ) -> Result<i64, String> {
        let body = json!({
            "tenant_id": tenant_id, "limiter": format!("policy:{policy_id}"), "bucket": bucket,
            "minute": minute, "limit": limit, "want": limit.min(10_000),
        });
        #[derive(serde::Deserialize)]
        struct Grant {
            granted: i64,
        }
        let grant: Grant = ask_for_data(
            &self.client,
            &self.url,
            &self.service_token,
            &body,
            ASK_TIMEOUT,
        )
        .await?;
        Ok(grant.granted)
    }
}
