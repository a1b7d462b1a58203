//! The error answers every operation can give, declared in the OpenAPI document from
//! what the operation is, so the document cannot leave one out: a credential's 401 and
//! a scope's 403 for authenticated routes; 404 for a path that names something; 400,
//! 413, 415 and 422 for a body; 422 for query parameters; 429 for the throttled signup
//! and login. Each refers to one `ErrorBody` schema whose `code` lists every error code.

use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, ResponseBuilder};
use utoipa::Modify;

use crate::error::ErrorCode;

pub struct ErrorResponses;

impl Modify for ErrorResponses {
    fn modify(&self, openapi: &mut OpenApi) {
        let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        let error = ObjectBuilder::new()
            .property(
                "code",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(codes)),
            )
            .required("code")
            .property("message", ObjectBuilder::new().schema_type(Type::String))
            .required("message")
            .property("details", ObjectBuilder::new().schema_type(Type::Object))
            .required("details");
        let body = ObjectBuilder::new()
            .property("success", ObjectBuilder::new().schema_type(Type::Boolean))
            .required("success")
            .property("error", error)
            .required("error");
        openapi
            .components
            .get_or_insert_with(Default::default)
            .schemas
            .insert("ErrorBody".to_owned(), RefOr::T(body.into()));
        for (path, item) in &mut openapi.paths.paths {
            let names_something = path.contains('{');
            let throttled = path.ends_with("/auth/signup") || path.ends_with("/auth/login");
            for operation in operations(item) {
                declare(operation, names_something, throttled);
            }
        }
    }
}

/// The operations of a path, whatever their methods (the API uses these five).
pub(super) fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.post,
        &mut item.put,
        &mut item.patch,
        &mut item.delete,
    ]
    .into_iter()
    .flatten()
}

fn declare(operation: &mut Operation, names_something: bool, throttled: bool) {
    let authenticated = operation.security.as_ref().is_some_and(|s| !s.is_empty());
    let has_body = operation.request_body.is_some();
    let has_query = operation.parameters.as_ref().is_some_and(|parameters| {
        parameters
            .iter()
            .any(|p| matches!(p.parameter_in, utoipa::openapi::path::ParameterIn::Query))
    });
    let mut add = |status: &str, when: bool, description: &str| {
        if when && !operation.responses.responses.contains_key(status) {
            let response = ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build();
            operation
                .responses
                .responses
                .insert(status.to_owned(), RefOr::T(response));
        }
    };
    add("400", has_body, "The body is not JSON (`malformed_json`)");
    add(
        "401",
        authenticated,
        "No credential, or one that is unknown, revoked or expired",
    );
    add(
        "403",
        authenticated,
        "The credential lacks the route's scope (`insufficient_scope`)",
    );
    add(
        "404",
        names_something,
        "Nothing of that kind with that id in the caller's tenant",
    );
    add("413", has_body, "The body is larger than `max_body_bytes`");
    add(
        "415",
        has_body,
        "The body is not sent as `application/json`",
    );
    add(
        "422",
        has_body || has_query,
        "A field or query parameter breaks a rule (`validation_failed`, `details.field`)",
    );
    add(
        "429",
        throttled,
        "Too many attempts (`rate_limited`); `Retry-After` says when",
    );
}
