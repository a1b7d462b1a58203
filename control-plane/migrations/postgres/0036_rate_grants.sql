-- Request allowances of rate_limit policies granted to the proxies, per limiter, bucket
-- (agent, team, key or the tenant) and UTC minute: a proxy admits requests against the
-- allowance it was granted, and the sum of the grants never passes the limit, so N
-- proxies together admit at most the limit (control-plane/src/api/internal/
-- rate_grants.rs). `last_grant` is what the newest grant gave, for the one statement
-- that grants and reports it. Rows older than two minutes are forgotten by a round.
CREATE TABLE rate_grants (
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    limiter     TEXT NOT NULL,
    bucket      TEXT NOT NULL,
    minute      BIGINT NOT NULL,
    granted     BIGINT NOT NULL,
    last_grant  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, limiter, bucket, minute)
);
CREATE INDEX rate_grants_minute ON rate_grants (minute);
