-- Budget limits (spec 2.11, 4.6): at most one per scope of a tenant. `scope` is derived
-- from team_id / agent_id (`tenant`, `team:<id>`, `agent:<id>`) and names the
-- usage_spend_monthly rows the limit counts; the ledger keeps those rows for every scope
-- a budget limit or a budget_limit policy names.
CREATE TABLE budget_limits (
    id                   TEXT PRIMARY KEY,
    tenant_id            TEXT NOT NULL REFERENCES tenants (id),
    team_id              TEXT,
    agent_id             TEXT,
    scope                TEXT NOT NULL,
    monthly_limit_micros BIGINT NOT NULL,
    warn_threshold_pct   BIGINT NOT NULL,
    block_threshold_pct  BIGINT NOT NULL,
    enabled              BIGINT NOT NULL,
    created_at           BIGINT NOT NULL,
    updated_at           BIGINT NOT NULL
);
CREATE UNIQUE INDEX budget_limits_scope ON budget_limits (tenant_id, scope);

-- Thresholds a limit's scope crossed, once per limit, month and level (`warn`,
-- `block`): the ledger records the crossing (and its audit event) in the batch that
-- made it.
CREATE TABLE budget_alerts (
    tenant_id    TEXT NOT NULL REFERENCES tenants (id),
    limit_id     TEXT NOT NULL,
    month        BIGINT NOT NULL,
    level        TEXT NOT NULL,
    spend_micros BIGINT NOT NULL,
    recorded_at  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, limit_id, month, level)
);

-- The ledger looks up a batch's tenants' budget_limit policies.
CREATE INDEX policies_tenant_type ON policies (tenant_id, policy_type);
