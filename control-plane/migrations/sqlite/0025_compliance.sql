-- Fundamental rights impact assessments (spec 2.14, EU AI Act Art. 27): one row per
-- version of an agent's assessment. A new assessment is a new `draft` version; submitting
-- one makes it `submitted` and it is never changed again.
CREATE TABLE frias (
    id                       TEXT PRIMARY KEY,
    tenant_id                TEXT NOT NULL REFERENCES tenants (id),
    agent_id                 TEXT NOT NULL,
    version                  BIGINT NOT NULL,
    status                   TEXT NOT NULL,
    processes                TEXT NOT NULL,
    frequency_and_scope      TEXT NOT NULL,
    categories_of_persons    TEXT NOT NULL,
    specific_risks           TEXT NOT NULL,
    human_oversight_measures TEXT NOT NULL,
    risk_mitigation_measures TEXT NOT NULL,
    created_at               BIGINT NOT NULL,
    created_by               TEXT NOT NULL,
    submitted_at             BIGINT,
    submitted_by             TEXT
);
CREATE UNIQUE INDEX frias_version ON frias (tenant_id, agent_id, version);

-- Serious incidents (spec 2.16, Art. 73) with the reporting deadline fixed when reported,
-- and every operator response after.
CREATE TABLE incidents (
    id                       TEXT PRIMARY KEY,
    tenant_id                TEXT NOT NULL REFERENCES tenants (id),
    agent_id                 TEXT NOT NULL,
    title                    TEXT NOT NULL,
    severity                 TEXT NOT NULL,
    description              TEXT NOT NULL,
    impact                   TEXT NOT NULL,
    immediate_actions        TEXT NOT NULL,
    root_cause               TEXT NOT NULL,
    affected_persons_count   BIGINT NOT NULL,
    involves_health_or_death BIGINT NOT NULL,
    widespread_infringement  BIGINT NOT NULL,
    critical_infrastructure  BIGINT NOT NULL,
    status                   TEXT NOT NULL,
    authority_notified_at    BIGINT,
    reported_at              BIGINT NOT NULL,
    report_due_at            BIGINT NOT NULL,
    reported_by              TEXT NOT NULL,
    updated_at               BIGINT NOT NULL
);
CREATE INDEX incidents_tenant ON incidents (tenant_id, reported_at);

CREATE TABLE incident_updates (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id          TEXT NOT NULL REFERENCES tenants (id),
    incident_id        TEXT NOT NULL,
    status             TEXT,
    note               TEXT,
    authority_notified BIGINT NOT NULL,
    created_at         BIGINT NOT NULL,
    created_by         TEXT NOT NULL
);
CREATE INDEX incident_updates_incident ON incident_updates (tenant_id, incident_id, id);
