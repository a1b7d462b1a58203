//! The reviewers' page: the pending queue, oldest first, which follows new held
//! requests live (server-sent events tell the page to fetch the queue again), the
//! approve and deny forms, and the decided history.
//!
//! The reviewer is the signed-in person, never a typed field. A decision answers once
//! every connected proxy holds it (the API's read-your-writes), so the agent's retry
//! passes at once; the page says whether they all confirmed.

use std::convert::Infallible;
use std::time::Duration;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use futures_util::Stream;
use serde::Deserialize;

use super::enforcement::{self, Enforced};
use super::form::Posted;
use super::page::{self, span, Layout, PageError};
use super::session::Signed;
use crate::api::approvals::{self, Approval, ApprovalStatus, DecideInput, Verdict};
use crate::api::auth::service as auth;
use crate::api::envelope::{Page, PageQuery};
use crate::auth::{caller_for, require};
use crate::error::ApiError;
use crate::state::AppState;
use crate::validate::Text;

/// The queue lists at most this many (the API's largest page).
const QUEUE: i64 = 100;
/// How often the live queue looks for a change.
const POLL: Duration = Duration::from_secs(1);

/// One approval as a row of the page.
pub struct Item {
    pub id: i64,
    pub agent_id: String,
    /// The agent's name, or its id if it is gone.
    pub agent: String,
    /// The policy's name, or its id if it is gone.
    pub policy: String,
    /// `openai gpt-4o`, or for a tool call `mcp docs__search`.
    pub what: String,
    pub environment: String,
    pub status: String,
    /// How long it has waited (pending) or when it was decided.
    pub age: String,
    /// Time left before a pending approval expires.
    pub left: String,
    pub reviewer: String,
    pub reason: String,
    /// For a tool call held at the MCP gateway: the tool and what it was to be called with.
    pub tool: Option<ToolAsked>,
    /// What approving it lets through, in words.
    pub covers: String,
    /// The held action's digest, for an approval bound to it.
    pub action_digest: Option<String>,
    /// For the history: what an approval released (`this action, used 12:03`).
    pub released: String,
}

/// A held tool call as the proxy reported it, its arguments redacted by the tenant's
/// payload-capture rules before they left the proxy.
pub struct ToolAsked {
    pub server: String,
    pub name: String,
    /// The arguments as indented JSON, or why they are not shown.
    pub arguments: String,
}

impl ToolAsked {
    fn of(context: &serde_json::Value) -> Option<ToolAsked> {
        let server = context["server"].as_str()?;
        let name = context["tool"].as_str()?;
        let arguments = match (&context["arguments"], &context["arguments_omitted"]) {
            (serde_json::Value::Null, serde_json::Value::Null) => "(none)".to_owned(),
            (serde_json::Value::Null, _) => "(too large to show)".to_owned(),
            (arguments, _) => serde_json::to_string_pretty(arguments).unwrap_or_default(),
        };
        Some(ToolAsked {
            server: server.to_owned(),
            name: name.to_owned(),
            arguments,
        })
    }
}

impl Item {
    pub fn of(approval: Approval, now: i64) -> Item {
        let released = released(&approval);
        let context = &approval.request_context;
        let text = |key: &str| context[key].as_str().unwrap_or_default().to_owned();
        Item {
            id: approval.id,
            agent: approval
                .agent_name
                .unwrap_or_else(|| approval.agent_id.clone()),
            agent_id: approval.agent_id,
            policy: approval
                .policy_name
                .unwrap_or_else(|| format!("policy {}", approval.policy_id)),
            what: format!("{} {}", text("provider"), text("model")),
            environment: text("environment"),
            status: approval.status,
            age: span(now - approval.created_at.as_millis()),
            left: span(approval.expires_at.as_millis() - now),
            reviewer: approval.reviewer_id.unwrap_or_default(),
            reason: approval.reason.unwrap_or_default(),
            tool: ToolAsked::of(context),
            released,
            covers: approval.covers.clone(),
            action_digest: approval
                .action_digest
                .filter(|d| d.len() >= 12 && approval.releases != "scope"),
        }
    }
}

