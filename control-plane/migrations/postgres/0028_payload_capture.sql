-- A tenant's payload capture configuration (spec 2.18, 4.12): one row once configured.
-- `redaction_rules` is the JSON array of rules as accepted.
CREATE TABLE payload_capture_configs (
    tenant_id          TEXT PRIMARY KEY REFERENCES tenants (id),
    enabled            BIGINT NOT NULL,
    retention_days     BIGINT NOT NULL,
    processing_purpose TEXT NOT NULL,
    redaction_rules    TEXT NOT NULL,
    config_version     BIGINT NOT NULL,
    updated_by         TEXT NOT NULL,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL
);
