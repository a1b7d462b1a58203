-- Notification channels (spec 2.19, 4.13): where a tenant's events are delivered.
-- `config` is the channel's settings as JSON, sensitive values included (responses mask
-- them); `events` a JSON array of event names; `signing_secret` a webhook channel's
-- `whsec_` secret, shown once at creation.
CREATE TABLE notification_channels (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    name           TEXT NOT NULL,
    channel_type   TEXT NOT NULL,
    config         TEXT NOT NULL,
    signing_secret TEXT,
    enabled        BIGINT NOT NULL,
    events         TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);
CREATE INDEX notification_channels_tenant ON notification_channels (tenant_id, created_at);

-- The delivery outbox: one row per event and channel, written in the transaction of the
-- change that caused the event, so a committed change is never left unannounced. The
-- delivery worker sends each row until it is `delivered` or, after its last try, `dead`.
-- `id` is the message id receivers deduplicate on (Standard Webhooks' `webhook-id`).
CREATE TABLE notification_deliveries (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    channel_id      TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    payload         TEXT NOT NULL,
    status          TEXT NOT NULL,
    attempts        BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    last_error      TEXT,
    created_at      BIGINT NOT NULL,
    finished_at     BIGINT
);
CREATE INDEX notification_deliveries_due ON notification_deliveries (status, next_attempt_at);
CREATE INDEX notification_deliveries_channel ON notification_deliveries (tenant_id, channel_id, created_at);

-- Each attempt to send a delivery and how it ended.
CREATE TABLE notification_attempts (
    delivery_id  TEXT NOT NULL,
    attempt      BIGINT NOT NULL,
    tenant_id    TEXT NOT NULL REFERENCES tenants (id),
    attempted_at BIGINT NOT NULL,
    outcome      TEXT NOT NULL,
    status_code  BIGINT,
    error        TEXT,
    duration_ms  BIGINT NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);
CREATE INDEX notification_attempts_tenant ON notification_attempts (tenant_id);

-- Background work that must run on one replica at a time (the delivery worker): the
-- replica holding a job's lease runs it; a lease not renewed by its `lease_until`
-- (wall-clock milliseconds) may be taken by another replica.
CREATE TABLE worker_leases (
    job         TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    lease_until BIGINT NOT NULL
);

-- The sweep that marks lapsed pending approvals `expired` (and announces
-- `approval.expired`) finds them across tenants by this index.
CREATE INDEX approvals_lapsing ON approvals (status, expires_at);
