-- Batches no longer add to usage_daily_open: a background round sums each finished hour
-- of usage_hourly into it. `rolled_until` (Unix ms, an hour boundary) is where the
-- tenant's daily rows stop: hours before it are in the daily tables, hours from it on
-- only in usage_hourly, and views read those hours from there. Until now batches kept
-- the daily rows complete, so every existing tenant starts rolled up to the end of the
-- current hour.
ALTER TABLE usage_days_closed ADD COLUMN rolled_until BIGINT NOT NULL DEFAULT 0;
UPDATE usage_days_closed
SET rolled_until = (CAST(strftime('%s', 'now') AS INTEGER) / 3600 + 1) * 3600000;
