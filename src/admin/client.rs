//! The admin client: connects with an operator certificate and sends typed requests.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use quinn::{ConnectionError, VarInt};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::election::ElectionInfo;
use crate::history::TenureRecord;
use crate::status::{Membership, Status};
use crate::tls::{
    client_builder, node_id_from_cert, node_server_name, ring_provider, Credential,
    OperatorIdentity, TlsIdentity,
};
use crate::transport::{NodeId, PeerAddr};

use super::protocol::{ElectionEntry, Leaderships, Response};
use super::{
    close_code, peer_cert, ErrorReply, Reply, Request, ALPN, CONNECT_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT, IDLE_TIMEOUT_MS, MAX_RESPONSE, PROTOCOL_VERSION,
};

/// The certificate a [`Client`] presents and the CA it trusts.
///
/// Normally made from an [`OperatorIdentity`]. A node's [`TlsIdentity`] converts too, so
/// a setup can be checked: the node refuses it ([`ClientError::Refused`]).
pub struct Credentials {
    /// The CA, chain and key of the identity it was made from.
    core: Credential,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("chain", &self.core.chain().len())
            .field("key", &"<redacted>")
            .finish()
    }
}

impl From<&OperatorIdentity> for Credentials {
    fn from(id: &OperatorIdentity) -> Self {
        Credentials {
            core: id.credential().clone(),
        }
    }
}

impl From<&TlsIdentity> for Credentials {
    fn from(id: &TlsIdentity) -> Self {
        Credentials {
            core: id.credential().clone(),
        }
    }
}

/// Why a [`Client`] call failed. [`ClientError::Node`] is the node's own refusal (it
/// understood and answered); the others are about reaching it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The node answered with a refusal: not the leader, change in flight, unknown node,
    /// bad request, ... The [`ErrorReply`] says which and why.
    #[error("node {node} refused {command}: {reply}")]
    Node {
        /// The node that answered.
        node: NodeId,
        /// The command.
        command: &'static str,
        /// Its answer.
        reply: ErrorReply,
    },
    /// The node refused the certificate presented, after the handshake: it is not an
    /// operator certificate. Fix: use `operator.pem` / `operator-key.pem`.
    #[error("{addr} refused our certificate: {reason}")]
    Refused {
        /// The endpoint.
        addr: SocketAddr,
        /// What the node said, e.g. "certificate of node 3 is not an operator certificate".
        reason: String,
    },
    /// The TLS handshake failed: the node did not accept our certificate (another CA,
    /// expired) or we did not accept its (not a node of our group, or not the node
    /// asked for). Fix: use the certificates of this group.
    #[error("TLS handshake with {addr} failed: {reason}")]
    Handshake {
        /// The endpoint.
        addr: SocketAddr,
        /// What failed.
        reason: String,
    },
    /// The address answers, but not as an admin endpoint: no common ALPN. Cause: the
    /// raft port (or another QUIC service) instead of the admin port. Fix: use the
    /// address the worker reports as `admin`.
    #[error("{addr} does not speak the admin protocol (tenure-admin/1); is it the node's raft port rather than its admin port?")]
    WrongProtocol {
        /// The endpoint.
        addr: SocketAddr,
    },
    /// No answer in time. Cause: nothing listens there, the host is down or cut off, or
    /// (for a request) the command took longer than the timeout; it may still take effect.
    #[error("{addr}: no answer within {} ms: {what}", timeout.as_millis())]
    TimedOut {
        /// The endpoint.
        addr: SocketAddr,
        /// What we waited for.
        what: String,
        /// How long.
        timeout: Duration,
    },
    /// The connection broke or was closed (the node stopped, the network failed).
    #[error("connection to {addr} lost: {reason}")]
    Connection {
        /// The endpoint.
        addr: SocketAddr,
        /// What happened.
        reason: String,
    },
    /// The answer could not be understood (not JSON of this protocol, too large).
    #[error("bad answer from {addr}: {reason}")]
    Protocol {
        /// The endpoint.
        addr: SocketAddr,
        /// What is wrong with it.
        reason: String,
    },
    /// The client could not be set up (local socket, TLS configuration).
    #[error("cannot set up the admin client: {0}")]
    Setup(String),
}

