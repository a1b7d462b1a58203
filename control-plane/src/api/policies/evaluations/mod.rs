//! Policy evaluation records (`/policy-evaluations`): per-policy results of proxy
//! decisions, reported by the proxies after the fact (never on the request path).
//!
//! A decision's results are stored once per tenant as a result set that identical
//! decisions share (migration 0017). The decision itself, who asked for what and when,
//! is a column group of its usage record when the request was forwarded (migration
//! 0019), and a `policy_decisions` row otherwise (refused, held for approval, ended
//! without usage). `record` writes both kinds; `list` reads them as one list. A `fail`
//! is audited as `policy.violated`, at most twice a minute per agent and policy
//! (`violations`). `store` holds the SQL of all three.

pub(crate) mod list;
mod record;
mod store;

pub(crate) use store::Filters;
mod violations;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;
use warden_shared::policy::{Outcome, PolicyType};
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use crate::api::extract::parse_raw_at;
use crate::api::telemetry::ItemError;
use crate::error::ApiError;
use crate::validate::Text;

pub use list::{__path_list_evaluations, list_evaluations};
pub use record::{draw_decision_ids, record_evaluations, result_set_ids};
pub use violations::{audit_violations, summarize_violations};

/// The API id of a decision's result: unique, and in the order results were recorded.
const POSITIONS_PER_DECISION: i64 = 1 << 20;

/// An evaluation record as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct PolicyEvaluation {
    /// Unique and stable: the decision's id times 2^20 plus the result's position in it.
    pub id: i64,
    pub policy_id: i64,
    pub policy_name: String,
    pub policy_type: String,
    /// `pass`, `fail` or `skip`.
    pub result: String,
    pub reason: Option<String>,
    pub agent_id: String,
    pub provider: String,
    /// The model as the agent asked for it.
    pub model: String,
    /// The proxy's request id (shared by the results of one decision); for a forwarded
    /// request, the id of its usage record.
    pub request_id: String,
    /// When the proxy decided.
    #[schema(value_type = String, format = DateTime)]
    pub evaluated_at: Timestamp,
}

/// One proxy decision: who asked for what, and every policy's result.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvaluationReport {
    pub request_id: Text<1, 100>,
    pub agent_id: Text<1, 100>,
    #[schema(schema_with = crate::api::openapi_enums::provider)]
    pub provider: Provider,
    pub model: Text<1, 200>,
    #[schema(value_type = String, format = DateTime)]
    pub evaluated_at: Timestamp,
    /// The results in the policies' order, or the index of the batch's `result_lists`
    /// entry that holds them. Kept as text: most of a batch's decisions carry the same
    /// list, which is parsed and checked once per batch ([`ResultList::parse_at`]).
    #[schema(value_type = Object)]
    pub results: Box<RawValue>,
}

/// A decision's results, parsed and checked, with the digest that names its result set.
#[derive(Debug)]
pub struct ResultList {
    pub results: Vec<ReportedResult>,
    pub digest: String,
}

impl ResultList {
    /// Parses a results list found at `field`; a wrong shape is a 422 naming the field
    /// within it.
    pub fn parse_at(raw: &RawValue, field: &str) -> Result<ResultList, ApiError> {
        let results: Vec<ReportedResult> = parse_raw_at(raw, field)?;
        Ok(ResultList {
            digest: digest(&results),
            results,
        })
    }
}

/// A batch's results lists, each parsed and checked the first time a decision names it:
/// most of a batch's decisions carry the same list, either by index into the batch's
/// `result_lists` or written out.
pub struct ResultLists<'b> {
    /// The batch's `result_lists`, and what became of each once parsed.
    shared: &'b [Box<RawValue>],
    shared_parsed: Vec<Option<Result<usize, ItemError>>>,
    /// Lists written out in decisions, by their text.
    inline: HashMap<String, Result<usize, ItemError>>,
    parsed: Vec<ResultList>,
}

impl<'b> ResultLists<'b> {
    pub fn new(shared: &'b [Box<RawValue>]) -> Self {
        ResultLists {
            shared,
            shared_parsed: vec![None; shared.len()],
            inline: HashMap::new(),
            parsed: Vec::new(),
        }
    }

    pub fn get(&self, list: usize) -> &ResultList {
        &self.parsed[list]
    }

    /// The list a decision's `results` (at `field`) holds, or names by its index in
    /// `result_lists`. An error is the decision's, still to be given its index.
    pub fn of(&mut self, results: &RawValue, field: &str) -> Result<usize, ItemError> {
        let text = results.get();
        let Ok(position) = text.parse::<usize>() else {
            if let Some(known) = self.inline.get(text) {
                return known.clone();
            }
            let parsed = ResultList::parse_at(results, field);
            let outcome = self.place(parsed);
            self.inline.insert(text.to_owned(), outcome.clone());
            return outcome;
        };
        let Some(raw) = self.shared.get(position) else {
            return Err(item_error(ApiError::validation(
                field,
                format!("{field}: no list {position} in result_lists"),
            )));
        };
        if let Some(known) = &self.shared_parsed[position] {
            return known.clone();
        }
        let parsed = ResultList::parse_at(raw, &format!("result_lists[{position}]"));
        let outcome = self.place(parsed);
        self.shared_parsed[position] = Some(outcome.clone());
        outcome
    }

    fn place(&mut self, parsed: Result<ResultList, ApiError>) -> Result<usize, ItemError> {
        let list = parsed.map_err(item_error)?;
        self.parsed.push(list);
        Ok(self.parsed.len() - 1)
    }
}

fn item_error(error: ApiError) -> ItemError {
    crate::api::telemetry::item_error(0, error)
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportedResult {
    pub policy_id: i64,
    pub policy_name: Text<1, 200>,
    #[schema(schema_with = crate::api::openapi_enums::policy_type)]
    pub policy_type: PolicyType,
    #[schema(schema_with = crate::api::openapi_enums::outcome)]
    pub result: Outcome,
    #[serde(default)]
    pub reason: Option<Text<0, 1000>>,
}

/// A stable digest of a decision's results, in order: decisions that came out the same
/// share a result set.
fn digest(results: &[ReportedResult]) -> String {
    use std::fmt::Write;
    let mut canonical = String::with_capacity(results.len() * 64);
    for result in results {
        let reason = result.reason.as_ref().map(Text::as_str);
        let _ = write!(canonical, "{}:", result.policy_id);
        // Each text after its length, so no two different lists encode alike.
        for field in [
            result.policy_name.as_str(),
            result.policy_type.as_str(),
            result.result.as_str(),
            reason.unwrap_or(""),
        ] {
            let _ = write!(canonical, "{}:{field}", field.len());
        }
        canonical.push(if reason.is_some() { '+' } else { '-' });
    }
    warden_shared::keys::hash_credential(&canonical)
}

/// One decision to write: who asked for what, when, and its checked results.
#[derive(Debug, Clone, Copy)]
pub struct DecisionRow<'a> {
    pub tenant_id: &'a str,
    pub request_id: &'a str,
    pub agent_id: &'a str,
    pub provider: Provider,
    pub model: &'a str,
    pub evaluated_at: Timestamp,
    pub list: &'a ResultList,
}
