//! Policy decisions reported to the control plane after the fact: each request's
//! per-policy results (evaluation records) and, when a `require_approval` policy held it,
//! the approval to queue. A forwarded request's decision rides on its usage record
//! (`crate::usage`); the others come here. Like usage, the request path only
//! `try_send`s into a bounded queue; a task posts batches to
//! `/internal/v1/policy-decisions` and retries a batch, the very same body under the
//! same batch id, until it is acknowledged (the control plane writes a batch id once).
//! A full queue drops reports, counted, never blocking a request.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use prometheus::IntCounter;
use serde::Serialize;
use serde_json::Value;
use warden_shared::ids::{new_id, IdKind};

use warden_shared::policy::{Outcome, Policy, PolicyResult, PolicyType};
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use crate::batch_queue::{batch_queue, BatchReceiver, BatchSender};
use crate::flush::{post_json, post_until_answered, FlushTarget};
use crate::metrics::ProxyMetrics;
use warden_shared::clock::system_now_ms;

/// One request's decision, reported on its own: a request the policies refused or held
/// for approval, or one they let through that ended without a usage record (refused by a
/// budget, the provider unreachable, cancelled, or its record dropped by a full usage
/// queue). A forwarded request's decision rides on its usage record instead
/// (`crate::usage`), one row and one post fewer.
#[derive(Debug, Clone)]
pub struct DecisionReport {
    pub tenant_id: String,
    pub evaluation: EvaluationReport,
    pub approval: Option<ApprovalAsk>,
}

/// One request's evaluation. The names of its policies are written only when the flusher
/// serializes the batch, off the request path.
#[derive(Debug, Clone)]
pub struct EvaluationReport {
    pub request_id: String,
    pub agent_id: String,
    pub provider: Provider,
    pub model: String,
    /// Written as RFC 3339 when the batch is serialized, off the request path.
    pub evaluated_at: Timestamp,
    pub policy_results: PolicyResults,
}

/// What the policies made of a request: the tenant's list they were evaluated from (one
/// reference count, not a copy of every name) and each one's result.
#[derive(Debug, Clone)]
pub struct PolicyResults {
    pub policies: Arc<Vec<Policy>>,
    /// `results[i]` is `policies[i]`'s.
    pub results: Vec<PolicyResult>,
}

/// The distinct results lists of a batch's items, each written once under
/// `result_lists`; an item names its list by index. A batch's requests mostly came out
/// alike (the same policies, the same results), so this writes, sends and has the
/// control plane parse one list of ten named results instead of hundreds.
pub struct ResultLists<'r> {
    lists: Vec<&'r PolicyResults>,
}

impl<'r> ResultLists<'r> {
    /// The distinct lists among `items`, and each item's index into them (`None` for an
    /// item without one).
    pub fn of(
        items: impl Iterator<Item = Option<&'r PolicyResults>>,
    ) -> (Self, Vec<Option<usize>>) {
        // Lists are told apart by the policy list they were evaluated from (shared, and
        // kept alive by the items, so its address names it) and their results.
        type ListKey<'r> = (*const Vec<Policy>, &'r [PolicyResult]);
        let mut lists: Vec<&PolicyResults> = Vec::new();
        let mut list_of: HashMap<ListKey<'_>, usize> = HashMap::new();
        // Runs of items with the same list are the rule: compared with the last item's
        // key, most items skip hashing their results.
        let mut last: Option<(ListKey<'_>, usize)> = None;
        let indexes = items
            .map(|item| {
                let item = item?;
                let key = (Arc::as_ptr(&item.policies), item.results.as_slice());
                if let Some((last_key, index)) = last {
                    if last_key == key {
                        return Some(index);
                    }
                }
                let next = lists.len();
                let index = *list_of.entry(key).or_insert(next);
                if index == next {
                    lists.push(item);
                }
                last = Some((key, index));
                Some(index)
            })
            .collect();
        (ResultLists { lists }, indexes)
    }

    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }
}

/// Each list written with its policies' names.
impl Serialize for ResultLists<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.lists.iter().map(|list| NamedResults(list)))
    }
}

struct NamedResults<'a>(&'a PolicyResults);