impl ClientError {
    /// The node's refusal, if it answered with one.
    pub fn reply(&self) -> Option<&ErrorReply> {
        match self {
            ClientError::Node { reply, .. } => Some(reply),
            _ => None,
        }
    }
}

/// Checks the admin endpoint's certificate: a node certificate of the group, and, when
/// one was asked for, of that node. The name dialed does not matter.
#[derive(Debug)]
struct NodeServerVerifier {
    inner: Arc<WebPkiServerVerifier>,
    expected: Option<NodeId>,
}

impl ServerCertVerifier for NodeServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let id = node_id_from_cert(end_entity)
            .map_err(|e| rustls::Error::General(format!("the admin endpoint's {e}")))?;
        if let Some(want) = self.expected {
            if id != want {
                return Err(rustls::Error::General(format!(
                    "the endpoint is node {id}, not node {want} as asked"
                )));
            }
        }
        let name = ServerName::try_from(node_server_name(id))
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        self.inner
            .verify_server_cert(end_entity, intermediates, &name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A connection to one node's admin endpoint. Requests may be sent concurrently (one
/// stream each). Dropping it closes the connection.
pub struct Client {
    endpoint: quinn::Endpoint,
    conn: quinn::Connection,
    addr: SocketAddr,
    node: NodeId,
    timeout: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.addr)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// Maps a QUIC connection error to what it means for an admin client.
fn connection_error(addr: SocketAddr, e: ConnectionError) -> ClientError {
    match e {
        ConnectionError::ApplicationClosed(c)
            if c.error_code == VarInt::from_u32(close_code::REFUSED) =>
        {
            ClientError::Refused {
                addr,
                reason: String::from_utf8_lossy(&c.reason).into_owned(),
            }
        }
        ConnectionError::ConnectionClosed(c)
            if c.error_code == quinn::TransportErrorCode::crypto(120) =>
        {
            // no_application_protocol
            ClientError::WrongProtocol { addr }
        }
        ConnectionError::ConnectionClosed(c)
            if (0x100..0x200).contains(&u64::from(c.error_code)) =>
        {
            let alert = u64::from(c.error_code) & 0xff;
            let hint = match alert {
                42 | 48 | 51 => " (is our certificate from this group's CA?)",
                45 => " (our certificate has expired?)",
                _ => "",
            };
            ClientError::Handshake {
                addr,
                reason: format!(
                    "the node refused the TLS handshake (alert {alert}): {}{hint}",
                    String::from_utf8_lossy(&c.reason)
                ),
            }
        }
        ConnectionError::TransportError(t) if (0x100..0x200).contains(&u64::from(t.code)) => {
            ClientError::Handshake {
                addr,
                reason: format!(
                    "we did not accept the node's certificate: {} (is ca.pem this group's CA? is it the node asked for?)",
                    t.reason
                ),
            }
        }
        ConnectionError::TransportError(t) => ClientError::Handshake {
            addr,
            reason: t.to_string(),
        },
        ConnectionError::TimedOut => ClientError::TimedOut {
            addr,
            what: "the connection went idle (the node stopped or is cut off)".into(),
            timeout: Duration::from_millis(u64::from(IDLE_TIMEOUT_MS)),
        },
        other => ClientError::Connection {
            addr,
            reason: other.to_string(),
        },
    }
}

impl Client {
    /// Connects to the admin endpoint at `addr` presenting `credentials` (normally an
    /// [`OperatorIdentity`]). With `node: Some(id)` the endpoint must be node `id`'s;
    /// with `None` any node of the group will do ([`Client::node_id`] says which).
    ///
    /// Returns once the TLS handshake is done. A node that refuses the certificate
    /// because it is not an operator's does so just after: the first request then fails
    /// with [`ClientError::Refused`].
    pub async fn connect(
        addr: SocketAddr,
        credentials: impl Into<Credentials>,
        node: Option<NodeId>,
    ) -> Result<Client, ClientError> {
        let creds: Credentials = credentials.into();
        let setup = |e: String| ClientError::Setup(e);
        let roots = creds.core.roots().map_err(|e| setup(e.to_string()))?;
        let inner = WebPkiServerVerifier::builder_with_provider(roots, ring_provider())
            .build()
            .map_err(|e| setup(e.to_string()))?;
        let verifier = Arc::new(NodeServerVerifier {
            inner,
            expected: node,
        });
        let builder = client_builder()
            .map_err(|e| setup(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let crypto = creds
            .core
            .client_config(builder, ALPN)
            .map_err(|e| setup(e.to_string()))?;
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(crypto)
            .map_err(|e| setup(e.to_string()))?;
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        let mut transport = quinn::TransportConfig::default();
        transport
            .keep_alive_interval(Some(Duration::from_secs(5)))
            .max_idle_timeout(Some(quinn::IdleTimeout::from(VarInt::from_u32(
                IDLE_TIMEOUT_MS,
            ))));
        config.transport_config(Arc::new(transport));

        let bind: SocketAddr = if addr.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let endpoint =
            quinn::Endpoint::client(bind).map_err(|e| setup(format!("local UDP socket: {e}")))?;
        let server_name = node.map_or_else(|| "admin.tenure".into(), node_server_name);
        let connecting = endpoint
            .connect_with(config, addr, &server_name)
            .map_err(|e| setup(format!("{addr}: {e}")))?;
        let conn = match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
            Err(_) => {
                return Err(ClientError::TimedOut {
                    addr,
                    what: "no TLS handshake; is a node's admin endpoint listening there?".into(),
                    timeout: CONNECT_TIMEOUT,
                })
            }
            Ok(Err(e)) => return Err(connection_error(addr, e)),
            Ok(Ok(c)) => c,
        };
        let id = peer_cert(&conn)
            .and_then(|c| node_id_from_cert(&c).ok())
            .ok_or_else(|| ClientError::Handshake {
                addr,
                reason: "the endpoint presented no node certificate".into(),
            })?;
        Ok(Client {
            endpoint,
            conn,
            addr,
            node: id,
            timeout: DEFAULT_REQUEST_TIMEOUT,
        })
    }

    /// The node this client talks to (from its certificate).
    pub fn node_id(&self) -> NodeId {
        self.node
    }

    /// The endpoint's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets how long one request may take ([`DEFAULT_REQUEST_TIMEOUT`]).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Sends `request` and returns the node's answer.
    pub async fn request(&self, request: &Request) -> Result<Reply, ClientError> {
        let body = serde_json::to_vec(&request.to_json())
            .map_err(|e| ClientError::Setup(format!("cannot encode the request: {e}")))?;
        let response = self.raw_request(&body).await?;
        match (response.ok, response.error) {
            (Some(reply), None) => Ok(reply),
            (None, Some(reply)) => Err(ClientError::Node {
                node: self.node,
                command: request.name(),
                reply,
            }),
            _ => Err(ClientError::Protocol {
                addr: self.addr,
                reason: "the answer has neither \"ok\" nor \"error\"".into(),
            }),
        }
    }

    /// Sends raw bytes as a request and parses the answer (for tests of bad input; use
    /// [`Client::request`] otherwise).
    #[doc(hidden)]
    pub async fn request_bytes(
        &self,
        body: &[u8],
    ) -> Result<Result<Reply, ErrorReply>, ClientError> {
        let r = self.raw_request(body).await?;
        match (r.ok, r.error) {
            (Some(reply), None) => Ok(Ok(reply)),
            (None, Some(e)) => Ok(Err(e)),
            _ => Err(ClientError::Protocol {
                addr: self.addr,
                reason: "the answer has neither \"ok\" nor \"error\"".into(),
            }),
        }
    }

    async fn raw_request(&self, body: &[u8]) -> Result<Response, ClientError> {
        let addr = self.addr;
        let exchange = async {
            let (mut send, mut recv) = self
                .conn
                .open_bi()
                .await
                .map_err(|e| connection_error(addr, e))?;
            let write = async {
                send.write_all(body).await?;
                send.finish()?;
                Ok::<_, quinn::WriteError>(())
            };
            if let Err(e) = write.await {
                // A refused connection shows up here first; the reason is on the
                // connection.
                return Err(match self.conn.close_reason() {
                    Some(c) => connection_error(addr, c),
                    None => ClientError::Connection {
                        addr,
                        reason: e.to_string(),
                    },
                });
            }
            match recv.read_to_end(MAX_RESPONSE).await {
                Ok(bytes) => Ok(bytes),
                Err(quinn::ReadToEndError::TooLong) => Err(ClientError::Protocol {
                    addr,
                    reason: format!("the answer is larger than {MAX_RESPONSE} bytes"),
                }),
                Err(quinn::ReadToEndError::Read(e)) => Err(match self.conn.close_reason() {
                    Some(c) => connection_error(addr, c),
                    None => ClientError::Connection {
                        addr,
                        reason: e.to_string(),
                    },
                }),
            }
        };
        let bytes = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| ClientError::TimedOut {
                addr,
                what: "the command did not finish in time; it may still take effect".into(),
                timeout: self.timeout,
            })??;
        let response: Response =
            serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol {
                addr,
                reason: format!("not a version {PROTOCOL_VERSION} answer: {e}"),
            })?;
        if response.v != PROTOCOL_VERSION {
            return Err(ClientError::Protocol {
                addr,
                reason: format!(
                    "the node answers in protocol version {}, this client speaks {PROTOCOL_VERSION}",
                    response.v
                ),
            });
        }
        Ok(response)
    }

    fn unexpected(&self, reply: Reply) -> ClientError {
        ClientError::Protocol {
            addr: self.addr,
            reason: format!("unexpected answer {reply:?}"),
        }
    }

    /// The node's view: role, term, leader, members, quorum health, lease.
    pub async fn status(&self) -> Result<Status, ClientError> {
        match self.request(&Request::Status).await? {
            Reply::Status(s) => Ok(s),
            other => Err(self.unexpected(other)),
        }
    }

    /// The replicated leadership history, oldest first.
    pub async fn history(&self) -> Result<Vec<TenureRecord>, ClientError> {
        match self.request(&Request::History).await? {
            Reply::History { records } => Ok(records),
            other => Err(self.unexpected(other)),
        }
    }

    /// A backup of the group's replicated state as the node applied it
    /// ([`crate::backup::Backup`]); ask the leader for the newest.
    pub async fn backup(&self) -> Result<crate::backup::Backup, ClientError> {
        match self.request(&Request::Backup).await? {
            Reply::Backup(b) => Ok(b),
            other => Err(self.unexpected(other)),
        }
    }

    /// Hands leadership to `to` (or the most up-to-date follower); returns the new
    /// leader. The node must be the leader.
    pub async fn transfer(&self, to: Option<NodeId>) -> Result<NodeId, ClientError> {
        match self.request(&Request::Transfer { to }).await? {
            Reply::Transferred { leader } => Ok(leader),
            other => Err(self.unexpected(other)),
        }
    }

    async fn membership(&self, request: Request) -> Result<Membership, ClientError> {
        match self.request(&request).await? {
            Reply::Membership(m) => Ok(m),
            other => Err(self.unexpected(other)),
        }
    }

    /// Drains node `id`: it never campaigns, and hands over at once if it leads.
    pub async fn drain(&self, id: NodeId) -> Result<Membership, ClientError> {
        self.membership(Request::Drain { id }).await
    }

    /// Lets drained node `id` campaign again.
    pub async fn undrain(&self, id: NodeId) -> Result<Membership, ClientError> {
        self.membership(Request::Undrain { id }).await
    }

    /// Adds node `id` at raft address `addr` (an IP address or a name) as a learner.
    pub async fn add_learner(
        &self,
        id: NodeId,
        addr: impl Into<PeerAddr>,
    ) -> Result<Membership, ClientError> {
        self.membership(Request::AddLearner {
            id,
            addr: addr.into(),
        })
        .await
    }

    /// Promotes learner `id` to voter.
    pub async fn promote(&self, id: NodeId) -> Result<Membership, ClientError> {
        self.membership(Request::Promote { id }).await
    }

    /// Removes member `id`.
    pub async fn remove(&self, id: NodeId) -> Result<Membership, ClientError> {
        self.membership(Request::Remove { id }).await
    }

    /// Replaces voter `old` by learner `new`.
    pub async fn replace(&self, old: NodeId, new: NodeId) -> Result<Membership, ClientError> {
        self.membership(Request::Replace { old, new }).await
    }

    /// The catalog of named elections as the node applied it, each with the node's view
    /// of its leader and term.
    pub async fn elections(&self) -> Result<Vec<ElectionEntry>, ClientError> {
        match self.request(&Request::Elections).await? {
            Reply::Elections { elections } => Ok(elections),
            other => Err(self.unexpected(other)),
        }
    }

    /// Creates named election `name` (the node must lead the group).
    pub async fn create_election(
        &self,
        name: &str,
        affinity: Vec<NodeId>,
        priority: Option<u8>,
    ) -> Result<ElectionInfo, ClientError> {
        let request = Request::CreateElection {
            name: name.into(),
            affinity,
            priority,
        };
        match self.request(&request).await? {
            Reply::ElectionCreated(info) => Ok(info),
            other => Err(self.unexpected(other)),
        }
    }

    /// Suspends (`suspended`) or resumes named election `name` (the node must lead the
    /// group); returns the election as the catalog holds it then.
    pub async fn suspend_election(
        &self,
        name: &str,
        suspended: bool,
    ) -> Result<ElectionInfo, ClientError> {
        let name = name.into();
        let request = if suspended {
            Request::SuspendElection { name }
        } else {
            Request::ResumeElection { name }
        };
        match self.request(&request).await? {
            Reply::ElectionSuspended(info) => Ok(info),
            other => Err(self.unexpected(other)),
        }
    }

    /// Removes named election `name` (the node must lead the group); returns the removed
    /// id and the token above every token it could hand out.
    pub async fn remove_election(&self, name: &str) -> Result<(u32, u64), ClientError> {
        let request = Request::RemoveElection { name: name.into() };
        match self.request(&request).await? {
            Reply::ElectionRemoved {
                id, retired_above, ..
            } => Ok((id, retired_above)),
            other => Err(self.unexpected(other)),
        }
    }

    /// Hands named election `name`'s leadership to `to` (or the most up-to-date
    /// follower); returns its new leader. The node must lead that election.
    pub async fn transfer_election(
        &self,
        name: &str,
        to: Option<NodeId>,
    ) -> Result<NodeId, ClientError> {
        let request = Request::TransferElection {
            name: name.into(),
            to,
        };
        match self.request(&request).await? {
            Reply::ElectionTransferred { leader, .. } => Ok(leader),
            other => Err(self.unexpected(other)),
        }
    }

    /// The named elections the node runs and leads.
    pub async fn leaderships(&self) -> Result<Leaderships, ClientError> {
        match self.request(&Request::Leaderships).await? {
            Reply::Leaderships(l) => Ok(l),
            other => Err(self.unexpected(other)),
        }
    }

    /// Closes the connection, giving the close a moment to reach the node.
    pub async fn close(self) {
        self.conn.close(VarInt::from_u32(close_code::DONE), b"done");
        let _ = tokio::time::timeout(Duration::from_millis(200), self.endpoint.wait_idle()).await;
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.conn.close(VarInt::from_u32(close_code::DONE), b"done");
    }
}
