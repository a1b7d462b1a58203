-- Coarser rollups beside usage_hourly, so cost views over a month read thousands of rows
-- instead of one per agent, model and hour (about 700,000 for 1,000 busy agents).
-- usage_daily: per agent (and its team) by UTC day, for views grouped by agent or team;
-- no model dimension, so a month is one row per agent and day.
-- usage_model_hourly: per provider, model and source by hour, without the agent, for
-- the summary, the by-model view, unfiltered time series and the proxy's statistics.
-- source is `proxy` (usage the proxy measured) or `telemetry` (usage agents reported).
-- Both change in the same transaction as usage_hourly; existing rollups are folded in.
CREATE TABLE usage_daily (
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

CREATE TABLE usage_model_hourly (
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    hour           BIGINT NOT NULL,
    model_provider TEXT NOT NULL,
    model_name     TEXT NOT NULL,
    source         TEXT NOT NULL,
    requests       BIGINT NOT NULL,
    input_tokens   BIGINT NOT NULL,
    output_tokens  BIGINT NOT NULL,
    cost_micros    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, hour, model_provider, model_name, source)
);

-- Where each record came from; everything recorded before the proxy existed was reported.
ALTER TABLE usage_records ADD COLUMN source TEXT NOT NULL DEFAULT 'telemetry';

-- One agent's hours (its time series, its health score) without scanning the tenant's.
CREATE INDEX usage_hourly_agent ON usage_hourly (tenant_id, agent_id, hour);

INSERT INTO usage_daily (tenant_id, day, agent_id, team_id,
                         requests, input_tokens, output_tokens, cost_micros)
SELECT tenant_id, hour - (hour % 86400000), agent_id, team_id,
       SUM(requests), SUM(input_tokens), SUM(output_tokens), SUM(cost_micros)
FROM usage_hourly
GROUP BY tenant_id, hour - (hour % 86400000), agent_id, team_id;

INSERT INTO usage_model_hourly (tenant_id, hour, model_provider, model_name, source,
                                requests, input_tokens, output_tokens, cost_micros)
SELECT tenant_id, hour, model_provider, model_name, 'telemetry',
       SUM(requests), SUM(input_tokens), SUM(output_tokens), SUM(cost_micros)
FROM usage_hourly
GROUP BY tenant_id, hour, model_provider, model_name;
