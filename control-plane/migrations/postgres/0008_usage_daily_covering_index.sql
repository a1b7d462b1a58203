-- Views grouped by agent or team read a month of usage_daily for one tenant: about
-- 30,000 rows for 1,000 agents. With the sums in the index they are read by an
-- index-only scan instead of 30,000 scattered heap fetches (about 40 ms -> 10 ms).
CREATE INDEX usage_daily_cover ON usage_daily (tenant_id, day)
    INCLUDE (agent_id, team_id, requests, input_tokens, output_tokens, cost_micros);
