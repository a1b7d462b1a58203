//! A TCP balancer, as a Kubernetes Service or a cloud load balancer in front of
//! replicas: each new connection goes to the first backend, counting from the next in
//! turn, that accepts it. Its backends can change while it runs (a rolling restart).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};

pub struct Balancer {
    pub addr: SocketAddr,
    backends: Arc<Mutex<Vec<SocketAddr>>>,
}

impl Balancer {
    pub async fn start(backends: Vec<SocketAddr>) -> Balancer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let backends = Arc::new(Mutex::new(backends));
        let shared = backends.clone();
        tokio::spawn(async move {
            let mut turn = 0usize;
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                turn += 1;
                let backends = shared.lock().unwrap().clone();
                tokio::spawn(async move {
                    for offset in 0..backends.len() {
                        let backend = backends[(turn + offset) % backends.len()];
                        if let Ok(mut outbound) = TcpStream::connect(backend).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            return;
                        }
                    }
                });
            }
        });
        Balancer { addr, backends }
    }

    /// Replaces `old` by `new` among the backends (`None`: removes it).
    pub fn replace(&self, old: SocketAddr, new: Option<SocketAddr>) {
        let mut backends = self.backends.lock().unwrap();
        backends.retain(|backend| *backend != old);
        backends.extend(new);
    }
}
