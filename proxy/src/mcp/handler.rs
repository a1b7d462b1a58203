//! The gateway's side toward agents: an MCP server (the SDK's `ServerHandler`) whose
//! tools are the tenant's servers' tools that the caller may use, and whose tool calls
//! are decided before they reach a server: the key and its agent (kill switch,
//! quarantine), the tool's approved definition, then the tenant's policies with the
//! very evaluator and state model requests use. Every call, allowed or refused, is
//! recorded through the usage path.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorCode, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ResultType, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{json, Map, Value};
use warden_shared::clock::Clock;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::mcp::{prefixed, split};
use warden_shared::registry::Provider;
use warden_shared::snapshot::McpServerState;
use warden_shared::timestamp::Timestamp;

use super::drift::{DriftReports, ToolStanding};
use super::metrics::GatewayMetrics;
use super::upstream::UpstreamClients;
use crate::admission::{self, Admitted};
use crate::approval_claims::{ApprovalClaims, RE_EVALUATIONS};
use crate::capture::CaptureBuffer;
use crate::decisions::{ApprovalQueue, DecisionSink};
use crate::guardrails::Guardrails;
use crate::otel::{ToolCallTrace, Tracer};
use crate::policy_gate::{Action, PolicyGate, Stopped};
use crate::rate_limit::RateWindows;
use crate::refusal::Refusal;
use crate::routing::Route;
use crate::state::{EnforcementState, KeyView};
use crate::usage::sink::UsageSink;
use crate::usage::{ToolCallRecord, UsageRecord};

/// The JSON-RPC error code of Warden's refusals (in the range JSON-RPC leaves to
/// servers); `data.code` is the refusal's stable code, as in the proxy's HTTP errors.
pub const REFUSED: ErrorCode = ErrorCode(-32001);
/// Largest tool arguments shown in an approval item, as JSON bytes.
const MAX_APPROVAL_ARGUMENTS: usize = 16 * 1024;

/// Who is calling: the key presented on this HTTP request (from memory, as the proxy
/// found it just now) and the server the path names (`/mcp/{server}`), if any.
#[derive(Clone)]
pub struct Caller {
    pub view: KeyView,
    pub server: Option<String>,
}

/// What every gateway session shares.
pub struct GatewayShared {
    pub state: Arc<EnforcementState>,
    pub upstreams: UpstreamClients,
    pub rates: Arc<RateWindows>,
    pub decisions: DecisionSink,
    pub approvals: ApprovalQueue,
    /// Where single-use approvals of tool calls are claimed.
    pub approval_claims: ApprovalClaims,
    /// Guardrails' time limit and metrics.
    pub guardrails: Guardrails,
    pub usage: UsageSink,
    pub metrics: GatewayMetrics,
    pub drifts: DriftReports,
    pub call_timeout: Duration,
    /// The request path's time (see `ProxySettings::clock`).
    pub clock: Clock,
    /// Where tool calls' spans go; `None`: tracing is off.
    pub tracer: Option<Tracer>,
    /// Holds the arguments a span shows (see `crate::otel::content`).
    pub captures: Arc<CaptureBuffer>,
}

/// One MCP session's handler. A session belongs to the key that opened it: another
/// key presenting its session id is refused.
pub struct Gateway {
    shared: Arc<GatewayShared>,
    owner: OnceLock<String>,
}

impl Gateway {
    pub fn new(shared: Arc<GatewayShared>) -> Gateway {
        Gateway {
            shared,
            owner: OnceLock::new(),
        }
    }

    /// The caller of this request, its key and agent checked now (a kill switch or
    /// quarantine applies to the very next call of an open session).
    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, Refusal> {
        let caller = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
            .ok_or(Refusal::MissingKey)?;
        let owner = self.owner.get_or_init(|| caller.view.key.id.clone());
        if *owner != caller.view.key.id {
            return Err(Refusal::InvalidKey);
        }
        Ok(caller)
    }
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("warden", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "Tools of the MCP servers your organisation registered with Warden, governed by \
             its policies: a call may be refused or held for a human's approval."
                .into(),
        );
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = self.caller(&context).map_err(|r| refused(&r))?;
        admission::check_key(&caller.view, self.shared.clock.now_ms()).map_err(|r| refused(&r))?;
        let tools = self.shared.visible_tools(&caller).await;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let started = Instant::now();
        let caller = self.caller(&context).map_err(|r| refused(&r))?;
        let mut trace = self
            .shared
            .tracer
            .as_ref()
            .map(|tracer| ToolCallTrace::start(tracer, &request, &context, &caller.view));
        if let Some(trace) = trace.as_mut().filter(|t| t.wants_content()) {
            self.shared.hold_arguments(trace, &caller, &request);
        }
        self.shared.call(&caller, request, started, trace).await
    }
}

