//! A test certificate authority and a TLS listener for the mock provider, so the proxy's
//! TLS to providers (rustls, SNI, verification against a configured CA) is exercised.

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// A CA (its PEM in a file, as `proxy.ca_file` wants) and a `localhost` certificate it
/// signed.
pub struct TestCa {
    pub ca_file: PathBuf,
    server_cert: CertificateDer<'static>,
    server_key: Vec<u8>,
    _dir: tempfile::TempDir,
}

impl TestCa {
    pub fn new() -> TestCa {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let server_key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .signed_by(&server_key, &ca, &ca_key)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        TestCa {
            ca_file,
            server_cert: server.der().clone(),
            server_key: server_key.serialize_der(),
            _dir: dir,
        }
    }
}

/// Accepts TCP connections and completes the TLS handshake, for `axum::serve`.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl TlsListener {
    pub async fn bind(ca: &TestCa) -> TlsListener {
        let key = PrivateKeyDer::try_from(ca.server_key.clone()).unwrap();
        let config = ServerConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![ca.server_cert.clone()], key)
        .unwrap();
        TlsListener {
            tcp: TcpListener::bind("127.0.0.1:0").await.unwrap(),
            acceptor: TlsAcceptor::from(Arc::new(config)),
        }
    }

    pub fn port(&self) -> u16 {
        self.tcp.local_addr().unwrap().port()
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            // A client that fails the handshake (an untrusting proxy) is simply dropped.
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
