//! Email over SMTP (lettre): STARTTLS (required, the default), implicit TLS or, for a
//! relay on a trusted network, none. The connection goes to the address the guard
//! checked; TLS verifies the certificate for the configured host name.

use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use super::{Message, Outcome, Sender};
use crate::notifications::channel::{EmailConfig, SmtpSecurity};

pub async fn send(
    sender: &Sender,
    config: &EmailConfig,
    message: &Message<'_>,
) -> Result<Outcome, Outcome> {
    let failed = |message: String| Outcome {
        status: None,
        message,
    };
    let checked = sender
        .guard
        .check_host(&config.smtp_host, config.port())
        .await
        .map_err(|refusal| failed(refusal.to_string()))?;
    let Some(addr) = checked.addrs.first() else {
        return Err(failed(format!("cannot resolve `{}`", config.smtp_host)));
    };
    let email = compose(config, message).map_err(failed)?;
    let host = config
        .smtp_host
        .trim_start_matches('[')
        .trim_end_matches(']');
    let roots = sender.smtp_roots.as_deref();
    let tls = match config.security {
        SmtpSecurity::None => Tls::None,
        SmtpSecurity::Starttls => Tls::Required(tls_parameters(host, roots).map_err(failed)?),
        SmtpSecurity::Tls => Tls::Wrapper(tls_parameters(host, roots).map_err(failed)?),
    };
    let mut transport =
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(addr.ip().to_string())
            .port(addr.port())
            .tls(tls)
            .timeout(Some(sender.timeout));
    if let (Some(username), Some(password)) = (&config.username, &config.password) {
        transport = transport.credentials(Credentials::new(username.clone(), password.clone()));
    }
    match transport.build().send(email).await {
        Ok(response) => Ok(Outcome {
            status: None,
            message: format!("delivered: the SMTP server answered {}", response.code()),
        }),
        Err(error) => Err(failed(format!(
            "SMTP delivery to {addr} failed: {}",
            crate::outbound::error_chain(&error)
        ))),
    }
}

/// TLS for `host`: the public roots, and the operator's extra authorities.
fn tls_parameters(host: &str, roots: Option<&[u8]>) -> Result<TlsParameters, String> {
    let mut builder = TlsParameters::builder(host.to_owned());
    if let Some(pem) = roots {
        builder = builder.add_root_certificate(self::roots(pem)?);
    }
    builder
        .build_rustls()
        .map_err(|error| format!("TLS setup for `{host}`: {error}"))
}

/// The certificates of a PEM file of authorities.
pub fn roots(pem: &[u8]) -> Result<Certificate, String> {
    Certificate::from_pem(pem).map_err(|error| format!("notifications.smtp_ca_file: {error}"))
}

/// The email: a subject with the event's title and target, a plain-text body with the
/// summary and the event's details, and a Message-ID made of the delivery id, so a
/// mailbox shows a retried delivery once.
fn compose(config: &EmailConfig, message: &Message<'_>) -> Result<lettre::Message, String> {
    let mailbox = |address: &str| {
        address
            .parse::<Mailbox>()
            .map_err(|error| format!("`{address}` is not an address: {error}"))
    };
    let mut builder = lettre::Message::builder()
        .from(mailbox(&config.from)?)
        .subject(format!(
            "[Warden] {}: {} {}",
            message.title(),
            message.data("target_type"),
            message.data("target_id")
        ))
        .message_id(Some(format!("<{}@warden>", message.id)))
        .header(ContentType::TEXT_PLAIN);
    for address in &config.to {
        builder = builder.to(mailbox(address)?);
    }
    let details = serde_json::to_string_pretty(&message.payload["data"]).unwrap_or_default();
    let body = format!(
        "{}\n\nEvent: {}\nSeverity: {}\nTime: {}\nDelivery: {}\n\n{details}\n",
        message.summary(),
        message.event_type(),
        message.severity().as_str(),
        message.payload["timestamp"].as_str().unwrap_or(""),
        message.id,
    );
    builder.body(body).map_err(|error| error.to_string())
}
