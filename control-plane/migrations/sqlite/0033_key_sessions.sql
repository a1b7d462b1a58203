-- Console sessions signed in with an API key (platform operators, tenants without
-- users): like `sessions`, a one-hour token stored by its hash, ended on sign-out. The
-- scopes are the key's own, read at each request, and the session ends with the key.
CREATE TABLE key_sessions (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    api_key_id TEXT NOT NULL REFERENCES api_keys (id),
    token_hash TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX key_sessions_hash ON key_sessions (token_hash);
CREATE INDEX key_sessions_key ON key_sessions (tenant_id, api_key_id);
