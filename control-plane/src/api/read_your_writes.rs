//! Read-your-writes for enforcement: a management call that changed what the proxies
//! enforce answers only once every proxy connected at that moment has applied the
//! change, or once the wait's bound (`enforcement_wait_ms`) has passed.
//!
//! One mechanism for every route: `changes::record` notes the version of each change it
//! writes for the proxies in the request's scope, and this middleware, around every
//! handler, nudges the publisher and waits for that version after a successful answer.
//! The answer says how it went in `Warden-Enforcement`: `applied`, or
//! `pending; unconfirmed=N` when N connected proxies had not confirmed within the bound
//! (the change still reaches them; a proxy that is gone never holds a write hostage).

use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

use crate::changes;
use crate::proxy_state::confirm::Confirmation;
use crate::state::AppState;

/// The response header that tells a caller whether the proxies enforce its change yet.
pub const ENFORCEMENT_HEADER: &str = "warden-enforcement";

/// Middleware: see the module's documentation.
pub async fn confirm_enforcement(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let (mut response, written) = changes::tracking(next.run(request)).await;
    let Some(version) = written.filter(|_| response.status().is_success()) else {
        return response;
    };
    let value = match confirm(&state, version).await {
        Confirmation::Applied => HeaderValue::from_static("applied"),
        Confirmation::Pending { unconfirmed } => {
            HeaderValue::from_str(&format!("pending; unconfirmed={unconfirmed}"))
                .unwrap_or(HeaderValue::from_static("pending"))
        }
    };
    response.headers_mut().insert(ENFORCEMENT_HEADER, value);
    response
}

/// Nudges the publisher and waits, within `enforcement_wait_ms`, for every connected
/// proxy to apply `version`: what a write that changed enforcement answers after (the
/// API through the middleware above, the console's forms themselves).
pub async fn confirm(state: &AppState, version: i64) -> Confirmation {
    state.publisher.nudge();
    let started = Instant::now();
    let confirmation = state.confirmations.wait_for(version).await;
    state
        .metrics
        .observe_enforcement_wait(confirmation, started.elapsed().as_secs_f64());
    if let Confirmation::Pending { unconfirmed } = confirmation {
        tracing::warn!(
            version,
            unconfirmed,
            "connected proxies did not confirm a change within enforcement_wait_ms"
        );
    }
    confirmation
}
