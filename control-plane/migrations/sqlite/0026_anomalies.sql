-- Anomalies (spec 2.13, 3.3) found by the detector. One row per agent, type and cause
-- while it is not resolved: a repeat finding updates it (`last_seen_at`, `occurrences`).
CREATE TABLE anomalies (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    agent_id        TEXT NOT NULL,
    anomaly_type    TEXT NOT NULL,
    cause           TEXT NOT NULL,
    severity        TEXT NOT NULL,
    status          TEXT NOT NULL,
    description     TEXT NOT NULL,
    details         TEXT NOT NULL,
    detected_at     BIGINT NOT NULL,
    last_seen_at    BIGINT NOT NULL,
    occurrences     BIGINT NOT NULL,
    acknowledged_at BIGINT,
    acknowledged_by TEXT,
    note            TEXT,
    resolved_at     BIGINT,
    resolved_by     TEXT,
    resolution      TEXT
);
CREATE UNIQUE INDEX anomalies_unresolved_once ON anomalies (tenant_id, agent_id, anomaly_type, cause)
    WHERE status <> 'resolved';
CREATE INDEX anomalies_tenant_time ON anomalies (tenant_id, detected_at);

-- A tenant's settings per anomaly type: on or off, thresholds, and a webhook that hears
-- the type's anomalies (signed like webhook channels, with its own secret).
CREATE TABLE anomaly_rules (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id           TEXT NOT NULL REFERENCES tenants (id),
    anomaly_type        TEXT NOT NULL,
    enabled             BIGINT NOT NULL,
    threshold_config    TEXT NOT NULL,
    notification_config TEXT NOT NULL,
    signing_secret      TEXT,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL
);
CREATE UNIQUE INDEX anomaly_rules_type ON anomaly_rules (tenant_id, anomaly_type);
