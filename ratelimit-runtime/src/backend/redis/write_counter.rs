//! A connection's socket that counts the writes that succeed: what tells a command that
//! certainly did not reach Redis (and may be sent again) from one that may have run.

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use redis::aio::AsyncStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A stream counting its successful writes: a command queued after a count was read can
/// only have reached Redis if the count has grown since.
pub(super) struct WriteCounter {
    stream: Pin<Box<dyn AsyncStream + Send + Sync>>,
    writes: Arc<AtomicU64>,
}

impl WriteCounter {
    /// `stream`, counting its writes in `writes`.
    pub fn new(stream: Pin<Box<dyn AsyncStream + Send + Sync>>, writes: Arc<AtomicU64>) -> Self {
        WriteCounter { stream, writes }
    }

    fn count(&self, written: &Poll<std::io::Result<usize>>) {
        if matches!(written, Poll::Ready(Ok(n)) if *n > 0) {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl AsyncRead for WriteCounter {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.stream.as_mut().poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteCounter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let written = self.stream.as_mut().poll_write(cx, buf);
        self.count(&written);
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let written = self.stream.as_mut().poll_write_vectored(cx, bufs);
        self.count(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.stream.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.stream.as_mut().poll_shutdown(cx)
    }
}
