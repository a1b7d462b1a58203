//! What a request is, as approvals bound to an action and guardrails see it: a model
//! request's body as sent, or a tool call with its arguments.

use warden_shared::registry::Provider;

/// The action a request is, for approvals bound to it (`warden_shared::action`): its
/// digest is computed only when a policy asks for it.
#[derive(Debug, Clone, Copy)]
pub enum Action<'a> {
    /// A model request's body as sent.
    Model(&'a [u8]),
    /// A tool call on an MCP server, with the fingerprint of the tool's approved
    /// definition.
    Tool {
        server_id: &'a str,
        tool: &'a str,
        arguments: &'a serde_json::Value,
        fingerprint: &'a str,
    },
}

impl Action<'_> {
    pub fn digest(&self, provider: Provider, model: &str) -> String {
        match *self {
            Action::Model(body) => warden_shared::action::model_request(provider, model, body),
            Action::Tool {
                server_id,
                tool,
                arguments,
                fingerprint,
            } => warden_shared::action::tool_call(server_id, tool, arguments, fingerprint),
        }
    }
}

impl Action<'_> {
    /// What guardrails scan: the body as JSON, or the tool call's arguments. `None` for
    /// a body that is not JSON (the proxy refuses those before any policy).
    pub fn content(&self) -> Option<serde_json::Value> {
        match *self {
            Action::Model(body) => serde_json::from_slice(body).ok(),
            Action::Tool { arguments, .. } => Some(arguments.clone()),
        }
    }
}
