-- Money allowances of budgets granted to the proxies, per budget scope (`key:<id>`,
-- `tenant`, `team:<id>`, `agent:<id>`), month and proxy instance (`holder`): a proxy
-- admits a request only within what it holds, and a grant is made only while the
-- scope's month-to-date spend plus every live holder's allowance stays within the
-- budget's block threshold, so N proxies together stay within it
-- (control-plane/src/api/internal/budget_grants.rs). A proxy gives back what the
-- ledger has acknowledged and what it holds unused; a row not renewed for a minute has
-- lapsed (its proxy stopped or lost the control planes) and is forgotten by a round.
CREATE TABLE budget_grants (
    tenant_id    TEXT NOT NULL REFERENCES tenants (id),
    scope        TEXT NOT NULL,
    month        BIGINT NOT NULL,
    holder       TEXT NOT NULL,
    held_micros  BIGINT NOT NULL,
    renewed_at   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, scope, month, holder)
);
CREATE INDEX budget_grants_renewed ON budget_grants (renewed_at);
