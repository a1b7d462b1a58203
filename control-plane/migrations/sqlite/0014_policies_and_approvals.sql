-- Policies (spec 2.8), their evaluation records and human approvals (2.7, 3.2).
-- Policies and approvals have integer ids, as the spec gives them.
CREATE TABLE policies (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    name        TEXT NOT NULL,
    description TEXT,
    policy_type TEXT NOT NULL,
    -- The normalised config as JSON (shared::policy::PolicyConfig::to_json).
    config      TEXT NOT NULL,
    scope       TEXT NOT NULL,
    enabled     BIGINT NOT NULL,
    priority    BIGINT NOT NULL,
    template_id TEXT,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
CREATE INDEX policies_tenant ON policies (tenant_id, id);

-- One row per policy per proxy decision, written from the proxy's reports. The
-- evaluation id (request id and policy id) makes a resent report count once.
CREATE TABLE policy_evaluations (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id     TEXT NOT NULL REFERENCES tenants (id),
    evaluation_id TEXT NOT NULL,
    request_id    TEXT NOT NULL,
    policy_id     BIGINT NOT NULL,
    policy_name   TEXT NOT NULL,
    policy_type   TEXT NOT NULL,
    agent_id      TEXT NOT NULL,
    provider      TEXT NOT NULL,
    model         TEXT NOT NULL,
    result        TEXT NOT NULL,
    reason        TEXT,
    evaluated_at  BIGINT NOT NULL
);
CREATE UNIQUE INDEX policy_evaluations_once ON policy_evaluations (tenant_id, evaluation_id);
CREATE INDEX policy_evaluations_recent ON policy_evaluations (tenant_id, evaluated_at);
CREATE INDEX policy_evaluations_policy ON policy_evaluations (tenant_id, policy_id, evaluated_at);
CREATE INDEX policy_evaluations_agent ON policy_evaluations (tenant_id, agent_id, evaluated_at);

-- A pending approval holds its dedupe key (agent, policy, provider, model); the unique
-- index lets one pending approval exist per key however many proxies ask at once.
-- Deciding or expiring an approval clears the key. A pending row past expires_at reads
-- as expired before anything rewrites it.
CREATE TABLE approvals (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    policy_id       BIGINT NOT NULL,
    agent_id        TEXT NOT NULL,
    team_id         TEXT,
    provider        TEXT NOT NULL,
    model           TEXT NOT NULL,
    request_context TEXT NOT NULL,
    status          TEXT NOT NULL,
    dedupe_key      TEXT,
    reviewer_id     TEXT,
    reason          TEXT,
    expires_at      BIGINT NOT NULL,
    resolved_at     BIGINT,
    -- An approval lets the agent's requests through until then.
    grant_until     BIGINT,
    created_at      BIGINT NOT NULL
);
CREATE UNIQUE INDEX approvals_pending_once ON approvals (tenant_id, dedupe_key);
CREATE INDEX approvals_tenant ON approvals (tenant_id, status, id);
CREATE INDEX approvals_agent ON approvals (tenant_id, agent_id, id);
CREATE INDEX approvals_grants ON approvals (grant_until);
