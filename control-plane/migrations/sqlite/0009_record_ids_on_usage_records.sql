-- The proxy's record id moves onto the usage record itself, unique per tenant, so one
-- INSERT ... ON CONFLICT DO NOTHING both appends a batch and skips the records a retry
-- repeats: one table written per record instead of two. Telemetry records have no
-- record id (NULLs never conflict). Ids ingested before this migration are not carried
-- over: no proxy existed to retry them.
ALTER TABLE usage_records ADD COLUMN record_id TEXT;
ALTER TABLE usage_records ADD COLUMN batch_id TEXT;
CREATE UNIQUE INDEX usage_records_record_id ON usage_records (tenant_id, record_id);
DROP TABLE usage_ingest_keys;
