//! Pinned tool definitions: an approved server's tools reach agents only as they were
//! when an operator approved them. Each listing of a server is compared with its pins;
//! a tool whose definition changed since (a "rug pull"), or a tool added since, is
//! withheld and reported to the control plane once per proxy and definition, which
//! audits and notifies it. Calls are checked against the definitions this proxy last
//! saw listed, which are the ones the agent's model read.

use std::sync::Arc;

use dashmap::{DashMap, DashSet};
use serde::Serialize;
use warden_shared::snapshot::McpServerState;

use crate::flush::post_json;

/// A tool whose listed definition is not the approved one.
#[derive(Debug, Clone, Serialize)]
pub struct DriftReport {
    pub tenant_id: String,
    pub server_id: String,
    pub tool: String,
    /// The fingerprint seen now.
    pub fingerprint: String,
    /// The approved one; none: the tool was added after the approval.
    pub pinned_fingerprint: Option<String>,
}

/// Whether a tool may be called, by the server's listing and its approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolStanding {
    Callable,
    /// Listed, but not with an approved definition (never approved, or changed since).
    NotApproved,
    /// The server does not list it.
    Unknown,
}

#[derive(Clone)]
pub struct DriftReports {
    /// (server id, tool) → the fingerprint last listed.
    observed: Arc<DashMap<(String, String), String>>,
    /// Servers listed at least once.
    listed: Arc<DashSet<String>>,
    /// (server id, tool, fingerprint) already reported.
    reported: Arc<DashSet<(String, String, String)>>,
    target: Option<ReportTarget>,
}

#[derive(Clone)]
pub struct ReportTarget {
    pub client: reqwest::Client,
    pub url: String,
    pub service_token: String,
}

impl DriftReports {
    pub fn new(target: Option<ReportTarget>) -> DriftReports {
        DriftReports {
            observed: Default::default(),
            listed: Default::default(),
            reported: Default::default(),
            target,
        }
    }

    /// Records that `server` lists `tool` with `fingerprint`, and says whether that is an
    /// approved definition; a changed or new one of an approved server is reported.
    pub fn is_pinned(&self, server: &McpServerState, tool: &str, fingerprint: &str) -> bool {
        self.listed.insert(server.id.clone());
        self.observed
            .insert((server.id.clone(), tool.to_owned()), fingerprint.to_owned());
        let pin = server.pinned_tools.iter().find(|pin| pin.name == tool);
        if pin.is_some_and(|pin| pin.fingerprint == fingerprint) {
            return true;
        }
        // A server never approved has no pins: its tools are not drift, only unapproved.
        if !server.pinned_tools.is_empty() {
            self.report(DriftReport {
                tenant_id: server.tenant_id.clone(),
                server_id: server.id.clone(),
                tool: tool.to_owned(),
                fingerprint: fingerprint.to_owned(),
                pinned_fingerprint: pin.map(|pin| pin.fingerprint.clone()),
            });
        }
        false
    }

    pub fn has_observed(&self, server: &McpServerState) -> bool {
        self.listed.contains(&server.id)
    }

    /// What `tool` is on `server` by this proxy's last listing: callable when pinned and
    /// last listed with its pinned definition, unknown when the server never listed it.
    pub fn standing(&self, server: &McpServerState, tool: &str) -> ToolStanding {
        let seen = self.observed.get(&(server.id.clone(), tool.to_owned()));
        let Some(seen) = seen else {
            return ToolStanding::Unknown;
        };
        let pinned = server.pinned_tools.iter().find(|pin| pin.name == tool);
        if pinned.is_some_and(|pin| *seen == pin.fingerprint) {
            ToolStanding::Callable
        } else {
            ToolStanding::NotApproved
        }
    }

    /// Forgets what was seen of servers `keep` refuses (deleted or disabled ones).
    pub fn retain_servers(&self, keep: &impl Fn(&str) -> bool) {
        self.observed.retain(|(server_id, _), _| keep(server_id));
        self.listed.retain(|server_id| keep(server_id));
        self.reported.retain(|(server_id, _, _)| keep(server_id));
    }

    fn report(&self, report: DriftReport) {
        let key = (
            report.server_id.clone(),
            report.tool.clone(),
            report.fingerprint.clone(),
        );
        if !self.reported.insert(key.clone()) {
            return;
        }
        tracing::warn!(
            tenant_id = %report.tenant_id,
            server_id = %report.server_id,
            tool = %report.tool,
            "MCP tool definition differs from the approved one; withheld"
        );
        let Some(target) = self.target.clone() else {
            return;
        };
        let reported = self.reported.clone();
        tokio::spawn(async move {
            let Ok(body) = serde_json::to_vec(&report) else {
                return;
            };
            let sent = post_json(
                &target.client,
                &target.url,
                &target.service_token,
                body.into(),
                std::time::Duration::from_secs(5),
            )
            .await;
            if !matches!(&sent, Ok(response) if response.status().is_success()) {
                // Reported again at the next listing.
                reported.remove(&key);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use warden_shared::snapshot::PinnedTool;

    use super::*;

    fn server(pins: &[(&str, &str)]) -> McpServerState {
        McpServerState {
            id: "mcp_1".into(),
            tenant_id: "ten_1".into(),
            name: "docs".into(),
            url: "https://docs.example.com/mcp".into(),
            secret_ref: None,
            pinned_tools: pins
                .iter()
                .map(|(name, fingerprint)| PinnedTool {
                    name: (*name).into(),
                    fingerprint: (*fingerprint).into(),
                })
                .collect(),
        }
    }

    #[tokio::test]
    async fn only_approved_definitions_pass_and_changes_are_reported_once() {
        let drifts = DriftReports::new(None);
        let approved = server(&[("search", "f1")]);
        assert!(!drifts.has_observed(&approved));
        let standing = |tool: &str| drifts.standing(&approved, tool);
        assert_eq!(standing("search"), ToolStanding::Unknown, "not listed yet");
        assert!(drifts.is_pinned(&approved, "search", "f1"));
        assert_eq!(standing("search"), ToolStanding::Callable);
        // A changed definition is withheld, and calls stop with it.
        assert!(!drifts.is_pinned(&approved, "search", "f2"));
        assert_eq!(standing("search"), ToolStanding::NotApproved);
        // A tool added after the approval is not approved; one never listed is unknown.
        assert!(!drifts.is_pinned(&approved, "delete", "f3"));
        assert_eq!(standing("delete"), ToolStanding::NotApproved);
        assert_eq!(standing("nonexistent"), ToolStanding::Unknown);
        assert_eq!(drifts.reported.len(), 2);
        assert!(!drifts.is_pinned(&approved, "search", "f2"));
        assert_eq!(drifts.reported.len(), 2, "reported once per definition");
        // A server never approved withholds everything without reporting drift.
        let fresh = DriftReports::new(None);
        assert!(!fresh.is_pinned(&server(&[]), "search", "f1"));
        assert!(fresh.reported.is_empty());
        // A server gone from the state is forgotten: listed afresh if it comes back.
        drifts.retain_servers(&|id| id != "mcp_1");
        assert!(!drifts.has_observed(&approved));
        assert!(drifts.reported.is_empty());
        fresh.retain_servers(&|id| id == "mcp_1");
        assert!(fresh.has_observed(&server(&[])));
    }
}
