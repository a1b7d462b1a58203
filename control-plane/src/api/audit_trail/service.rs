//! The audit trail's rules: paging, the export's encodings and its streaming, and the
//! chain's verification.

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::mpsc;

use super::store::{self, Filter};
use super::{AuditEventView, AuditQuery, ExportFormat};
use crate::api::envelope::Page;
use crate::api::range::{parse_end, parse_start};
use crate::auth::Caller;
use crate::changes::chain::{self, Verification};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use warden_shared::timestamp::Timestamp;

/// Events an export reads at a time: its memory does not grow with the trail.
const EXPORT_CHUNK: i64 = 500;

/// A filter that owns its values, for an export's task.
#[derive(Debug, Clone, Default)]
pub struct Criteria {
    pub event_type: Option<String>,
    pub target_id: Option<String>,
    pub actor: Option<String>,
    pub from: Option<i64>,
    pub to: Option<i64>,
}

impl Criteria {
    pub fn of(query: &AuditQuery) -> ApiResult<Criteria> {
        let from = query
            .from
            .as_deref()
            .map(|text| parse_start("from", text))
            .transpose()?;
        let to = query
            .to
            .as_deref()
            .map(|text| parse_end("to", text))
            .transpose()?;
        if let (Some(from), Some(to)) = (from, to) {
            if to <= from {
                return Err(ApiError::validation("to", "to: must be after from"));
            }
        }
        Ok(Criteria {
            event_type: query.event_type.as_ref().map(|t| t.as_str().to_owned()),
            target_id: query.target_id.as_ref().map(|t| t.as_str().to_owned()),
            actor: query.actor.as_ref().map(|t| t.as_str().to_owned()),
            from,
            to,
        })
    }

    fn filter(&self) -> Filter<'_> {
        Filter {
            event_type: self.event_type.as_deref(),
            target_id: self.target_id.as_deref(),
            actor: self.actor.as_deref(),
            from: self.from,
            to: self.to,
        }
    }
}

/// One page of the caller's trail, newest first, the total matching and whether that
/// total is only a floor.
pub async fn list_events(
    state: &AppState,
    caller: &Caller,
    criteria: &Criteria,
    page: Page,
) -> ApiResult<(Vec<AuditEventView>, i64, bool)> {
    let pool = state.db.pool();
    let filter = criteria.filter();
    let events = store::list(pool, &caller.tenant_id, &filter, page.limit, page.offset()).await?;
    let (total, lower_bound) = store::count(pool, &caller.tenant_id, &filter).await?;
    Ok((events, total, lower_bound))
}

/// Verifies the caller's chain from its first event.
pub async fn verify_chain(state: &AppState, caller: &Caller) -> ApiResult<Verification> {
    Ok(chain::verify(state.db.pool(), &caller.tenant_id).await?)
}

/// How long a walk of the whole chain stands for [`check_chain`]: within it, a check
/// verifies the events appended since (and the last link the walk verified); after it,
/// the next check walks every event again. A walk costs about 12 ms per 1,000 events on
/// SQLite and 4 ms on PostgreSQL (`benches`, `console-pages`).
pub const WALK_EVERY_MS: i64 = 5 * 60 * 1000;

/// A check of the chain: its verification, and when the whole chain was last walked.
pub struct ChainCheck {
    pub verification: Verification,
    /// When the walk from the first event that this check builds on was.
    pub walked_at: Timestamp,
}

/// Verifies the caller's chain, walking every event if `whole` or if the last walk is
/// older than [`WALK_EVERY_MS`], else only what was appended since it.
pub async fn check_chain(state: &AppState, caller: &Caller, whole: bool) -> ApiResult<ChainCheck> {
    let (verification, walked_at) = chain::check(
        state.db.pool(),
        &state.verified_links,
        &caller.tenant_id,
        state.clock.now().as_millis(),
        WALK_EVERY_MS,
        whole,
    )
    .await?;
    Ok(ChainCheck {
        verification,
        walked_at: Timestamp::from_millis(walked_at),
    })
}

