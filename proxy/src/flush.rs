//! What the proxy's two reporters (usage, policy decisions) share: where batches go, and
//! posting a batch to the control plane until it answers. Batches are gathered by
//! [`crate::batch_queue`].

use std::time::Duration;

use bytes::Bytes;
use prometheus::IntCounter;
use serde::de::DeserializeOwned;

/// Where and how a reporter sends its batches.
pub struct FlushTarget {
    pub url: String,
    pub service_token: String,
    /// How long a batch's first item waits for others.
    pub interval: Duration,
}

/// The `data` of an acknowledgement: each reporter reads the fields it needs.
#[derive(serde::Deserialize)]
struct Acknowledged<A> {
    data: A,
}

/// One post of the JSON `body` to an internal endpoint of the control plane at `url`,
/// with the service token, answered within `timeout`: what every call the proxy makes
/// to the control plane is.
pub async fn post_json(
    client: &reqwest::Client,
    url: &str,
    service_token: &str,
    body: Bytes,
    timeout: Duration,
) -> reqwest::Result<reqwest::Response> {
    client
        .post(url)
        .bearer_auth(service_token)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .timeout(timeout)
        .send()
        .await
}

/// One question to the control plane (an allowance, say), answered within `timeout`:
/// the answer's `data`, or why there is none (unreachable, not a success, unreadable).
pub async fn ask_for_data<A: DeserializeOwned>(
    client: &reqwest::Client,
    url: &str,
    service_token: &str,
    body: &impl serde::Serialize,
    timeout: Duration,
) -> Result<A, String> {
    let body = Bytes::from(serde_json::to_vec(body).map_err(|e| e.to_string())?);
    let response = post_json(client, url, service_token, body, timeout)
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("the control plane answered {}", response.status()));
    }
    let answer: Acknowledged<A> = response.json().await.map_err(|e| e.to_string())?;
    Ok(answer.data)
}

/// How many times the control plane may answer a batch with a server error of its own
/// (500, or another 5xx but 502, 503 and 504) before the batch is given up: a batch that
/// keeps failing must not hold back the batches behind it. About 4 s of retries.
pub const MAX_BATCH_FAULTS: u32 = 5;

/// Posts `body` (batch `batch_id`) until the control plane answers for it, with backoff
/// (the very same body each time: the endpoints are idempotent). Returns the
/// acknowledgement's `data`, or `None` when the batch is not taken: refused (a 4xx other
/// than 401 and 429: no retry can succeed) or failed with a server error
/// [`MAX_BATCH_FAULTS`] times. A control plane that cannot be reached, or answers 502,
/// 503 (its database is down) or 504, is waited for without limit: that is an outage,
/// not a bad batch, and every batch would fail alike. Each failed attempt counts in
/// `failures`; `what` names the batch in logs.
pub async fn post_until_answered<A: DeserializeOwned + Default>(
    client: &reqwest::Client,
    target: &FlushTarget,
    batch_id: &str,
    body: Bytes,
    what: &'static str,
    failures: &IntCounter,
) -> Option<A> {
    let mut backoff = Duration::from_millis(250);
    let mut faults = 0;
    loop {
        let sent = post_json(
            client,
            &target.url,
            &target.service_token,
            body.clone(),
            Duration::from_secs(30),
        )
        .await;
        match sent {
            Ok(response) if response.status().is_success() => {
                let ack = response.json::<Acknowledged<A>>().await;
                return Some(ack.map(|ack| ack.data).unwrap_or_default());
            }
            Ok(response)
                if response.status().is_client_error()
                    && response.status() != 401
                    && response.status() != 429 =>
            {
                failures.inc();
                tracing::error!(%batch_id, status = %response.status(), "control plane refused a {what} batch");
                return None;
            }
            Ok(response) if is_fault_of_the_batch(response.status()) => {
                failures.inc();
                faults += 1;
                if faults >= MAX_BATCH_FAULTS {
                    tracing::error!(%batch_id, status = %response.status(), attempts = faults, "control plane failed a {what} batch every time; giving it up so later batches can go");
                    return None;
                }
                tracing::warn!(%batch_id, status = %response.status(), retry_in = ?backoff, "{what} batch failed; retrying");
            }
            Ok(response) => {
                failures.inc();
                tracing::warn!(%batch_id, status = %response.status(), retry_in = ?backoff, "{what} batch not accepted; retrying");
            }
            Err(error) => {
                failures.inc();
                tracing::warn!(%batch_id, %error, retry_in = ?backoff, "cannot reach the control plane for a {what} batch; retrying");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(15));
    }
}

/// A server error that this batch may have caused, as opposed to an unavailable control
/// plane (or a gateway in front of it saying so).
fn is_fault_of_the_batch(status: reqwest::StatusCode) -> bool {
    status.is_server_error() && !matches!(status.as_u16(), 502..=504)
}
