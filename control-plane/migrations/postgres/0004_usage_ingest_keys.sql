-- Idempotency of the proxy's usage batches: one row per ingested record id, so a batch
-- sent again (after a lost acknowledgement) counts once.
CREATE TABLE usage_ingest_keys (
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    record_id   TEXT NOT NULL,
    batch_id    TEXT NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, record_id)
);
