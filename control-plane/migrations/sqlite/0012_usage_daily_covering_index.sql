-- PostgreSQL gets a covering index on usage_daily here; SQLite has had its own since
-- 0008 (usage_daily_cover). Kept so both backends number their migrations alike.
SELECT 1;
