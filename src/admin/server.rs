//! The admin endpoint a node opens: operator certificates only, one stream per request.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::VarInt;
use slog::{debug, info, o, warn, Logger};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::election::{check_name, ElectionError, ElectionOptions};
use crate::error::{MembershipError, TransferError};
use crate::node::Node;
use crate::status::Membership;
use crate::status::Role;
use crate::tls::{check_operator_cert, TlsError, TlsIdentity};
use crate::transport::log_limit::{self, warn_limited, LogLimit};
use crate::transport::NodeId;

use super::protocol::{ElectionEntry, Leaderships, LedElection, Response};
use super::{
    close_code, peer_cert, ErrorKind, ErrorReply, Reply, Request, ALPN, IDLE_TIMEOUT_MS,
    MAX_REQUEST, MAX_STREAMS, READ_TIMEOUT,
};

/// Why [`serve`] could not open the admin endpoint.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The UDP socket could not be bound. Cause: address in use or not an address of
    /// this host. Fix: choose another `--admin` address (port 0 picks a free one).
    #[error("cannot bind the admin endpoint to UDP {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The TLS configuration could not be built from the node's identity.
    #[error("admin endpoint TLS setup failed: {0}")]
    Tls(#[from] TlsError),
    /// The identity names another node than the one served. Fix: pass the node's own
    /// identity (the one it was started with).
    #[error("the TLS identity names node {identity}, but the admin endpoint serves node {node}")]
    IdentityMismatch {
        /// The node served.
        node: NodeId,
        /// The node the certificate names.
        identity: NodeId,
    },
    /// Not called inside a tokio runtime. Fix: call it from async code on tokio.
    #[error("admin::serve must be called inside a tokio runtime")]
    NoRuntime,
}

/// A running admin endpoint. Closing it ([`AdminServer::close`], or dropping it) stops
/// accepting connections and closes the open ones; the node keeps running.
pub struct AdminServer {
    local_addr: SocketAddr,
    endpoint: quinn::Endpoint,
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl fmt::Debug for AdminServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminServer")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl AdminServer {
    /// The address the endpoint is bound to (with the real port when port 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Closes every connection and waits until the endpoint's tasks have ended.
    pub async fn close(mut self) {
        self.stop();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), self.endpoint.wait_idle()).await;
    }

    fn stop(&self) {
        self.shutdown.cancel();
        self.endpoint.close(
            VarInt::from_u32(close_code::SHUTDOWN),
            b"admin endpoint closed",
        );
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Opens node `node`'s admin endpoint on UDP `addr` (port 0 picks a free port; see
/// [`AdminServer::local_addr`]). `identity` is the node's own TLS identity: the endpoint
/// presents its certificate and trusts its CA. Must be called inside a tokio runtime.
///
/// The endpoint logs every request (command and outcome) and every refused client to
/// `logger`.
pub fn serve(
    node: Node,
    addr: SocketAddr,
    identity: &TlsIdentity,
    logger: Logger,
) -> Result<AdminServer, ServeError> {
    if identity.id() != node.id() {
        return Err(ServeError::IdentityMismatch {
            node: node.id(),
            identity: identity.id(),
        });
    }
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| ServeError::NoRuntime)?;
    let config = server_config(identity)?;
    let socket =
        std::net::UdpSocket::bind(addr).map_err(|source| ServeError::Bind { addr, source })?;
    let endpoint = {
        let _guard = runtime.enter();
        quinn::Endpoint::new(
            quinn::EndpointConfig::default(),
            Some(config),
            socket,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(|source| ServeError::Bind { addr, source })?
    };
    let local_addr = endpoint
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    let log = logger.new(o!("admin" => local_addr.to_string()));
    info!(log, "admin endpoint listening");
    let shutdown = CancellationToken::new();
    if let Some(updates) = node.tls_updates() {
        runtime.spawn(follow_reloads(
            endpoint.clone(),
            updates,
            shutdown.clone(),
            log.clone(),
        ));
    }
    let task = runtime.spawn(accept_loop(endpoint.clone(), node, shutdown.clone(), log));
    Ok(AdminServer {
        local_addr,
        endpoint,
        shutdown,
        task: Some(task),
    })
}

/// Presents each certificate the node's transport reloads (README, "Rotating
/// certificates") to new admin clients too, until the endpoint stops.
async fn follow_reloads(
    endpoint: quinn::Endpoint,
    mut updates: tokio::sync::watch::Receiver<TlsIdentity>,
    shutdown: CancellationToken,
    log: Logger,
) {
    updates.borrow_and_update();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = updates.changed() => if changed.is_err() { return },
        }
        let identity = updates.borrow_and_update().clone();
        match server_config(&identity) {
            // `stop` cancels `shutdown` before it closes the endpoint; checked again here
            // so that no configuration is set on a stopped endpoint.
            Ok(config) if !shutdown.is_cancelled() => {
                endpoint.set_server_config(Some(config));
                info!(log, "admin endpoint uses the reloaded certificate");
            }
            Ok(_) => return,
            Err(e) => warn!(log, "admin endpoint keeps its certificate"; "error" => %e),
        }
    }
}

