//! Where accepted connections are served: on event loops of their own, one thread each
//! (nginx's shape, the default), or on the runtime's shared workers.
//!
//! On a loop, an agent's connection and the provider connections its requests use are
//! registered with the same thread's poller, so a request never waits for a wakeup sent
//! from another thread. Under load on two cores that cut the proxy's CPU per request by
//! about a tenth and stopped the cores going idle while requests waited (10 % idle →
//! 4 %): a fifth more throughput. The price: a loop whose thread the kernel deschedules
//! stalls its connections, with no other worker to take them over, so where busy
//! neighbours compete for the cores the tail grows (`load-tests/README.md`).
//!
//! The acceptor deals connections out in turn, so the loops carry equal shares of
//! long-lived connections.

use std::future::Future;
use std::io;
use std::net::TcpStream as StdTcpStream;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounter;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::buffered_io::BufferedIo;
use crate::connection;
use crate::idle_pool;
use crate::log_throttle::{LogThrottle, LOG_INTERVAL};
use crate::service::ProxyService;

/// Connections still open at shutdown get this long to finish.
pub const DRAIN: Duration = Duration::from_secs(10);

/// How long the acceptor waits after `accept` failed for want of a resource (file
/// descriptors, memory). Retrying at once only spins: out of descriptors, the proxy took
/// a core and wrote two million log lines in 3 s. The open connections are served
/// meanwhile, and free what is lacking as they close.
pub const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Serves one connection until it closes or the watch turns true.
pub type Handler = Arc<
    dyn Fn(TcpStream, watch::Receiver<bool>) -> Pin<Box<dyn Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

/// The handler of a proxy's connections: its requests, one after another while the
/// agent keeps the connection alive (up to `keepalive_secs` without a request).
pub fn proxy_handler(service: Arc<ProxyService>, keepalive_secs: u64) -> Handler {
    Arc::new(move |tcp, stopping| {
        let service = service.clone();
        Box::pin(async move {
            let stream = Box::new(BufferedIo::new(tcp));
            connection::serve(&service, stream, keepalive_secs, stopping).await;
        })
    })
}

/// The servers connections are dealt to.
pub struct Servers {
    queues: Vec<mpsc::UnboundedSender<StdTcpStream>>,
    next: usize,
    finished: JoinSet<()>,
}

impl Servers {
    /// One server per handler: a thread with a runtime of its own each when
    /// `own_threads`, tasks of the calling runtime otherwise. Each serves until
    /// `stopping` turns true, then drains its connections.
    pub fn start(
        handlers: Vec<Handler>,
        own_threads: bool,
        stopping: &watch::Receiver<bool>,
    ) -> std::io::Result<Servers> {
        let mut servers = Servers {
            queues: Vec::with_capacity(handlers.len()),
            next: 0,
            finished: JoinSet::new(),
        };
        for (index, handler) in handlers.into_iter().enumerate() {
            let (queue, connections) = mpsc::unbounded_channel();
            servers.queues.push(queue);
            let served = serve(connections, handler, stopping.clone());
            if !own_threads {
                servers.finished.spawn(served);
                continue;
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (done, finished) = oneshot::channel::<()>();
            std::thread::Builder::new()
                .name(format!("warden-loop-{index}"))
                .spawn(move || {
                    runtime.block_on(served);
                    let _ = done.send(());
                })?;
            servers.finished.spawn(async move {
                let _ = finished.await;
            });
        }
        Ok(servers)
    }

    /// Accepts from `listener` and deals the connections out until `stopping` turns
    /// true (or its sender is gone), counting failed accepts in `failures`.
    pub async fn accept(
        &mut self,
        listener: &TcpListener,
        mut stopping: watch::Receiver<bool>,
        failures: &IntCounter,
    ) {
        loop {
            let pause = tokio::select! {
                _ = stopping.wait_for(|stop| *stop) => break,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => {
                        self.deal(tcp);
                        continue;
                    }
                    Err(error) => accept_failed(&error, failures),
                },
            };
            if let Some(pause) = pause {
                tokio::select! {
                    _ = stopping.wait_for(|stop| *stop) => break,
                    () = tokio::time::sleep(pause) => {}
                }
            }
        }
    }

