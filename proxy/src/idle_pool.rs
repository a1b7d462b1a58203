//! Idle keep-alive connections to the providers, kept by the thread that used them.
//!
//! pingora's connector watches each idle connection with a task of its own. Every
//! request on a reused connection paid for that task's spawn and its timer, two
//! wake-ups (the watch ends when the connection is taken, and the taker waits for it to
//! let go), the pool's locks and LRU, and a `recvfrom` to check the connection as it
//! went back. Here each thread (each event loop) keeps its own idle connections in a
//! list, the most recently used taken first (its state is the likeliest still in the
//! caches), without locks or tasks. A connection is checked when taken: the poller has
//! already noted whether the provider closed it, so the check makes no system call. The
//! closed and the expired are closed when met, and each event loop sweeps its list
//! every [`SWEEP_EVERY`] so that a quiet loop does not hold sockets its providers closed.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use pingora::protocols::Stream;
use tokio::io::{AsyncRead, ReadBuf};

/// Idle connections kept for one key on each thread; beyond this the
/// oldest is closed.
pub const IDLE_PER_ADDRESS: usize = 256;

/// How often an event loop drops its closed and expired idle connections.
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// Whose connections, and to where: the [`crate::upstream::Upstreams`] that opened them
/// (two proxies in one process, each with its own trust settings, never share one) and
/// the address's reuse hash (address, TLS, SNI).
pub type Key = (u64, u64);

struct Idle {
    stream: Stream,
    /// When the connection has idled for as long as it may.
    expires: Instant,
}

thread_local! {
    /// This thread's idle connections by their key, oldest first.
    static IDLE: RefCell<HashMap<Key, VecDeque<Idle>>> = RefCell::default();
}

/// This thread's most recently kept connection for `key` that is still open and
/// unexpired, if any; the closed and expired ones met on the way are closed.
pub fn take(key: Key) -> Option<Stream> {
    IDLE.with_borrow_mut(|pool| {
        let idle = pool.get_mut(&key)?;
        let now = Instant::now();
        while let Some(Idle {
            mut stream,
            expires,
        }) = idle.pop_back()
        {
            if expires <= now {
                // The older ones expired before it.
                idle.clear();
                return None;
            }
            if still_open(&mut stream) {
                return Some(stream);
            }
        }
        None
    })
}

/// Keeps `stream`, whose last exchange is complete, for reuse within `max_idle`.
pub fn keep(key: Key, stream: Stream, max_idle: Duration) {
    let now = Instant::now();
    IDLE.with_borrow_mut(|pool| {
        let idle = pool.entry(key).or_default();
        while idle
            .front()
            .is_some_and(|oldest| oldest.expires <= now || idle.len() >= IDLE_PER_ADDRESS)
        {
            idle.pop_front();
        }
        idle.push_back(Idle {
            stream,
            expires: now + max_idle,
        });
    });
}

/// Closes this thread's idle connections that expired or that the provider closed.
pub fn sweep() {
    let now = Instant::now();
    IDLE.with_borrow_mut(|pool| {
        for idle in pool.values_mut() {
            idle.retain_mut(|idle| idle.expires > now && still_open(&mut idle.stream));
        }
        pool.retain(|_, idle| !idle.is_empty());
    });
}

/// How many connections this thread keeps idle (for tests).
#[cfg(test)]
pub fn idle_here() -> usize {
    IDLE.with_borrow(|pool| pool.values().map(VecDeque::len).sum())
}

