-- PostgreSQL drops the tenant foreign keys of usage_records, usage_hourly and
-- usage_model_hourly here (a per-row check the ingest's tenant lock makes redundant),
-- and the index of usage_records' own id. SQLite keeps them: dropping a key rebuilds
-- the table, and its writes run one at a time.
SELECT 1;
