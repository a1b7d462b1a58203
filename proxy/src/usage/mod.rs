//! Usage capture: what each request consumed, read from the provider's answer
//! (`extract`, `sse`), queued in memory and sent to the ledger in batches (`sink`),
//! never on the request path.

pub mod extract;
pub mod sink;
pub mod sse;

use std::sync::Arc;

use serde::Serialize;
use warden_shared::registry::Provider;
use warden_shared::snapshot::ProxyKeyState;
use warden_shared::timestamp::Timestamp;

use crate::budget::BudgetHold;

pub use extract::Tokens;

/// One request's usage, as the control plane's internal batch endpoint takes it. The
/// key comes along as the shared state it was admitted with (a reference count, not
/// copies of its ids); the wire form is written when the batch is serialized.
#[derive(Debug)]
pub struct UsageRecord {
    /// Unique within the tenant, so a batch sent twice counts once.
    pub record_id: String,
    /// The proxy key the request came with: its tenant, agent and id are recorded.
    pub key: Arc<ProxyKeyState>,
    pub model_provider: Provider,
    pub model_name: String,
    pub request_type: &'static str,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Written as RFC 3339.
    pub recorded_at: Timestamp,
    /// The budgets this record's cost is pending in until the ledger has it; not sent.
    pub budget: Option<BudgetHold>,
}

impl Serialize for UsageRecord {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            record_id: &'a str,
            tenant_id: &'a str,
            agent_id: &'a str,
            model_provider: Provider,
            model_name: &'a str,
            request_type: &'static str,
            input_tokens: i64,
            output_tokens: i64,
            recorded_at: Timestamp,
            api_key_id: &'a str,
        }
        Wire {
            record_id: &self.record_id,
            tenant_id: &self.key.tenant_id,
            agent_id: &self.key.agent_id,
            model_provider: self.model_provider,
            model_name: &self.model_name,
            request_type: self.request_type,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            recorded_at: self.recorded_at,
            api_key_id: &self.key.id,
        }
        .serialize(serializer)
    }
}
