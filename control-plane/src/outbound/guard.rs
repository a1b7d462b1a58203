//! The server-side request forgery guard: which hosts Warden may call on a tenant's
//! behalf (webhook, Slack and PagerDuty URLs, SMTP servers).
//!
//! A URL must be http(s); its host is resolved here and every address it resolves to must
//! be public. The caller then connects to the addresses checked here, never resolving the
//! name again, so a DNS answer that changes between check and connect (DNS rebinding)
//! cannot lead it elsewhere. The `url` crate parses hosts as browsers do, so the decimal
//! (`2130706433`), octal (`0177.0.0.1`) and hexadecimal spellings of an IPv4 address are
//! read as the address they mean.
//!
//! Which addresses are public, and the operator's exceptions (`outbound.allow_private`),
//! are `warden_shared::outbound`'s: the proxy judges its MCP sessions' addresses by the
//! same rules.

use std::net::{IpAddr, SocketAddr};

use url::{Host, Url};
use warden_shared::outbound::{Allowance, Forbidden};

/// Why a URL or host is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("not a valid URL: {0}")]
    Malformed(String),
    #[error("only http and https URLs are allowed, not `{0}`")]
    Scheme(String),
    #[error("the URL has no host")]
    NoHost,
    #[error("cannot resolve `{host}`: {reason}")]
    Unresolvable { host: String, reason: String },
    #[error(transparent)]
    Forbidden(#[from] Forbidden),
}

impl Refusal {
    /// A short stable word for the reason, for `details.reason` and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "malformed",
            Refusal::Scheme(_) => "scheme",
            Refusal::NoHost => "no_host",
            Refusal::Unresolvable { .. } => "unresolvable",
            Refusal::Forbidden(_) => "forbidden_address",
        }
    }
}

/// A host that passed the guard and the addresses to connect to.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The host as written in the URL (a name, or an address's canonical spelling).
    pub host: String,
    /// The host is a name (not an address literal): TLS verifies the certificate for it.
    pub is_name: bool,
    pub addrs: Vec<SocketAddr>,
}

/// The operator's exceptions to the guard.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    allowance: Allowance,
}

impl Guard {
    /// A guard allowing `entries`, each a host name (`receiver.internal`, `localhost`), an
    /// address or a network in CIDR form (`127.0.0.1`, `10.1.0.0/16`, `::1/128`).
    pub fn new(entries: &[String]) -> Result<Guard, String> {
        Ok(Guard {
            allowance: Allowance::new(entries)?,
        })
    }

    /// The exceptions, for a client that resolves names itself (the MCP sessions).
    pub fn allowance(&self) -> &Allowance {
        &self.allowance
    }

    /// Parses `raw` as an http(s) URL and checks its host; returns the URL and the
    /// addresses to connect to.
    pub async fn check_url(&self, raw: &str) -> Result<(Url, Checked), Refusal> {
        let url = parse_http_url(raw)?;
        let port = url.port_or_known_default().unwrap_or(443);
        let checked = match url.host() {
            None => return Err(Refusal::NoHost),
            Some(Host::Domain(name)) => self.check_name(name, port).await?,
            Some(Host::Ipv4(addr)) => self.check_addr(&url_host(&url), IpAddr::V4(addr), port)?,
            Some(Host::Ipv6(addr)) => self.check_addr(&url_host(&url), IpAddr::V6(addr), port)?,
        };
        Ok((url, checked))
    }

