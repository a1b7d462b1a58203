//! The agents' connections, and plain ones to providers: a TCP socket with a write
//! buffer, as pingora's HTTP/1 server and client read and write them.
//!
//! pingora's HTTP/1 server is written for a buffered stream: it writes a response header
//! without flushing, flushes a `Content-Length` body when it is complete and every chunk
//! of a chunked one. Unbuffered, each of those writes is a system call of its own: a
//! plain answer took two `sendto`s (header, body) and each streamed chunk three (size
//! line, data, CRLF). Through this wrapper each is one.
//!
//! The socket is tokio's, not wrapped in pingora's own stream type (`l4::Stream`): that
//! type's layers (a zero-sized buffered stream over a raw-stream enum, the time each
//! read and write waited, receive timestamps) are for its TLS and TCP features, which an
//! agent's plain connection does not use, and each write of a streamed event went
//! through all of them (without them, writing the events went from 29.8 % to 25.3 % of
//! the proxy's user time at 1,000 streams, `perf`, 2026-11-30). pingora's traits are answered here the way its stream answers them for
//! a plain TCP connection made from a socket: no proxy or socket digest, the time the
//! connection was accepted, and peeking not supported (HTTP/1 does not peek).
//!
//! A stream's relay also corks it ([`Cork`]) across pingora's flushes that would send a
//! piece on its own: a chunked response's header (flushed before any body) and the
//! data written just before the end (flushed before the end that follows at once).
//! Each then leaves with what comes next: a streamed answer that is in hand goes out in
//! one write, not three.

use std::future::poll_fn;
use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::SystemTime;

use async_trait::async_trait;
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl,
    TimingDigest, UniqueID, UniqueIDType,
};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// Bytes buffered before a write goes out without a flush: a response header and a
/// typical non-streamed answer fit; larger writes go straight through.
const WRITE_BUFFER: usize = 16 * 1024;
/// The room a connection's buffer is first given: a response header and a short answer.
const FIRST_ROOM: usize = 4 * 1024;

/// The longest size line of a chunk: 16 hexadecimal digits and CRLF.
const CHUNK_SIZE_LINE: usize = 18;

/// `len` in hexadecimal followed by CRLF, as a chunk of a chunked body starts.
fn chunk_size_line(len: usize, line: &mut [u8; CHUNK_SIZE_LINE]) -> &[u8] {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut at = CHUNK_SIZE_LINE - 2;
    line[at..].copy_from_slice(b"\r\n");
    let mut rest = len;
    loop {
        at -= 1;
        line[at] = DIGITS[rest & 0xf];
        rest >>= 4;
        if rest == 0 {
            return &line[at..];
        }
    }
}

#[derive(Debug)]
pub struct BufferedIo {
    socket: TcpStream,
    /// What is written and not yet sent. Allocated when a write is held back and freed
    /// once it has all gone out, so that a connection between writes holds none: at
    /// 1,000 streams nearly every write of an event goes out as it comes (see
    /// `poll_write_vectored`), and an idle keep-alive connection writes nothing.
    buffer: Vec<u8>,
    /// How much of `buffer` has been sent.
    sent: usize,
    cork: Cork,
    accepted: SystemTime,
    proxy_digest: Option<Arc<ProxyDigest>>,
    socket_digest: Option<Arc<SocketDigest>>,
}

/// While set, flushes keep what is buffered: whoever sets it clears it before the write
/// whose flush is to send everything (see [`crate::relay`]).
#[derive(Debug, Clone, Default)]
pub struct Cork(Arc<AtomicBool>);

