-- A decision row no longer needs a unique (tenant, request) index to be written once.
-- A forwarded request's decision rides on its usage record and is written with it, once
-- (usage records are unique by record id); every other decision comes in a batch that
-- the proxy resends, the very same batch under the same id, until it is acknowledged,
-- so the batch id is the idempotency key: one row per batch instead of an index entry
-- per decision.
CREATE TABLE policy_decision_batches (
    batch_id    TEXT PRIMARY KEY,
    received_at BIGINT NOT NULL
);
-- Batch ids are kept a week (a proxy retries a batch every 15 s at most until answered),
-- then forgotten by age.
CREATE INDEX policy_decision_batches_received ON policy_decision_batches (received_at);
DROP INDEX policy_decisions_once;
