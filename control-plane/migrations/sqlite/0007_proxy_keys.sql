-- Proxy keys (spec 2.17, 4.11): an API key (type proxy) plus what the proxy enforces for
-- it. The key's secret stays in api_keys as a hash; this row adds the agent behind the
-- key and its limits. Lists are JSON arrays (empty: no restriction).
CREATE TABLE proxy_keys (
    api_key_id          TEXT PRIMARY KEY REFERENCES api_keys (id),
    tenant_id           TEXT NOT NULL REFERENCES tenants (id),
    developer_label     TEXT NOT NULL,
    agent_id            TEXT NOT NULL REFERENCES agents (id),
    team_id             TEXT,
    allowed_providers   TEXT NOT NULL,
    allowed_models      TEXT NOT NULL,
    model_overrides     TEXT NOT NULL,
    rate_limit_override TEXT,
    budget_limit_micros BIGINT,
    use_managed_key     BIGINT NOT NULL CHECK (use_managed_key IN (0, 1)),
    created_at          BIGINT NOT NULL
);
CREATE INDEX proxy_keys_tenant ON proxy_keys (tenant_id, created_at);

-- Managed provider keys: only a reference to a secret in AWS Secrets Manager, never the
-- value. One per provider and tenant, so the proxy's choice is never ambiguous.
CREATE TABLE managed_keys (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    provider   TEXT NOT NULL,
    label      TEXT NOT NULL,
    secret_ref TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX managed_keys_provider ON managed_keys (tenant_id, provider);
