//! Incoming connections: the accept loop, naming each peer by its certificate, the cap on
//! connections per peer, the hello each stream begins with, and reading its frames
//! within the frame deadline and the inbound byte budget.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quinn::{Connection, ConnectionError, RecvStream};
use slog::{debug, o, warn, Logger};
use tokio_util::sync::CancellationToken;

use crate::tls::RemovedNode;
use crate::transport::frame::{self, FrameError};
use crate::transport::hello::{Hello, HELLO_LEN};
use crate::transport::log_limit::warn_limited;
use crate::transport::{Inbound, NodeId, TransportStats};

use super::config::Settings;
use super::shared::{describe_loss, peer_node_id, Shared};
use super::{close_code, code};

/// How long an accepted stream may take to deliver its hello.
const HELLO_WAIT: Duration = Duration::from_secs(5);

/// One of a peer's incoming connection slots; given back when dropped.
struct ConnectionSlot(Arc<AtomicUsize>);

impl ConnectionSlot {
    fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<ConnectionSlot> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| ConnectionSlot(count.clone()))
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accepts incoming connections until the transport closes.
pub(super) async fn accept_loop(shared: Arc<Shared>) {
    loop {
        let incoming = tokio::select! {
            biased;
            _ = shared.shutdown.cancelled() => return,
            incoming = shared.endpoint.accept() => match incoming {
                Some(incoming) => incoming,
                None => return,
            },
        };
        shared.spawn(serve_connection(shared.clone(), incoming));
    }
}

/// Completes the handshake of one incoming connection, names the peer by its
/// certificate, and reads its streams.
async fn serve_connection(shared: Arc<Shared>, incoming: quinn::Incoming) {
    let remote = incoming.remote_address();
    let log = shared.log.new(o!("remote" => remote.to_string()));
    // Warnings about this remote: one a minute per IP address (a reconnecting client
    // changes ports), the rest at DEBUG.
    let log_key = remote.ip().to_string();
    let conn = tokio::select! {
        biased;
        _ = shared.shutdown.cancelled() => return,
        r = incoming => match r {
            Ok(conn) => conn,
            // We detected the failure: rustls rejected the client (no certificate, a
            // certificate of another CA, expired, ...) or the handshake broke protocol.
            Err(e @ ConnectionError::TransportError(_)) => {
                TransportStats::bump(&shared.stats.connections_refused);
                warn_limited!(shared.refusal_log, &log_key, log,
                    "refused incoming connection: handshake failed"; "error" => %e,);
                return;
            }
            // The client gave up (it rejected our certificate, timed out, or abandoned
            // the attempt): not a refusal of ours.
            Err(e) => {
                debug!(log, "incoming handshake did not complete"; "error" => %e);
                return;
            }
        },
    };
    let refuse =
        |c: u32, reason: String| refuse_connection(&shared, &conn, &log, &log_key, c, &reason);
    let peer = match peer_node_id(&conn) {
        Ok(id) => id,
        Err(e) => return refuse(close_code::REFUSED, e),
    };
    // The handshake refuses them already; this catches a handshake that completed just
    // before the removal was applied.
    if shared.tls.removed.contains(peer) {
        return refuse(close_code::REFUSED, RemovedNode(peer).to_string());
    }
    let max_conns = shared.settings.max_connections_per_peer;
    let (cancel, seen, slot) = match shared.peers_read().get(&peer) {
        Some(p) => (
            p.cancel.clone(),
            p.seen.clone(),
            ConnectionSlot::take(&p.connections, max_conns),
        ),
        None => {
            return refuse(
                close_code::REFUSED,
                format!("node {peer} is not a known peer"),
            )
        }
    };
    // Held while the connection is served: the peer's slot.
    let Some(_slot) = slot else {
        TransportStats::bump(&shared.stats.connections_over_limit);
        return refuse(
            close_code::TOO_MANY_CONNECTIONS,
            format!("node {peer} already has {max_conns} connections open to this node"),
        );
    };
    let log = log.new(o!("peer" => peer));
    debug!(log, "accepted connection");
    seen.notify_one();
    loop {
        let stream = tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                let c = if shared.shutdown.is_cancelled() {
                    close_code::SHUTDOWN
                } else {
                    close_code::PEER_REMOVED
                };
                shared.close_conn(&conn, c, b"closing").await;
                return;
            }
            s = conn.accept_uni() => s,
        };
        match stream {
            Ok(stream) => shared.spawn(read_stream(
                shared.clone(),
                conn.clone(),
                peer,
                stream,
                cancel.clone(),
                log.clone(),
            )),
            Err(e) => {
                debug!(log, "incoming connection ended"; "reason" => describe_loss(&e));
                return;
            }
        }
    }
}

