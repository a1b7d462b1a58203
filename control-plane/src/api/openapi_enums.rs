//! The names of the shared enums (providers, policy types, outcomes, agent statuses,
//! plans) as enumerations in the OpenAPI document, taken from the types themselves so the
//! document lists exactly what deserializing accepts. Fields use them through
//! `#[schema(schema_with = ...)]`.

use utoipa::openapi::schema::{Object, ObjectBuilder, SchemaType, Type};
use warden_shared::policy::{Outcome, PolicyType};
use warden_shared::registry::{AgentStatus, Provider};

use crate::plans::Plan;

fn names<'a>(values: impl IntoIterator<Item = &'a str>, nullable: bool) -> Object {
    let values: Vec<Option<&str>> = values.into_iter().map(Some).collect();
    let (schema_type, values) = if nullable {
        let mut values = values;
        values.push(None);
        (SchemaType::from_iter([Type::String, Type::Null]), values)
    } else {
        (SchemaType::Type(Type::String), values)
    };
    ObjectBuilder::new()
        .schema_type(schema_type)
        .enum_values(Some(values))
        .build()
}

pub fn provider() -> Object {
    names(Provider::BUILT_IN.iter().map(Provider::as_str), false)
}

pub fn optional_provider() -> Object {
    names(Provider::BUILT_IN.iter().map(Provider::as_str), true)
}

pub fn policy_type() -> Object {
    names(PolicyType::ALL.map(PolicyType::as_str), false)
}

pub fn outcome() -> Object {
    names(
        [Outcome::Pass, Outcome::Fail, Outcome::Skip].map(Outcome::as_str),
        false,
    )
}

pub fn agent_status() -> Object {
    let statuses = [
        AgentStatus::Healthy,
        AgentStatus::Degraded,
        AgentStatus::Down,
        AgentStatus::Unknown,
    ];
    names(statuses.map(AgentStatus::as_str), false)
}

pub fn plan() -> Object {
    names(Plan::ALL.map(Plan::as_str), false)
}
