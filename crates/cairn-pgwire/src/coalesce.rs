//! One write per request: a client wrapper that queues responses until Sync.
//!
//! pgwire's default handlers end some responses with `send`, which flushes the
//! connection: after `Execute` its `CommandComplete`, after `Describe` each message.
//! PostgreSQL flushes only when the client needs the bytes, at `Sync` or `Flush` (or
//! when its output buffer fills). Over TCP with `TCP_NODELAY` every flush is a system
//! call and a segment of its own, and it wakes the client for a partial answer: a
//! prepared point read cost two sends where PostgreSQL makes one, and on a machine
//! where client and server share the cores those wakeups are the larger part of a
//! keyed request's cost.
//!
//! [`Coalesce`] wraps the connection for one handler call. Messages go into the
//! connection's buffer as before (which still writes out on its own once the buffer
//! passes its limit, so long results stream), but `flush` does nothing: the handler
//! for `Sync` or `Flush`, which runs on the connection itself, writes everything.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Sink;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState, SessionExtensions};
use pgwire::messages::ProtocolVersion;
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::SecretKey;
use pgwire::tokio::tokio_rustls::rustls::pki_types::CertificateDer;

/// A connection whose `flush` is deferred to the connection's next real flush (see
/// the module docs). Everything else is the wrapped connection's.
pub(crate) struct Coalesce<'a, C>(pub(crate) &'a mut C);

impl<C, M> Sink<M> for Coalesce<'_, C>
where
    C: Sink<M> + Unpin,
{
    type Error = C::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        Pin::new(&mut *self.0).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: M) -> Result<(), C::Error> {
        Pin::new(&mut *self.0).start_send(item)
    }

    /// Nothing: the bytes wait in the connection's buffer for `Sync` or `Flush`.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        Pin::new(&mut *self.0).poll_close(cx)
    }
}

impl<C: ClientPortalStore> ClientPortalStore for Coalesce<'_, C> {
    type PortalStore = C::PortalStore;

    fn portal_store(&self) -> &Self::PortalStore {
        self.0.portal_store()
    }
}

impl<C: ClientInfo> ClientInfo for Coalesce<'_, C> {
    fn socket_addr(&self) -> SocketAddr {
        self.0.socket_addr()
    }

    fn is_secure(&self) -> bool {
        self.0.is_secure()
    }

    fn protocol_version(&self) -> ProtocolVersion {
        self.0.protocol_version()
    }

    fn set_protocol_version(&mut self, version: ProtocolVersion) {
        self.0.set_protocol_version(version)
    }

    fn pid_and_secret_key(&self) -> (i32, SecretKey) {
        self.0.pid_and_secret_key()
    }

    fn set_pid_and_secret_key(&mut self, pid: i32, secret_key: SecretKey) {
        self.0.set_pid_and_secret_key(pid, secret_key)
    }

    fn state(&self) -> PgWireConnectionState {
        self.0.state()
    }

    fn set_state(&mut self, new_state: PgWireConnectionState) {
        self.0.set_state(new_state)
    }

    fn transaction_status(&self) -> TransactionStatus {
        self.0.transaction_status()
    }

    fn set_transaction_status(&mut self, new_status: TransactionStatus) {
        self.0.set_transaction_status(new_status)
    }

    fn metadata(&self) -> &HashMap<String, String> {
        self.0.metadata()
    }

    fn metadata_mut(&mut self) -> &mut HashMap<String, String> {
        self.0.metadata_mut()
    }

    fn session_extensions(&self) -> &SessionExtensions {
        self.0.session_extensions()
    }

    fn sni_server_name(&self) -> Option<&str> {
        self.0.sni_server_name()
    }

    fn client_certificates<'b>(&self) -> Option<&[CertificateDer<'b>]> {
        self.0.client_certificates()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::SinkExt;

    /// A sink that records what reaches it and counts flushes.
    #[derive(Default)]
    struct Recorder {
        items: Vec<u32>,
        flushes: usize,
    }

    impl Sink<u32> for Recorder {
        type Error = std::io::Error;

        fn poll_ready(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn start_send(mut self: Pin<&mut Self>, item: u32) -> Result<(), Self::Error> {
            self.items.push(item);
            Ok(())
        }

        fn poll_flush(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Result<(), Self::Error>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn sends_through_the_wrapper_queue_without_flushing() {
        let mut conn = Recorder::default();
        {
            let mut c = Coalesce(&mut conn);
            c.send(1).await.unwrap();
            c.feed(2).await.unwrap();
            c.send(3).await.unwrap();
            c.flush().await.unwrap();
        }
        assert_eq!(
            conn.items,
            vec![1, 2, 3],
            "every message reaches the connection"
        );
        assert_eq!(conn.flushes, 0, "no flush before the connection's own");
        conn.flush().await.unwrap();
        assert_eq!(conn.flushes, 1);
    }
}