/// Reads frames from one stream of `peer` until it ends or misbehaves.
///
/// Per frame: the length prefix (nothing allocated yet, no deadline: a stream may idle
/// between frames), then the frame's reservation of the inbound budget (waiting while it
/// is spent), then the payload within the frame deadline, then the wire scan (entries,
/// unknown fields) and the decode. The message goes to the driver with its reservation,
/// shrunk to what the decoded message may take: a root frame's as [`Inbound::Message`],
/// an election frame's as [`Inbound::Election`] with the frame's election id.
async fn read_stream(
    shared: Arc<Shared>,
    conn: Connection,
    peer: NodeId,
    mut stream: RecvStream,
    cancel: CancellationToken,
    log: Logger,
) {
    match read_hello(&shared, &conn, peer, &mut stream, &cancel, &log).await {
        Some(hello) => {
            // Through `to_driver`, like every item, so the budget's count of the
            // channel's items stays right.
            if shared
                .to_driver(Inbound::Hello { from: peer, hello }, None)
                .is_err()
            {
                TransportStats::bump(&shared.stats.dropped_inbound_full);
            }
        }
        None => return,
    }
    let Settings {
        max_frame,
        max_entries,
        frame_timeout,
        ..
    } = shared.settings;
    let close = |c: u32, reason: &'static [u8]| conn.close(code(c), reason);
    let malformed = |e: &FrameError| {
        TransportStats::bump(&shared.stats.frames_malformed);
        warn!(log, "closing connection: malformed frame"; "error" => %e);
        close(close_code::MALFORMED, b"malformed frame");
    };
    loop {
        let prefix = tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            r = frame::read_prefix(&mut stream) => r,
        };
        let len = match prefix {
            Ok(Some(len)) if len <= max_frame => len,
            Ok(Some(len)) => {
                TransportStats::bump(&shared.stats.frames_oversized);
                let e = FrameError::TooLarge {
                    len,
                    max: max_frame,
                };
                warn!(log, "closing connection: oversized frame"; "error" => %e);
                return close(close_code::FRAME_TOO_LARGE, b"frame too large");
            }
            Ok(None) => return,
            Err(e @ FrameError::Malformed(_)) => return malformed(&e),
            Err(e) => {
                debug!(log, "stream ended"; "reason" => %e);
                return;
            }
        };
        let reserve = frame::decode_bound(len, max_entries);
        let reclaim = || shared.reclaim_budget();
        let mut permit = match shared.budget.try_acquire(peer, reserve, reclaim) {
            Some(p) => p,
            None => {
                TransportStats::bump(&shared.stats.frames_waited_for_budget);
                debug!(log, "frame waits for inbound budget"; "reserve" => reserve);
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return,
                    // A connection that ends meanwhile needs no budget any more.
                    _ = conn.closed() => return,
                    p = shared.budget.acquire(peer, reserve, reclaim) => p,
                }
            }
        };
        let payload = tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            r = tokio::time::timeout(frame_timeout, frame::read_payload(&mut stream, len)) => r,
        };
        let payload = match payload {
            Ok(Ok(payload)) => payload,
            Err(_elapsed) => {
                TransportStats::bump(&shared.stats.frames_timed_out);
                warn!(log, "closing connection: frame not received in time";
                    "len" => len, "timeout" => format!("{frame_timeout:?}"));
                return close(close_code::FRAME_TIMEOUT, b"frame timed out");
            }
            Ok(Err(e @ FrameError::Malformed(_))) => return malformed(&e),
            Ok(Err(e)) => {
                debug!(log, "stream ended"; "reason" => %e);
                return;
            }
        };
        match frame::parse_election_limited(&payload, max_entries) {
            Ok((election, msg, shape)) => {
                drop(payload);
                permit.shrink_to(shape.decoded_bytes(len));
                if shared.deliver(peer, election, msg, permit, &log).is_err() {
                    return; // the driver is gone
                }
            }
            Err(e @ FrameError::TooManyEntries { .. }) => {
                TransportStats::bump(&shared.stats.frames_too_many_entries);
                warn!(log, "closing connection: too many entries in a frame"; "error" => %e);
                return close(close_code::TOO_MANY_ENTRIES, b"too many entries");
            }
            Err(e) => return malformed(&e),
        }
    }
}

