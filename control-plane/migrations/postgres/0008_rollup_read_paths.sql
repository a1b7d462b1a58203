-- Rollup rows are updated by every batch that touches them (an agent's daily row many
-- times a minute under load). Room on each page lets PostgreSQL update them in place
-- (HOT updates: no new index entries), so the primary-key indexes and the pages a
-- month of usage_daily occupies stay small, and views grouped by agent read them in a
-- few milliseconds instead of wading through bloat. (SQLite updates rows in place and
-- gets a covering index instead, in its own 0008.)
ALTER TABLE usage_daily SET (fillfactor = 50);
ALTER TABLE usage_hourly SET (fillfactor = 70);
ALTER TABLE usage_model_hourly SET (fillfactor = 50);
