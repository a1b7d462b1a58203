//! The peer the proxy connects to: pingora's `HttpPeer`, minus one system call per
//! pooled request.
//!
//! Before handing out a pooled connection, pingora's connector asks the peer whether the
//! connection's descriptor still points at it (`Peer::matches_fd`), and `HttpPeer`
//! answers with a `getpeername` call: one system call on every request that reuses a
//! connection, about 1.5 % of the proxy's CPU under load. The question cannot come out
//! no here: the pool owns its connections' descriptors (none can be closed and its
//! number reused while pooled), and it files them by the peer's reuse hash, so a
//! connection handed out for this peer was opened to this peer's address. Everything
//! else is `HttpPeer`'s.

use std::fmt;
use std::net::SocketAddr as InetAddr;

use pingora::protocols::l4::socket::SocketAddr;
use pingora::upstreams::peer::{HttpPeer, Peer, PeerOptions};

#[derive(Debug, Clone)]
pub struct PoolPeer(pub HttpPeer);

impl PoolPeer {
    pub fn new(address: InetAddr, tls: bool, sni: String) -> PoolPeer {
        PoolPeer(HttpPeer::new(address, tls, sni))
    }
}

impl fmt::Display for PoolPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Peer for PoolPeer {
    fn address(&self) -> &SocketAddr {
        self.0.address()
    }

    fn tls(&self) -> bool {
        self.0.tls()
    }

    fn sni(&self) -> &str {
        self.0.sni()
    }

    fn reuse_hash(&self) -> u64 {
        self.0.reuse_hash()
    }

    fn get_peer_options(&self) -> Option<&PeerOptions> {
        self.0.get_peer_options()
    }

    fn get_mut_peer_options(&mut self) -> Option<&mut PeerOptions> {
        self.0.get_mut_peer_options()
    }

    #[cfg(unix)]
    fn matches_fd<V: std::os::unix::io::AsRawFd>(&self, _fd: V) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_peer_is_its_http_peer_for_the_connector() {
        let address: InetAddr = "127.0.0.1:9443".parse().unwrap();
        let plain = HttpPeer::new(address, true, "api.example.com".to_owned());
        let peer = PoolPeer::new(address, true, "api.example.com".to_owned());
        // Same pool entry, address, TLS and SNI as the HttpPeer it wraps.
        assert_eq!(peer.reuse_hash(), plain.reuse_hash());
        assert_eq!(peer.address(), plain.address());
        assert!(peer.tls());
        assert_eq!(peer.sni(), "api.example.com");
        assert!(peer.get_peer_options().is_some());
    }
}
