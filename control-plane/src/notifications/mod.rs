//! Notifications: the events a tenant's channels subscribe to, their delivery outbox, the
//! senders for each channel type and the worker that delivers.
//!
//! An audit event that raises a notification event (`events.rs`) queues one delivery per
//! subscribed, enabled channel in the same transaction (`outbox.rs`, called by
//! `changes::record`), so a committed change is always announced and a rolled-back one
//! never is. The worker (`worker.rs`), on one replica at a time, sends them (`send/`)
//! through the outbound guard and retries failures with backoff.

pub mod channel;
pub mod events;
pub mod metrics;
pub mod outbox;
pub mod send;
pub mod store;
pub mod worker;
