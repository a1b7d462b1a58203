//! Every error code the management API answers with: its HTTP status and what it means.
//!
//! This list is the source of truth. The OpenAPI document's introduction is generated
//! from it, and a test compares it with the table in `control-plane/README.md`, so the
//! documented codes cannot drift from the ones the code can produce.

use axum::http::StatusCode;

macro_rules! error_codes {
    ($($variant:ident => $status:ident, $code:literal, $meaning:literal;)*) => {
        /// A stable, snake_case error code that clients may match on.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ErrorCode {
            $($variant),*
        }

        impl ErrorCode {
            /// Every code, in the order the documentation lists them.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $code),*
                }
            }

            /// The HTTP status every answer with this code has.
            pub const fn status(self) -> StatusCode {
                match self {
                    $(ErrorCode::$variant => StatusCode::$status),*
                }
            }

            /// One sentence for people: when the code is answered.
            pub const fn meaning(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $meaning),*
                }
            }
        }
    };
}

error_codes! {
    MalformedJson => BAD_REQUEST, "malformed_json",
        "The body is not well-formed JSON.";
    SsoNotConfigured => BAD_REQUEST, "sso_not_configured",
        "SSO is enabled or disabled before it is configured.";
    InvalidSignature => UNAUTHORIZED, "invalid_signature",
        "A webhook's signature does not verify, or its timestamp is outside the tolerance.";
    MissingCredentials => UNAUTHORIZED, "missing_credentials",
        "No `Authorization: Bearer` credential was sent.";
    InvalidCredentials => UNAUTHORIZED, "invalid_credentials",
        "The credential is unknown, revoked, or not valid for this route.";
    ExpiredCredentials => UNAUTHORIZED, "expired_credentials",
        "The API key or session has expired.";
    InvalidLogin => UNAUTHORIZED, "invalid_login",
        "Wrong email or password.";
    SamlResponseInvalid => UNAUTHORIZED, "saml_response_invalid",
        "A SAML response failed validation: signature, issuer, audience, destination, validity window, request, replay or markup.";
    PlanUpgradeRequired => PAYMENT_REQUIRED, "plan_upgrade_required",
        "The tenant's plan does not include the feature (proxy keys, managed keys and budget limits need Starter or above).";
    AgentLimitReached => PAYMENT_REQUIRED, "agent_limit_reached",
        "The plan's active agent limit is reached.";
    InsufficientScope => FORBIDDEN, "insufficient_scope",
        "The credential lacks the scope the route requires (`details.required_scope`).";
    ScopeNotGrantable => FORBIDDEN, "scope_not_grantable",
        "A key may only be given scopes its creator holds.";
    PlatformTenantProtected => FORBIDDEN, "platform_tenant_protected",
        "The platform operators' own tenant cannot be deleted.";
    SsoNotInPlan => FORBIDDEN, "sso_not_in_plan",
        "The tenant's plan does not include SAML single sign-on (Enterprise and above).";
    SsoNotEnabled => FORBIDDEN, "sso_not_enabled",
        "A SAML login for a tenant whose SSO is configured but not enabled.";
    SsoUserNotProvisioned => FORBIDDEN, "sso_user_not_provisioned",
        "The signed-in email names no user of the tenant and the configuration does not provision users, or it belongs to another tenant.";
    NotFound => NOT_FOUND, "not_found",
        "No such resource in the caller's tenant (another tenant's ids are not found too).";
    RouteNotFound => NOT_FOUND, "route_not_found",
        "No such route.";
    MethodNotAllowed => METHOD_NOT_ALLOWED, "method_not_allowed",
        "The route does not accept that method.";
    McpServerNameTaken => CONFLICT, "mcp_server_name_taken",
        "An MCP server of that name is registered in the tenant.";
    EmailTaken => CONFLICT, "email_taken",
        "An account with this email exists.";
    TeamNameTaken => CONFLICT, "team_name_taken",
        "A team with that name exists.";
    TeamHasAgents => CONFLICT, "team_has_agents",
        "A team with agents cannot be deleted.";
    ManagedKeyExists => CONFLICT, "managed_key_exists",
        "The tenant already has a managed key for that provider.";
    BudgetLimitExists => CONFLICT, "budget_limit_exists",
        "The scope already has a budget limit.";
    OwnerExists => CONFLICT, "owner_exists",
        "That owner already owns the agent.";
    ChannelLimitReached => CONFLICT, "channel_limit_reached",
        "The tenant has the most notification channels it may have (50).";
    FriaAlreadySubmitted => CONFLICT, "fria_already_submitted",
        "A submitted impact assessment cannot change; make a new version.";
    IncidentClosed => CONFLICT, "incident_closed",
        "A closed incident takes no more updates.";
    InvalidAnomalyTransition => CONFLICT, "invalid_anomaly_transition",
        "The anomaly cannot move to that state from its own (`details.status`).";
    AnomalyRuleExists => CONFLICT, "anomaly_rule_exists",
        "The tenant has a rule for that anomaly type already.";
    PlanUnchanged => CONFLICT, "plan_unchanged",
        "The tenant is on that plan already.";
    TooManyAgentsForPlan => CONFLICT, "too_many_agents_for_plan",
        "The tenant has more active agents than the lower plan allows (`details`).";
    NotOnFreePlan => CONFLICT, "not_on_free_plan",
        "Only a free tenant has a free slot.";
    ApprovalNotPending => CONFLICT, "approval_not_pending",
        "The approval was already decided or has expired.";
    PayloadTooLarge => PAYLOAD_TOO_LARGE, "payload_too_large",
        "The body is larger than the server accepts.";
    UnsupportedMediaType => UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
        "A body was sent without `Content-Type: application/json`.";
    ValidationFailed => UNPROCESSABLE_ENTITY, "validation_failed",
        "A field breaks a rule; `details.field` names it.";
    UrlNotAllowed => UNPROCESSABLE_ENTITY, "url_not_allowed",
        "An outbound URL or host is not http(s) or resolves to an address Warden will not call (`details.field`, `details.reason`).";
    McpServerUnreachable => UNPROCESSABLE_ENTITY, "mcp_server_unreachable",
        "The MCP server could not be reached, its credential read, or its tools listed, so nothing was approved (`details.reason`).";
    RateLimited => TOO_MANY_REQUESTS, "rate_limited",
        "Too many signup or login attempts; `Retry-After` says when to retry.";
    InternalError => INTERNAL_SERVER_ERROR, "internal_error",
        "A server fault; the response's request id finds it in the logs.";
    NotReady => SERVICE_UNAVAILABLE, "not_ready",
        "The readiness probe: the database does not answer.";
    DatabaseUnavailable => SERVICE_UNAVAILABLE, "database_unavailable",
        "The database cannot be reached now; nothing was changed. Retry after `Retry-After` seconds.";
}

