//! The gateway connects to MCP servers at public addresses only, unless the operator
//! allows a host or network (`outbound.allow_private`), by the rules the control plane
//! applied when the server was registered (`warden_shared::outbound`).
//!
//! The control plane's check is not enough on its own: a server's name is resolved again
//! each time the gateway opens a connection, and a name that resolved to a public address
//! at registration can resolve to a metadata or internal address later (DNS rebinding).
//! So the sessions' HTTP client resolves names through [`GuardedResolver`], which refuses
//! an answer holding any forbidden address, and connects only to what it returned. An
//! address written in the URL never reaches a resolver; [`check_literal`] judges it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest_mcp::dns::{Addrs, Name, Resolve, Resolving};
use warden_shared::outbound::{Allowance, Forbidden};

/// Resolves names for the sessions' HTTP client, refusing forbidden addresses.
pub struct GuardedResolver {
    pub allowance: Arc<Allowance>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allowance = self.allowance.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: the client puts the URL's port on each address.
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            // Every address must pass: the client could connect to any of them.
            for addr in &resolved {
                allowance.check(&host, addr.ip())?;
            }
            Ok(Box::new(resolved.into_iter()) as Addrs)
        })
    }
}

/// Judges the host of `url` when it is an address rather than a name.
pub fn check_literal(url: &str, allowance: &Allowance) -> Result<(), Forbidden> {
    let Ok(parsed) = reqwest_mcp::Url::parse(url) else {
        return Ok(()); // Not a URL: the client refuses it itself.
    };
    let Some(host) = parsed.host_str() else {
        return Ok(());
    };
    // The URL parser has already read every spelling of an IPv4 address (`2130706433`,
    // `0x7f.1`) as the address; IPv6 comes bracketed.
    match host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        Ok(addr) => allowance.check(host, addr),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowing(entries: &[&str]) -> Arc<Allowance> {
        let entries: Vec<String> = entries.iter().map(|entry| (*entry).to_owned()).collect();
        Arc::new(Allowance::new(&entries).unwrap())
    }

    async fn resolve(allowance: Arc<Allowance>, host: &str) -> Result<Vec<SocketAddr>, String> {
        let name: Name = host.parse().unwrap();
        GuardedResolver { allowance }
            .resolve(name)
            .await
            .map(Iterator::collect)
            .map_err(|error| error.to_string())
    }

    #[tokio::test]
    async fn a_name_resolving_to_a_private_address_is_refused_unless_allowed() {
        let refused = resolve(allowing(&[]), "localhost").await.unwrap_err();
        assert!(refused.contains("`localhost` resolves to"), "{refused}");
        assert!(refused.contains("loopback"), "{refused}");
        let allowed = resolve(allowing(&["localhost"]), "localhost")
            .await
            .unwrap();
        assert!(!allowed.is_empty());
        let by_network = resolve(allowing(&["127.0.0.0/8", "::1/128"]), "localhost").await;
        assert!(by_network.is_ok(), "{by_network:?}");
    }

    #[test]
    fn an_address_in_the_url_is_judged_in_every_spelling() {
        let none = allowing(&[]);
        for url in [
            "http://127.0.0.1:8000/mcp",
            "http://2130706433/mcp",
            "http://0x7f.1/mcp",
            "http://[::1]:8000/mcp",
            "http://[::ffff:169.254.169.254]/mcp",
            "https://10.1.2.3/mcp",
        ] {
            assert!(check_literal(url, &none).is_err(), "{url} must be refused");
        }
        assert!(check_literal("https://8.8.8.8/mcp", &none).is_ok());
        assert!(check_literal("https://mcp.example.com/mcp", &none).is_ok());
        assert!(check_literal("http://127.0.0.1:8000/mcp", &allowing(&["127.0.0.1"])).is_ok());
    }
}
