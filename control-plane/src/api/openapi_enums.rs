//! The names of the shared enums (providers, policy types, outcomes, agent statuses,
//! plans) as enumerations in the OpenAPI document, taken from the types themselves so the
//! document lists exactly what deserializing accepts. Fields use them through
//! `#[schema(schema_with = ...)]`.

use utoipa::openapi::schema::{Object, ObjectBuilder, SchemaType, Type};
use warden_shared::policy::{Outcome, PolicyType};
use warden_shared::registry::{AgentStatus, Environment, Provider};

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

/// A provider, or `mcp`: the provider of the MCP gateway's tool calls.
pub fn provider_or_mcp() -> Object {
    let names_with_mcp = Provider::BUILT_IN
        .iter()
        .chain([&Provider::Mcp])
        .map(Provider::as_str);
    names(names_with_mcp, false)
}

pub fn optional_provider() -> Object {
    names(Provider::BUILT_IN.iter().map(Provider::as_str), true)
}

pub fn environment() -> Object {
    let environments = [
        Environment::Production,
        Environment::Staging,
        Environment::Dev,
    ];
    names(environments.map(Environment::as_str), false)
}

/// An environment that may be `null` (meaning the default).
pub fn optional_environment() -> Object {
    let environments = [
        Environment::Production,
        Environment::Staging,
        Environment::Dev,
    ];
    names(environments.map(Environment::as_str), true)
}

/// One or more notification event names (a channel's `events`).
pub fn event_names() -> utoipa::openapi::schema::Array {
    event_names_array(false)
}

/// Event names on a PATCH: `null` leaves them as they are.
pub fn optional_event_names() -> utoipa::openapi::schema::Array {
    event_names_array(true)
}

fn event_names_array(nullable: bool) -> utoipa::openapi::schema::Array {
    let names = crate::notifications::events::EVENTS
        .iter()
        .map(|kind| kind.name);
    let schema_type = if nullable {
        utoipa::openapi::schema::SchemaType::from_iter([
            utoipa::openapi::schema::Type::Array,
            utoipa::openapi::schema::Type::Null,
        ])
    } else {
        utoipa::openapi::schema::SchemaType::new(utoipa::openapi::schema::Type::Array)
    };
    utoipa::openapi::schema::ArrayBuilder::new()
        .schema_type(schema_type)
        .items(self::names(names, false))
        .min_items(Some(1))
        .build()
}

pub fn policy_type() -> Object {
    names(PolicyType::ALL.map(PolicyType::as_str), false)
}

/// What an approval releases (`warden_shared::policy::Releases`), or `null`.
pub fn optional_releases() -> Object {
    use warden_shared::policy::Releases;
    names(
        [
            Releases::Action,
            Releases::ActionRepeatable,
            Releases::Scope,
        ]
        .map(Releases::as_str),
        true,
    )
}

/// A policy type that may be `null` (left as it is).
pub fn optional_policy_type() -> Object {
    names(PolicyType::ALL.map(PolicyType::as_str), true)
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
