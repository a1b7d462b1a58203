-- Evaluation records as decisions and result sets. A proxy reports every policy's result
-- for every request, and an agent's requests mostly come out the same way: the same
-- policies, the same results, the same reasons. So a decision row (who asked for what,
-- when) points at a result set, stored once per tenant and reused by every decision
-- that came out identically (found by a digest of its results). The old layout wrote
-- a row per policy per request, each with four indexes: with ten policies that was most
-- of the control plane's work under load.
CREATE TABLE policy_result_sets (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL REFERENCES tenants (id),
    -- SHA-256 of the results in order (see api::policies::evaluations::digest).
    digest    TEXT NOT NULL
);
CREATE UNIQUE INDEX policy_result_sets_digest ON policy_result_sets (tenant_id, digest);

-- A set's results, in the order the policies were evaluated (position).
CREATE TABLE policy_result_set_members (
    set_id      BIGINT NOT NULL,
    position    BIGINT NOT NULL,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    policy_id   BIGINT NOT NULL,
    policy_name TEXT NOT NULL,
    policy_type TEXT NOT NULL,
    result      TEXT NOT NULL,
    reason      TEXT,
    PRIMARY KEY (set_id, position)
) WITHOUT ROWID;

-- One row per proxy decision; the request id makes a resent report count once. A
-- record's id in the API is the decision's id * 2^20 + the result's position.
CREATE TABLE policy_decisions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id     TEXT NOT NULL REFERENCES tenants (id),
    request_id    TEXT NOT NULL,
    agent_id      TEXT NOT NULL,
    provider      TEXT NOT NULL,
    model         TEXT NOT NULL,
    evaluated_at  BIGINT NOT NULL,
    result_set_id BIGINT NOT NULL
);
CREATE UNIQUE INDEX policy_decisions_once ON policy_decisions (tenant_id, request_id);
CREATE INDEX policy_decisions_recent ON policy_decisions (tenant_id, evaluated_at);
CREATE INDEX policy_decisions_agent ON policy_decisions (tenant_id, agent_id, evaluated_at);

-- The old rows: a result set of its own for each past decision.
INSERT INTO policy_result_sets (tenant_id, digest)
SELECT DISTINCT tenant_id, 'migrated:' || request_id FROM policy_evaluations;
INSERT INTO policy_result_set_members (set_id, position, tenant_id, policy_id, policy_name,
    policy_type, result, reason)
SELECT s.id, ROW_NUMBER() OVER (PARTITION BY e.tenant_id, e.request_id ORDER BY e.id) - 1,
    e.tenant_id, e.policy_id, e.policy_name, e.policy_type, e.result, e.reason
FROM policy_evaluations e
JOIN policy_result_sets s ON s.tenant_id = e.tenant_id AND s.digest = 'migrated:' || e.request_id;
INSERT INTO policy_decisions (tenant_id, request_id, agent_id, provider, model, evaluated_at,
    result_set_id)
SELECT e.tenant_id, e.request_id, MIN(e.agent_id), MIN(e.provider), MIN(e.model),
    MIN(e.evaluated_at), MIN(s.id)
FROM policy_evaluations e
JOIN policy_result_sets s ON s.tenant_id = e.tenant_id AND s.digest = 'migrated:' || e.request_id
GROUP BY e.tenant_id, e.request_id;
DROP TABLE policy_evaluations;