/// The admin endpoint's quinn server configuration: `identity`'s certificate, clients
/// of its CA bundle, ALPN [`ALPN`], the admin endpoint's QUIC limits.
fn server_config(identity: &TlsIdentity) -> Result<quinn::ServerConfig, ServeError> {
    let mut crypto = identity.rustls_server_config()?;
    crypto.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(crypto)
        .map_err(|e| ServeError::Tls(TlsError::Quic(e.to_string())))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(VarInt::from_u32(MAX_STREAMS))
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .datagram_receive_buffer_size(None)
        .max_idle_timeout(Some(quinn::IdleTimeout::from(VarInt::from_u32(
            IDLE_TIMEOUT_MS,
        ))));
    config.transport_config(Arc::new(transport));
    config.migration(false);
    Ok(config)
}

async fn accept_loop(
    endpoint: quinn::Endpoint,
    node: Node,
    shutdown: CancellationToken,
    log: Logger,
) {
    // One warning a minute per client IP address about failed handshakes and refusals.
    let refusals = Arc::new(LogLimit::new(log_limit::WINDOW));
    loop {
        let incoming = tokio::select! {
            _ = shutdown.cancelled() => return,
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => return,
            },
        };
        let (node, shutdown, log) = (node.clone(), shutdown.clone(), log.clone());
        let refusals = refusals.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = serve_connection(incoming, node, log, &refusals) => {}
            }
        });
    }
}

async fn serve_connection(incoming: quinn::Incoming, node: Node, log: Logger, refusals: &LogLimit) {
    let key = incoming.remote_address().ip().to_string();
    let log = log.new(o!("client" => incoming.remote_address().to_string()));
    let conn = match incoming.await {
        Ok(c) => c,
        Err(e) => {
            // rustls refused the client (no certificate, another CA, ...), or the client
            // gave up. The client learns why from the TLS alert.
            warn_limited!(refusals, &key, log, "admin handshake failed"; "error" => %e,);
            return;
        }
    };
    let refusal = match peer_cert(&conn) {
        None => Some("no client certificate".to_string()),
        Some(cert) => match check_operator_cert(&cert) {
            Ok(()) => None,
            Err(TlsError::NotOperatorCertificate { reason, .. }) => Some(reason),
            Err(e) => Some(e.to_string()),
        },
    };
    if let Some(reason) = refusal {
        warn_limited!(refusals, &key, log, "refused admin connection"; "reason" => &reason,);
        conn.close(VarInt::from_u32(close_code::REFUSED), reason.as_bytes());
        return;
    }
    debug!(log, "operator connected");
    loop {
        let (send, recv) = match conn.accept_bi().await {
            Ok(s) => s,
            Err(e) => {
                debug!(log, "operator connection ended"; "reason" => %e);
                return;
            }
        };
        let (node, log) = (node.clone(), log.clone());
        tokio::spawn(async move { serve_stream(send, recv, node, log).await });
    }
}