/// What a decided approval let through, briefly.
fn released(approval: &Approval) -> String {
    if approval.status != "approved" {
        return String::new();
    }
    match (approval.releases.as_str(), approval.consumed_at) {
        ("action", Some(at)) => format!("this action once, used {at}"),
        ("action", None) => "this action once, unused".to_owned(),
        ("action_repeatable", _) => "this action, for an hour".to_owned(),
        _ => "the agent's requests to this model or tool, for an hour".to_owned(),
    }
}

#[derive(Template)]
#[template(path = "approvals.html")]
struct ApprovalsPage {
    layout: Layout,
    queue: Queue,
    history: History,
    enforced: Option<Enforced>,
}

/// The pending queue, also answered alone for the live refresh.
#[derive(Template)]
#[template(path = "approvals_queue.html")]
struct Queue {
    total: i64,
    items: Vec<Item>,
    may_decide: bool,
    csrf: String,
}

impl Queue {
    /// What the page shows of the queue, for the live stream's first look.
    fn shown(&self) -> String {
        format!(
            "total={}&oldest={}",
            self.total,
            self.items.first().map_or(0, |item| item.id)
        )
    }
}

/// One page of decided approvals, with the filters that chose them.
struct History {
    items: Vec<Item>,
    total: i64,
    /// The status filter (`approved`, `denied`, `expired`), or empty for all.
    status: String,
    /// The agent filter, or empty for all.
    agent_id: String,
    page: i64,
    /// The query of the page before and after this one, when there is one.
    newer: Option<String>,
    older: Option<String>,
}

/// How many decided approvals a page of the history lists.
const HISTORY_PAGE: i64 = 50;

#[derive(Deserialize)]
pub struct HistoryFilter {
    /// `approved`, `denied` or `expired`; all decided ones when absent or empty.
    #[serde(default)]
    status: String,
    /// Only this agent's approvals, when given.
    #[serde(default)]
    agent_id: String,
    /// Which page of the history, from 1.
    page: Option<i64>,
    /// What the last decision came to (after the redirect).
    #[serde(flatten)]
    enforced: Enforced,
}

impl HistoryFilter {
    fn status(&self) -> Result<Option<ApprovalStatus>, PageError> {
        match self.status.as_str() {
            "" => Ok(None),
            "approved" => Ok(Some(ApprovalStatus::Approved)),
            "denied" => Ok(Some(ApprovalStatus::Denied)),
            "expired" => Ok(Some(ApprovalStatus::Expired)),
            _ => Err(ApiError::validation(
                "status",
                "status: approved, denied or expired (or none for all decided)",
            )
            .into()),
        }
    }

    /// The query string of page `page` under the same filters.
    fn query_of(&self, page: i64) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        if !self.status.is_empty() {
            query.append_pair("status", &self.status);
        }
        if !self.agent_id.is_empty() {
            query.append_pair("agent_id", &self.agent_id);
        }
        query.append_pair("page", &page.to_string());
        query.finish()
    }
}

/// `GET /console/approvals`: the live queue, and the history of decided approvals.
pub async fn show(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceRead>,
    Query(filter): Query<HistoryFilter>,
) -> Result<Response, PageError> {
    let now = state.clock.now().as_millis();
    let status = filter.status()?;
    let page = Page::try_from(PageQuery {
        page: filter.page,
        limit: Some(HISTORY_PAGE),
    })?;
    let agent_id = Some(filter.agent_id.trim()).filter(|id| !id.is_empty());
    let (decided, total) =
        approvals::service::decided(&state, &signed.caller, status, agent_id, page).await?;
    let history = History {
        items: decided.into_iter().map(|a| Item::of(a, now)).collect(),
        total,
        status: status.map_or("", ApprovalStatus::as_str).to_owned(),
        agent_id: agent_id.unwrap_or_default().to_owned(),
        page: page.page,
        newer: (page.page > 1).then(|| filter.query_of(page.page - 1)),
        older: (page.page * page.limit < total).then(|| filter.query_of(page.page + 1)),
    };
    let page = ApprovalsPage {
        layout: signed.layout(&state, "approvals").await?,
        queue: queue(&state, &signed).await?,
        history,
        enforced: Some(filter.enforced).filter(Enforced::is_known),
    };
    Ok(page::render(&page))
}

