//! Warden's data plane: the OpenAI-compatible LLM proxy.
//!
//! The proxy arrives with its own issue: a pingora server that authenticates proxy keys,
//! enforces blocks, policies, budgets and rate limits against snapshots pushed by the
//! control plane, forwards to the providers and flushes usage to the ledger. Until then
//! this crate holds nothing, so that the workspace has its final shape and `warden dev`
//! can start the proxy beside the control plane without restructuring.
