-- The audit trail as a hash chain per tenant. Each event takes the next `seq` of its
-- tenant and stores `hash`, the SHA-256 of a canonical encoding of all its fields and
-- `prev_hash` (the hash of the event before it; 64 zeros for the first). The head of
-- each chain (its last seq and hash) is kept in `audit_heads`, whose row a writer locks
-- to append, so concurrent writers (and replicas) append one after another. Events
-- written before this migration are chained at the next start (`changes::chain`).
ALTER TABLE audit_events ADD COLUMN seq BIGINT;
ALTER TABLE audit_events ADD COLUMN prev_hash TEXT;
ALTER TABLE audit_events ADD COLUMN hash TEXT;
CREATE UNIQUE INDEX audit_events_chain ON audit_events (tenant_id, seq);
-- Newest first is by time, then seq: each list's filter has an index in that order.
DROP INDEX audit_events_tenant_time;
CREATE INDEX audit_events_time ON audit_events (tenant_id, occurred_at, seq);
CREATE INDEX audit_events_type ON audit_events (tenant_id, event_type, occurred_at, seq);
CREATE INDEX audit_events_target ON audit_events (tenant_id, target_id, occurred_at, seq);

CREATE TABLE audit_heads (
    tenant_id TEXT PRIMARY KEY REFERENCES tenants (id),
    seq       BIGINT NOT NULL,
    hash      TEXT NOT NULL
);

-- A proxy refusal by policy is audited at most twice per agent, policy and minute: the
-- first as a `policy.violated` event at once, the repeats of that minute counted here
-- and written as one `policy.violated` event with their count once the minute is over
-- (`api::policies::evaluations::violations`).
CREATE TABLE policy_violation_minutes (
    tenant_id    TEXT NOT NULL REFERENCES tenants (id),
    agent_id     TEXT NOT NULL,
    policy_id    BIGINT NOT NULL,
    minute       BIGINT NOT NULL,
    repeats      BIGINT NOT NULL,
    last_details TEXT NOT NULL,
    PRIMARY KEY (tenant_id, agent_id, policy_id, minute)
);
CREATE INDEX policy_violation_minutes_open ON policy_violation_minutes (minute);