    fn deal(&mut self, tcp: TcpStream) {
        let _ = tcp.set_nodelay(true);
        // Out of this runtime's poller: the server registers it with its own.
        let Ok(tcp) = tcp.into_std() else { return };
        if self.queues.is_empty() {
            return;
        }
        let queue = &self.queues[self.next % self.queues.len()];
        self.next = self.next.wrapping_add(1);
        let _ = queue.send(tcp);
    }

    /// Waits until every server has drained and ended: call it once `stopping` is true.
    pub async fn finish(mut self) {
        self.queues.clear();
        while self.finished.join_next().await.is_some() {}
    }
}

/// Serves the connections that arrive on `connections` until `stopping` turns true
/// (or no more can arrive), then lets open requests finish (up to [`DRAIN`]).
async fn serve(
    mut connections: mpsc::UnboundedReceiver<StdTcpStream>,
    handler: Handler,
    stopping: watch::Receiver<bool>,
) {
    let mut open = JoinSet::new();
    let mut stop = stopping.clone();
    // The provider connections this loop's requests left idle are its own to close.
    let mut sweep = tokio::time::interval(idle_pool::SWEEP_EVERY);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            _ = sweep.tick() => idle_pool::sweep(),
            arrived = connections.recv() => {
                let Some(tcp) = arrived else { break };
                match TcpStream::from_std(tcp) {
                    Ok(tcp) => {
                        open.spawn(handler(tcp, stopping.clone()));
                    }
                    Err(error) => tracing::warn!(%error, "cannot serve a connection"),
                }
            }
            Some(_) = open.join_next(), if !open.is_empty() => {}
        }
    }
    let _ = tokio::time::timeout(DRAIN, async { while open.join_next().await.is_some() {} }).await;
    open.abort_all();
}

/// Counts a failed `accept` in `failures`, logs it (a line per [`LOG_INTERVAL`] at most)
/// and says how long to wait before the next: `None` when the failure was one
/// connection's own (reset or aborted before it was taken, or a network error Linux
/// reports on `accept`), which the next `accept` does not share. Anything else pauses (a
/// rare connection error that does too costs that connection's neighbours 100 ms, not a
/// spin).
fn accept_failed(error: &io::Error, failures: &IntCounter) -> Option<Duration> {
    static LOG: LogThrottle = LogThrottle::new(LOG_INTERVAL);
    failures.inc();
    let pause = accept_pause(error);
    if let Some(times) = LOG.hit() {
        let pause_ms = pause.map_or(0, |p| u64::try_from(p.as_millis()).unwrap_or(u64::MAX));
        tracing::warn!(%error, times, pause_ms, "accept failed");
    }
    pause
}

