//! Rate limits shared by every proxy (see `crate::rate_limit`): before a request is
//! evaluated, each requests-per-minute `rate_limit` policy that covers it has an
//! allowance on this proxy for the request's bucket and minute, asked from the control
//! plane (`POST /internal/v1/rate-grants`) when there is none or it is spent. The
//! control plane never grants past the limit, whatever the number of proxies.
//!
//! A proxy asks at most once per spent allowance and request; when the control plane
//! does not answer within a second, the bucket's minute is counted by this proxy alone
//! (up to the whole limit here) and counted in `warden_proxy_rate_grant_failures_total`.

use std::time::Duration;

use prometheus::IntCounter;
use serde_json::json;
use warden_shared::policy::{rate_bucket_id, Policy, PolicyConfig, RequestFacts};

use crate::flush::ask_for_data;
use crate::rate_limit::{Limiter, RateWindows};

/// How long a request waits for a grant before its bucket is counted locally.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub struct RateGrants {
    client: reqwest::Client,
    url: String,
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
                Ok(granted) => rates.add_grant(limiter, bucket, minute, *limit, granted),
                Err(error) => {
                    tracing::warn!(%error, policy_id = policy.id, "cannot ask the control plane for a rate limit's allowance; counting this minute here alone");
                    self.failures.inc();
                    rates.unshare(limiter, bucket, minute);
                }
            }
        }
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