fn may_decide<R>(signed: &Signed<R>) -> bool {
    signed
        .caller
        .has(warden_shared::scopes::Scope::GovernanceWrite)
}

async fn queue<R>(state: &AppState, signed: &Signed<R>) -> Result<Queue, PageError> {
    let (total, oldest) = approvals::service::oldest_pending(state, &signed.caller, QUEUE).await?;
    let now = state.clock.now().as_millis();
    Ok(Queue {
        total,
        items: oldest.into_iter().map(|a| Item::of(a, now)).collect(),
        may_decide: may_decide(signed),
        csrf: signed.csrf(),
    })
}

/// `GET /console/approvals/queue`: the queue alone, which the page fetches when told.
pub async fn queue_fragment(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceRead>,
) -> Result<Response, PageError> {
    Ok(page::render(&queue(&state, &signed).await?))
}

/// What the page showed of the queue when it was rendered: its pending total and the
/// oldest item's id (0: none).
#[derive(Deserialize)]
pub struct Shown {
    total: Option<i64>,
    oldest: Option<i64>,
}

/// `GET /console/approvals/events`: an `approvals` event whenever the pending queue
/// changes (an approval queued, decided or expired, on any replica: the database is
/// asked once a second while the page is open). The first look compares with what the
/// page showed (`total`, `oldest`), so a request held between rendering the page and
/// opening this stream is news too. The stream ends when the session does (signed out,
/// expired, or its key deleted), checked at each look.
pub async fn events(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceRead>,
    Query(shown): Query<Shown>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let shown = shown
        .total
        .map(|total| (total, shown.oldest.filter(|id| *id > 0)));
    let stream = futures_util::stream::unfold(
        (state, signed.token, shown, false),
        |(state, token, seen, looked)| async move {
            loop {
                if looked {
                    tokio::time::sleep(POLL).await;
                }
                let caller = caller_for(&state, &token).await.ok()?;
                if !caller.has(warden_shared::scopes::Scope::GovernanceRead) {
                    return None;
                }
                let Ok((total, oldest)) =
                    approvals::service::oldest_pending(&state, &caller, 1).await
                else {
                    // The database is out of reach: look again later.
                    tokio::time::sleep(POLL).await;
                    continue;
                };
                let now = Some((total, oldest.first().map(|a| a.id)));
                let event = match seen {
                    // Nothing known of what the page shows: only later changes are news.
                    None => Event::default().comment("watching"),
                    Some(_) if seen != now => {
                        Event::default().event("approvals").data(total.to_string())
                    }
                    Some(_) if looked => continue,
                    Some(_) => Event::default().comment("watching"),
                };
                return Some((Ok(event), (state, token, now, true)));
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[derive(Deserialize)]
pub struct Decision {
    decision: String,
    #[serde(default)]
    reason: String,
}

/// `POST /console/approvals/{id}`: approve or deny as the signed-in person.
pub async fn decide(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceWrite>,
    Path(id): Path<i64>,
    Posted(form): Posted<Decision>,
) -> Result<Response, PageError> {
    let decision = match form.decision.as_str() {
        "approved" => Verdict::Approved,
        "denied" => Verdict::Denied,
        _ => return Err(PageError::bad_form("decide `approved` or `denied`")),
    };
    let reviewer = auth::caller_name(&state, &signed.caller).await?;
    let input = DecideInput {
        reviewer_id: Text::try_from(reviewer.chars().take(100).collect::<String>())
            .map_err(|_| PageError::bad_form("the reviewer has no name"))?,
        decision,
        reason: match form.reason.trim() {
            "" => None,
            reason => Some(
                Text::try_from(reason.to_owned())
                    .map_err(|_| PageError::bad_form("a reason has at most 1,000 characters"))?,
            ),
        },
    };
    let ((), enforced) = enforcement::apply(
        &state,
        approvals::service::decide_approval(&state, &signed.caller, id, input),
    )
    .await?;
    Ok(Redirect::to(&format!("/console/approvals?{}", enforced.query())).into_response())
}
