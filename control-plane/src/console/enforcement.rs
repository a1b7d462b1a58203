//! Whether a change made from a console form is in force on every proxy: the form's
//! write runs under the same read-your-writes wait as the API's (`Warden-Enforcement`),
//! and what it came to rides on the redirect to the page that shows it.

use std::future::Future;

use serde::Deserialize;

use crate::api::read_your_writes;
use crate::changes;
use crate::error::ApiResult;
use crate::proxy_state::confirm::Confirmation;
use crate::state::AppState;

/// What the proxies made of the last change, as the page's query carries it:
/// `enforcement=applied`, `enforcement=pending&unconfirmed=2`, or `enforcement=saved`
/// for a change no proxy enforces.
#[derive(Debug, Default, Deserialize)]
pub struct Enforced {
    enforcement: Option<String>,
    unconfirmed: Option<String>,
}

impl Enforced {
    fn of(confirmation: Option<Confirmation>) -> Enforced {
        let (state, unconfirmed) = match confirmation {
            None => ("saved", None),
            Some(Confirmation::Applied) => ("applied", None),
            Some(Confirmation::Pending { unconfirmed }) => ("pending", Some(unconfirmed)),
        };
        Enforced {
            enforcement: Some(state.to_owned()),
            unconfirmed: unconfirmed.map(|n| n.to_string()),
        }
    }

    /// From a page's own query fields (a page whose query holds more than these).
    pub fn from_parts(enforcement: Option<String>, unconfirmed: Option<String>) -> Enforced {
        Enforced {
            enforcement,
            unconfirmed,
        }
    }

    /// The query that carries it to the next page.
    pub fn query(&self) -> String {
        let state = self.enforcement.as_deref().unwrap_or("saved");
        match &self.unconfirmed {
            Some(n) => format!("enforcement={state}&unconfirmed={n}"),
            None => format!("enforcement={state}"),
        }
    }

    /// Whether the query named an outcome (else there is nothing to say).
    pub fn is_known(&self) -> bool {
        matches!(
            self.enforcement.as_deref(),
            Some("applied" | "pending" | "saved")
        )
    }

    pub fn applied(&self) -> bool {
        self.enforcement.as_deref() != Some("pending")
    }

    /// What the page tells the person.
    pub fn message(&self) -> String {
        match self.enforcement.as_deref() {
            Some("applied") => "Saved, and in force on every connected proxy.".to_owned(),
            Some("pending") => format!(
                "Saved, but {} connected proxies had not confirmed it yet; they apply it as \
                 soon as they hear of it.",
                self.unconfirmed
                    .as_deref()
                    .and_then(|n| n.parse::<u32>().ok())
                    .unwrap_or(1)
            ),
            _ => "Saved.".to_owned(),
        }
    }
}

/// Runs `write` and, when it changed what the proxies enforce, waits for them as the
/// API does; its output and what the proxies made of it.
pub async fn apply<T>(
    state: &AppState,
    write: impl Future<Output = ApiResult<T>>,
) -> ApiResult<(T, Enforced)> {
    let (result, version) = changes::tracking(write).await;
    let output = result?;
    let confirmation = match version {
        Some(version) => Some(read_your_writes::confirm(state, version).await),
        None => None,
    };
    Ok((output, Enforced::of(confirmation)))
}
