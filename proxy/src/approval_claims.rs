//! Single-use approvals (`releases` `action`): a request that passed the policies on one
//! is let through only once this proxy has claimed it through the control plane
//! (`POST /internal/v1/approval-uses`), which grants each claim to one caller whatever
//! the number of proxies and replicas, and remembers it across restarts. A claim that
//! finds the approval used drops it here (the stream's removal follows), and the request
//! is evaluated again: held, it asks for an approval of its own. When no control plane
//! answers, the request is refused (503 `approval_unconfirmed`): an approval that cannot
//! be confirmed single releases nothing.

use std::time::Duration;

use warden_shared::wire::{paths, ApprovalUse, ApprovalUsed};

use crate::flush::ask_for_data;
use crate::policy_gate::PolicyPass;
use crate::refusal::Refusal;
use crate::state::EnforcementState;

/// How long a request waits for its claim.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(2);
/// How many times a request is evaluated again after its approval was used elsewhere.
pub const RE_EVALUATIONS: usize = 2;

#[derive(Clone)]
pub struct ApprovalClaims {
    client: reqwest::Client,
    url: String,
    service_token: String,
}

impl ApprovalClaims {
    pub fn new(client: reqwest::Client, control_plane: &str, service_token: &str) -> Self {
        ApprovalClaims {
            client,
            url: format!("{control_plane}{}", paths::APPROVAL_USES),
            service_token: service_token.to_owned(),
        }
    }

    /// Claims every single-use approval `pass` stands on: true when all are this
    /// request's, false when one was used already (and is dropped here).
    pub async fn claim_all(
        &self,
        state: &EnforcementState,
        tenant_id: &str,
        pass: &PolicyPass,
    ) -> Result<bool, Refusal> {
        let Some(digest) = pass.action_digest.as_deref() else {
            return Ok(pass.claims.is_empty());
        };
        for approval_id in &pass.claims {
            let body = ApprovalUse {
                tenant_id: tenant_id.to_owned(),
                approval_id: *approval_id,
                action_digest: digest.to_owned(),
            };
            let answer: Result<ApprovalUsed, String> = ask_for_data(
                &self.client,
                &self.url,
                &self.service_token,
                &body,
                CLAIM_TIMEOUT,
            )
            .await;
            match answer {
                Ok(ApprovalUsed { used: true }) => {}
                Ok(ApprovalUsed { used: false }) => {
                    state.drop_grant(*approval_id);
                    return Ok(false);
                }
                Err(error) => {
                    tracing::warn!(%error, approval_id, "cannot claim a single-use approval; the request is refused");
                    return Err(Refusal::ApprovalUnconfirmed(*approval_id));
                }
            }
        }
        Ok(true)
    }
}
