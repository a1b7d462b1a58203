-- Billing (spec 2.20, 4.10, 6.1). A downgrade or cancellation waits in `pending_plan`
-- until `pending_plan_at` (the end of the billing period), when a background round
-- applies it. `payment_method` holds only what may be shown (type, last four, expiry).
-- `free_agent_id` is the one agent whose telemetry a free tenant records.
ALTER TABLE tenants ADD COLUMN pending_plan TEXT;
ALTER TABLE tenants ADD COLUMN pending_plan_at BIGINT;
ALTER TABLE tenants ADD COLUMN payment_status TEXT NOT NULL DEFAULT 'current';
ALTER TABLE tenants ADD COLUMN payment_method TEXT;
ALTER TABLE tenants ADD COLUMN free_agent_id TEXT;
CREATE INDEX tenants_pending_plan ON tenants (pending_plan_at);

-- Upgrades started through checkout, completed by the payment provider's webhook.
CREATE TABLE billing_checkouts (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants (id),
    from_plan     TEXT NOT NULL,
    to_plan       TEXT NOT NULL,
    amount_micros BIGINT NOT NULL,
    status        TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    completed_at  BIGINT
);
CREATE INDEX billing_checkouts_tenant ON billing_checkouts (tenant_id, created_at);

-- The payment provider's events already applied, by event id: a replay changes nothing.
CREATE TABLE billing_events (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    event       TEXT NOT NULL,
    received_at BIGINT NOT NULL
);
CREATE INDEX billing_events_tenant ON billing_events (tenant_id);
