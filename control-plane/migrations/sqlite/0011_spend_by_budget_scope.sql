-- The proxy key behind each record the proxy measured (NULL for usage agents reported),
-- and month-to-date spend per budget scope, kept in the insert's transaction like the
-- rollups. The control plane streams changed rows to the proxies, which enforce
-- budgets against them (`updated_at`, the writer's clock, finds the changed rows).
-- Scopes: `key:<api_key_id>` for proxy keys' budget_limit_usd.
ALTER TABLE usage_records ADD COLUMN api_key_id TEXT;

CREATE TABLE usage_spend_monthly (
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    scope       TEXT NOT NULL,
    month       BIGINT NOT NULL,
    requests    BIGINT NOT NULL,
    cost_micros BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, scope, month)
);

CREATE INDEX usage_spend_monthly_changed ON usage_spend_monthly (updated_at);
