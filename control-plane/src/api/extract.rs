//! Request extractors that turn every kind of bad input into an [`ApiError`].
//!
//! `ApiJson` answers 415 without a JSON content type, 413 above the body limit, 400 for
//! text that is not JSON and 422 (naming the field) for JSON of the wrong shape. Field
//! rules live in the input types themselves (see `validate`), so "parse, don't
//! validate": a handler that receives a value knows it is valid.

use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::StatusCode;
use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ErrorCode};

/// A JSON request body deserialized into `T`.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let JsonBytes(bytes) = JsonBytes::from_request(req, state).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// A JSON request body, checked for its content type and size but not parsed: for a
/// handler that parses it in more than one way (see `internal::usage_batches`).
#[derive(Debug)]
pub struct JsonBytes(pub Bytes);

impl<S> FromRequest<S> for JsonBytes
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !is_json(&req) {
            return Err(not_json());
        }
        Bytes::from_request(req, state)
            .await
            .map(JsonBytes)
            .map_err(body_rejection)
    }
}

/// A JSON body that may be left out entirely (`POST /agents/{id}/block` with no body).
/// A body that is present must be JSON with the JSON content type, like [`ApiJson`].
#[derive(Debug)]
pub struct OptionalJson<T>(pub Option<T>);

impl<T, S> FromRequest<S> for OptionalJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let json = is_json(&req);
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(body_rejection)?;
        if bytes.is_empty() {
            return Ok(OptionalJson(None));
        }
        if !json {
            return Err(not_json());
        }
        parse_json(&bytes).map(|value| OptionalJson(Some(value)))
    }
}

fn is_json(req: &Request) -> bool {
    req.headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<mime::Mime>().ok())
        .is_some_and(|mime| {
            mime.type_() == "application"
                && (mime.subtype() == "json" || mime.suffix().is_some_and(|s| s == "json"))
        })
}

fn not_json() -> ApiError {
    ApiError::new(
        ErrorCode::UnsupportedMediaType,
        "expected a body with Content-Type: application/json",
    )
}

fn body_rejection(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            "the request body is larger than this server accepts",
        )
    } else {
        ApiError::malformed_json(format!("cannot read the request body: {rejection}"))
    }
}

/// Deserializes `bytes`, telling malformed JSON (400) from a wrong shape (422).
///
/// One typed parse on success, without path tracking. When it fails, the text is checked
/// as a whole (and parsed again to name the field), so that a syntax error anywhere is a
/// 400 even when a type error came earlier in the parse.
/// (Parsing into a `Value` first did the same with a tree of maps built for every body:
/// the proxy's usage batches spent most of their parse time there.)
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    ensure_object(bytes, "body", "the body must be a JSON object")?;
    // Good input parses without tracking paths (a third of the cost of a batch of
    // decisions went to that); only a failure is parsed again to name the field.
    if let Ok(value) = serde_json::from_slice(bytes) {
        return Ok(value);
    }
    if let Some(value) = with_integral_numbers(bytes) {
        return Ok(value);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let typed_error = match serde_path_to_error::deserialize(&mut deserializer) {
        Ok(value) if deserializer.end().is_ok() => return Ok(value),
        Ok(_) => None,
        Err(error) => Some(error),
    };
    if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        return Err(ApiError::malformed_json(format!(
            "the body is not valid JSON: {error}"
        )));
    }
    match typed_error {
        Some(error) => Err(path_error(error)),
        // Typed, with trailing text that is somehow valid JSON: not one document.
        None => Err(ApiError::malformed_json(
            "the body is not one JSON document",
        )),
    }
}

/// `bytes` as `T` once every number with a zero fraction (`94.0`) is an integer: JSON
/// Schema counts `94.0` as an integer, so fields the document declares `integer` take
/// it. Tried only after the typed parse failed (a good body pays nothing); `None` when
/// the body still does not fit (the caller then reports the first error).
fn with_integral_numbers<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    let mut value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    if !integral_floats_to_integers(&mut value) {
        return None;
    }
    serde_json::from_value(value).ok()
}

/// Rewrites integral floats within ±2^53 (exact in an f64) as integers; whether any was.
fn integral_floats_to_integers(value: &mut serde_json::Value) -> bool {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match value {
        serde_json::Value::Number(number) if !number.is_i64() && !number.is_u64() => {
            match number.as_f64() {
                Some(float) if float.fract() == 0.0 && float.abs() <= EXACT => {
                    *number = serde_json::Number::from(float as i64);
                    true
                }
                _ => false,
            }
        }
        // Every element is visited (no short-circuit): each may need rewriting.
        serde_json::Value::Array(items) => {
            let mut any = false;
            for item in items {
                any |= integral_floats_to_integers(item);
            }
            any
        }
        serde_json::Value::Object(fields) => {
            let mut any = false;
            for item in fields.values_mut() {
                any |= integral_floats_to_integers(item);
            }
            any
        }
        _ => false,
    }
}

/// Every body and batch item of the API is a JSON object. Serde reads a struct from an
/// array by position as readily as from an object (`["x"]` would pass for `{"name":
/// "x"}`), so anything else is refused here, before it is deserialized: 400 when it is
/// not JSON at all, 422 when it is JSON of another kind.
pub fn ensure_object(text: &[u8], field: &str, message: &str) -> Result<(), ApiError> {
    if text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        return Ok(());
    }
    match serde_json::from_slice::<serde_json::Value>(text) {
        Err(error) => Err(ApiError::malformed_json(format!(
            "the body is not valid JSON: {error}"
        ))),
        Ok(value) => {
            let kind = match value {
                serde_json::Value::Null => "null",
                serde_json::Value::Bool(_) => "a boolean",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::Object(_) => "an object",
            };
            Err(ApiError::validation(
                field,
                format!("{message}, not {kind}"),
            ))
        }
    }
}