/// How long to wait after `accept` failed with `error` (see [`accept_failed`]).
fn accept_pause(error: &io::Error) -> Option<Duration> {
    use io::ErrorKind::*;
    let ones_own = matches!(
        error.kind(),
        ConnectionAborted
            | ConnectionReset
            | ConnectionRefused
            | Interrupted
            | WouldBlock
            | NetworkDown
            | NetworkUnreachable
            | HostUnreachable
    );
    (!ones_own).then_some(ACCEPT_PAUSE)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[test]
    fn accept_pauses_when_out_of_resources_not_for_one_connections_failure() {
        // EMFILE and ENFILE (24 and 23 on Linux): out of file descriptors.
        for out_of_descriptors in [24, 23] {
            let error = io::Error::from_raw_os_error(out_of_descriptors);
            assert_eq!(accept_pause(&error), Some(ACCEPT_PAUSE), "{error}");
        }
        assert_eq!(
            accept_pause(&io::Error::from(io::ErrorKind::OutOfMemory)),
            Some(ACCEPT_PAUSE)
        );
        for ones_own in [
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::ConnectionReset,
        ] {
            assert_eq!(
                accept_pause(&io::Error::from(ones_own)),
                None,
                "{ones_own:?}"
            );
        }
    }

    /// A handler that answers one byte with the name of the thread serving it, then
    /// holds the connection until the client closes it.
    fn naming_handler(served: Arc<Mutex<Vec<String>>>) -> Handler {
        Arc::new(move |mut tcp: TcpStream, _stopping| {
            let served = served.clone();
            Box::pin(async move {
                let mut byte = [0u8; 1];
                if tcp.read_exact(&mut byte).await.is_err() {
                    return;
                }
                let name = std::thread::current().name().unwrap_or("").to_owned();
                served.lock().expect("lock").push(name.clone());
                let _ = tcp.write_all(name.as_bytes()).await;
                let _ = tcp.shutdown().await;
                let _ = tcp.read(&mut byte).await;
            })
        })
    }

    async fn ask(address: std::net::SocketAddr) -> (TcpStream, String) {
        let mut tcp = TcpStream::connect(address).await.expect("connect");
        tcp.write_all(b"?").await.expect("write");
        let mut name = String::new();
        tcp.read_to_string(&mut name).await.expect("read");
        (tcp, name)
    }

    /// Servers for `handlers` accepting on a port of their own, until [`Running::stop`].
    struct Running {
        address: std::net::SocketAddr,
        stop: watch::Sender<bool>,
        accepting: tokio::task::JoinHandle<Servers>,
    }

    impl Running {
        async fn start(handlers: Vec<Handler>, own_threads: bool) -> Running {
            let (stop, stopping) = watch::channel(false);
            let mut servers = Servers::start(handlers, own_threads, &stopping).expect("servers");
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let address = listener.local_addr().expect("address");
            let accepting = tokio::spawn(async move {
                servers
                    .accept(
                        &listener,
                        stopping,
                        &IntCounter::new("accept_failures", "-").unwrap(),
                    )
                    .await;
                servers
            });
            Running {
                address,
                stop,
                accepting,
            }
        }

        /// Stops accepting, closes `held` and waits for the servers to drain and end.
        async fn stop(self, held: Vec<TcpStream>) {
            self.stop.send(true).expect("stop");
            drop(held);
            let servers = self.accepting.await.expect("the acceptor stops");
            tokio::time::timeout(Duration::from_secs(5), servers.finish())
                .await
                .expect("the servers drain and end");
        }
    }

    #[tokio::test]
    async fn connections_are_dealt_to_the_loops_in_turn_each_on_its_own_thread() {
        let served = Arc::new(Mutex::new(Vec::new()));
        let handlers = vec![
            naming_handler(served.clone()),
            naming_handler(served.clone()),
        ];
        let running = Running::start(handlers, true).await;
        let mut held = Vec::new();
        let mut names = Vec::new();
        for _ in 0..4 {
            let (tcp, name) = ask(running.address).await;
            held.push(tcp);
            names.push(name);
        }
        assert_eq!(
            names,
            [
                "warden-loop-0",
                "warden-loop-1",
                "warden-loop-0",
                "warden-loop-1"
            ]
        );
        running.stop(held).await;
        assert_eq!(served.lock().expect("lock").len(), 4);
    }

    #[tokio::test]
    async fn without_loops_connections_are_served_on_the_runtime() {
        let served = Arc::new(Mutex::new(Vec::new()));
        let running = Running::start(vec![naming_handler(served.clone())], false).await;
        let (tcp, name) = ask(running.address).await;
        assert!(!name.starts_with("warden-loop"), "served on {name}");
        running.stop(vec![tcp]).await;
        assert_eq!(served.lock().expect("lock").len(), 1);
    }
}
