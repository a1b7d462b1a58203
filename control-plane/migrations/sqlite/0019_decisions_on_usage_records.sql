-- A forwarded request's policy decision moves onto its usage record. The proxy already
-- sent the two together and they were written in one transaction, each a row with its
-- own indexes: the usage record (four b-trees) and a decision row (three) repeating the
-- record's tenant, agent, provider, model and request id. Under load with policies on,
-- the decision row was most of what policies cost the control plane. Now a decided
-- record carries its decision id, result set and decision time in four columns, and one
-- partial index finds an agent's decided records; `policy_decisions` keeps the requests
-- that were not forwarded (refused, held for approval, ended without usage) and the
-- decisions written before this migration.
ALTER TABLE usage_records ADD COLUMN decision_id BIGINT;
ALTER TABLE usage_records ADD COLUMN decision_set_id BIGINT;
ALTER TABLE usage_records ADD COLUMN evaluated_at BIGINT;
-- The model as the agent asked for it, when that differs from the provider's
-- `model_name` (NULL otherwise).
ALTER TABLE usage_records ADD COLUMN requested_model TEXT;
CREATE INDEX usage_records_decided_agent ON usage_records (tenant_id, agent_id, recorded_at)
    WHERE decision_set_id IS NOT NULL;
-- Decision ids for records are drawn from policy_decisions' own sequence, so the two
-- kinds share one id space (an evaluation record's API id is its decision id * 2^20 +
-- its position). SQLite keeps an AUTOINCREMENT table's sequence in sqlite_sequence and
-- never reuses or goes below it; make sure the row exists before anyone draws from it.
INSERT INTO sqlite_sequence (name, seq)
SELECT 'policy_decisions', COALESCE((SELECT MAX(id) FROM policy_decisions), 0)
WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'policy_decisions');