impl GatewayShared {
    /// Holds the call's arguments for its span, when the tenant captures payloads, in
    /// the shape its rules are written for.
    fn hold_arguments(
        &self,
        trace: &mut ToolCallTrace,
        caller: &Caller,
        request: &CallToolRequestParams,
    ) {
        let Some(tenant) = self.state.payload_capture(&caller.view.key.tenant_id) else {
            return;
        };
        let held = serde_json::to_vec(&as_rules_address(request)).unwrap_or_default();
        let body = Bytes::from(held);
        trace.arguments(self.captures.hold(tenant, &body));
    }

    /// Decides, forwards and records one tool call.
    async fn call(
        &self,
        caller: &Caller,
        request: CallToolRequestParams,
        started: Instant,
        mut trace: Option<ToolCallTrace>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut call = CallFacts::resolve(caller, &request.name);
        let (server, redacted) = match self.decide(caller, &mut call, &request).await {
            Ok(decided) => decided,
            Err(Stopped {
                refusal, approval, ..
            }) => {
                if let Some(report) = approval {
                    // Queued before the refusal is answered, as for model requests: a
                    // reviewer listing pending approvals right after finds it.
                    let approval_id = self.approvals.ask(*report).await;
                    if let (Some(trace), Some(approval_id)) = (&mut trace, approval_id) {
                        trace.approval(approval_id);
                    }
                }
                // A server that could not be listed is a failure of the server, not a
                // refusal of the agent (nor audited as one).
                let outcome = match refusal {
                    Refusal::ToolServerUnreachable(_) => "upstream_error",
                    _ => "refused",
                };
                let policy_id = refusal.policy_id();
                self.finish(caller, &call, outcome, refusal.code(), policy_id, started);
                if let Some(trace) = trace {
                    trace.end(outcome, Some(&call.server), Some(&refusal));
                }
                return Err(refused(&refusal));
            }
        };
        // The server's own name for its tool; everything else as the agent sent it.
        let mut params = request;
        params.name = call.tool.clone().into();
        if let Some(Value::Object(arguments)) = redacted {
            params.arguments = Some(arguments);
        }
        if let Some(trace) = &mut trace {
            if let Some(approval_id) = call.released_by {
                trace.approval(approval_id);
            }
            trace.pass_on(&mut params);
        }
        let answer = self
            .upstreams
            .call_tool(&server, params, self.call_timeout)
            .await;
        match answer {
            Ok(mut result) => {
                let outcome = if result.is_error == Some(true) {
                    "tool_error"
                } else {
                    "ok"
                };
                // The server may speak an older protocol than the agent: the result is
                // marked complete as the agent's version requires (the SDK drops the
                // mark again for agents on older versions).
                result.result_type = Some(ResultType::COMPLETE);
                self.finish(caller, &call, outcome, "allowed", None, started);
                if let Some(trace) = trace {
                    trace.end(outcome, Some(&call.server), None);
                }
                Ok(CallToolResponse::Complete(result))
            }
            Err(error) => {
                tracing::warn!(server = %server.name, tool = %call.tool, %error, "MCP tool call failed upstream");
                self.finish(caller, &call, "upstream_error", "allowed", None, started);
                if let Some(trace) = trace {
                    trace.end("upstream_error", Some(&call.server), None);
                }
                Err(ErrorData::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!("the MCP server `{}` failed the call: {error}", server.name),
                    Some(json!({ "code": "upstream_failed" })),
                ))
            }
        }
    }

    /// Everything that must pass before the server is called, in order: the key and
    /// agent, the server and tool, the tool's approved definition, the policies.
    async fn decide(
        &self,
        caller: &Caller,
        call: &mut CallFacts,
        request: &CallToolRequestParams,
    ) -> Result<(ChosenServer, Option<Value>), Stopped> {
        let now = self.clock.now_ms();
        admission::check_key(&caller.view, now)?;
        let servers = self
            .state
            .mcp_servers(&caller.view.key.tenant_id)
            .unwrap_or_default();
        let index = servers
            .iter()
            .position(|s| s.name == call.server && in_path(caller, s))
            .ok_or_else(|| Refusal::ToolNotFound(call.prefixed.clone()))?;
        let server = ChosenServer { servers, index };
        call.server_id.clone_from(&server.id);
        match self.standing_now(&server, &call.tool).await? {
            ToolStanding::Callable => {}
            ToolStanding::NotApproved => {
                return Err(Refusal::ToolNotApproved(call.prefixed.clone()).into())
            }
            ToolStanding::Unknown => {
                return Err(Refusal::ToolNotFound(call.prefixed.clone()).into())
            }
        }
        let admitted = Admitted {
            route: Route {
                provider: Provider::Mcp,
                upstream_model: call.tool.clone(),
            },
            requested_model: call.prefixed.clone(),
            price: None,
        };
        let gate = PolicyGate {
            state: &self.state,
            rates: &self.rates,
            decisions: &self.decisions,
            guardrails: &self.guardrails,
            // Tool calls' limits are counted by each proxy alone.
            ask_again_when_short: false,
        };
        // The action an approval can be bound to: the call's arguments and the tool's
        // approved definition.
        let arguments = serde_json::Value::Object(request.arguments.clone().unwrap_or_default());
        let fingerprint = server
            .pinned_tools
            .iter()
            .find(|pinned| pinned.name == call.tool)
            .map_or("", |pinned| pinned.fingerprint.as_str());
        let action = Action::Tool {
            server_id: &server.id,
            tool: &call.tool,
            arguments: &arguments,
            fingerprint,
        };
        let tenant_id = &caller.view.key.tenant_id;
        let mut evaluations = 0;
        // Dropping the pass reports the decision on its own (a tool call's record
        // does not carry it). A single-use approval it stands on is claimed first.
        let mut stopped = loop {
            match gate.check(&caller.view, &admitted, action, "tool_call", 0, now) {
                Ok(mut pass) => {
                    if pass.claims.is_empty()
                        || self
                            .approval_claims
                            .claim_all(&self.state, tenant_id, &pass)
                            .await?
                    {
                        // Arguments a `redact` guardrail changed go in their stead.
                        let redacted = pass.redacted.take().map(|(arguments, _)| arguments);
                        call.released_by = pass.released_by;
                        return Ok((server, redacted));
                    }
                    let approval_id = pass.claims[0];
                    pass.discard();
                    evaluations += 1;
                    if evaluations > RE_EVALUATIONS {
                        return Err(Refusal::ApprovalUnconfirmed(approval_id).into());
                    }
                }
                Err(stopped) => break stopped,
            }
        };
        // A held call's approval shows reviewers the tool and its arguments too.
        let ask = stopped
            .approval
            .as_mut()
            .and_then(|report| report.approval.as_mut());
        if let Some(context) = ask.and_then(|ask| ask.request_context.as_object_mut()) {
            context.extend(approval_details(&self.state, caller, call, request));
        }
        Err(stopped)
    }

    /// Whether `tool` is listed by `server` and approved with the definition it lists
    /// now, as this proxy last saw it (listing the server first if it never has).
    async fn standing_now(
        &self,
        server: &McpServerState,
        tool: &str,
    ) -> Result<ToolStanding, Refusal> {
        if !self.drifts.has_observed(server) {
            match self.upstreams.list_tools(server).await {
                Ok(listed) => {
                    for listed in &listed {
                        self.drifts
                            .is_pinned(server, &listed.tool.name, &listed.fingerprint);
                    }
                }
                Err(error) => {
                    tracing::warn!(server = %server.name, %error, "MCP server's tools not listed");
                    return Err(Refusal::ToolServerUnreachable(server.name.clone()));
                }
            }
        }
        Ok(self.drifts.standing(server, tool))
    }

    /// Records the call, counts it, and sends an approval it asked for.
    fn finish(
        &self,
        caller: &Caller,
        call: &CallFacts,
        outcome: &'static str,
        decision: &'static str,
        policy_id: Option<i64>,
        started: Instant,
    ) {
        let elapsed = started.elapsed();
        let reached_server = outcome != "refused";
        self.metrics.count(
            &call.server,
            &call.tool,
            decision,
            reached_server.then_some(elapsed.as_secs_f64()),
        );
        if caller.view.agent.is_none() {
            return;
        }
        let recorded_at = self.clock.now_ms();
        self.usage.record(UsageRecord {
            record_id: new_id(IdKind::Usage, recorded_at),
            key: caller.view.key.clone(),
            model_provider: Provider::Mcp,
            model_name: call.prefixed.clone(),
            request_type: "tool_call",
            input_tokens: 0,
            output_tokens: 0,
            recorded_at: Timestamp::from_millis(recorded_at),
            budget: None,
            evaluation: None,
            capture: None,
            tool_call: Some(Box::new(ToolCallRecord {
                server_id: call.server_id.clone(),
                server: call.server.clone(),
                tool: call.tool.clone(),
                outcome,
                decision,
                policy_id,
                latency_ms: i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX),
            })),
        });
    }
}

