-- Heartbeats: liveness reports of agents, kept for health scores (uptime, latency).
CREATE TABLE heartbeats (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    agent_id    TEXT NOT NULL REFERENCES agents (id),
    status      TEXT NOT NULL,
    latency_ms  BIGINT,
    metadata    TEXT NOT NULL DEFAULT '{}',
    received_at BIGINT NOT NULL
);
CREATE INDEX heartbeats_agent_time ON heartbeats (tenant_id, agent_id, received_at);
