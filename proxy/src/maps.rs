//! The concurrent map the request path reads: a `DashMap` hashed with foldhash.
//!
//! A request looks up its key, agent and tenant, its tenant's policies and budget
//! limits, each budget scope it is held to and each rate window that counts it: a dozen
//! or more lookups, where std's SipHash was a visible share of the proxy's profile.
//! foldhash is several times faster on short keys. Its seed is random per map, and the
//! keys are ids the control plane issued or hashes of credentials, so callers cannot
//! steer them into one shard.

pub type FastMap<K, V> = dashmap::DashMap<K, V, foldhash::fast::RandomState>;
