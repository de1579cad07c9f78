//! Plumbing shared by recon's API emulators (Stripe, HubSpot, Shopify):
//! fault plans that decide which requests get which fault, and an axum
//! listener whose connections a handler can drop without a response (the
//! `DropConnection` fault), which axum's own `TcpListener` cannot do.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

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
    /// Makes the connection fail at its next read or write: the client gets
    /// no response, as when a server or proxy dies mid-request.
    pub fn drop_connection(&self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl Connected<IncomingStream<'_, EmuListener>> for ConnHandle {
    fn connect_info(stream: IncomingStream<'_, EmuListener>) -> Self {
        ConnHandle {
            dropped: stream.io().dropped.clone(),
        }
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
}
