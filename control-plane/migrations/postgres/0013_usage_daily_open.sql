-- Per-agent sums of each tenant's open days (see 0010), kept by every batch beside
-- usage_hourly, so views grouped by agent or team read one row per agent for today
-- instead of one per agent, model and hour (25,000 rows by mid-morning for 1,000
-- agents). It holds only a day or two: closing a day moves its rows into usage_daily
-- (control-plane/src/ledger/days.rs), in the same transaction that advances open_from,
-- so any one statement finds a day's sums in exactly one of the two tables.
CREATE TABLE usage_daily_open (
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    day            BIGINT NOT NULL,
    agent_id       TEXT NOT NULL,
    team_id        TEXT NOT NULL,
    requests       BIGINT NOT NULL,
    input_tokens   BIGINT NOT NULL,
    output_tokens  BIGINT NOT NULL,
    cost_micros    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, day, agent_id, team_id)
);

-- The open days' usage so far, from the hourly rollup.
INSERT INTO usage_daily_open (tenant_id, day, agent_id, team_id,
                              requests, input_tokens, output_tokens, cost_micros)
SELECT h.tenant_id, h.hour - (h.hour % 86400000), h.agent_id, h.team_id,
       SUM(h.requests), SUM(h.input_tokens), SUM(h.output_tokens), SUM(h.cost_micros)
FROM usage_hourly h
JOIN usage_days_closed c ON c.tenant_id = h.tenant_id AND h.hour >= c.open_from
GROUP BY h.tenant_id, h.hour - (h.hour % 86400000), h.agent_id, h.team_id;
