-- The audit trail is filtered by who acted too (the console's actor filter, the API's
-- `actor`): one index per filter, as for event type and target, so each filtered page
-- reads only its matches in order.
CREATE INDEX audit_events_actor ON audit_events (tenant_id, actor, occurred_at, seq);
