//! One agent connection: its HTTP/1 requests read and answered one after another while
//! the agent keeps the connection alive.
//!
//! Warden answers every request itself ([`ProxyService::answer`]), so it drives pingora's
//! HTTP/1 server session directly. pingora's `HttpProxy` would hold, for as long as a
//! connection is open, a future sized for the proxying, caching and module steps Warden
//! never reaches (14 KiB a connection), and run their hooks on every request.

use bytes::Bytes;
use pingora::protocols::http::ServerSession;
use pingora::protocols::Stream;
use pingora::ErrorType;
use tokio::sync::watch;

use crate::refusal::Refusal;
use crate::respond::respond_refusal;
use crate::service::ProxyService;

/// Serves the requests that arrive on `stream` until the agent closes it, leaves it
/// without a request for `keepalive_secs`, a request leaves it unusable, or `stopping`
/// turns true (at once when it waits for a request; after the answer when one is in
/// progress).
pub async fn serve(
    service: &ProxyService,
    mut stream: Stream,
    keepalive_secs: u64,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let mut session = ServerSession::new_http1(stream);
        session.set_keepalive(Some(keepalive_secs));
        let read = tokio::select! {
            // A request already in hand is read, and answered, before shutdown counts.
            biased;
            read = session.read_request() => read,
            _ = stop.wait_for(|stop| *stop) => return,
        };
        match read {
            Ok(true) => {}
            // Closed by the agent, or idle past the keep-alive.
            Ok(false) => return,
            Err(error) => {
                if error.etype() == &ErrorType::InvalidHTTPHeader {
                    refuse_and_close(
                        &mut session,
                        &Refusal::BadRequest("malformed HTTP request".into()),
                    )
                    .await;
                }
                session.shutdown().await;
                return;
            }
        }
        // CONNECT frames what follows differently (RFC 9112 §6.3): answered, never reused.
        if session.req_header().method == http::Method::CONNECT {
            refuse_and_close(&mut session, &Refusal::MethodNotAllowed).await;
            session.shutdown().await;
            return;
        }
        if *stop.borrow() {
            session.set_keepalive(None);
        }
        service.answer(&mut session).await;
        match session.finish().await {
            Ok(Some(reusable)) => stream = reusable.into_parts().0,
            _ => return,
        }
    }
}

/// Answers `refusal` in the JSON error envelope on a connection marked to close: what
/// follows the request on it cannot be trusted to start a new one.
async fn refuse_and_close(session: &mut ServerSession, refusal: &Refusal) {
    session.set_keepalive(None);
    let body = Bytes::from(refusal.body());
    respond_refusal(session, refusal.status(), body, refusal.retry_after_secs()).await;
}
