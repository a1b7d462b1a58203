//! Usage capture: what each request consumed, read from the provider's answer
//! (`extract`, `sse`), queued in memory and sent to the ledger in batches (`sink`),
//! never on the request path.

pub mod extract;
pub mod sink;
pub mod sse;

use serde::Serialize;
use warden_shared::registry::Provider;

use crate::budget::BudgetHold;

pub use extract::Tokens;

/// One request's usage, as the control plane's internal batch endpoint takes it.
#[derive(Debug, Serialize)]
pub struct UsageRecord {
    /// Unique within the tenant, so a batch sent twice counts once.
    pub record_id: String,
    pub tenant_id: String,
    pub agent_id: String,
    pub model_provider: Provider,
    pub model_name: String,
    pub request_type: &'static str,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// RFC 3339.
    pub recorded_at: String,
    /// The proxy key the request came with.
    pub api_key_id: String,
    /// The budgets this record's cost is pending in until the ledger has it; not sent.
    #[serde(skip)]
    pub budget: Option<BudgetHold>,
}
