//! The Flight SQL front end's connection limit (`--flight-max-connections`).
//!
//! Every accepted TCP connection takes a permit from a semaphore and holds it until
//! the connection closes. A connection accepted when none is left is served anyway,
//! but only to answer each of its calls with `RESOURCE_EXHAUSTED` and a message that
//! names the flag, so the client learns why instead of seeing a reset connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// A client connection, with its permit when it is within the limit.
pub(crate) struct CountedStream {
    inner: TcpStream,
    permit: Option<OwnedSemaphorePermit>,
    limit: usize,
}

/// What a call learns about its connection.
#[derive(Clone, Debug)]
pub(crate) struct CountedInfo {
    /// The TCP addresses.
    #[allow(dead_code)]
    pub(crate) tcp: TcpConnectInfo,
    /// The limit, when this connection is past it.
    pub(crate) over_limit: Option<usize>,
}

impl CountedStream {
    /// Counts `inner` against `permits` (of `limit` in all).
    pub(crate) fn new(inner: TcpStream, permits: &Arc<Semaphore>, limit: usize) -> Self {
        let permit = permits.clone().try_acquire_owned().ok();
        if permit.is_none() {
            tracing::warn!(
                peer = ?inner.peer_addr().ok(),
                limit,
                "refusing the calls of a Flight SQL client: too many connections"
            );
        }
        CountedStream {
            inner,
            permit,
            limit,
        }
    }
}

impl Connected for CountedStream {
    type ConnectInfo = CountedInfo;

    fn connect_info(&self) -> CountedInfo {
        CountedInfo {
            tcp: self.inner.connect_info(),
            over_limit: self.permit.is_none().then_some(self.limit),
        }
    }
}

impl AsyncRead for CountedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
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
}

/// Interceptor: refuses every call of a connection past the limit.
pub(crate) fn refuse_over_limit(
    req: tonic::Request<()>,
) -> Result<tonic::Request<()>, tonic::Status> {
    let ext = req.extensions();
    let info = ext.get::<CountedInfo>().or_else(|| {
        ext.get::<tonic::transport::server::TlsConnectInfo<CountedInfo>>()
            .map(|t| t.get_ref())
    });
    if let Some(limit) = info.and_then(|i| i.over_limit) {
        return Err(super::status::status_with_state(
            "53300",
            &format!(
                "too many Flight SQL connections: the server allows {limit} \
                 (--flight-max-connections); close idle clients or retry later"
            ),
        ));
    }
    Ok(req)
}