/// The bytes of the hello a stream begins with: the fixed part and, when it announces
/// one, the extension (at most [`MAX_EXTENSION`](crate::transport::hello::MAX_EXTENSION) bytes). The inner error: not a hello.
async fn read_hello_bytes(
    stream: &mut RecvStream,
) -> Result<Result<Vec<u8>, String>, quinn::ReadExactError> {
    let mut head = [0u8; HELLO_LEN];
    stream.read_exact(&mut head).await?;
    let mut bytes = head.to_vec();
    match Hello::extended(&head) {
        Ok(false) => return Ok(Ok(bytes)),
        Ok(true) => {}
        Err(e) => return Ok(Err(e)),
    }
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await?;
    let n = match Hello::extension_len(len) {
        Ok(n) => n,
        Err(e) => return Ok(Err(e)),
    };
    bytes.extend_from_slice(&len);
    let mut ext = vec![0u8; n];
    stream.read_exact(&mut ext).await?;
    bytes.extend_from_slice(&ext);
    Ok(Ok(bytes))
}

/// Reads the hello a stream begins with; refuses (closes the connection) a stream that
/// does not begin with one, or a peer of another group than ours.
async fn read_hello(
    shared: &Shared,
    conn: &Connection,
    peer: NodeId,
    stream: &mut RecvStream,
    cancel: &CancellationToken,
    log: &Logger,
) -> Option<Hello> {
    let read = tokio::select! {
        biased;
        _ = cancel.cancelled() => return None,
        r = tokio::time::timeout(HELLO_WAIT, read_hello_bytes(stream)) => r,
    };
    let refuse = |why: String| {
        let key = conn.remote_address().ip().to_string();
        refuse_connection(shared, conn, log, &key, close_code::WRONG_GROUP, &why);
    };
    let hello = match read {
        Ok(Ok(Ok(bytes))) => match Hello::decode(&bytes) {
            Ok(h) => h,
            Err(e) => {
                TransportStats::bump(&shared.stats.frames_malformed);
                refuse(format!("node {peer}: {e}"));
                return None;
            }
        },
        Ok(Ok(Err(e))) => {
            TransportStats::bump(&shared.stats.frames_malformed);
            refuse(format!("node {peer}: {e}"));
            return None;
        }
        Ok(Err(e)) => {
            debug!(log, "stream ended before its hello"; "reason" => %e);
            return None;
        }
        Err(_) => {
            TransportStats::bump(&shared.stats.frames_malformed);
            refuse(format!(
                "node {peer} sent no hello within {HELLO_WAIT:?}: not a tenure peer of this version"
            ));
            return None;
        }
    };
    let ours = shared.hello.borrow().and_then(|h| h.group);
    if let (Some(ours), Some(theirs)) = (ours, hello.group) {
        if ours != theirs {
            refuse(format!(
                "node {peer} belongs to group {theirs}, this node to group {ours}: a node of \
                 another group (or a data folder copied from one) uses this group's certificates"
            ));
            return None;
        }
    }
    debug!(log, "peer said hello"; "hello" => %hello);
    Some(hello)
}

/// Refuses a connection that passed the handshake (its certificate is from our CA):
/// counts it, warns (at most once a minute per `key`, the remote IP address), and closes
/// it with `c`, telling the client why.
fn refuse_connection(
    shared: &Shared,
    conn: &Connection,
    log: &Logger,
    key: &str,
    c: u32,
    reason: &str,
) {
    TransportStats::bump(&shared.stats.connections_refused);
    warn_limited!(shared.refusal_log, key, log,
        "refused incoming connection"; "reason" => reason,);
    conn.close(code(c), reason.as_bytes());
}