impl ErrorCode {
    /// Every code as a Markdown table (code, status, meaning), for the OpenAPI document.
    pub fn markdown_table() -> String {
        let mut table = String::from("| code | status | meaning |\n|---|---|---|\n");
        for code in Self::ALL {
            let row = format!(
                "| `{}` | {} | {} |\n",
                code.as_str(),
                code.status().as_u16(),
                code.meaning()
            );
            table.push_str(&row);
        }
        table
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    /// `(code, status)` of each row of the `## Error codes` table in `readme`.
    fn documented(readme: &str) -> Vec<(String, u16)> {
        readme
            .split("## Error codes")
            .nth(1)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let code = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                Some((code.to_owned(), cells.get(2)?.parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn the_readme_lists_exactly_the_codes_the_api_answers_with() {
        let readme = include_str!("../../README.md");
        let in_code: Vec<(String, u16)> = ErrorCode::ALL
            .iter()
            .map(|code| (code.as_str().to_owned(), code.status().as_u16()))
            .collect();
        assert_eq!(documented(readme), in_code);
    }

    #[test]
    fn codes_are_unique_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            let text = code.as_str();
            assert!(seen.insert(text), "{text} is listed twice");
            assert!(text.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
            assert!(code.status().is_client_error() || code.status().is_server_error());
        }
    }
}