/// The caller's trail (oldest first) encoded as `format`, streamed: the first piece is
/// read before this returns (a database failure is then an error answer), the rest by a
/// task that reads one piece at a time as the client takes them. A failure later cuts
/// the stream short with an error, so a client never mistakes a part for the whole.
pub async fn export(
    state: &AppState,
    caller: &Caller,
    criteria: Criteria,
    format: ExportFormat,
) -> ApiResult<impl Stream<Item = Result<Bytes, std::io::Error>>> {
    let pool = state.db.pool().clone();
    let tenant_id = caller.tenant_id.clone();
    let first = store::after(&pool, &tenant_id, &criteria.filter(), 0, EXPORT_CHUNK).await?;
    let (lines, body) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        let mut chunk = first;
        let mut written = 0_u64;
        let _ = lines.send(Ok(Bytes::from(format.opening()))).await;
        loop {
            let full = chunk.len() as i64 == EXPORT_CHUNK;
            let last_seq = chunk.last().map(|event| event.seq);
            let mut piece = Vec::with_capacity(chunk.len() * 512);
            for event in &chunk {
                format.write(&mut piece, event, written == 0);
                written += 1;
            }
            if lines.send(Ok(Bytes::from(piece))).await.is_err() {
                return; // The client went away.
            }
            let (true, Some(after)) = (full, last_seq) else {
                break;
            };
            match store::after(&pool, &tenant_id, &criteria.filter(), after, EXPORT_CHUNK).await {
                Ok(next) => chunk = next,
                Err(error) => {
                    tracing::error!(%error, "audit trail export failed part way");
                    let _ = lines.send(Err(std::io::Error::other(error))).await;
                    return;
                }
            }
        }
        let _ = lines.send(Ok(Bytes::from(format.closing()))).await;
    });
    let mut body = body;
    Ok(futures_util::stream::poll_fn(move |cx| body.poll_recv(cx)))
}

impl ExportFormat {
    fn opening(self) -> &'static str {
        match self {
            ExportFormat::Csv => "id,seq,timestamp,event_type,actor,actor_type,target_type,target_id,tenant_id,details,prev_hash,hash\r\n",
            ExportFormat::Json => "[",
        }
    }

    fn closing(self) -> &'static str {
        match self {
            ExportFormat::Csv => "",
            ExportFormat::Json => "]\n",
        }
    }

    /// Appends one event to `out`.
    fn write(self, out: &mut Vec<u8>, event: &AuditEventView, first: bool) {
        match self {
            ExportFormat::Json => {
                if !first {
                    out.push(b',');
                }
                // A struct of strings, numbers and a JSON value cannot fail to encode.
                let _ = serde_json::to_writer(&mut *out, event);
            }
            ExportFormat::Csv => {
                let seq = event.seq.to_string();
                let timestamp = event.timestamp.to_string();
                let details = event.details.to_string();
                let cells = [
                    event.id.as_str(),
                    &seq,
                    &timestamp,
                    &event.event_type,
                    &event.actor,
                    &event.actor_type,
                    &event.target_type,
                    &event.target_id,
                    &event.tenant_id,
                    &details,
                    &event.prev_hash,
                    &event.hash,
                ];
                for (index, cell) in cells.iter().enumerate() {
                    if index > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(csv_cell(cell).as_bytes());
                }
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

/// One CSV cell (RFC 4180): quoted when it holds a comma, a quote or a line break, with
/// quotes doubled; and safe to open in a spreadsheet: a cell a spreadsheet would read as
/// a formula (starting with `=`, `+`, `-`, `@`, a tab or a carriage return) is prefixed
/// with `'`, as OWASP recommends.
pub fn csv_cell(value: &str) -> String {
    let guarded = if value.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{value}")
    } else {
        value.to_owned()
    };
    if guarded.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", guarded.replace('"', "\"\""))
    } else {
        guarded
    }
}

#[cfg(test)]
mod tests {
    use super::csv_cell;

    #[test]
    fn cells_are_quoted_and_formulas_disarmed() {
        assert_eq!(csv_cell("plain"), "plain");
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_cell("two\nlines"), "\"two\nlines\"");
        assert_eq!(csv_cell("=SUM(A1:A9)"), "'=SUM(A1:A9)");
        assert_eq!(csv_cell("+1"), "'+1");
        assert_eq!(csv_cell("-1"), "'-1");
        assert_eq!(csv_cell("@cmd"), "'@cmd");
        assert_eq!(csv_cell("=a,b"), "\"'=a,b\"");
        assert_eq!(csv_cell("{\"a\":1}"), "\"{\"\"a\"\":1}\"");
    }
}