impl Cork {
    pub fn set(&self, corked: bool) {
        self.0.store(corked, Ordering::Relaxed);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl BufferedIo {
    pub fn new(socket: TcpStream) -> BufferedIo {
        BufferedIo {
            socket,
            buffer: Vec::new(),
            sent: 0,
            cork: Cork::default(),
            accepted: SystemTime::now(),
            proxy_digest: None,
            socket_digest: None,
        }
    }

    /// The connection's cork, for the stream relayed on it.
    pub fn cork(&self) -> Cork {
        self.cork.clone()
    }

    /// Bytes written and not yet sent.
    fn pending(&self) -> &[u8] {
        &self.buffer[self.sent..]
    }

    /// Holds `data` back, in a buffer allocated for it if there is none.
    fn hold(&mut self, data: &[u8]) {
        if self.buffer.capacity() == 0 {
            self.buffer.reserve_exact(FIRST_ROOM.max(data.len()));
        }
        self.buffer.extend_from_slice(data);
    }

    /// Makes room for a write of `len` bytes, as tokio's `BufWriter` does: sends the
    /// buffer first if the write would overfill it. Ready with true when the write is as
    /// large as the buffer and goes straight to the socket.
    fn poll_room_for(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<bool>> {
        if self.pending().len() + len > WRITE_BUFFER {
            ready!(self.poll_send_buffer(cx))?;
        }
        Poll::Ready(Ok(len >= WRITE_BUFFER))
    }

    /// Whether nothing written is held back (a chunk may then be written through).
    pub fn drained(&self) -> bool {
        self.pending().is_empty()
    }

    /// Writes `data` as one chunk of a chunked body (size line, data, CRLF) straight to
    /// the socket, waiting for it to take every byte. Only when [`Self::drained`]: a
    /// chunk never goes out ahead of bytes held before it (it fails instead).
    ///
    /// A streamed answer's events are written this way once its header has gone out:
    /// through pingora's body writer each event's size line was a new `String`, the
    /// three pieces a chained buffer and the write two layers of futures, 10 to 13 % of
    /// the proxy's user time at 1,000 streams (`perf`, 2026-11-30). It takes `&self`, as
    /// the relay reaches the connection only through pingora's session: tokio's socket
    /// writes through a shared reference, and nothing of this type's state changes.
    pub async fn write_chunk(&self, data: &[u8]) -> io::Result<()> {
        if !self.drained() {
            return Err(io::Error::other("a chunk cannot pass bytes held before it"));
        }
        let mut size = [0u8; CHUNK_SIZE_LINE];
        let size = chunk_size_line(data.len(), &mut size);
        let mut slices = [
            io::IoSlice::new(size),
            io::IoSlice::new(data),
            io::IoSlice::new(b"\r\n"),
        ];
        let mut unsent = &mut slices[..];
        while !unsent.is_empty() {
            match self.socket.try_write_vectored(unsent) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => io::IoSlice::advance_slices(&mut unsent, n),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    poll_fn(|cx| self.socket.poll_write_ready(cx)).await?;
                }
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Sends what is buffered, then frees the buffer.
    fn poll_send_buffer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.drained() {
            let Self {
                socket,
                buffer,
                sent,
                ..
            } = self;
            match ready!(Pin::new(socket).poll_write(cx, &buffer[*sent..])) {
                Ok(0) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the connection took no more bytes",
                    )))
                }
                Ok(n) => *sent += n,
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
        self.buffer = Vec::new();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for BufferedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_read(cx, buf)
    }
}

impl AsyncWrite for BufferedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if ready!(self.poll_room_for(cx, data.len()))? {
            return Pin::new(&mut self.socket).poll_write(cx, data);
        }
        self.hold(data);
        Poll::Ready(Ok(data.len()))
    }

    /// pingora writes a chunk of a chunked body (size line, data, CRLF) as one vectored
    /// write and flushes it at once. With nothing buffered ahead of it and no cork holding
    /// it back, it goes out as one `writev` from where it lies instead of being copied
    /// into the buffer first (each connection's buffer is cold memory at 1,000 streams:
    /// that copy was 4.7 % of the proxy's user time). Anything buffered keeps its order:
    /// the write then joins the buffer.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        slices: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if !self.cork.is_set() && self.drained() {
            return Pin::new(&mut self.socket).poll_write_vectored(cx, slices);
        }
        let total = slices.iter().map(|slice| slice.len()).sum::<usize>();
        if ready!(self.poll_room_for(cx, total))? {
            return Pin::new(&mut self.socket).poll_write_vectored(cx, slices);
        }
        for slice in slices {
            self.hold(slice);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.cork.is_set() {
            return Poll::Ready(Ok(()));
        }
        self.poll_send_buffer(cx)
    }

    /// Sends what is buffered, then shuts the socket's write side.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_send_buffer(cx))?;
        Pin::new(&mut self.socket).poll_shutdown(cx)
    }
}

#[async_trait]
impl Shutdown for BufferedIo {
    async fn shutdown(&mut self) {
        if let Err(error) = AsyncWriteExt::shutdown(self).await {
            tracing::debug!(%error, "shutting a connection down");
        }
    }
}

impl UniqueID for BufferedIo {
    fn id(&self) -> UniqueIDType {
        self.socket.as_raw_fd()
    }
}

impl Ssl for BufferedIo {}

impl GetTimingDigest for BufferedIo {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        vec![Some(TimingDigest {
            established_ts: self.accepted,
            ..TimingDigest::default()
        })]
    }
}

impl GetProxyDigest for BufferedIo {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.proxy_digest.clone()
    }

    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.proxy_digest = Some(Arc::new(digest));
    }
}

impl GetSocketDigest for BufferedIo {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.socket_digest.clone()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.socket_digest = Some(Arc::new(digest));
    }
}