impl Serialize for NamedResults<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Named<'a> {
            policy_id: i64,
            policy_name: &'a str,
            policy_type: PolicyType,
            result: Outcome,
            reason: Option<&'a str>,
        }
        let list = self.0;
        serializer.collect_seq(
            list.policies
                .iter()
                .zip(&list.results)
                .map(|(policy, result)| Named {
                    policy_id: result.policy_id,
                    policy_name: &policy.name,
                    policy_type: result.policy_type,
                    result: result.result,
                    reason: result.reason.as_deref(),
                }),
        )
    }
}

/// The body of `POST /internal/v1/policy-decisions` for `reports`, each decision's
/// `results` naming its list in `result_lists`. `None` only if serializing fails (it
/// cannot).
pub fn batch_body(batch_id: &str, reports: &[DecisionReport]) -> Option<Bytes> {
    let (result_lists, list_indexes) =
        ResultLists::of(reports.iter().map(|r| Some(&r.evaluation.policy_results)));
    let body = BatchWire {
        batch_id,
        result_lists,
        decisions: DecisionsWire(reports, &list_indexes),
    };
    serde_json::to_vec(&body).ok().map(Bytes::from)
}

#[derive(Serialize)]
struct BatchWire<'a> {
    batch_id: &'a str,
    result_lists: ResultLists<'a>,
    decisions: DecisionsWire<'a>,
}

/// The decisions, `list_indexes[i]` naming the list of `reports[i]`.
struct DecisionsWire<'a>(&'a [DecisionReport], &'a [Option<usize>]);

impl Serialize for DecisionsWire<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Decision<'a> {
            tenant_id: &'a str,
            evaluation: Evaluation<'a>,
            #[serde(skip_serializing_if = "Option::is_none")]
            approval: Option<&'a ApprovalAsk>,
        }
        #[derive(Serialize)]
        struct Evaluation<'a> {
            request_id: &'a str,
            agent_id: &'a str,
            provider: Provider,
            model: &'a str,
            evaluated_at: Timestamp,
            results: Option<usize>,
        }
        serializer.collect_seq(self.0.iter().zip(self.1).map(|(report, list)| {
            let evaluation = &report.evaluation;
            Decision {
                tenant_id: &report.tenant_id,
                evaluation: Evaluation {
                    request_id: &evaluation.request_id,
                    agent_id: &evaluation.agent_id,
                    provider: evaluation.provider,
                    model: &evaluation.model,
                    evaluated_at: evaluation.evaluated_at,
                    results: *list,
                },
                approval: report.approval.as_ref(),
            }
        }))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ApprovalAsk {
    pub policy_id: i64,
    pub request_context: Value,
    /// What an approval lets through (the policy's `releases`).
    pub releases: warden_shared::policy::Releases,
    /// The held action's digest (`warden_shared::action`).
    pub action_digest: String,
}

/// The request path's handle on the queue. Cheap to clone (each forwarded request's held
/// decision keeps one): the queue and the one counter it needs, not the whole registry.
#[derive(Clone)]
pub struct DecisionSink {
    queue: BatchSender<DecisionReport>,
    dropped: IntCounter,
}

impl DecisionSink {
    pub fn report(&self, report: DecisionReport) {
        if self.queue.try_send(report).is_err() {
            self.dropped.inc();
        }
    }
}

/// Where a held request's approval is asked for at once: the control plane queues it
/// before the proxy answers the request's 403 `approval_required`, so a reviewer (or a
/// script) listing pending approvals right after that answer finds it. The ask is a
/// decision batch of one; when it cannot be delivered within [`ASK_TIMEOUT`], the
/// decision goes to the queue like any other and arrives with the next batch.
pub struct ApprovalQueue {
    pub client: reqwest::Client,
    pub url: String,
    pub service_token: String,
    pub fallback: DecisionSink,
}

