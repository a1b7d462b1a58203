-- The usage ledger: append-only records plus hourly rollups maintained in the same
-- transaction, so cost queries read rollups and stay fast at any number of records.
-- Money is BIGINT micro-dollars (1 USD = 1,000,000) so sums are exact.
CREATE TABLE usage_records (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    agent_id       TEXT NOT NULL,
    team_id        TEXT,
    model_provider TEXT NOT NULL,
    model_name     TEXT NOT NULL,
    request_type   TEXT NOT NULL,
    input_tokens   BIGINT NOT NULL,
    output_tokens  BIGINT NOT NULL,
    cost_micros    BIGINT NOT NULL,
    priced         BIGINT NOT NULL CHECK (priced IN (0, 1)),
    recorded_at    BIGINT NOT NULL
);
CREATE INDEX usage_records_tenant_time ON usage_records (tenant_id, recorded_at);

-- team_id is '' for agents without a team: it is part of the key, so it is never NULL.
CREATE TABLE usage_hourly (
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    hour           BIGINT NOT NULL,
    agent_id       TEXT NOT NULL,
    team_id        TEXT NOT NULL,
    model_provider TEXT NOT NULL,
    model_name     TEXT NOT NULL,
    requests       BIGINT NOT NULL,
    input_tokens   BIGINT NOT NULL,
    output_tokens  BIGINT NOT NULL,
    cost_micros    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, hour, agent_id, team_id, model_provider, model_name)
);