impl Peek for BufferedIo {}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Buf;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::BufferedIo;

    /// A client's socket and the server's side of its connection, as the proxy wraps it.
    async fn connected() -> (TcpStream, BufferedIo) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (accepted, _) = listener.accept().await.expect("accept");
        (client, BufferedIo::new(accepted))
    }

    /// The next `len` bytes the client receives.
    async fn received(client: &mut TcpStream, len: usize) -> Vec<u8> {
        let mut received = vec![0u8; len];
        client.read_exact(&mut received).await.expect("read");
        received
    }

    #[tokio::test]
    async fn a_corked_connection_keeps_its_writes_until_a_flush_after_the_cork() {
        let (mut client, mut io) = connected().await;
        let cork = io.cork();

        cork.set(true);
        io.write_all(b"header;").await.expect("write");
        io.flush().await.expect("corked flush");
        let mut buf = [0u8; 64];
        let nothing = tokio::time::timeout(Duration::from_millis(100), client.read(&mut buf)).await;
        assert!(nothing.is_err(), "a corked flush sent {nothing:?}");

        cork.set(false);
        io.write_all(b"chunk").await.expect("write");
        io.flush().await.expect("flush");
        assert_eq!(received(&mut client, 12).await, b"header;chunk");
    }

    #[tokio::test]
    async fn an_uncorked_vectored_write_goes_out_unless_something_is_buffered_ahead() {
        let (mut client, mut io) = connected().await;
        let cork = io.cork();
        let chunk = |data: &'static [u8]| {
            bytes::Bytes::from_static(b"5\r\n")
                .chain(data)
                .chain(&b"\r\n"[..])
        };

        // Behind a buffered header, the chunk joins the buffer (order kept).
        cork.set(true);
        io.write_all(b"header;").await.expect("write");
        cork.set(false);
        io.write_all_buf(&mut chunk(b"first")).await.expect("write");
        assert_eq!(io.pending(), b"header;5\r\nfirst\r\n");
        io.flush().await.expect("flush");

        // With nothing ahead of it, the chunk is written without waiting for a flush.
        io.write_all_buf(&mut chunk(b"again")).await.expect("write");
        assert!(io.pending().is_empty(), "the chunk was held");
        let expected = b"header;5\r\nfirst\r\n5\r\nagain\r\n";
        assert_eq!(received(&mut client, expected.len()).await, expected);
    }

    #[test]
    fn a_chunk_starts_with_its_size_in_hexadecimal() {
        let mut line = [0u8; super::CHUNK_SIZE_LINE];
        for (len, expected) in [
            (0, &b"0\r\n"[..]),
            (5, b"5\r\n"),
            (255, b"FF\r\n"),
            (4096, b"1000\r\n"),
            (usize::MAX, b"FFFFFFFFFFFFFFFF\r\n"),
        ] {
            assert_eq!(super::chunk_size_line(len, &mut line), expected);
        }
    }

    #[tokio::test]
    async fn a_chunk_is_written_through_only_with_nothing_buffered_ahead() {
        let (mut client, mut io) = connected().await;
        let cork = io.cork();
        cork.set(true);
        io.write_all(b"header;").await.expect("write");
        assert!(!io.drained());
        assert!(
            io.write_chunk(b"first").await.is_err(),
            "the header is ahead"
        );
        cork.set(false);
        io.flush().await.expect("flush");
        io.write_chunk(b"first").await.expect("nothing ahead");
        // Larger than the socket takes at once: written as the client reads.
        let large = vec![b'x'; 8 << 20];
        let (sent, read) = tokio::join!(
            io.write_chunk(&large),
            received(&mut client, 7 + 10 + 8 + (8 << 20) + 2)
        );
        sent.expect("written");
        assert_eq!(&read[..17], b"header;5\r\nfirst\r\n");
        assert_eq!(&read[17..25], b"800000\r\n");
        assert!(read[25..read.len() - 2].iter().all(|&byte| byte == b'x'));
        assert_eq!(&read[read.len() - 2..], b"\r\n");
    }

    #[tokio::test]
    async fn a_connection_holds_no_buffer_once_its_writes_have_gone_out() {
        let (mut client, mut io) = connected().await;
        assert_eq!(io.buffer.capacity(), 0, "none before the first write");
        io.write_all(b"HTTP/1.1 200 OK\r\n\r\n")
            .await
            .expect("write");
        io.write_all(b"answer").await.expect("write");
        assert!(io.buffer.capacity() > 0, "held until the flush");
        io.flush().await.expect("flush");
        assert_eq!(io.buffer.capacity(), 0, "freed once sent");
        assert_eq!(
            received(&mut client, 25).await,
            b"HTTP/1.1 200 OK\r\n\r\nanswer"
        );

        // A write as large as the buffer goes straight out behind what was held.
        let large = vec![b'x'; super::WRITE_BUFFER];
        io.write_all(b"head;").await.expect("write");
        io.write_all(&large).await.expect("write");
        assert_eq!(io.buffer.capacity(), 0);
        let sent = received(&mut client, 5 + large.len()).await;
        assert_eq!(&sent[..5], b"head;");
        assert!(sent[5..].iter().all(|&byte| byte == b'x'));
    }
}
