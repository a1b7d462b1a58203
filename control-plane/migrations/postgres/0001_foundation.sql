-- Tenancy, credentials, the agent registry and the audit trail.
-- Timestamps are BIGINT Unix milliseconds (UTC) so that one SQL text serves SQLite and
-- PostgreSQL through sqlx's Any driver; the API renders them as ISO 8601. Flags are
-- BIGINT 0/1 for the same reason (the Any driver cannot decode SQLite's BOOLEAN).

CREATE TABLE tenants (
    id            TEXT PRIMARY KEY,
    company_name  TEXT NOT NULL,
    owner_email   TEXT,
    plan          TEXT NOT NULL,
    agent_limit   BIGINT NOT NULL,
    active_agents BIGINT NOT NULL DEFAULT 0,
    is_platform   BIGINT NOT NULL DEFAULT 0 CHECK (is_platform IN (0, 1)),
    created_at    BIGINT NOT NULL
);
CREATE INDEX tenants_plan ON tenants (plan, created_at);

CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants (id),
    email         TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    scopes        TEXT NOT NULL,
    created_at    BIGINT NOT NULL
);
-- Login names no tenant, so an email identifies one user across the whole service.
CREATE UNIQUE INDEX users_email ON users (email);
CREATE INDEX users_tenant ON users (tenant_id);

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    name       TEXT NOT NULL,
    key_prefix TEXT NOT NULL,
    key_hash   TEXT NOT NULL,
    scopes     TEXT NOT NULL,
    created_by TEXT,
    expires_at BIGINT,
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX api_keys_hash ON api_keys (key_hash);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at);

CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    user_id    TEXT NOT NULL REFERENCES users (id),
    token_hash TEXT NOT NULL,
    scopes     TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX sessions_hash ON sessions (token_hash);
CREATE INDEX sessions_tenant ON sessions (tenant_id);

CREATE TABLE teams (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    deleted_at BIGINT
);
CREATE UNIQUE INDEX teams_live_name ON teams (tenant_id, name) WHERE deleted_at IS NULL;

CREATE TABLE agents (
    id               TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL REFERENCES tenants (id),
    name             TEXT NOT NULL,
    description      TEXT,
    framework        TEXT,
    model_provider   TEXT,
    model_name       TEXT,
    environment      TEXT,
    team_id          TEXT REFERENCES teams (id),
    tags             TEXT NOT NULL DEFAULT '{}',
    status           TEXT NOT NULL,
    risk_level       TEXT,
    last_heartbeat   BIGINT,
    expires_at       BIGINT,
    review_frequency TEXT,
    sponsor_id       TEXT,
    blocked          BIGINT NOT NULL DEFAULT 0 CHECK (blocked IN (0, 1)),
    quarantined      BIGINT NOT NULL DEFAULT 0 CHECK (quarantined IN (0, 1)),
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    deleted_at       BIGINT
);
CREATE INDEX agents_tenant_live ON agents (tenant_id, deleted_at, created_at);
CREATE INDEX agents_team ON agents (tenant_id, team_id);

CREATE TABLE audit_events (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    event_type  TEXT NOT NULL,
    actor       TEXT NOT NULL,
    target_id   TEXT NOT NULL,
    target_type TEXT NOT NULL,
    details     TEXT NOT NULL,
    occurred_at BIGINT NOT NULL
);
CREATE INDEX audit_events_tenant_time ON audit_events (tenant_id, occurred_at);
