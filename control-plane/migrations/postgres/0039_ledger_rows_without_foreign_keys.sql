-- The rows the ledger writes for every usage record (the record, its hourly and its
-- model-hour rollup) no longer check their tenant with a foreign key. The check ran per
-- row, a lookup and a row lock of the tenant each time, about a quarter of a record's
-- insert; the ingest now locks each tenant of a batch once (`FOR KEY SHARE`,
-- `ledger::record_batch`) before writing any of these rows, which keeps a concurrent
-- tenant deletion (it locks the tenant first, `tenancy::delete_tenant_rows`) from
-- leaving orphans, as the foreign key did. These three tables are written by nothing
-- else; the tables the background rounds write keep their keys.
ALTER TABLE usage_records DROP CONSTRAINT usage_records_tenant_id_fkey;
ALTER TABLE usage_hourly DROP CONSTRAINT usage_hourly_tenant_id_fkey;
ALTER TABLE usage_model_hourly DROP CONSTRAINT usage_model_hourly_tenant_id_fkey;

-- Nothing looks a usage record up by its own id (a retried record is found by its
-- tenant and record id, `usage_records_record_id`), and each id is generated fresh:
-- the primary key's index only cost every insert its upkeep.
ALTER TABLE usage_records DROP CONSTRAINT usage_records_pkey;
