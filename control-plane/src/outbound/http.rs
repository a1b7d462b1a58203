//! One guarded HTTP POST: to the addresses the guard checked, no redirects followed, a
//! bounded time, and at most a few KiB of the answer read.

use std::time::Duration;

use super::guard::{Guard, Refusal};

/// How much of a receiver's answer is kept (for the attempt's record); the rest is not
/// read.
const MAX_ANSWER_BYTES: usize = 4 * 1024;

/// A receiver's answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// The start of the body, lossily decoded.
    pub body: String,
}

/// Why a POST did not get a 2xx answer.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(
        "the receiver answered {status} with a redirect to `{location}`, which is not followed"
    )]
    Redirect { status: u16, location: String },
    #[error("the receiver answered {}: {}", .0.status, .0.body)]
    Status(Answer),
    #[error("no answer within {0} s")]
    Timeout(u64),
    #[error("cannot reach the receiver: {0}")]
    Connect(String),
}

impl PostError {
    /// The HTTP status the receiver answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            PostError::Redirect { status, .. } => Some(*status),
            PostError::Status(answer) => Some(answer.status),
            _ => None,
        }
    }
}

/// POSTs `body` as JSON with `headers` to `url`, after the guard has checked its host.
pub async fn post_json(
    guard: &Guard,
    url: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Answer, PostError> {
    let (url, checked) = guard.check_url(url).await?;
    let mut client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        .user_agent(concat!("Warden/", env!("CARGO_PKG_VERSION")));
    if checked.is_name {
        // Connect to the addresses checked, not to a second resolution of the name.
        client = client.resolve_to_addrs(&checked.host, &checked.addrs);
    }
    let client = client
        .build()
        .map_err(|error| PostError::Connect(error.to_string()))?;
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let mut response = request.send().await.map_err(|error| {
        if error.is_timeout() {
            PostError::Timeout(timeout.as_secs())
        } else {
            PostError::Connect(super::error_chain(&error))
        }
    })?;
    let status = response.status();
    if status.is_redirection() {
        let location = response
            .headers()
            .get("location")
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
            .chars()
            .take(200)
            .collect();
        return Err(PostError::Redirect {
            status: status.as_u16(),
            location,
        });
    }
    let mut kept = Vec::new();
    while kept.len() < MAX_ANSWER_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => kept.extend_from_slice(&chunk),
            Ok(None) => break,
            // The status is what counts; a body cut short is recorded as far as it came.
            Err(_) => break,
        }
    }
    kept.truncate(MAX_ANSWER_BYTES);
    let answer = Answer {
        status: status.as_u16(),
        body: String::from_utf8_lossy(&kept).into_owned(),
    };
    if status.is_success() {
        Ok(answer)
    } else {
        Err(PostError::Status(answer))
    }
}
