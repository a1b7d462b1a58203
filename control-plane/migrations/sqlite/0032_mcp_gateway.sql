-- The MCP gateway. A server's tools reach agents only once an operator approved them:
-- `approved_at` is when, and `mcp_server_tools` holds each approved tool's definition and
-- its fingerprint, which the proxies compare every listing with.
ALTER TABLE mcp_servers ADD COLUMN approved_at BIGINT;
CREATE TABLE mcp_server_tools (
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    server_id   TEXT NOT NULL,
    name        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    definition  TEXT NOT NULL,
    approved_at BIGINT NOT NULL,
    PRIMARY KEY (server_id, name)
);
CREATE INDEX mcp_server_tools_tenant ON mcp_server_tools (tenant_id, server_id);
-- Definitions a proxy saw differ from the approved ones, each reported (audited and
-- notified) once.
CREATE TABLE mcp_tool_drifts (
    tenant_id          TEXT NOT NULL REFERENCES tenants (id),
    server_id          TEXT NOT NULL,
    tool               TEXT NOT NULL,
    fingerprint        TEXT NOT NULL,
    pinned_fingerprint TEXT,
    first_seen_at      BIGINT NOT NULL,
    PRIMARY KEY (server_id, tool, fingerprint)
);
CREATE INDEX mcp_tool_drifts_tenant ON mcp_tool_drifts (tenant_id, first_seen_at);
-- Every tool call through the gateway, allowed or refused, as the proxies recorded it;
-- `id` is the record's, unique per tenant, so a resent batch adds nothing.
CREATE TABLE tool_calls (
    id          TEXT NOT NULL,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    agent_id    TEXT NOT NULL,
    api_key_id  TEXT,
    server_id   TEXT NOT NULL,
    server      TEXT NOT NULL,
    tool        TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    decision    TEXT NOT NULL,
    policy_id   BIGINT,
    latency_ms  BIGINT NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX tool_calls_time ON tool_calls (tenant_id, recorded_at);
CREATE INDEX tool_calls_agent ON tool_calls (tenant_id, agent_id, recorded_at);
