-- Captured request bodies (spec 4.12), one per usage record of a tenant whose capture
-- was enabled: written by the ledger's ingest with the record, read by no endpoint,
-- deleted after the tenant's retention. `body` is the body as redacted by the proxy
-- (JSON text); NULL when the proxy omitted it, `omitted` saying why. A record is new to
-- the ledger once, and only then is its capture written: `record_id` needs no unique
-- index of its own, and the one index serves the purge (it is most of a capture's
-- write cost after the body).
CREATE TABLE payload_captures (
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    record_id      TEXT NOT NULL,
    agent_id       TEXT NOT NULL,
    api_key_id     TEXT,
    request_type   TEXT NOT NULL,
    provider       TEXT NOT NULL,
    model          TEXT NOT NULL,
    config_version BIGINT NOT NULL,
    body_bytes     BIGINT NOT NULL,
    redactions     BIGINT NOT NULL,
    body           TEXT,
    omitted        TEXT,
    captured_at    BIGINT NOT NULL
);

-- The purge deletes each tenant's oldest.
CREATE INDEX payload_captures_by_age ON payload_captures (tenant_id, captured_at);