async fn serve_stream(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    node: Node,
    log: Logger,
) {
    let read = tokio::time::timeout(READ_TIMEOUT, recv.read_to_end(MAX_REQUEST)).await;
    let result = match read {
        Err(_) => Err(ErrorReply::new(
            ErrorKind::BadRequest,
            format!(
                "the request did not arrive within {} s; send one JSON object and finish the stream",
                READ_TIMEOUT.as_secs()
            ),
        )),
        Ok(Err(quinn::ReadToEndError::TooLong)) => Err(ErrorReply::new(
            ErrorKind::BadRequest,
            format!("the request is larger than {MAX_REQUEST} bytes"),
        )),
        Ok(Err(quinn::ReadToEndError::Read(e))) => {
            debug!(log, "admin request not read"; "error" => %e);
            return;
        }
        Ok(Ok(bytes)) => match Request::from_json(&bytes) {
            Ok(request) => {
                let command = request.name();
                // Reads (status, history) may be polled: log them at debug level.
                let changes = request.leader_only();
                let r = execute(&node, request).await;
                match &r {
                    Ok(_) if changes => info!(log, "admin request done"; "command" => command),
                    Ok(_) => debug!(log, "admin request done"; "command" => command),
                    Err(e) => {
                        info!(log, "admin request refused"; "command" => command, "kind" => e.kind.as_str(), "reason" => &e.message);
                    }
                }
                r
            }
            Err(e) => {
                info!(log, "bad admin request"; "reason" => &e.message);
                Err(e)
            }
        },
    };
    let _ = recv.stop(VarInt::from_u32(0));
    let bytes = Response::from_result(result).encode();
    if send.write_all(&bytes).await.is_ok() {
        let _ = send.finish();
    }
}

/// Carries out one request on `node`.
async fn execute(node: &Node, request: Request) -> Result<Reply, ErrorReply> {
    let me = node.id();
    match request {
        Request::Status => Ok(Reply::Status(node.status().await?)),
        Request::History => Ok(Reply::History {
            records: node.history().await?,
        }),
        Request::Backup => Ok(Reply::Backup(node.backup().await?)),
        Request::Transfer { to } => node
            .transfer_leadership(to)
            .await
            .map(|leader| Reply::Transferred { leader })
            .map_err(|e| transfer_refusal(me, e)),
        Request::Drain { id } => membership(me, node.set_drained(id, true).await),
        Request::Undrain { id } => membership(me, node.set_drained(id, false).await),
        Request::AddLearner { id, addr } => membership(me, node.add_learner(id, addr).await),
        Request::Promote { id } => membership(me, node.promote(id).await),
        Request::Remove { id } => membership(me, node.remove_member(id).await),
        Request::Replace { old, new } => membership(me, node.replace_member(old, new).await),
        Request::Elections => {
            let catalog = node.list_elections().await?;
            let view = node.elections().borrow().clone();
            let elections = catalog
                .into_iter()
                .map(|info| {
                    let l = view.get(&info.name);
                    ElectionEntry {
                        leader: l.and_then(|l| l.leader),
                        term: l.map_or(0, |l| l.term),
                        name: info.name,
                        id: info.id,
                        options: info.options,
                        created_at: info.created_at,
                        suspended: info.suspended,
                    }
                })
                .collect();
            Ok(Reply::Elections { elections })
        }
        Request::CreateElection {
            name,
            affinity,
            priority,
        } => {
            let mut options = ElectionOptions::new().affinity(affinity);
            if let Some(p) = priority {
                options = options.priority(p);
            }
            node.create_election(&name, options)
                .await
                .map(Reply::ElectionCreated)
                .map_err(|e| election_refusal(me, e))
        }
        Request::RemoveElection { name } => {
            check_name(&name).map_err(|e| election_refusal(me, e))?;
            node.remove_election(&name)
                .await
                .map(|r| Reply::ElectionRemoved {
                    name,
                    id: r.id,
                    retired_above: r.retired_above.term(),
                })
                .map_err(|e| election_refusal(me, e))
        }
        Request::SuspendElection { name } => {
            check_name(&name).map_err(|e| election_refusal(me, e))?;
            node.suspend_election(&name)
                .await
                .map(Reply::ElectionSuspended)
                .map_err(|e| election_refusal(me, e))
        }
        Request::ResumeElection { name } => {
            check_name(&name).map_err(|e| election_refusal(me, e))?;
            node.resume_election(&name)
                .await
                .map(Reply::ElectionSuspended)
                .map_err(|e| election_refusal(me, e))
        }
        Request::TransferElection { name, to } => {
            check_name(&name).map_err(|e| election_refusal(me, e))?;
            // Only a name of the catalog gets a handle (a handle keeps a watch per name).
            if !node
                .list_elections()
                .await?
                .iter()
                .any(|info| info.name == name)
            {
                return Err(election_refusal(me, ElectionError::NotFound(name)));
            }
            let election = node.election(&name);
            match election.transfer_leadership(to).await {
                Ok(leader) => Ok(Reply::ElectionTransferred { name, leader }),
                Err(TransferError::NotLeader { leader_hint }) => {
                    Err(ErrorReply::not_election_leader(me, &name, leader_hint))
                }
                Err(e) => Err(transfer_refusal(me, e)),
            }
        }
        Request::Leaderships => {
            let view = node.elections().borrow().clone();
            let led = view
                .iter()
                .filter(|(_, l)| l.role == Role::Leader)
                .map(|(name, l)| LedElection {
                    name: name.clone(),
                    term: l.term,
                    leased: l.leased,
                })
                .collect();
            Ok(Reply::Leaderships(Leaderships {
                node: me,
                elections: view.len() as u64,
                leaderless: view.values().filter(|l| l.leader.is_none()).count() as u64,
                suspended: view.values().filter(|l| l.suspended).count() as u64,
                led,
            }))
        }
    }
}

