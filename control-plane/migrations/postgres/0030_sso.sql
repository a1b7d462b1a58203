-- SAML single sign-on (spec 2.6, 4.1). One configuration per tenant; `idp_x509_cert` is
-- the IdP's signing certificate as PEM (public, but never returned by the API).
CREATE TABLE sso_configs (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    provider_name  TEXT NOT NULL,
    idp_entity_id  TEXT NOT NULL,
    idp_sso_url    TEXT NOT NULL,
    idp_slo_url    TEXT,
    idp_x509_cert  TEXT NOT NULL,
    enabled        BIGINT NOT NULL,
    auto_provision BIGINT NOT NULL,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);
CREATE UNIQUE INDEX sso_configs_tenant ON sso_configs (tenant_id);

-- AuthnRequests sent and not yet answered: a response must answer one of them
-- (`InResponseTo`), and each is answered once.
CREATE TABLE sso_requests (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    expires_at BIGINT NOT NULL
);
CREATE INDEX sso_requests_tenant ON sso_requests (tenant_id, expires_at);

-- Assertion ids already consumed, kept until the assertion itself expires: a replayed
-- assertion is refused.
CREATE TABLE sso_assertions (
    tenant_id    TEXT NOT NULL REFERENCES tenants (id),
    assertion_id TEXT NOT NULL,
    expires_at   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, assertion_id)
);
