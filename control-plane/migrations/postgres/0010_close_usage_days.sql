-- usage_daily is written once per day, when the day closes, instead of by every batch.
-- Rewriting an agent's daily row with each batch left PostgreSQL a month of those rows
-- scattered over sparse pages (91,000 rows in 41,000 pages at 10 million records), so
-- views grouped by agent or team read hundreds of megabytes. Each tenant now has a
-- first open day: days before it are complete in usage_daily (late records for them are
-- added to it as before), days from it on live only in usage_hourly until the ledger
-- sums each into usage_daily with one insert (control-plane/src/ledger/days.rs).
-- Existing daily rows are complete, so a tenant's open days start after the last of
-- them (0 for a tenant without usage: its first close skips to its first usage).
CREATE TABLE usage_days_closed (
    tenant_id TEXT PRIMARY KEY REFERENCES tenants (id),
    open_from BIGINT NOT NULL
);

INSERT INTO usage_days_closed (tenant_id, open_from)
SELECT t.id, COALESCE((SELECT MAX(d.day) + 86400000 FROM usage_daily d WHERE d.tenant_id = t.id), 0)
FROM tenants t;

-- Rows are no longer updated in place: pack them (new pages only; existing ones stay
-- until a VACUUM FULL).
ALTER TABLE usage_daily SET (fillfactor = 100);

-- A team's monthly cost (teams list and detail) without reading every agent's month.
CREATE INDEX usage_daily_team ON usage_daily (tenant_id, team_id, day);
