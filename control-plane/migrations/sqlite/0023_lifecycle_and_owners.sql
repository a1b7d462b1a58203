-- Agent lifecycle (spec 4.3): the next review falls one `review_frequency` after the
-- schedule was set or a review recorded, and is stored so that "due for review" is an
-- indexed comparison. `expires_at` (0001) is enforced by the proxies.
ALTER TABLE agents ADD COLUMN review_date BIGINT;
CREATE INDEX agents_expiry ON agents (tenant_id, expires_at);
CREATE INDEX agents_review ON agents (tenant_id, review_date);

-- Who owns an agent (spec 2.4): people, teams or service accounts named by the
-- caller's own identifiers, with what each may do. Record ids are integers.
CREATE TABLE agent_owners (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id     TEXT NOT NULL REFERENCES tenants (id),
    agent_id      TEXT NOT NULL,
    owner_type    TEXT NOT NULL,
    owner_id      TEXT NOT NULL,
    owner_name    TEXT NOT NULL,
    can_invoke    BIGINT NOT NULL,
    can_configure BIGINT NOT NULL,
    can_delete    BIGINT NOT NULL,
    created_at    BIGINT NOT NULL
);
CREATE UNIQUE INDEX agent_owners_once ON agent_owners (tenant_id, agent_id, owner_type, owner_id);
CREATE INDEX agent_owners_owner ON agent_owners (tenant_id, owner_id);