fn election_refusal(me: NodeId, e: ElectionError) -> ErrorReply {
    let kind = match &e {
        ElectionError::NotLeader { leader_hint } => {
            return ErrorReply::not_leader(me, *leader_hint)
        }
        ElectionError::NotFound(_) | ElectionError::Removed(_) => ErrorKind::UnknownElection,
        ElectionError::Exists(_) => ErrorKind::ElectionExists,
        ElectionError::InvalidName { .. } => ErrorKind::InvalidName,
        ElectionError::Full(_) => ErrorKind::CatalogFull,
        ElectionError::TimedOut(_) => ErrorKind::TimedOut,
        ElectionError::Stopped(_) => ErrorKind::Stopped,
    };
    ErrorReply::new(kind, e.to_string())
}

fn transfer_refusal(me: NodeId, e: TransferError) -> ErrorReply {
    let kind = match &e {
        TransferError::NotLeader { leader_hint } => {
            return ErrorReply::not_leader(me, *leader_hint)
        }
        TransferError::UnknownNode(_) => ErrorKind::UnknownNode,
        TransferError::AlreadyLeader(_) => ErrorKind::AlreadyLeader,
        TransferError::NoCandidate => ErrorKind::NoCandidate,
        TransferError::Drained(_) => ErrorKind::Drained,
        TransferError::TimedOut { .. } => ErrorKind::TimedOut,
        TransferError::Stopped(_) => ErrorKind::Stopped,
    };
    ErrorReply::new(kind, e.to_string())
}

fn membership(me: NodeId, r: Result<Membership, MembershipError>) -> Result<Reply, ErrorReply> {
    let e = match r {
        Ok(m) => return Ok(Reply::Membership(m)),
        Err(e) => e,
    };
    let kind = match &e {
        MembershipError::NotLeader { leader_hint } => {
            return Err(ErrorReply::not_leader(me, *leader_hint))
        }
        MembershipError::ChangeInFlight => ErrorKind::ChangeInFlight,
        MembershipError::UnknownNode(_) => ErrorKind::UnknownNode,
        MembershipError::AlreadyMember(_) => ErrorKind::AlreadyMember,
        MembershipError::RemovedNode(_) => ErrorKind::RemovedNode,
        MembershipError::NotALearner(_) => ErrorKind::NotALearner,
        MembershipError::LearnerBehind { .. } => ErrorKind::LearnerBehind,
        MembershipError::WouldLoseQuorum { .. } => ErrorKind::WouldLoseQuorum,
        MembershipError::NoQuorum { .. } => ErrorKind::NoQuorum,
        MembershipError::TimedOut { .. } => ErrorKind::TimedOut,
        MembershipError::Stopped(_) => ErrorKind::Stopped,
    };
    Err(ErrorReply::new(kind, e.to_string()))
}
