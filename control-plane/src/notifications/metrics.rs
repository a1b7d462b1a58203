//! Prometheus metrics of notification delivery.

use prometheus::{Gauge, IntCounterVec, IntGauge, Opts, Registry};

pub struct NotificationMetrics {
    /// Attempts by channel type and outcome (`delivered`, `failed` and retried, `dead`).
    pub deliveries: IntCounterVec,
    pub queue_depth: IntGauge,
    pub oldest_pending_seconds: Gauge,
}

impl NotificationMetrics {
    pub fn register(registry: &Registry) -> Result<NotificationMetrics, prometheus::Error> {
        let deliveries = IntCounterVec::new(
            Opts::new(
                "warden_notification_deliveries_total",
                "Notification delivery attempts by channel type and outcome: delivered, \
                 failed (retried later) or dead (the last try failed).",
            ),
            &["channel_type", "outcome"],
        )?;
        let queue_depth = IntGauge::new(
            "warden_notification_queue_depth",
            "Notification deliveries waiting to be sent or retried (as of the worker's last round).",
        )?;
        let oldest_pending_seconds = Gauge::new(
            "warden_notification_oldest_pending_seconds",
            "Age of the oldest notification delivery not yet delivered or dead (as of the \
             worker's last round).",
        )?;
        registry.register(Box::new(deliveries.clone()))?;
        registry.register(Box::new(queue_depth.clone()))?;
        registry.register(Box::new(oldest_pending_seconds.clone()))?;
        Ok(NotificationMetrics {
            deliveries,
            queue_depth,
            oldest_pending_seconds,
        })
    }
}
