-- Per-agent sums of each tenant's closed days by calendar month (UTC), so views grouped
-- by agent or team over a month read one row per agent instead of one per agent and day
-- (300,000 rows for a month of 10,000 agents). A month's row holds exactly its days in
-- usage_daily: closing a day adds its rows here in the same transaction
-- (control-plane/src/ledger/days.rs), and a batch's late records for closed days are
-- added here as they are to usage_daily (control-plane/src/ledger/rollups.rs).
CREATE TABLE usage_monthly (
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    month          BIGINT NOT NULL,
    agent_id       TEXT NOT NULL,
    team_id        TEXT NOT NULL,
    requests       BIGINT NOT NULL,
    input_tokens   BIGINT NOT NULL,
    output_tokens  BIGINT NOT NULL,
    cost_micros    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, month, agent_id, team_id)
);

-- The closed days so far, by the UTC month of each day.
INSERT INTO usage_monthly (tenant_id, month, agent_id, team_id,
                           requests, input_tokens, output_tokens, cost_micros)
SELECT tenant_id,
       CAST(EXTRACT(EPOCH FROM date_trunc('month', to_timestamp(day / 1000) AT TIME ZONE 'UTC')) * 1000 AS BIGINT),
       agent_id, team_id,
       SUM(requests), SUM(input_tokens), SUM(output_tokens), SUM(cost_micros)
FROM usage_daily
GROUP BY tenant_id,
         CAST(EXTRACT(EPOCH FROM date_trunc('month', to_timestamp(day / 1000) AT TIME ZONE 'UTC')) * 1000 AS BIGINT),
         agent_id, team_id;
