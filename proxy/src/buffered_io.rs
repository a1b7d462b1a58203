//! The agents' connections with a write buffer.
//!
//! pingora gives the streams its own listener accepts a write buffer, but the one that
//! sizes it (`Stream::set_buffer`) is private to pingora, and a stream made from a
//! `TcpStream` (as our accept loop does) writes straight through. pingora's HTTP/1
//! server is written for a buffered stream: it writes a response header without
//! flushing, flushes a `Content-Length` body when it is complete and every chunk of a
//! chunked one. Unbuffered, each of those writes is a system call of its own: a plain
//! answer took two `sendto`s (header, body) and each streamed chunk three (size line,
//! data, CRLF). Through this wrapper each is one.
//!
//! A stream's relay also corks it ([`Cork`]) across pingora's flushes that would send a
//! piece on its own: a chunked response's header (flushed before any body) and the
//! data written just before the end (flushed before the end that follows at once).
//! Each then leaves with what comes next: a streamed answer that is in hand goes out in
//! one write, not three.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl,
    TimingDigest, UniqueID, UniqueIDType,
};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter, ReadBuf};

/// Bytes buffered before a write goes out without a flush: a response header and a
/// typical non-streamed answer fit; larger writes go straight through.
const WRITE_BUFFER: usize = 16 * 1024;

#[derive(Debug)]
pub struct BufferedIo {
    inner: BufWriter<L4Stream>,
    cork: Cork,
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
    pub fn new(stream: L4Stream) -> BufferedIo {
        BufferedIo {
            inner: BufWriter::with_capacity(WRITE_BUFFER, stream),
            cork: Cork::default(),
        }
    }

    /// The connection's cork, for the stream relayed on it.
    pub fn cork(&self) -> Cork {
        self.cork.clone()
    }
}

impl AsyncRead for BufferedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for BufferedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.cork.is_set() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    /// Flushes what is buffered, then shuts the socket's write side.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[async_trait]
impl Shutdown for BufferedIo {
    async fn shutdown(&mut self) {
        if let Err(error) = AsyncWriteExt::shutdown(&mut self.inner).await {
            tracing::debug!(%error, "shutting a client connection down");
        }
    }
}

impl UniqueID for BufferedIo {
    fn id(&self) -> UniqueIDType {
        self.inner.get_ref().id()
    }
}

impl Ssl for BufferedIo {}

impl GetTimingDigest for BufferedIo {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_ref().get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_ref().get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_ref().get_write_pending_time()
    }
}

impl GetProxyDigest for BufferedIo {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_ref().get_proxy_digest()
    }

    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.inner.get_mut().set_proxy_digest(digest);
    }
}

impl GetSocketDigest for BufferedIo {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_ref().get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.inner.get_mut().set_socket_digest(digest);
    }
}

#[async_trait]
impl Peek for BufferedIo {
    async fn try_peek(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        self.inner.get_mut().try_peek(buf).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pingora::protocols::l4::stream::Stream as L4Stream;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::BufferedIo;

    #[tokio::test]
    async fn a_corked_connection_keeps_its_writes_until_a_flush_after_the_cork() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (accepted, _) = listener.accept().await.expect("accept");
        let mut io = BufferedIo::new(L4Stream::from(accepted));
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
        let mut received = Vec::new();
        while received.len() < b"header;chunk".len() {
            let n = client.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed early");
            received.extend_from_slice(&buf[..n]);
        }
        assert_eq!(received, b"header;chunk");
    }
}
