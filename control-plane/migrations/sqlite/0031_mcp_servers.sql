-- MCP servers a tenant registers for its agents' tool calls. `name` prefixes the
-- server's tools (`<name>__<tool>`), so it is unique per tenant; `secret_ref` names the
-- server's credential in Secrets Manager (under the tenant's managed prefix), never the
-- credential itself.
CREATE TABLE mcp_servers (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    name       TEXT NOT NULL,
    url        TEXT NOT NULL,
    secret_ref TEXT,
    enabled    BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX mcp_servers_name ON mcp_servers (tenant_id, name);