/// How long a held request waits for its approval to be queued before it is answered
/// anyway (the decision then goes with the batched reports).
pub const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl ApprovalQueue {
    /// Queues `report`'s approval with the control plane, or hands the report to the
    /// batched queue when that fails. Returns the pending approval's id, when the
    /// control plane said it.
    pub async fn ask(&self, report: DecisionReport) -> Option<i64> {
        let batch_id = new_id(IdKind::Usage, system_now_ms());
        let Some(body) = batch_body(&batch_id, std::slice::from_ref(&report)) else {
            self.fallback.report(report);
            return None;
        };
        let sent = post_json(
            &self.client,
            &self.url,
            &self.service_token,
            body,
            ASK_TIMEOUT,
        )
        .await;
        match sent {
            Ok(response) if response.status().is_success() => {
                let ack: Option<QueuedAck> = response.json().await.ok();
                ack.and_then(|ack| ack.data.approvals.first().map(|a| a.approval_id))
            }
            answered => {
                let why = match answered {
                    Ok(response) => response.status().to_string(),
                    Err(error) => error.to_string(),
                };
                tracing::warn!(%batch_id, %why, "cannot queue an approval at once; it goes with the next decision batch");
                self.fallback.report(report);
                None
            }
        }
    }
}

/// The control plane's answer to an ask.
#[derive(serde::Deserialize)]
struct QueuedAck {
    data: warden_shared::wire::DecisionAck,
}

/// A queue of `capacity` reports, sent in batches of at most `batch_size`.
pub fn channel(
    capacity: usize,
    batch_size: usize,
    metrics: &ProxyMetrics,
) -> (DecisionSink, BatchReceiver<DecisionReport>) {
    let (queue, receiver) = batch_queue(capacity, batch_size);
    let dropped = metrics.decisions_dropped.clone();
    (DecisionSink { queue, dropped }, receiver)
}

/// Sends batches until every sender is gone and the queue is empty.
pub async fn flush_forever(
    mut receiver: BatchReceiver<DecisionReport>,
    target: FlushTarget,
    client: reqwest::Client,
    metrics: ProxyMetrics,
) {
    let mut batch = Vec::with_capacity(receiver.batch_size());
    while receiver.next_batch(&mut batch, target.interval).await {
        let batch_id = new_id(IdKind::Usage, system_now_ms());
        let body = batch_body(&batch_id, &batch);
        let answered: Option<serde::de::IgnoredAny> = match body {
            Some(body) => {
                post_until_answered(
                    &client,
                    &target,
                    &batch_id,
                    body,
                    "policy decisions",
                    &metrics.decisions_flush_failures,
                )
                .await
            }
            None => None,
        };
        if answered.is_none() {
            metrics.decisions_dropped.inc_by(batch.len() as u64);
        }
    }
}

/// Policy 7 of `policies` (`crate::test_fixtures::no_nvidia`) came out `result`: the
/// results list the reporters' tests build.
#[cfg(test)]
pub fn results(policies: &Arc<Vec<Policy>>, result: Outcome) -> PolicyResults {
    PolicyResults {
        policies: policies.clone(),
        results: vec![PolicyResult {
            policy_id: 7,
            policy_type: PolicyType::BlockProvider,
            result,
            reason: None,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::no_nvidia;

    fn report(request: &str, policies: &Arc<Vec<Policy>>, result: Outcome) -> DecisionReport {
        DecisionReport {
            tenant_id: "ten_1".into(),
            evaluation: EvaluationReport {
                request_id: request.into(),
                agent_id: "agt_1".into(),
                provider: Provider::Openai,
                model: "gpt-4o".into(),
                evaluated_at: Timestamp::from_millis(0),
                policy_results: results(policies, result),
            },
            approval: None,
        }
    }

    #[test]
    fn a_batch_sends_each_distinct_results_list_once() {
        let policies = no_nvidia();
        let reports = [
            report("a", &policies, Outcome::Pass),
            report("b", &policies, Outcome::Fail),
            report("c", &policies, Outcome::Pass),
        ];
        let body = batch_body("batch_1", &reports).unwrap_or_default();
        let body: Value = serde_json::from_slice(&body).unwrap_or_default();
        let lists = body["result_lists"].as_array().cloned().unwrap_or_default();
        assert_eq!(lists.len(), 2, "{body}");
        assert_eq!(lists[0][0]["policy_name"], "no \"nvidia\"");
        assert_eq!(lists[1][0]["result"], "fail");
        let named: Vec<&Value> = (0..3)
            .map(|i| &body["decisions"][i]["evaluation"]["results"])
            .collect();
        assert_eq!(named, [0, 1, 0]);
        assert_eq!(body["decisions"][1]["evaluation"]["request_id"], "b");
    }
}
