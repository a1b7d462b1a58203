//! Answers the proxy writes itself (its own endpoints, its refusals): a complete
//! response with a length, so the client's connection stays reusable. pingora's
//! `respond_error_with_body` would close it, and refusals (403, 429) come often.

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;

/// Answers `status` with `body` of `content_type`.
pub async fn respond(session: &mut ServerSession, status: u16, content_type: &str, body: Bytes) {
    let Ok(mut header) = ResponseHeader::build_no_case(status, Some(3)) else {
        return;
    };
    let _ = header.insert_header(http::header::CONTENT_TYPE, content_type);
    let _ = header.insert_header(http::header::CONTENT_LENGTH, body.len().to_string());
    if session
        .write_response_header(Box::new(header))
        .await
        .is_err()
    {
        return;
    }
    if !body.is_empty() {
        let _ = session.write_response_body(body, true).await;
    }
}

/// Answers a refusal: `status` with the JSON error `body`, and `Retry-After` when the
/// refusal says when a retry may pass.
pub async fn respond_refusal(
    session: &mut ServerSession,
    status: u16,
    body: Bytes,
    retry_after_secs: Option<u64>,
) {
    let Ok(mut header) = ResponseHeader::build_no_case(status, Some(4)) else {
        return;
    };
    let _ = header.insert_header(http::header::CONTENT_TYPE, "application/json");
    let _ = header.insert_header(http::header::CONTENT_LENGTH, body.len().to_string());
    if let Some(seconds) = retry_after_secs {
        let _ = header.insert_header(http::header::RETRY_AFTER, seconds.to_string());
    }
    if session
        .write_response_header(Box::new(header))
        .await
        .is_ok()
    {
        let _ = session.write_response_body(body, true).await;
    }
}
