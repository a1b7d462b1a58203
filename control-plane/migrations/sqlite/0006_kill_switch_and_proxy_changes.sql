-- Kill switch and quarantine: why and when, beside the flags of 0001.
ALTER TABLE agents ADD COLUMN block_reason TEXT;
ALTER TABLE agents ADD COLUMN blocked_at BIGINT;
ALTER TABLE agents ADD COLUMN quarantine_reason TEXT;
ALTER TABLE agents ADD COLUMN quarantined_at BIGINT;
CREATE INDEX agents_quarantined ON agents (tenant_id, quarantined, created_at);

-- The outbox of changes proxies must learn about (keys, agents, blocks, quarantine...).
-- Each change takes the next version from proxy_state_version inside the transaction
-- that makes it, so versions are handed out in commit order and a proxy that has seen
-- version N has seen every change up to N.
CREATE TABLE proxy_state_version (
    id      BIGINT PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);
INSERT INTO proxy_state_version (id, version) VALUES (1, 0);

-- A change names the entity, not its content: the publisher reads the entity's current
-- state when it sends the delta, so a deleted entity (even a deleted tenant) is sent as
-- a removal. Rows hold ids only and are pruned by age; a proxy further behind than the
-- oldest row gets a full snapshot instead.
CREATE TABLE proxy_changes (
    version    BIGINT PRIMARY KEY,
    kind       TEXT NOT NULL,
    entity_id  TEXT NOT NULL,
    changed_at BIGINT NOT NULL
);
