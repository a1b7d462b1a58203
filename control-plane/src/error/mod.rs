//! `ApiError`: the one error type of the management API and its JSON envelope.
//!
//! Every 4xx and 5xx answer has the body
//! `{"success": false, "error": {"code": "...", "message": "...", "details": {...}}}`.
//! `code` is a stable snake_case string that clients may match on; `message` is for
//! people and may change. Server errors are logged with their cause and answered with a
//! generic message, so a client never sees SQL or internal paths.

mod codes;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

pub use codes::ErrorCode;

/// An error answer of the management API.
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Value,
    retry_after_secs: Option<u64>,
}

impl ApiError {
    /// An answer with `code` and its status.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            details: json!({}),
            retry_after_secs: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    /// 400: the body is not well-formed JSON.
    pub fn malformed_json(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::MalformedJson, message)
    }

    /// 422: a field (named in `details.field`) breaks a rule.
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        let field = field.into();
        Self::new(ErrorCode::ValidationFailed, message).with_details(json!({ "field": field }))
    }

    /// 403: the credential lacks `scope`.
    pub fn missing_scope(scope: &str) -> Self {
        Self::new(
            ErrorCode::InsufficientScope,
            format!("this route requires the `{scope}` scope"),
        )
        .with_details(json!({ "required_scope": scope }))
    }

    /// 404: nothing of that kind with that id in the caller's tenant.
    pub fn not_found(resource: &'static str) -> Self {
        Self::new(ErrorCode::NotFound, format!("{resource} not found"))
            .with_details(json!({ "resource": resource }))
    }

    /// 429 with a `Retry-After` header.
    pub fn too_many_requests(retry_after_secs: u64) -> Self {
        let mut error = Self::new(ErrorCode::RateLimited, "too many attempts; retry later")
            .with_details(json!({ "retry_after_secs": retry_after_secs }));
        error.retry_after_secs = Some(retry_after_secs);
        error
    }

    /// 500: logs `cause` and answers with a message that reveals nothing of it.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(
            ErrorCode::InternalError,
            "internal error; the request id in the response headers identifies it in the logs",
        )
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        if is_unavailable(&error) {
            tracing::warn!(%error, "database unavailable");
            let mut unavailable = Self::new(
                ErrorCode::DatabaseUnavailable,
                "the database cannot be reached now; nothing was changed, retry shortly",
            );
            unavailable.retry_after_secs = Some(1);
            return unavailable;
        }
        ApiError::internal(format_args!("database: {error}"))
    }
}

/// Whether `error` says the database is out of reach (down, restarting, refusing
/// connections), as opposed to a fault of the statement: the transaction rolled back,
/// so the write changed nothing and may be retried as it is.
fn is_unavailable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        // PostgreSQL's connection exceptions (08), and shutdown or not accepting
        // connections yet (57P01 to 57P03).
        sqlx::Error::Database(database) => database.code().is_some_and(|code| {
            code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03")
        }),
        _ => false,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "success": false,
            "error": { "code": self.code.as_str(), "message": self.message, "details": self.details },
        });
        let mut response = (self.code.status(), axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
