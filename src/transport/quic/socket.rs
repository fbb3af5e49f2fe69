//! The UDP socket under the endpoint: [`ReleasableSocket`], which the transport can close
//! while quinn still holds it, so that the port is free once the transport has shut
//! down, and [`GivenSocket`], what a transport is started on.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{ready, Context, Poll};

use tokio::io::Interest;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[cfg(doc)]
use super::QuicTransport;

/// The endpoint's UDP socket (what quinn's tokio runtime would wrap it in), which the
/// transport can close while quinn still holds it.
///
/// Quinn keeps its socket until every connection has drained, seconds after the
/// endpoint is closed. [`ReleasableSocket::release`] closes it at once: from then on,
/// what quinn sends is discarded and nothing is received.
pub(super) struct ReleasableSocket {
    /// `None` once released. The only other holders of the `Arc` are writability waits
    /// in progress, which end on `released`.
    io: RwLock<Option<Arc<SocketIo>>>,
    released: CancellationToken,
    /// Its sender is dropped with the socket: `changed` then fails.
    closed: watch::Receiver<()>,
    local_addr: SocketAddr,
}

struct SocketIo {
    io: tokio::net::UdpSocket,
    state: quinn::udp::UdpSocketState,
    /// Dropped after `io` (fields drop in order): tells `release` the socket is closed.
    _closed: watch::Sender<()>,
}

impl ReleasableSocket {
    /// Wraps `socket` (makes it non-blocking). Must be called inside a tokio runtime.
    pub(super) fn new(socket: std::net::UdpSocket) -> io::Result<ReleasableSocket> {
        let state = quinn::udp::UdpSocketState::new((&socket).into())?;
        let local_addr = socket.local_addr()?;
        let (closed_tx, closed_rx) = watch::channel(());
        Ok(ReleasableSocket {
            io: RwLock::new(Some(Arc::new(SocketIo {
                io: tokio::net::UdpSocket::from_std(socket)?,
                state,
                _closed: closed_tx,
            }))),
            released: CancellationToken::new(),
            closed: closed_rx,
            local_addr,
        })
    }

    /// Stands in for a socket the caller owns ([`QuicTransport::start_on_socket`]):
    /// nothing to close, so releasing it resolves at once.
    pub(super) fn detached(local_addr: SocketAddr) -> ReleasableSocket {
        // The sender is dropped here: `release` sees the socket closed at once.
        let (_, closed) = watch::channel(());
        ReleasableSocket {
            io: RwLock::new(None),
            released: CancellationToken::new(),
            closed,
            local_addr,
        }
    }

    fn io(&self) -> std::sync::RwLockReadGuard<'_, Option<Arc<SocketIo>>> {
        self.io
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Lets go of the socket; the returned future resolves once it is closed (at once,
    /// unless a writability wait still holds it: that wait ends now too). Idempotent.
    pub(super) fn release(&self) -> impl Future<Output = ()> + Send + 'static {
        self.released.cancel();
        let io = self
            .io
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        drop(io);
        let mut closed = self.closed.clone();
        async move { while closed.changed().await.is_ok() {} }
    }
}

impl fmt::Debug for ReleasableSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleasableSocket")
            .field("local_addr", &self.local_addr)
            .field("released", &self.released.is_cancelled())
            .finish()
    }
}

impl quinn::AsyncUdpSocket for ReleasableSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn quinn::UdpPoller>> {
        Box::pin(WritablePoller {
            socket: self,
            wait: None,
        })
    }

    fn try_send(&self, transmit: &quinn::udp::Transmit) -> io::Result<()> {
        match &*self.io() {
            Some(s) => s.io.try_io(Interest::WRITABLE, || {
                s.state.send((&s.io).into(), transmit)
            }),
            // Released: the datagram is lost, as if on the wire.
            None => Ok(()),
        }
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let guard = self.io();
        // Released: nothing arrives any more (the endpoint's other work wakes its driver).
        let Some(s) = &*guard else {
            return Poll::Pending;
        };
        loop {
            ready!(s.io.poll_recv_ready(cx))?;
            if let Ok(res) = s.io.try_io(Interest::READABLE, || {
                s.state.recv((&s.io).into(), bufs, meta)
            }) {
                return Poll::Ready(Ok(res));
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local_addr)
    }

    fn may_fragment(&self) -> bool {
        self.io().as_ref().is_none_or(|s| s.state.may_fragment())
    }

    fn max_transmit_segments(&self) -> usize {
        self.io().as_ref().map_or(1, |s| s.state.max_gso_segments())
    }

    fn max_receive_segments(&self) -> usize {
        self.io().as_ref().map_or(1, |s| s.state.gro_segments())
    }
}

type WritableWait = Pin<Box<dyn Future<Output = io::Result<()>> + Send + Sync>>;

/// Waits for the socket to be writable, for one connection (each has its own, so each is
/// woken). Holds the socket only while a wait is in progress; release ends the wait.
struct WritablePoller {
    socket: Arc<ReleasableSocket>,
    wait: Option<WritableWait>,
}

impl fmt::Debug for WritablePoller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WritablePoller")
            .field("waiting", &self.wait.is_some())
            .finish()
    }
}

impl quinn::UdpPoller for WritablePoller {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.wait.is_none() {
            let Some(io) = this.socket.io().clone() else {
                return Poll::Ready(Ok(())); // released: sends are discarded
            };
            let released = this.socket.released.clone();
            this.wait = Some(Box::pin(async move {
                tokio::select! {
                    biased;
                    r = io.io.writable() => r,
                    _ = released.cancelled() => Ok(()),
                }
            }));
        }
        let wait = this.wait.as_mut().expect("set above");
        let r = wait.as_mut().poll(cx);
        if r.is_ready() {
            this.wait = None;
        }
        r
    }
}

/// The socket a transport is started on.
pub(super) enum GivenSocket {
    /// A bound OS socket: the transport wraps it and closes it at shutdown.
    Std(std::net::UdpSocket),
    /// A socket the caller owns, and the quinn runtime to drive it with.
    Abstract(Arc<dyn quinn::AsyncUdpSocket>, Arc<dyn quinn::Runtime>),
}

impl GivenSocket {
    pub(super) fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            GivenSocket::Std(s) => s.local_addr(),
            GivenSocket::Abstract(s, _) => s.local_addr(),
        }
    }
}