/// The call as named: its server and tool, and what deciding it found.
struct CallFacts {
    server: String,
    tool: String,
    /// `<server>__<tool>`, the name policies match.
    prefixed: String,
    /// The registered server's id, once found; empty when the name matched none.
    server_id: String,
    /// The approval that let the call through a `require_approval` policy.
    released_by: Option<i64>,
}

/// The server a call goes to, in the tenant's list from the state (not a copy of it).
struct ChosenServer {
    servers: Arc<Vec<McpServerState>>,
    index: usize,
}

impl std::ops::Deref for ChosenServer {
    type Target = McpServerState;

    fn deref(&self) -> &McpServerState {
        &self.servers[self.index]
    }
}

impl CallFacts {
    fn resolve(caller: &Caller, name: &str) -> CallFacts {
        let (server, tool) = match &caller.server {
            Some(server) => (server.clone(), name.to_owned()),
            None => split(name).map_or_else(
                || (String::new(), name.to_owned()),
                |(server, tool)| (server.to_owned(), tool.to_owned()),
            ),
        };
        CallFacts {
            prefixed: prefixed(&server, &tool),
            server,
            tool,
            server_id: String::new(),
            released_by: None,
        }
    }
}

pub(super) fn in_path(caller: &Caller, server: &McpServerState) -> bool {
    caller
        .server
        .as_deref()
        .is_none_or(|name| name == server.name)
}

