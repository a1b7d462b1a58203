//! The load test's second floor: a pass-through proxy on pingora with nothing of Warden in
//! it, run the way pingora's own examples run one (its `Server`, one service, a thread
//! per core). Warden's ratio to it is what governance costs on top of the framework;
//! its ratio to nginx is the framework's own price.
//!
//!   bare-pingora LISTEN UPSTREAM [THREADS]
//!   bare-pingora 127.0.0.1:19280 127.0.0.1:19100 2

use std::net::SocketAddr;

use async_trait::async_trait;
use pingora::prelude::{HttpPeer, ProxyHttp, Result, Session};
use pingora::server::configuration::ServerConf;
use pingora::server::Server;

/// Sends every request to one upstream over pingora's pooled connections.
struct PassThrough {
    upstream: SocketAddr,
}

#[async_trait]
impl ProxyHttp for PassThrough {
    type CTX = ();

    fn new_ctx(&self) -> Self::CTX {}

    async fn upstream_peer(&self, _: &mut Session, _: &mut Self::CTX) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match args.as_slice() {
        [listen, upstream] => Some((listen, upstream, 0)),
        [listen, upstream, threads] => threads.parse().ok().map(|t| (listen, upstream, t)),
        _ => None,
    };
    let Some((listen, upstream, threads)) = parsed else {
        eprintln!("usage: bare-pingora LISTEN UPSTREAM [THREADS (0: one per core)]");
        return std::process::ExitCode::FAILURE;
    };
    let Ok(upstream) = upstream.parse::<SocketAddr>() else {
        eprintln!("UPSTREAM must be an address such as 127.0.0.1:19100");
        return std::process::ExitCode::FAILURE;
    };
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    let conf = ServerConf {
        threads,
        // Stopped by the script's kill: no grace period holding the port for the next run.
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(0),
        // Warden's proxy keeps 256 idle provider connections (`upstream.rs`): the same
        // pool here, so that many concurrent streams reuse connections alike.
        upstream_keepalive_pool_size: 256,
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut service =
        pingora::proxy::http_proxy_service(&server.configuration, PassThrough { upstream });
    service.add_tcp(listen);
    server.add_service(service);
    server.run_forever()
}
