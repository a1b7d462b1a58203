//! The state every handler shares.

use std::sync::Arc;
use warden_shared::catalog::ProviderCatalog;

use crate::changes::chain::VerifiedLinks;
use crate::config::Config;
use crate::db::Db;
use crate::health::HealthCache;
use crate::metrics::HttpMetrics;
use crate::notifications::send::Sender;
use crate::proxy_state::confirm::Confirmations;
use crate::proxy_state::Publisher;
use crate::throttle::Throttle;
use warden_shared::clock::Clock;

/// Cheap to clone: everything inside is reference-counted or a pool handle.
#[derive(Clone)]
pub struct AppState {
    pub db: Db,
    pub clock: Clock,
    pub config: Arc<Config>,
    /// The providers the API accepts beyond the built-ins, their models and prices
    /// (`providers.custom`).
    pub providers: Arc<ProviderCatalog>,
    /// Where this API is reached from outside (`Config::public_url`), without `/api/v1`.
    pub public_url: Arc<str>,
    pub metrics: Arc<HttpMetrics>,
    pub throttle: Arc<Throttle>,
    pub health_cache: Arc<HealthCache>,
    /// How far each tenant's audit chain was verified, for the console's badge.
    pub verified_links: Arc<VerifiedLinks>,
    /// SHA-256 of the service token that internal endpoints require.
    pub service_token_hash: Arc<str>,
    /// Deltas of enforcement state for the proxies' streams.
    pub publisher: Publisher,
    /// The connected proxies' acknowledgements, which enforcement writes wait for.
    pub confirmations: Arc<Confirmations>,
    /// Sends notifications through the outbound guard (channel tests, and the checks of
    /// channels' hosts when they are written).
    pub notification_sender: Sender,
    /// Turns true when the server starts shutting down, so long-lived responses (the
    /// proxies' state streams) end and graceful shutdown can complete.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}
