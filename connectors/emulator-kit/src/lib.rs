//! Plumbing shared by recon's API emulators (Stripe, HubSpot, Shopify,
//! Salesforce): fault plans that decide which requests get which fault; the
//! transport faults, counters and per-request fault sequence every emulator
//! applies the same way ([`Transport`], [`TransportFault`], [`Stats`]); an axum
//! listener whose connections a handler can drop without a response (the
//! `DropConnection` fault), which axum's own `TcpListener` cannot do; the
//! server task's start and shutdown; and the small codecs and mixers every
//! emulator needs (base64, percent-decoding, SplitMix64, FNV-1a, request ids).
//!
//! # Dropping a connection
//!
//! The `DropConnection` fault must close the TCP connection without writing
//! any HTTP response. axum's `serve` accepts any [`Listener`], so [`Server`]
//! wraps `tokio::net::TcpListener` in [`EmuListener`], whose connections are
//! [`ConnIo`]: a `TcpStream` plus a shared "dropped" flag. The same flag
//! reaches the handler through `ConnectInfo<ConnHandle>` (the [`Connected`]
//! impl takes it from the accepted `ConnIo`; [`ConnHandle::of`] reads it). To
//! drop, the handler sets the flag and returns ([`dropped_response`]);
//! hyper's first attempt to write the response then fails with
//! `ConnectionAborted` before a single byte is written, hyper abandons the
//! connection, and dropping it closes the socket. The client sees the
//! connection close with no response at all.

mod codec;
mod mix;
mod transport;

pub use codec::{base64_decode, base64_encode, percent_decode};
pub use mix::{fnv1a64, splitmix64, uuid_v4, IdSeq};
pub use transport::{AfterWork, Arrival, Injected, Stats, Transport, TransportFault};

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::http::Request;
use axum::response::Response;
use axum::serve::{IncomingStream, Listener};
use axum::Router;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The body of the `MalformedJson` fault: what a proxy in front of the API
/// sends when the upstream fails, served as `200` with a JSON content type.
pub const MALFORMED_JSON_BODY: &[u8] =
    b"<html><head><title>502 Bad Gateway</title></head><body>upstream error</body></html>";

/// A fault to inject: requests number `after .. after + times` (counted
/// from 0 since the plan was set) get `kind`. When entries overlap, the
/// first in the plan wins.
#[derive(Clone, Debug)]
pub struct Fault<K> {
    /// What happens to the request.
    pub kind: K,
    /// Let this many requests through first.
    pub after: u64,
    /// Then inject on this many requests.
    pub times: u64,
}

/// A fault plan, consulted once per request in arrival order.
#[derive(Debug)]
pub struct FaultPlan<K> {
    faults: Vec<Fault<K>>,
    seen: u64,
}

impl<K> Default for FaultPlan<K> {
    fn default() -> Self {
        FaultPlan {
            faults: Vec::new(),
            seen: 0,
        }
    }
}

impl<K: Clone> FaultPlan<K> {
    /// A plan; counting starts with the next request.
    pub fn new(faults: Vec<Fault<K>>) -> Self {
        FaultPlan { faults, seen: 0 }
    }

    /// Counts one arriving request and returns the fault to inject on it, if any.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<K> {
        let n = self.seen;
        self.seen += 1;
        self.faults
            .iter()
            .find(|f| n >= f.after && n - f.after < f.times)
            .map(|f| f.kind.clone())
    }
}

/// A `TcpListener` whose connections can be dropped from a handler.
pub struct EmuListener(pub TcpListener);

