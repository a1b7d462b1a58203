//! `POST /billing/webhook`: the payment provider's events (spec 6.1), signed the way
//! major payment providers sign them.
//!
//! Header `Warden-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>…]`, where each `v1` is
//! the hex HMAC-SHA256 of `<t>.<raw body>` keyed with a secret of
//! `billing.webhook_secrets`. The call is accepted when `t` is within 300 seconds of the
//! server's time and any `v1` matches any configured secret (so a provider rotating its
//! secret may send both signatures), compared in constant time; otherwise 401
//! `invalid_signature` and nothing changes.
//!
//! Body: `{id?, event, tenant_id, plan, amount_usd, timestamp, payment_method?}`. `id`
//! is the event's id (when the provider sends none, the SHA-256 of the body stands in);
//! an event applied before answers 200 and changes nothing. Effects, each audited:
//! `checkout.completed` moves the tenant to `plan` (a paid plan) at once, marks its
//! checkouts completed and the payment current, and records `payment_method`
//! (`{type, last_four, expiry}`, nothing more); `invoice.paid` marks the payment
//! current; `invoice.payment_failed` marks it `past_due` (the plan stays; the provider
//! retries); `subscription.canceled` marks it `canceled` and schedules the free plan for
//! the end of the period. An unknown tenant or a malformed body is a 422.

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{period, service, store};
use crate::changes::{self, AuditEvent, Author, Proxies};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::plans::Plan;
use crate::state::AppState;

const TOLERANCE_SECS: i64 = 300;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderEvent {
    #[serde(default)]
    id: Option<String>,
    event: String,
    tenant_id: String,
    #[serde(default)]
    plan: Option<String>,
    #[serde(default)]
    amount_usd: Option<f64>,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    payment_method: Option<PaymentMethod>,
}

#[derive(Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct PaymentMethod {
    #[serde(rename = "type")]
    kind: String,
    last_four: String,
    expiry: String,
}

fn invalid(message: &str) -> ApiError {
    ApiError::new(ErrorCode::InvalidSignature, message)
}

/// Checks the signature header over `body`; `Ok` when a configured secret signed it.
fn verify(state: &AppState, headers: &HeaderMap, body: &[u8]) -> ApiResult<()> {
    let secrets = &state.config.billing.webhook_secrets;
    if secrets.is_empty() {
        return Err(invalid(
            "no webhook secret is configured (billing.webhook_secrets)",
        ));
    }
    let header = headers
        .get("warden-signature")
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| invalid("missing Warden-Signature header"))?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", value)) => timestamp = value.parse::<i64>().ok(),
            Some(("v1", value)) => signatures.push(value.to_owned()),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or_else(|| invalid("Warden-Signature has no t="))?;
    let now = state.clock.now().as_millis() / 1000;
    if (now - timestamp).abs() > TOLERANCE_SECS {
        return Err(invalid(
            "the signature's timestamp is more than 300 s from the server's time",
        ));
    }
    let signed_payload = [timestamp.to_string().as_bytes(), b".", body].concat();
    for secret in secrets {
        for signature in &signatures {
            let Some(expected) = decode_hex(signature) else {
                continue;
            };
            let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes()) else {
                continue;
            };
            mac.update(&signed_payload);
            // `verify_slice` compares in constant time.
            if mac.verify_slice(&expected).is_ok() {
                return Ok(());
            }
        }
    }
    Err(invalid("no v1 signature matches"))
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || text.len() > 256 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

pub async fn receive(state: &AppState, headers: &HeaderMap, body: &[u8]) -> ApiResult<()> {
    verify(state, headers, body)?;
    crate::api::extract::ensure_object(body, "body", "the body must be a JSON object")?;
    let event: ProviderEvent = serde_json::from_slice(body)
        .map_err(|error| ApiError::validation("body", format!("body: {error}")))?;
    let event_id = event
        .id
        .clone()
        .unwrap_or_else(|| warden_shared::keys::hex(&Sha256::digest(body)));
    if event_id.is_empty() || event_id.len() > 200 {
        return Err(ApiError::validation("id", "id: 1 to 200 characters"));
    }
    let now = state.clock.now();
    let mut tx = state.db.begin_write().await?;
    if store::account(&mut *tx, &event.tenant_id).await?.is_none() {
        return Err(ApiError::validation(
            "tenant_id",
            "tenant_id: no such tenant",
        ));
    }
    let paid_plan = |plan: Option<&str>| -> ApiResult<Plan> {
        match plan.and_then(Plan::parse) {
            Some(Plan::Free) | None => Err(ApiError::validation("plan", "plan: a paid plan")),
            Some(plan) => Ok(plan),
        }
    };
    // Checked before the event is claimed, so a malformed event can be sent again.
    let plan = match event.event.as_str() {
        "checkout.completed" => Some(paid_plan(event.plan.as_deref())?),
        "invoice.paid" | "invoice.payment_failed" | "subscription.canceled" => None,
        other => {
            return Err(ApiError::validation(
                "event",
                format!("event: `{other}` is not one of checkout.completed, invoice.paid, invoice.payment_failed, subscription.canceled"),
            ))
        }
    };
    if !store::claim_event(
        &mut tx,
        &event_id,
        &event.tenant_id,
        &event.event,
        now.as_millis(),
    )
    .await?
    {
        // A replay: applied before, nothing changes.
        return Ok(());
    }
    let tenant = event.tenant_id.as_str();
    let method = event
        .payment_method
        .as_ref()
        .and_then(|method| serde_json::to_string(method).ok());
    match (event.event.as_str(), plan) {
        ("checkout.completed", Some(plan)) => {
            store::complete_checkouts(&mut tx, tenant, plan.as_str(), now.as_millis()).await?;
            store::set_payment(&mut tx, tenant, "current", method.as_deref()).await?;
            service::change_plan(
                &mut tx,
                tenant,
                plan,
                "payment_provider",
                "checkout completed",
                now,
            )
            .await?;
        }
        ("invoice.paid", _) => {
            store::set_payment(&mut tx, tenant, "current", method.as_deref()).await?
        }
        ("invoice.payment_failed", _) => {
            store::set_payment(&mut tx, tenant, "past_due", None).await?
        }
        _ => {
            store::set_payment(&mut tx, tenant, "canceled", None).await?;
            let (_, end) = period::of(now);
            store::set_pending(&mut tx, tenant, Plan::Free.as_str(), end).await?;
        }
    }
    changes::record(
        &mut tx,
        Author {
            tenant_id: tenant,
            actor: "payment_provider",
        },
        now,
        AuditEvent {
            event_type: "billing.payment_event",
            target_type: "tenant",
            target_id: tenant,
            details: json!({
                "event_id": event_id,
                "event": event.event,
                "plan": event.plan,
                "amount_usd": event.amount_usd,
                "timestamp": event.timestamp,
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
