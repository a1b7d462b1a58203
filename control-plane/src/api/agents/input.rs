//! Request bodies of the agent registry, with their rules.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use warden_shared::registry::{Environment, Provider};

use crate::api::teams::TeamName;
use crate::validate::{present, Text};

pub type AgentName = Text<1, 200>;
pub type Description = Text<0, 2000>;
pub type ShortText = Text<1, 100>;
pub type ModelName = Text<1, 200>;

/// Up to 50 tags; keys 1 to 64 characters, values up to 256.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "BTreeMap<Text<1, 64>, Text<0, 256>>")]
#[schema(value_type = BTreeMap<String, Text<0, 256>>)]
pub struct Tags(pub BTreeMap<Text<1, 64>, Text<0, 256>>);

impl TryFrom<BTreeMap<Text<1, 64>, Text<0, 256>>> for Tags {
    type Error = String;

    fn try_from(map: BTreeMap<Text<1, 64>, Text<0, 256>>) -> Result<Self, Self::Error> {
        if map.len() > 50 {
            return Err("at most 50 tags".to_owned());
        }
        Ok(Tags(map))
    }
}

impl Tags {
    pub fn to_json(&self) -> String {
        let map: BTreeMap<&str, &str> = self
            .0
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect();
        serde_json::to_string(&map).unwrap_or_else(|_| "{}".to_owned())
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAgentInput {
    pub name: AgentName,
    #[serde(default)]
    pub description: Option<Description>,
    #[serde(default)]
    pub framework: Option<ShortText>,
    /// `openai`, `anthropic`, `google`, `nvidia`, `bedrock`, or a provider the deployment
    /// declares (`providers.custom`).
    #[serde(default)]
    #[schema(schema_with = crate::api::openapi_enums::optional_provider)]
    pub model_provider: Option<Provider>,
    #[serde(default)]
    pub model_name: Option<ModelName>,
    /// `production` (default), `staging` or `dev`.
    #[serde(default)]
    #[schema(schema_with = crate::api::openapi_enums::optional_environment)]
    pub environment: Option<Environment>,
    /// A team name; created when it does not exist.
    #[serde(default)]
    pub team: Option<TeamName>,
    #[serde(default)]
    pub tags: Option<Tags>,
}

impl CreateAgentInput {
    /// The registration of an agent known only by name (and team), such as the agent a
    /// proxy key creates behind itself.
    pub fn named(name: &str, team: Option<&str>) -> Result<Self, crate::error::ApiError> {
        let invalid = |field: &str, message: String| {
            crate::error::ApiError::validation(field, format!("{field}: {message}"))
        };
        Ok(CreateAgentInput {
            name: AgentName::try_from(name.to_owned()).map_err(|m| invalid("name", m))?,
            description: None,
            framework: None,
            model_provider: None,
            model_name: None,
            environment: None,
            team: team
                .map(|team| TeamName::try_from(team.to_owned()))
                .transpose()
                .map_err(|m| invalid("team", m))?,
            tags: None,
        })
    }
}

/// Any registration field. An absent field is left alone; `null` clears an optional one.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateAgentInput {
    /// Not null.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = AgentName)]
    pub name: Option<Option<AgentName>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Description>)]
    pub description: Option<Option<Description>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<ShortText>)]
    pub framework: Option<Option<ShortText>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(schema_with = crate::api::openapi_enums::optional_provider)]
    pub model_provider: Option<Option<Provider>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<ModelName>)]
    pub model_name: Option<Option<ModelName>>,
    /// `production`, `staging` or `dev`; not null.
    #[serde(default, deserialize_with = "present")]
    #[schema(schema_with = crate::api::openapi_enums::environment)]
    pub environment: Option<Option<Environment>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<TeamName>)]
    pub team: Option<Option<TeamName>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    pub tags: Option<Option<Tags>>,
}

pub type Reason = Text<1, 1000>;

/// How often an agent is to be reviewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReviewFrequency {
    Weekly,
    Monthly,
    Quarterly,
    Annually,
}

impl ReviewFrequency {
    pub const fn as_str(self) -> &'static str {
        match self {
            ReviewFrequency::Weekly => "weekly",
            ReviewFrequency::Monthly => "monthly",
            ReviewFrequency::Quarterly => "quarterly",
            ReviewFrequency::Annually => "annually",
        }
    }

    /// The period in milliseconds.
    pub const fn period_ms(self) -> i64 {
        const DAY_MS: i64 = 86_400_000;
        match self {
            ReviewFrequency::Weekly => 7 * DAY_MS,
            ReviewFrequency::Monthly => 30 * DAY_MS,
            ReviewFrequency::Quarterly => 91 * DAY_MS,
            ReviewFrequency::Annually => 365 * DAY_MS,
        }
    }
}

/// Every field optional: absent leaves it, `null` clears it.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LifecycleInput {
    /// An RFC 3339 date-time; one already past expires the agent at once.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<ReviewFrequency>)]
    pub review_frequency: Option<Option<ReviewFrequency>>,
    /// Who answers for the agent (1 to 200 characters).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Text<1, 200>>)]
    pub sponsor_id: Option<Option<Text<1, 200>>>,
}