/// Deserializes one item of a batch, kept as text (`RawValue`) until now so that each
/// item can fail alone; a wrong shape is a 422 naming the field.
pub fn parse_raw<T: DeserializeOwned>(raw: &serde_json::value::RawValue) -> Result<T, ApiError> {
    ensure_object(
        raw.get().as_bytes(),
        "item",
        "each item must be a JSON object",
    )?;
    parse_raw_at(raw, "")
}

/// As [`parse_raw`], for a value found at `prefix` within its item (errors name
/// `prefix` and the path below it).
pub fn parse_raw_at<T: DeserializeOwned>(
    raw: &serde_json::value::RawValue,
    prefix: &str,
) -> Result<T, ApiError> {
    if let Ok(value) = serde_json::from_str(raw.get()) {
        return Ok(value);
    }
    if let Some(value) = with_integral_numbers(raw.get().as_bytes()) {
        return Ok(value);
    }
    let mut deserializer = serde_json::Deserializer::from_str(raw.get());
    serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let path = match (prefix, path.as_str()) {
            ("", _) => path,
            (_, "." | "") => prefix.to_owned(),
            (_, below) if below.starts_with('[') => format!("{prefix}{below}"),
            (_, below) => format!("{prefix}.{below}"),
        };
        field_error(&path, &error.into_inner().to_string())
    })
}

fn path_error(error: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = error.path().to_string();
    field_error(&path, &error.into_inner().to_string())
}

/// A 422 naming the field; serde names a missing field only in its message.
fn field_error(path: &str, message: &str) -> ApiError {
    let message = strip_position(message);
    let field = if path == "." || path.is_empty() {
        between_backticks(message, "missing field `")
            .or_else(|| between_backticks(message, "unknown field `"))
            .unwrap_or_else(|| "body".to_owned())
    } else {
        path.to_owned()
    };
    ApiError::validation(field.clone(), format!("{field}: {message}"))
}

fn strip_position(message: &str) -> &str {
    message
        .rfind(" at line ")
        .map_or(message, |index| &message[..index])
}

fn between_backticks(message: &str, marker: &str) -> Option<String> {
    let start = message.find(marker)? + marker.len();
    let rest = &message[start..];
    rest.find('`').map(|end| rest[..end].to_owned())
}

/// Query-string parameters deserialized into `T`; a bad value is a 422 naming it.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        let deserializer =
            serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(deserializer)
            .map(ApiQuery)
            .map_err(|error| {
                let path = error.path().to_string();
                let message = error.into_inner().to_string();
                let field = if path == "." || path.is_empty() {
                    between_backticks(&message, "unknown field `")
                        .unwrap_or_else(|| "query".to_owned())
                } else {
                    path
                };
                ApiError::validation(field.clone(), format!("{field}: {message}"))
            })
    }
}

/// A path parameter; one that cannot be decoded (e.g. invalid UTF-8) names nothing that
/// exists, so it is a 404 like any unknown id.
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| ApiPath(value))
            // A path id that cannot even be read (`/approvals/null`) names nothing that
            // exists; the parser's own words stay in the logs, not in the answer.
            .map_err(|rejection| {
                tracing::debug!(%rejection, "unreadable path parameter");
                ApiError::new(
                    ErrorCode::NotFound,
                    "no such resource: the path names nothing that exists",
                )
            })
    }
}

/// For a field holding a struct: anything but a JSON object is refused, since serde
/// would read a struct from an array by position (`[5, 6]` for `{"a": 5, "b": 6}`).
/// Used with `#[serde(deserialize_with = …)]` on nested struct fields of bodies.
pub fn object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    let value = <serde_json::Value as serde::Deserialize>::deserialize(deserializer)?;
    if !value.is_object() {
        return Err(D::Error::custom("must be a JSON object"));
    }
    serde_json::from_value(value).map_err(D::Error::custom)
}

/// [`object`] for an optional field: null or an object.
pub fn optional_object<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    let value = <serde_json::Value as serde::Deserialize>::deserialize(deserializer)?;
    match value {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::Object(_) => serde_json::from_value(value)
            .map(Some)
            .map_err(D::Error::custom),
        _ => Err(D::Error::custom("must be a JSON object or null")),
    }
}

/// [`object`] for a list of structs: each item must be a JSON object.
pub fn objects<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    let items = <Vec<serde_json::Value> as serde::Deserialize>::deserialize(deserializer)?;
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            if !item.is_object() {
                return Err(D::Error::custom(format!(
                    "item {index} must be a JSON object"
                )));
            }
            serde_json::from_value(item)
                .map_err(|error| D::Error::custom(format!("item {index}: {error}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Limits {
        pct: i64,
        usd: f64,
        #[serde(default)]
        items: Vec<i64>,
    }

    #[test]
    fn integral_floats_count_as_integers_as_json_schema_says() {
        let parsed: Result<Limits, _> =
            parse_json(br#"{"pct": 94.0, "usd": 5, "items": [1.0, 2]}"#);
        assert_eq!(
            parsed.ok(),
            Some(Limits {
                pct: 94,
                usd: 5.0,
                items: vec![1, 2]
            })
        );
        let fractional: Result<Limits, _> = parse_json(br#"{"pct": 94.5, "usd": 5}"#);
        assert_eq!(
            fractional.err().map(|e| e.code),
            Some(ErrorCode::ValidationFailed)
        );
    }
}
