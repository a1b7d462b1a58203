//! Calls Warden makes to hosts its tenants name: notification channels today, anomaly
//! rule webhooks next. Every such call goes through the guard (`guard.rs`) and, for HTTP,
//! the one guarded POST (`http.rs`).

pub mod guard;
pub mod http;

pub use guard::{Guard, Refusal};

/// An error with its causes, which HTTP and SMTP clients keep apart ("error sending
/// request" alone says nothing).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