/// Whether an idle connection can carry a request: a read would wait (a provider sends
/// nothing unasked). An end of stream, an error or unexpected bytes rule it out. Where
/// the poller has seen no event on the socket, tokio answers without a system call.
fn still_open(stream: &mut Stream) -> bool {
    let mut byte = [0u8; 1];
    let mut buf = ReadBuf::new(&mut byte);
    let mut cx = Context::from_waker(Waker::noop());
    Pin::new(stream).poll_read(&mut cx, &mut buf).is_pending()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pingora::protocols::l4::stream::Stream as L4Stream;
    use pingora::protocols::Stream;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    use super::{idle_here, keep, sweep, take, IDLE_PER_ADDRESS};

    const MINUTE: Duration = Duration::from_secs(60);

    /// A connected pair: the proxy's side as pingora's stream, and the provider's.
    async fn connected() -> (Stream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ours = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (theirs, _) = listener.accept().await.unwrap();
        (Box::new(L4Stream::from(ours)), theirs)
    }

    fn id(stream: &Stream) -> i32 {
        stream.id()
    }

    /// Lets the poller see what the provider's side did to the sockets.
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_most_recently_kept_connection_is_taken_first_and_only_once() {
        let (older, _a) = connected().await;
        let (newer, _b) = connected().await;
        let (older_id, newer_id) = (id(&older), id(&newer));
        keep((0, 1), older, MINUTE);
        keep((0, 1), newer, MINUTE);
        assert!(take((0, 2)).is_none(), "another address has none");
        assert!(take((1, 1)).is_none(), "another owner has none");
        assert_eq!(take((0, 1)).map(|s| id(&s)), Some(newer_id));
        assert_eq!(take((0, 1)).map(|s| id(&s)), Some(older_id));
        assert!(take((0, 1)).is_none());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_connection_the_provider_closed_or_wrote_on_is_not_taken() {
        let (closed, theirs) = connected().await;
        let (chatty, mut talking) = connected().await;
        let (fine, _kept) = connected().await;
        let fine_id = id(&fine);
        keep((0, 3), fine, MINUTE);
        keep((0, 3), closed, MINUTE);
        keep((0, 3), chatty, MINUTE);
        drop(theirs);
        talking
            .write_all(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
            .await
            .unwrap();
        settle().await;
        assert_eq!(take((0, 3)).map(|s| id(&s)), Some(fine_id));
        assert_eq!(idle_here(), 0, "the two passed over are closed");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_expired_connection_is_closed_not_taken() {
        let (stream, _theirs) = connected().await;
        keep((0, 4), stream, Duration::from_millis(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(take((0, 4)).is_none());
        assert_eq!(idle_here(), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn beyond_the_limit_the_oldest_is_closed() {
        let mut sides = Vec::new();
        let (first, theirs) = connected().await;
        let first_id = id(&first);
        sides.push(theirs);
        keep((0, 5), first, MINUTE);
        for _ in 0..IDLE_PER_ADDRESS {
            let (stream, theirs) = connected().await;
            sides.push(theirs);
            keep((0, 5), stream, MINUTE);
        }
        assert_eq!(idle_here(), IDLE_PER_ADDRESS);
        let mut taken = Vec::new();
        while let Some(stream) = take((0, 5)) {
            taken.push(id(&stream));
        }
        assert_eq!(taken.len(), IDLE_PER_ADDRESS);
        assert!(!taken.contains(&first_id), "the oldest made room");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_sweep_closes_what_the_provider_closed_and_keeps_the_rest() {
        let (closed, theirs) = connected().await;
        let (open, _kept) = connected().await;
        keep((0, 6), closed, MINUTE);
        keep((0, 6), open, MINUTE);
        drop(theirs);
        settle().await;
        sweep();
        assert_eq!(idle_here(), 1);
        assert!(take((0, 6)).is_some());
    }

    #[test]
    fn each_thread_keeps_its_own() {
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        };
        // Kept here, on this thread: another thread finds nothing.
        let here = runtime();
        let theirs = here.block_on(async {
            let (stream, theirs) = connected().await;
            keep((0, 7), stream, MINUTE);
            theirs
        });
        let elsewhere =
            std::thread::spawn(move || runtime().block_on(async { take((0, 7)).is_some() }));
        assert!(!elsewhere.join().unwrap());
        assert!(here.block_on(async { take((0, 7)).is_some() }));
        drop(theirs);
    }
}
