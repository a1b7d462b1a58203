//! The audit trail for auditors: the API's filters (event type, target, actor, time) in
//! the URL, newest first a page at a time, each event's details, the export of the
//! filtered view as CSV or JSON, and the hash chain's verification as a badge (fetched
//! after the page: it verifies what was appended since the last walk of the whole chain,
//! and walks it all again every few minutes or at the auditor's request).

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::filters::Filters;
use super::page::{self, Layout, PageError};
use super::session::Signed;
use crate::api::audit_trail::service::{self as audit, Criteria};
use crate::api::audit_trail::{self, AuditEventView, AuditQuery, ExportFormat};
use crate::api::envelope::{Page, PageQuery};
use crate::auth::require;
use crate::changes::chain::Verification;
use crate::state::AppState;

/// Events a page of the trail lists.
const PER_PAGE: i64 = 50;

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage {
    layout: Layout,
    events: Vec<Event>,
    total: i64,
    /// The total is a floor (a filter matching more than the API counts).
    at_least: bool,
    page: i64,
    event_type: String,
    target_id: String,
    actor: String,
    from: String,
    to: String,
    /// The query string of the filters alone, for the export links.
    filters: String,
    newer: Option<String>,
    older: Option<String>,
}

/// One event as a row, with the links that filter by its values.
struct Event {
    view: AuditEventView,
    /// Its details as indented JSON.
    details: String,
    by_type: String,
    by_actor: String,
    by_target: String,
}

/// `GET /console/audit`.
pub async fn show(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceRead>,
    filters: Filters<AuditQuery>,
) -> Result<Response, PageError> {
    let page = Page::try_from(PageQuery {
        page: filters.query.page,
        limit: Some(PER_PAGE),
    })?;
    let criteria = Criteria::of(&filters.query)?;
    let (events, total, at_least) =
        audit::list_events(&state, &signed.caller, &criteria, page).await?;
    let events = events
        .into_iter()
        .map(|view| Event {
            details: serde_json::to_string_pretty(&view.details).unwrap_or_default(),
            by_type: filters.with("event_type", &view.event_type),
            by_actor: filters.with("actor", &view.actor),
            by_target: filters.with("target_id", &view.target_id),
            view,
        })
        .collect();
    let audit = AuditPage {
        layout: signed.layout(&state, "audit").await?,
        events,
        total,
        at_least,
        page: page.page,
        event_type: filters.get("event_type").to_owned(),
        target_id: filters.get("target_id").to_owned(),
        actor: filters.get("actor").to_owned(),
        from: filters.get("from").to_owned(),
        to: filters.get("to").to_owned(),
        filters: filters.without_page(),
        newer: (page.page > 1).then(|| filters.with("page", &(page.page - 1).to_string())),
        older: (page.page * page.limit < total)
            .then(|| filters.with("page", &(page.page + 1).to_string())),
    };
    Ok(page::render(&audit))
}

/// The chain's verification, as the badge the page shows.
#[derive(Template)]
#[template(path = "audit_verification.html")]
struct Badge {
    verification: Verification,
    walked_at: String,
}

/// The badge's query: `whole=true` walks every event now (the button under the badge).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BadgeQuery {
    #[serde(default)]
    whole: bool,
}

/// `GET /console/audit/verification`: the events appended since the last walk of the
/// whole chain, or every event when that walk is older than
/// [`audit::WALK_EVERY_MS`] or `whole` asks for it.
pub async fn verification(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceRead>,
    query: Filters<BadgeQuery>,
) -> Result<Response, PageError> {
    let check = audit::check_chain(&state, &signed.caller, query.query.whole).await?;
    Ok(page::render(&Badge {
        verification: check.verification,
        walked_at: check.walked_at.to_string()[..19].replace('T', " "),
    }))
}

/// `GET /console/audit/export/{format}` (`csv` or `json`): the filtered view, every
/// page of it, oldest first, as a file, as the API's `/audit-trail/export` answers it.
pub async fn export(
    State(state): State<AppState>,
    signed: Signed<require::GovernanceRead>,
    Path(format): Path<String>,
    filters: Filters<AuditQuery>,
) -> Result<Response, PageError> {
    let format = match format.as_str() {
        "csv" => ExportFormat::Csv,
        "json" => ExportFormat::Json,
        _ => {
            return Err(PageError::new(
                StatusCode::NOT_FOUND,
                "There is no such export format.",
            ))
        }
    };
    let criteria = Criteria::of(&filters.query)?;
    Ok(audit_trail::export_file(&state, &signed.caller, criteria, format).await?)
}