/// What a reviewer sees of a held tool call besides the request context every approval
/// has: the server, the tool and its arguments, redacted by the tenant's payload rules
/// (a rule's path starts at `arguments`), and omitted beyond
/// [`MAX_APPROVAL_ARGUMENTS`].
fn approval_details(
    state: &EnforcementState,
    caller: &Caller,
    call: &CallFacts,
    request: &CallToolRequestParams,
) -> Map<String, Value> {
    let mut shown = as_rules_address(request);
    if let Some(rules) = state.payload_capture(&caller.view.key.tenant_id) {
        rules.redact(&mut shown);
    }
    let arguments = shown["arguments"].take();
    let size = serde_json::to_vec(&arguments).map_or(usize::MAX, |bytes| bytes.len());
    let mut details = Map::new();
    details.insert("server".into(), json!(call.server));
    details.insert("tool".into(), json!(call.tool));
    if size <= MAX_APPROVAL_ARGUMENTS {
        details.insert("arguments".into(), arguments);
    } else {
        details.insert("arguments_omitted".into(), json!("too_large"));
    }
    details
}

/// A call's arguments as the tenant's payload rules address them: `{"arguments": ...}`
/// (a rule's path starts at `arguments`).
fn as_rules_address(request: &CallToolRequestParams) -> Value {
    json!({ "arguments": request.arguments.clone().unwrap_or_default() })
}

/// A refusal as the JSON-RPC error the agent's MCP client raises.
fn refused(refusal: &Refusal) -> ErrorData {
    let mut data = json!({ "code": refusal.code() });
    if let Refusal::ApprovalRequired { policy_id } = refusal {
        data["approval_policy_id"] = json!(policy_id);
    }
    if let Refusal::RateLimited {
        retry_after_secs, ..
    } = refusal
    {
        data["retry_after_secs"] = json!(retry_after_secs);
    }
    ErrorData::new(REFUSED, refusal.message(), Some(data))
}
