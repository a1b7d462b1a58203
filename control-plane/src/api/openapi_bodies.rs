//! Optional request bodies in the OpenAPI document: utoipa renders `Option<T>` content
//! as `oneOf: [null, T]`, but a body that is sent must be a JSON object (`null` is
//! refused like any other non-object, `extract::OptionalJson`); an optional body is one
//! that may be left out. The document says so: the body is not required, and its schema
//! is `T`.

use utoipa::openapi::schema::{Schema, Type};
use utoipa::openapi::{OpenApi, RefOr};
use utoipa::Modify;

use super::openapi_errors::operations;

pub struct OptionalBodies;

/// Bodies that must name at least one field say so with `minProperties: 1`. Set here:
/// utoipa-gen 5.5 writes the `min_properties` attribute as `maxProperties`.
pub struct AtLeastOneField(pub &'static [&'static str]);

impl Modify for AtLeastOneField {
    fn modify(&self, openapi: &mut OpenApi) {
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        for name in self.0 {
            if let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(*name) {
                object.min_properties = Some(1);
            }
        }
    }
}

impl Modify for OptionalBodies {
    fn modify(&self, openapi: &mut OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            for operation in operations(item) {
                let Some(body) = operation.request_body.as_mut() else {
                    continue;
                };
                for content in body.content.values_mut() {
                    if let Some(schema) = content.schema.take() {
                        content.schema = Some(without_null(schema));
                    }
                }
            }
        }
    }
}

/// `oneOf: [null, T]` as `T`; any other schema as it is.
fn without_null(schema: RefOr<Schema>) -> RefOr<Schema> {
    let RefOr::T(Schema::OneOf(one_of)) = &schema else {
        return schema;
    };
    let is_null = |item: &RefOr<Schema>| {
        matches!(item, RefOr::T(Schema::Object(object))
            if object.schema_type == Type::Null.into())
    };
    let mut rest = one_of.items.iter().filter(|item| !is_null(item));
    match (rest.next(), rest.next()) {
        (Some(only), None) if one_of.items.len() == 2 => only.clone(),
        _ => schema,
    }
}