impl Listener for EmuListener {
    type Io = ConnIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (ConnIo, SocketAddr) {
        loop {
            match self.0.accept().await {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let io = ConnIo {
                        stream,
                        dropped: Arc::new(AtomicBool::new(false)),
                    };
                    return (io, peer);
                }
                // Like axum's own TcpListener impl: transient errors (EMFILE,
                // ECONNABORTED, ...) are retried after a short pause.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// A connection whose I/O fails once the handler has asked for it to be dropped.
pub struct ConnIo {
    stream: TcpStream,
    dropped: Arc<AtomicBool>,
}

impl ConnIo {
    fn check(&self) -> io::Result<()> {
        if self.dropped.load(Ordering::SeqCst) {
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "emulator fault: connection dropped",
            ))
        } else {
            Ok(())
        }
    }
}

impl AsyncRead for ConnIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// The handler's grip on its connection (via `ConnectInfo`).
#[derive(Clone)]
pub struct ConnHandle {
    dropped: Arc<AtomicBool>,
}

impl ConnHandle {
    /// The handle of the connection `req` arrived on (`None` when the router
    /// was not served by [`Server`]).
    pub fn of<B>(req: &Request<B>) -> Option<ConnHandle> {
        req.extensions()
            .get::<ConnectInfo<ConnHandle>>()
            .map(|c| c.0.clone())
    }

    /// Makes the connection fail at its next read or write: the client gets
    /// no response, as when a server or proxy dies mid-request.
    pub fn drop_connection(&self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

/// Drops `conn` (see [`ConnHandle::drop_connection`]) and returns the
/// response for the handler to return, which is never written.
pub fn dropped_response(conn: Option<ConnHandle>) -> Response {
    if let Some(conn) = conn {
        conn.drop_connection();
    }
    Response::new(Body::empty())
}

impl Connected<IncomingStream<'_, EmuListener>> for ConnHandle {
    fn connect_info(stream: IncomingStream<'_, EmuListener>) -> Self {
        ConnHandle {
            dropped: stream.io().dropped.clone(),
        }
    }
}

/// An emulator's server task: `app` served on `127.0.0.1` through
/// [`EmuListener`], so handlers get a [`ConnHandle`] via `ConnectInfo`.
/// Dropping it stops the server (without waiting).
pub struct Server {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `127.0.0.1:0`; returns the listener and its base URL,
    /// `"http://127.0.0.1:PORT"` (no trailing slash).
    pub async fn bind() -> io::Result<(TcpListener, String)> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let url = format!("http://{}", listener.local_addr()?);
        Ok((listener, url))
    }

    /// Serves `app` on `listener` on a tokio task of the current runtime.
    pub fn spawn(listener: TcpListener, app: Router) -> Server {
        let app = app.into_make_service_with_connect_info::<ConnHandle>();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(EmuListener(listener), app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Server {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops accepting connections, lets requests in flight finish (for up to
    /// five seconds), and returns once the server task has ended.
    pub async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Counts a request in flight for as long as it lives.
pub struct InFlight<'a>(&'a AtomicU64);

impl<'a> InFlight<'a> {
    /// Counts one more request in `counter`; returns the guard and how many
    /// requests are in flight now, this one included.
    pub fn enter(counter: &'a AtomicU64) -> (Self, u64) {
        let now = counter.fetch_add(1, Ordering::SeqCst) + 1;
        (InFlight(counter), now)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_count_every_fault_from_the_same_origin() {
        let mut plan = FaultPlan::new(vec![
            Fault {
                kind: 'a',
                after: 0,
                times: 2,
            },
            Fault {
                kind: 'b',
                after: 5,
                times: 1,
            },
            Fault {
                kind: 'c',
                after: 1,
                times: 10,
            },
        ]);
        let got: Vec<Option<char>> = (0..7).map(|_| plan.next()).collect();
        assert_eq!(
            got,
            [
                Some('a'),
                Some('a'),
                Some('c'),
                Some('c'),
                Some('c'),
                Some('b'),
                Some('c')
            ]
        );
        assert_eq!(FaultPlan::<char>::default().next(), None);
    }

    #[test]
    fn in_flight_counts_while_the_guard_lives() {
        let counter = AtomicU64::new(0);
        let (a, now) = InFlight::enter(&counter);
        assert_eq!(now, 1);
        let (b, now) = InFlight::enter(&counter);
        assert_eq!(now, 2);
        drop(a);
        assert_eq!(counter.load(Ordering::SeqCst), 1);
        drop(b);
        assert_eq!(counter.load(Ordering::SeqCst), 0);
    }
}