    /// Checks a host given on its own (an SMTP server): a name or an address literal.
    pub async fn check_host(&self, host: &str, port: u16) -> Result<Checked, Refusal> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(addr) => self.check_addr(bare, addr, port),
            // Through the URL parser, so that `2130706433` is read as an address here too.
            Err(_) => match Url::parse(&format!("http://{host}/"))
                .map_err(|error| {
                    Refusal::Malformed(format!("`{host}` is not a host name: {error}"))
                })?
                .host()
            {
                Some(Host::Domain(name)) => self.check_name(name, port).await,
                Some(Host::Ipv4(addr)) => self.check_addr(host, IpAddr::V4(addr), port),
                Some(Host::Ipv6(addr)) => self.check_addr(host, IpAddr::V6(addr), port),
                None => Err(Refusal::NoHost),
            },
        }
    }

    fn check_addr(&self, host: &str, addr: IpAddr, port: u16) -> Result<Checked, Refusal> {
        self.allowed(host, addr)?;
        Ok(Checked {
            host: host.to_owned(),
            is_name: false,
            addrs: vec![SocketAddr::new(addr, port)],
        })
    }

    async fn check_name(&self, name: &str, port: u16) -> Result<Checked, Refusal> {
        let resolved = tokio::net::lookup_host((name, port))
            .await
            .map_err(|error| Refusal::Unresolvable {
                host: name.to_owned(),
                reason: error.to_string(),
            })?;
        let mut addrs = Vec::new();
        for addr in resolved {
            // Every address must pass: a name with one public and one private address
            // could be connected to either.
            self.allowed(name, addr.ip())?;
            if !addrs.contains(&addr) {
                addrs.push(addr);
            }
        }
        if addrs.is_empty() {
            return Err(Refusal::Unresolvable {
                host: name.to_owned(),
                reason: "no addresses".to_owned(),
            });
        }
        Ok(Checked {
            host: name.to_owned(),
            is_name: true,
            addrs,
        })
    }

    fn allowed(&self, host: &str, addr: IpAddr) -> Result<(), Refusal> {
        Ok(self.allowance.check(host, addr)?)
    }
}

/// Parses an http(s) URL, refusing other schemes.
pub fn parse_http_url(raw: &str) -> Result<Url, Refusal> {
    let url = Url::parse(raw.trim()).map_err(|error| Refusal::Malformed(error.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Refusal::Scheme(url.scheme().to_owned()));
    }
    if url.host().is_none() {
        return Err(Refusal::NoHost);
    }
    Ok(url)
}

fn url_host(url: &Url) -> String {
    url.host_str().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_shared::outbound::forbidden_range;

    fn refused(raw: &str) -> Option<&'static str> {
        let url = parse_http_url(raw).ok()?;
        let addr = match url.host()? {
            Host::Ipv4(v4) => IpAddr::V4(v4),
            Host::Ipv6(v6) => IpAddr::V6(v6),
            Host::Domain(_) => return None,
        };
        forbidden_range(addr)
    }

    #[test]
    fn every_spelling_of_a_private_address_is_read_as_that_address() {
        for raw in [
            "http://127.0.0.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]/",
            "http://[fd00:ec2::254]/",
            "http://[::ffff:169.254.169.254]/",
            // Decimal, octal and hexadecimal spellings of 127.0.0.1.
            "http://2130706433/",
            "http://0177.0.0.1/",
            "http://0x7f.0.0.1/",
            "http://127.1/",
        ] {
            assert!(refused(raw).is_some(), "{raw} must be refused");
        }
        // The ranges themselves are `warden_shared::outbound`'s, tested there.
        assert_eq!(refused("https://8.8.8.8/"), None);
    }

    #[test]
    fn only_http_and_https_are_allowed() {
        for raw in [
            "file:///etc/passwd",
            "gopher://x/",
            "ftp://example.com/",
            "javascript:alert(1)",
        ] {
            assert!(parse_http_url(raw).is_err(), "{raw}");
        }
        assert!(parse_http_url("not a url").is_err());
    }

    #[tokio::test]
    async fn names_are_resolved_and_every_address_checked() {
        let guard = Guard::default();
        let refusal = guard.check_url("http://localhost:9/").await.unwrap_err();
        assert!(matches!(refusal, Refusal::Forbidden(_)), "{refusal:?}");
        let allowed = Guard::new(&["localhost".to_owned()]).unwrap();
        let (_, checked) = allowed.check_url("http://localhost:9/").await.unwrap();
        assert!(checked.addrs.iter().all(|addr| addr.port() == 9));
    }

    #[tokio::test]
    async fn an_allowed_network_admits_its_addresses_only() {
        let guard = Guard::new(&["127.0.0.1/32".to_owned()]).unwrap();
        assert!(guard.check_url("http://127.0.0.1:1/").await.is_ok());
        // A mapped spelling of the same address is the same address.
        assert!(guard
            .check_url("http://[::ffff:127.0.0.1]:1/")
            .await
            .is_ok());
        assert!(guard.check_url("http://127.0.0.2:1/").await.is_err());
        assert!(guard.check_url("http://10.0.0.1/").await.is_err());
        assert!(guard.check_host("10.0.0.1", 25).await.is_err());
        assert!(guard.check_host("127.0.0.1", 25).await.is_ok());
        assert!(Guard::new(&["not valid!".to_owned()]).is_err());
    }
}
