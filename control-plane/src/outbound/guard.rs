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
//! An operator can allow named hosts or networks (`outbound.allow_private`): for local
//! receivers in development and tests, or a mail relay on a private network. It is off by
//! default and dangerous: an allowed network is reachable by every tenant's channels.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;
use url::{Host, Url};

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
    #[error("`{host}` {}{addr}, a {range} address, which Warden does not call", if *.resolved { "resolves to " } else { "is " })]
    Forbidden {
        /// The host is a name that resolved to `addr` (not an address itself).
        resolved: bool,
        host: String,
        addr: IpAddr,
        range: &'static str,
    },
}

impl Refusal {
    /// A short stable word for the reason, for `details.reason` and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "malformed",
            Refusal::Scheme(_) => "scheme",
            Refusal::NoHost => "no_host",
            Refusal::Unresolvable { .. } => "unresolvable",
            Refusal::Forbidden { .. } => "forbidden_address",
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
    hosts: Vec<String>,
    networks: Vec<IpNet>,
}

impl Guard {
    /// A guard allowing `entries`, each a host name (`receiver.internal`, `localhost`), an
    /// address or a network in CIDR form (`127.0.0.1`, `10.1.0.0/16`, `::1/128`).
    pub fn new(entries: &[String]) -> Result<Guard, String> {
        let mut guard = Guard::default();
        for entry in entries {
            let entry = entry.trim();
            if let Ok(network) = entry.parse::<IpNet>() {
                guard.networks.push(network);
            } else if let Ok(addr) = entry.parse::<IpAddr>() {
                guard.networks.push(IpNet::from(addr));
            } else if !entry.is_empty()
                && entry
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
            {
                guard.hosts.push(entry.to_ascii_lowercase());
            } else {
                return Err(format!(
                    "outbound.allow_private: `{entry}` is neither a host name nor an address or network"
                ));
            }
        }
        Ok(guard)
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
        let Some(range) = forbidden_range(addr) else {
            return Ok(());
        };
        let host_allowed = self
            .hosts
            .iter()
            .any(|allowed| allowed == &host.to_ascii_lowercase());
        let addr = canonical(addr);
        if host_allowed || self.networks.iter().any(|network| network.contains(&addr)) {
            return Ok(());
        }
        Err(Refusal::Forbidden {
            host: host.to_owned(),
            resolved: host.parse::<IpAddr>().is_err() && !host.starts_with('['),
            addr,
            range,
        })
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

/// An IPv4 address carried inside an IPv6 one (mapped, NAT64, 6to4) as the IPv4 address,
/// so that the IPv4 rules apply to it.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(addr, IpAddr::V4),
        IpAddr::V4(_) => addr,
    }
}

fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let segments = v6.segments();
    let octets = v6.octets();
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) reach the IPv4 address they embed.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(Ipv4Addr::new(
            octets[12], octets[13], octets[14], octets[15],
        ));
    }
    if segments[0] == 0x2002 {
        return Some(Ipv4Addr::new(octets[2], octets[3], octets[4], octets[5]));
    }
    None
}

/// The kind of non-public range `addr` is in, or `None` for a public address.
pub fn forbidden_range(addr: IpAddr) -> Option<&'static str> {
    match canonical(addr) {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(v4: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = v4.octets();
    Some(match (a, b, c) {
        (0, _, _) => "unspecified",
        (127, _, _) => "loopback",
        (10, _, _) | (192, 168, _) => "private",
        (172, 16..=31, _) => "private",
        (169, 254, _) => "link-local (cloud metadata)",
        (100, 64..=127, _) => "shared (CGNAT)",
        (192, 0, 0) => "IETF protocol assignment",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking",
        (224..=239, _, _) => "multicast",
        (240..=255, _, _) => "reserved or broadcast",
        _ => return None,
    })
}

fn forbidden_v6(v6: Ipv6Addr) -> Option<&'static str> {
    let first = v6.segments()[0];
    Some(if v6.is_unspecified() {
        "unspecified"
    } else if v6.is_loopback() {
        "loopback"
    } else if first & 0xffc0 == 0xfe80 {
        "link-local"
    } else if first & 0xfe00 == 0xfc00 {
        // Unique local, which includes AWS's IPv6 metadata address fd00:ec2::254.
        "unique local (private)"
    } else if first & 0xff00 == 0xff00 {
        "multicast"
    } else if first == 0x2001 && v6.segments()[1] == 0x0db8 {
        "documentation"
    } else if v6.segments()[..6] == [0, 0, 0, 0, 0, 0] {
        // IPv4-compatible (deprecated) addresses, ::a.b.c.d.
        "IPv4-compatible"
    } else {
        return None;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn every_non_public_range_is_refused() {
        for raw in [
            "http://127.0.0.1/",
            "http://127.255.255.254:8080/",
            "http://10.0.0.1/",
            "http://172.16.0.1/",
            "http://172.31.255.255/",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://100.64.0.1/",
            "http://100.100.100.200/",
            "http://0.0.0.0/",
            "http://224.0.0.1/",
            "http://255.255.255.255/",
            "http://[::1]/",
            "http://[::]/",
            "http://[fe80::1]/",
            "http://[fd00:ec2::254]/",
            "http://[fc00::1]/",
            "http://[ff02::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:169.254.169.254]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[2002:7f00:1::]/",
            // Decimal, octal and hexadecimal spellings of 127.0.0.1.
            "http://2130706433/",
            "http://0177.0.0.1/",
            "http://0x7f.0.0.1/",
            "http://127.1/",
        ] {
            assert!(refused(raw).is_some(), "{raw} must be refused");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for raw in [
            "https://8.8.8.8/",
            "https://1.1.1.1/",
            "https://[2606:4700:4700::1111]/",
            "http://172.32.0.1/",
            "http://100.128.0.1/",
        ] {
            assert_eq!(refused(raw), None, "{raw} is public");
        }
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
        assert!(matches!(refusal, Refusal::Forbidden { .. }), "{refusal:?}");
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
