//! Connecting to the nodes' admin endpoints: to all of them, or to most of them for
//! commands that need only the one that leads.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tenure::admin::{Client, ClientError, CONNECT_TIMEOUT};
use tenure::transport::tls::OperatorIdentity;

use super::{join_all, Args};

/// How long [`connect_most`] still waits for the other nodes once more than half of them
/// answered: a stopped or cut-off node does not hold a command up for
/// [`CONNECT_TIMEOUT`], and a live one on a LAN connects in milliseconds.
const CONNECT_GRACE: Duration = Duration::from_millis(300);

/// One connection being made.
type Connecting<'a> = Pin<Box<dyn Future<Output = Result<Client, ClientError>> + 'a>>;

/// Connects to `addr`, waiting at most the connect timeout (or `--timeout` if shorter);
/// the client then waits `--timeout` for each answer.
async fn connect_one(
    args: &Args,
    identity: &OperatorIdentity,
    addr: SocketAddr,
) -> Result<Client, ClientError> {
    let wait = args.timeout.min(CONNECT_TIMEOUT);
    let r = match tokio::time::timeout(wait, Client::connect(addr, identity, None)).await {
        Ok(r) => r,
        Err(_) => Err(ClientError::TimedOut {
            addr,
            what: "no TLS handshake; is a node's admin endpoint listening there?".into(),
            timeout: wait,
        }),
    };
    r.map(|mut c| {
        c.set_timeout(args.timeout);
        c
    })
}

/// Connects to every address at once; each entry is the address and its client or why
/// it could not be reached.
pub(super) async fn connect_all(
    args: &Args,
    identity: &OperatorIdentity,
) -> Vec<(SocketAddr, Result<Client, ClientError>)> {
    let attempts = args
        .addrs
        .iter()
        .map(|addr| async move { (*addr, connect_one(args, identity, *addr).await) });
    join_all(attempts).await
}

/// Connects to every `--addr` at once, as [`connect_all`], but once more than half of
/// them connected it waits at most [`CONNECT_GRACE`] more for the others; an address
/// not connected by then is reported as timed out. For commands that need one node
/// (the one that leads) rather than all.
pub(super) async fn connect_most(
    args: &Args,
    identity: &OperatorIdentity,
) -> Vec<(SocketAddr, Result<Client, ClientError>)> {
    let mut futs: Vec<Connecting<'_>> = args
        .addrs
        .iter()
        .map(|addr| Box::pin(connect_one(args, identity, *addr)) as Connecting<'_>)
        .collect();
    let mut outs: Vec<Option<Result<Client, ClientError>>> = futs.iter().map(|_| None).collect();
    let mut grace: Option<Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        for (f, out) in futs.iter_mut().zip(outs.iter_mut()) {
            if out.is_none() {
                if let Poll::Ready(v) = f.as_mut().poll(cx) {
                    *out = Some(v);
                }
            }
        }
        if outs.iter().all(Option::is_some) {
            return Poll::Ready(());
        }
        let connected = outs.iter().filter(|o| matches!(o, Some(Ok(_)))).count();
        if connected * 2 > outs.len() {
            let g = grace.get_or_insert_with(|| Box::pin(tokio::time::sleep(CONNECT_GRACE)));
            if g.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    })
    .await;
    drop(futs);
    args.addrs
        .iter()
        .zip(outs)
        .map(|(addr, out)| {
            let r = out.unwrap_or_else(|| {
                Err(ClientError::TimedOut {
                    addr: *addr,
                    what: "no TLS handshake while most nodes answered".into(),
                    timeout: CONNECT_GRACE,
                })
            });
            (*addr, r)
        })
        .collect()
}
