-- EU AI Act risk classifications of agents: every classification made is kept (the
-- newest is the agent's current one, mirrored in agents.risk_level), so the history of
-- who classified an agent how, and why, stays readable beside the audit trail.
CREATE TABLE risk_classifications (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    agent_id       TEXT NOT NULL,
    risk_level     TEXT NOT NULL,
    previous_level TEXT,
    justification  TEXT NOT NULL,
    assessed_by    TEXT NOT NULL,
    assessed_at    BIGINT NOT NULL
);
CREATE INDEX risk_classifications_agent ON risk_classifications (tenant_id, agent_id, assessed_at);
CREATE INDEX agents_risk_level ON agents (tenant_id, risk_level);
