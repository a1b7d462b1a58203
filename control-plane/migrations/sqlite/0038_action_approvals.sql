-- Approvals bound to the exact action (control-plane/src/api/approvals): what the held
-- request's approval releases (`action`: that very action once, `action_repeatable`:
-- that action until the grant ends, `scope`: the agent's requests to the provider and
-- model, or the tool, until the grant ends), the digest of the held action
-- (warden_shared::action), and when a single-use approval was used (by the first proxy
-- to claim it; it releases nothing after).
ALTER TABLE approvals ADD COLUMN releases TEXT NOT NULL DEFAULT 'scope';
ALTER TABLE approvals ADD COLUMN action_digest TEXT;
ALTER TABLE approvals ADD COLUMN consumed_at BIGINT;
