//! Which addresses Warden may connect to on a tenant's behalf: the control plane's
//! notification channels and MCP approvals, and the proxy's sessions with MCP servers.
//! Both planes judge an address here, so a host one of them refuses the other refuses
//! too.
//!
//! Only public addresses pass, unless the operator allows named hosts or networks
//! (`outbound.allow_private`): for local receivers and servers in development and tests,
//! or a service on a private network. It is off by default and dangerous: an allowed
//! network is reachable by every tenant.
//!
//! Resolving names is the caller's job (each plane has its own resolver); what matters
//! is that it connects only to the addresses it checked, never to a second resolution.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// The operator's exceptions to the public-addresses-only rule.
#[derive(Debug, Clone, Default)]
pub struct Allowance {
    hosts: Vec<String>,
    networks: Vec<IpNet>,
}

/// An address Warden does not connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forbidden {
    /// The host as the URL or setting names it.
    pub host: String,
    /// The host is a name that resolved to `addr` (not an address itself).
    pub resolved: bool,
    pub addr: IpAddr,
    /// The kind of range `addr` is in (`loopback`, `private`, ...).
    pub range: &'static str,
}

impl std::fmt::Display for Forbidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = if self.resolved { "resolves to " } else { "is " };
        write!(
            f,
            "`{}` {how}{}, a {} address, which Warden does not call",
            self.host, self.addr, self.range
        )
    }
}

impl std::error::Error for Forbidden {}

impl Allowance {
    /// An allowance of `entries`, each a host name (`receiver.internal`, `localhost`), an
    /// address or a network in CIDR form (`127.0.0.1`, `10.1.0.0/16`, `::1/128`).
    pub fn new(entries: &[String]) -> Result<Allowance, String> {
        let mut allowance = Allowance::default();
        for entry in entries {
            let entry = entry.trim();
            if let Ok(network) = entry.parse::<IpNet>() {
                allowance.networks.push(network);
            } else if let Ok(addr) = entry.parse::<IpAddr>() {
                allowance.networks.push(IpNet::from(addr));
            } else if !entry.is_empty()
                && entry
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
            {
                allowance.hosts.push(entry.to_ascii_lowercase());
            } else {
                return Err(format!(
                    "outbound.allow_private: `{entry}` is neither a host name nor an address or network"
                ));
            }
        }
        Ok(allowance)
    }

    /// Whether `addr`, which `host` is or resolved to, may be connected to: a public
    /// address, or one the operator allows by host name or network.
    pub fn check(&self, host: &str, addr: IpAddr) -> Result<(), Forbidden> {
        let Some(range) = forbidden_range(addr) else {
            return Ok(());
        };
        let host_allowed = self
            .hosts
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(host));
        let addr = canonical(addr);
        if host_allowed || self.networks.iter().any(|network| network.contains(&addr)) {
            return Ok(());
        }
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        Err(Forbidden {
            host: host.to_owned(),
            resolved: bare.parse::<IpAddr>().is_err(),
            addr,
            range,
        })
    }
}

/// The kind of non-public range `addr` is in, or `None` for a public address.
pub fn forbidden_range(addr: IpAddr) -> Option<&'static str> {
    match canonical(addr) {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
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

    fn addr(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn every_non_public_range_is_forbidden() {
        for text in [
            "127.0.0.1",
            "127.255.255.254",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.100.100.200",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "fc00::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
        ] {
            assert!(
                forbidden_range(addr(text)).is_some(),
                "{text} must be refused"
            );
        }
    }

    #[test]
    fn public_addresses_pass() {
        for text in [
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "172.32.0.1",
            "100.128.0.1",
        ] {
            assert_eq!(forbidden_range(addr(text)), None, "{text} is public");
        }
    }

    #[test]
    fn an_allowance_admits_its_hosts_and_networks_only() {
        let allowance =
            Allowance::new(&["127.0.0.1/32".to_owned(), "Receiver.internal".to_owned()]).unwrap();
        assert!(allowance.check("127.0.0.1", addr("127.0.0.1")).is_ok());
        // A mapped spelling of the same address is the same address.
        assert!(allowance
            .check("[::ffff:127.0.0.1]", addr("::ffff:127.0.0.1"))
            .is_ok());
        assert!(allowance
            .check("receiver.internal", addr("10.9.9.9"))
            .is_ok());
        let refused = allowance
            .check("rebound.example", addr("169.254.169.254"))
            .unwrap_err();
        assert!(refused.resolved);
        assert_eq!(refused.range, "link-local (cloud metadata)");
        assert!(
            refused.to_string().contains("resolves to 169.254.169.254"),
            "{refused}"
        );
        let literal = allowance.check("127.0.0.2", addr("127.0.0.2")).unwrap_err();
        assert!(!literal.resolved);
        assert!(Allowance::default()
            .check("localhost", addr("::1"))
            .is_err());
        assert!(Allowance::default()
            .check("example.com", addr("93.184.216.34"))
            .is_ok());
        assert!(Allowance::new(&["not valid!".to_owned()]).is_err());
    }
}
