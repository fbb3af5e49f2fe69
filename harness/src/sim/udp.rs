//! quinn's UDP socket trait over turmoil's simulated UDP: the real QUIC transport runs
//! unchanged on a simulated network.
//!
//! * Sending calls turmoil's `try_send_to` (its network has no backpressure, so the
//!   socket is always writable). A datagram turmoil refuses is lost, as on a real wire.
//! * turmoil's socket receives only through `async` calls, so a small task per socket
//!   moves datagrams into a channel that [`quinn::AsyncUdpSocket::poll_recv`] polls. The
//!   task ends when the adapter is dropped (the endpoint is gone) or its host crashes.
//!
//! One datagram per transmit and per receive (no GSO/GRO), no ECN.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;

/// Per-packet loss, which turmoil does not have (its `fail_rate` cuts whole links for a
/// while). Shared by every socket of a run; all hosts run on one thread in a fixed
/// order, so the seeded draws repeat.
pub struct NetCtl {
    /// Drop probability per directed link (source host, destination host).
    pub loss: std::collections::HashMap<(IpAddr, IpAddr), f64>,
    rng: StdRng,
    /// Datagrams dropped so far.
    pub dropped: u64,
}

impl NetCtl {
    /// No loss; draws seeded with `seed`.
    pub fn new(seed: u64) -> NetCtl {
        NetCtl {
            loss: Default::default(),
            rng: StdRng::seed_from_u64(seed ^ 0x5eed_1055),
            dropped: 0,
        }
    }

    /// Whether a datagram from `from` to `to` is lost.
    fn lose(&mut self, from: IpAddr, to: IpAddr) -> bool {
        match self.loss.get(&(from, to)) {
            Some(p) if *p > 0.0 && self.rng.gen_bool(*p) => {
                self.dropped += 1;
                true
            }
            _ => false,
        }
    }
}

/// A turmoil UDP socket as quinn sees it.
pub struct SimUdp {
    socket: Arc<turmoil::net::UdpSocket>,
    rx: Mutex<mpsc::UnboundedReceiver<(Vec<u8>, SocketAddr)>>,
    local: SocketAddr,
    net: Arc<Mutex<NetCtl>>,
}

impl fmt::Debug for SimUdp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimUdp")
            .field("local", &self.local)
            .finish()
    }
}

impl SimUdp {
    /// Binds `addr` on the current simulated host and starts the receive task; `local`
    /// is the address peers reach it at. Must run inside a turmoil host.
    pub async fn bind(
        addr: SocketAddr,
        local: SocketAddr,
        net: Arc<Mutex<NetCtl>>,
    ) -> io::Result<Arc<SimUdp>> {
        let socket = Arc::new(turmoil::net::UdpSocket::bind(addr).await?);
        let (tx, rx) = mpsc::unbounded_channel();
        let s = socket.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            loop {
                tokio::select! {
                    biased;
                    _ = tx.closed() => break,
                    r = s.recv_from(&mut buf) => match r {
                        Ok((n, from)) => {
                            if tx.send((buf[..n].to_vec(), from)).is_err() {
                                break;
                            }
                        }
                        Err(_) => break,
                    },
                }
            }
        });
        Ok(Arc::new(SimUdp {
            socket,
            rx: Mutex::new(rx),
            local,
            net,
        }))
    }
}

/// Always writable: turmoil's network queues without limit.
#[derive(Debug)]
struct AlwaysWritable;

impl quinn::UdpPoller for AlwaysWritable {
    fn poll_writable(self: Pin<&mut Self>, _cx: &mut Context) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl quinn::AsyncUdpSocket for SimUdp {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn quinn::UdpPoller>> {
        Box::pin(AlwaysWritable)
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        let lost = self
            .net
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .lose(self.local.ip(), transmit.destination.ip());
        if lost {
            return Ok(());
        }
        // An unknown destination or a closed link is a lost datagram, not an error.
        let _ = self
            .socket
            .try_send_to(transmit.contents, transmit.destination);
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let mut rx = self
            .rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut n = 0;
        while n < bufs.len().min(meta.len()) {
            let next = if n == 0 {
                match rx.poll_recv(cx) {
                    Poll::Ready(Some(d)) => d,
                    // The receive task ended (host shutting down): nothing more comes.
                    Poll::Ready(None) | Poll::Pending => return Poll::Pending,
                }
            } else {
                match rx.try_recv() {
                    Ok(d) => d,
                    Err(_) => break,
                }
            };
            let (data, from) = next;
            let len = data.len().min(bufs[n].len());
            bufs[n][..len].copy_from_slice(&data[..len]);
            meta[n] = RecvMeta {
                addr: from,
                len,
                stride: len,
                ecn: None,
                dst_ip: None,
            };
            n += 1;
        }
        Poll::Ready(Ok(n))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn may_fragment(&self) -> bool {
        false
    }
}
