//! What a holder of a certificate loads: [`TlsIdentity`] (a node) and
//! [`OperatorIdentity`] (an operator), each checked up front, and the rustls and quinn
//! configurations a node's identity makes. Both are a [`Credential`] (the loading, the
//! checks and the rustls steps they share) and the kind of certificate they accept.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::CertificateDer;

use crate::NodeId;

use super::credential::{client_builder, Credential, Holder};
use super::error::{Result, TlsError};
use super::files::{
    node_cert_file, node_key_file, IdentityWarning, CA_CERT_FILE, OPERATOR_CERT_FILE,
    OPERATOR_KEY_FILE,
};
use super::names::{node_id_labeled, node_server_name, operator_labeled, parse_x509};
use super::pem::Src;
use super::refuse::RemovedIds;

#[cfg(doc)]
use super::{node_id_from_cert, write_cluster_certs, CertKind};

/// The ALPN protocol both sides must offer: the tenure transport, version 1.
pub const ALPN: &[u8] = b"tenure/1";

/// What a node loads at start: the cluster CA, its own certificate chain and private key,
/// and its node id (read from its certificate).
///
/// Every constructor checks the files up front: PEM well-formed, certificate names a node,
/// key belongs to the certificate, certificate verifies under the CA for both client and
/// server use. A node with bad files fails at start with a message naming the file.
///
/// The CA file may hold several CA certificates (all are trusted: useful while moving to
/// a new CA).
#[derive(Clone)]
pub struct TlsIdentity {
    id: NodeId,
    core: Credential,
    /// When the node's certificate stops being valid (its `notAfter`).
    not_after: SystemTime,
}

impl fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("TlsIdentity");
        d.field("id", &self.id).field("not_after", &self.not_after);
        self.core.debug_fields(&mut d);
        d.finish()
    }
}

impl TlsIdentity {
    /// Loads the CA certificate(s), the node's certificate chain (end-entity first) and its
    /// private key from PEM files.
    ///
    /// A key file that its group or others may read loads, with a warning
    /// ([`TlsIdentity::warnings`]).
    pub fn load(
        ca_pem_path: impl AsRef<Path>,
        cert_pem_path: impl AsRef<Path>,
        key_pem_path: impl AsRef<Path>,
    ) -> Result<TlsIdentity> {
        Self::from_files(
            ca_pem_path.as_ref(),
            cert_pem_path.as_ref(),
            key_pem_path.as_ref(),
        )
    }

    /// What was found worth fixing in the files it was loaded from (empty for identities
    /// made from PEM text). The QUIC transport logs each at start.
    pub fn warnings(&self) -> &[IdentityWarning] {
        self.core.warnings()
    }

    /// Loads node `id`'s identity from a directory in the layout [`write_cluster_certs`]
    /// writes (`ca.pem`, `node-<id>.pem`, `node-<id>-key.pem`), and checks that the
    /// certificate names node `id`.
    pub fn from_dir(dir: impl AsRef<Path>, id: NodeId) -> Result<TlsIdentity> {
        if id == 0 {
            return Err(TlsError::InvalidNodeId);
        }
        let dir = dir.as_ref();
        let cert_path = dir.join(node_cert_file(id));
        let identity = Self::load(
            dir.join(CA_CERT_FILE),
            &cert_path,
            dir.join(node_key_file(id)),
        )?;
        if identity.id != id {
            return Err(TlsError::WrongNode {
                file: cert_path.display().to_string(),
                expected: id,
                found: identity.id,
            });
        }
        Ok(identity)
    }

    /// Builds an identity from PEM text (see [`TlsIdentity::load`]).
    pub fn from_pem(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<TlsIdentity> {
        Self::from_texts(ca_pem, cert_pem, key_pem)
    }

    /// The node id this identity's certificate names.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// When the node's certificate expires (its `notAfter`): after that, every peer
    /// refuses it. `tenure_cert_expiry_seconds` counts down to it.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// Whether `other` holds the same CA certificates, certificate chain and key (the
    /// files it came from may differ in layout or whitespace).
    pub fn same_credential(&self, other: &TlsIdentity) -> bool {
        self.id == other.id && self.core.same_as(&other.core)
    }

    /// The trusted CA certificates (DER).
    pub fn ca_certs(&self) -> &[CertificateDer<'static>] {
        self.core.ca_certs()
    }

    /// The node's certificate chain (DER), end-entity first.
    pub fn cert_chain(&self) -> &[CertificateDer<'static>] {
        self.core.chain()
    }

    /// The rustls server side: TLS 1.3 only, ring provider, ALPN [`ALPN`], requires a
    /// client certificate that verifies under the cluster CA (the only root). No 0-RTT,
    /// no session tickets (every connection presents its certificate).
    ///
    /// The client's node id is not checked here: the caller reads it from the
    /// certificate ([`node_id_from_cert`]) and decides whether it is a known peer.
    pub fn rustls_server_config(&self) -> Result<rustls::ServerConfig> {
        self.core.server_config(ALPN, None)
    }

    /// [`TlsIdentity::server_config`] that also refuses, at the handshake, a client
    /// certificate naming a node in `removed`.
    pub(crate) fn server_config_refusing(
        &self,
        removed: &RemovedIds,
    ) -> Result<quinn::ServerConfig> {
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(
            self.core.server_config(ALPN, Some(removed))?,
        )
        .map_err(|e| TlsError::Quic(e.to_string()))?;
        Ok(quinn::ServerConfig::with_crypto(Arc::new(crypto)))
    }

    /// The rustls client side: TLS 1.3 only, ring provider, ALPN [`ALPN`], presents this
    /// node's certificate, verifies the server's certificate under the cluster CA (the
    /// only root) and against the server name the caller dials, which tenure always sets
    /// to `node-<id>.tenure` of the peer ([`node_server_name`]): identity is checked by
    /// id, never by IP address. No 0-RTT, no resumption.
    pub fn rustls_client_config(&self) -> Result<rustls::ClientConfig> {
        let builder = client_builder()?.with_root_certificates(self.core.roots()?);
        Ok(self.core.client_config(builder, ALPN)?)
    }

    /// [`TlsIdentity::rustls_server_config`] as a quinn server configuration (quinn's
    /// default transport settings; the QUIC transport sets its own).
    pub fn server_config(&self) -> Result<quinn::ServerConfig> {
        let crypto =
            quinn::crypto::rustls::QuicServerConfig::try_from(self.rustls_server_config()?)
                .map_err(|e| TlsError::Quic(e.to_string()))?;
        Ok(quinn::ServerConfig::with_crypto(Arc::new(crypto)))
    }

    /// [`TlsIdentity::rustls_client_config`] as a quinn client configuration (quinn's
    /// default transport settings). Dial with `node_server_name(peer)` as server name.
    pub fn client_config(&self) -> Result<quinn::ClientConfig> {
        let crypto =
            quinn::crypto::rustls::QuicClientConfig::try_from(self.rustls_client_config()?)
                .map_err(|e| TlsError::Quic(e.to_string()))?;
        Ok(quinn::ClientConfig::new(Arc::new(crypto)))
    }

    /// The CA, chain and key, as the admin client presents them.
    pub(crate) fn credential(&self) -> &Credential {
        &self.core
    }

    /// 32 secret bytes derived from the private key for `purpose` (HMAC-SHA256 keyed with
    /// the key's DER). Stable across restarts of the node, so it can key QUIC stateless
    /// resets: a restarted node can tell peers that their old connection to it is gone.
    pub(crate) fn derive_secret(&self, purpose: &[u8]) -> [u8; 32] {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, self.core.key().secret_der());
        let tag = ring::hmac::sign(&key, purpose);
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        out
    }
}

/// What the admin tool loads: the cluster CA, an operator certificate chain and its
/// private key.
///
/// Every constructor checks the files up front: PEM well-formed, the certificate is an
/// operator certificate ([`CertKind::Operator`]; a node certificate is
/// [`TlsError::NotOperatorCertificate`]), the key belongs to it, and it verifies under the
/// CA for client use. Present it to a node's admin endpoint with
/// [`admin::Client`](crate::admin::Client).
#[derive(Clone)]
pub struct OperatorIdentity {
    core: Credential,
}

impl fmt::Debug for OperatorIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("OperatorIdentity");
        self.core.debug_fields(&mut d);
        d.finish()
    }
}

impl OperatorIdentity {
    /// Loads the CA certificate(s), the operator certificate chain (end-entity first) and
    /// its private key from PEM files.
    pub fn load(
        ca_pem_path: impl AsRef<Path>,
        cert_pem_path: impl AsRef<Path>,
        key_pem_path: impl AsRef<Path>,
    ) -> Result<OperatorIdentity> {
        Self::from_files(
            ca_pem_path.as_ref(),
            cert_pem_path.as_ref(),
            key_pem_path.as_ref(),
        )
    }

    /// What was found worth fixing in the files it was loaded from (see
    /// [`TlsIdentity::warnings`]).
    pub fn warnings(&self) -> &[IdentityWarning] {
        self.core.warnings()
    }

    /// Loads the operator identity from a directory in the layout
    /// [`write_cluster_certs`] writes (`ca.pem`, `operator.pem`, `operator-key.pem`).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<OperatorIdentity> {
        let dir = dir.as_ref();
        Self::load(
            dir.join(CA_CERT_FILE),
            dir.join(OPERATOR_CERT_FILE),
            dir.join(OPERATOR_KEY_FILE),
        )
    }

    /// Builds an operator identity from PEM text (see [`OperatorIdentity::load`]).
    pub fn from_pem(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<OperatorIdentity> {
        Self::from_texts(ca_pem, cert_pem, key_pem)
    }

    /// The trusted CA certificates (DER).
    pub fn ca_certs(&self) -> &[CertificateDer<'static>] {
        self.core.ca_certs()
    }

    /// The operator's certificate chain (DER), end-entity first.
    pub fn cert_chain(&self) -> &[CertificateDer<'static>] {
        self.core.chain()
    }

    /// The CA, chain and key, as the admin client presents them.
    pub(crate) fn credential(&self) -> &Credential {
        &self.core
    }
}

impl Holder for TlsIdentity {
    const HOLDER: &'static str = "node";

    /// A node certificate, checked as every credential is and, under its own name, as a
    /// server.
    fn from_src(ca: Src<'_>, cert: Src<'_>, key: Src<'_>) -> Result<TlsIdentity> {
        let (core, id) = Credential::from_src(&ca, &cert, &key, node_id_labeled)?;
        core.verify_as_server(node_server_name(id), &cert, &ca)?;
        let secs = parse_x509(&core.chain()[0], &cert.label)?
            .validity()
            .not_after
            .timestamp();
        let not_after = UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0));
        Ok(TlsIdentity {
            id,
            core,
            not_after,
        })
    }

    fn credential_mut(&mut self) -> &mut Credential {
        &mut self.core
    }
}

impl Holder for OperatorIdentity {
    const HOLDER: &'static str = "operator";

    /// An operator certificate, checked as every credential is.
    fn from_src(ca: Src<'_>, cert: Src<'_>, key: Src<'_>) -> Result<OperatorIdentity> {
        let (core, ()) = Credential::from_src(&ca, &cert, &key, operator_labeled)?;
        Ok(OperatorIdentity { core })
    }

    fn credential_mut(&mut self) -> &mut Credential {
        &mut self.core
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::ca::testing::{custom_cert, der, dns};
    use crate::tls::credential::{provider, roots_of};
    use crate::tls::*;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::client::WebPkiServerVerifier;
    use rustls::pki_types::{ServerName, UnixTime};

    #[test]
    fn operator_certificate_is_a_client_only_operator_and_not_a_node() {
        let ca = ClusterCa::generate().unwrap();
        let op = ca.issue_operator().unwrap();
        let op_der = der(&op.cert_pem);
        assert_eq!(cert_kind(&op_der).unwrap(), CertKind::Operator);
        assert_eq!(CertKind::Operator.dns_name(), OPERATOR_NAME);
        assert_eq!(CertKind::Operator.to_string(), "operator");
        check_operator_cert(&op_der).unwrap();
        match node_id_from_cert(&op_der) {
            Err(TlsError::NotNodeCertificate { reason, .. }) => {
                assert!(reason.contains("operator certificate"), "{reason}");
            }
            other => panic!("expected NotNodeCertificate, got {other:?}"),
        }
        // A node certificate is not an operator's, and says whose it is.
        let n3 = ca.issue_node(3).unwrap();
        let e = check_operator_cert(&der(&n3.cert_pem)).unwrap_err();
        assert!(
            e.to_string()
                .contains("certificate of node 3 is not an operator certificate"),
            "{e}"
        );
        let e = OperatorIdentity::from_pem(ca.cert_pem(), &n3.cert_pem, &n3.key_pem).unwrap_err();
        assert!(matches!(e, TlsError::NotOperatorCertificate { .. }), "{e}");
        // An operator certificate cannot be loaded as a node identity ...
        let e = TlsIdentity::from_pem(ca.cert_pem(), &op.cert_pem, &op.key_pem).unwrap_err();
        assert!(matches!(e, TlsError::NotNodeCertificate { .. }), "{e}");
        // ... and, without the serverAuth usage, could not serve even under its own name.
        let name = ServerName::try_from(OPERATOR_NAME).unwrap();
        let verifier = WebPkiServerVerifier::builder_with_provider(
            roots_of(&[ca.cert_der().clone()]).unwrap(),
            provider(),
        )
        .build()
        .unwrap();
        assert!(verifier
            .verify_server_cert(&op_der, &[], &name, &[], UnixTime::now())
            .is_err());

        let id = OperatorIdentity::from_pem(ca.cert_pem(), &op.cert_pem, &op.key_pem).unwrap();
        assert_eq!(id.cert_chain(), &[op_der]);
        assert_eq!(id.ca_certs(), &[ca.cert_der().clone()]);
        assert!(!format!("{id:?}").contains("PRIVATE"));
        assert!(!format!("{op:?}").contains("PRIVATE"));
        let other = ClusterCa::generate().unwrap().issue_operator().unwrap();
        let e =
            OperatorIdentity::from_pem(ca.cert_pem(), &other.cert_pem, &other.key_pem).unwrap_err();
        assert!(matches!(e, TlsError::NotTrusted { .. }), "{e}");
        let e =
            OperatorIdentity::from_pem(ca.cert_pem(), &op.cert_pem, &other.key_pem).unwrap_err();
        assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e}");
    }

    #[test]
    fn identity_loads_and_builds_tls_configs() {
        let ca = ClusterCa::generate().unwrap();
        let node = ca.issue_node(2).unwrap();
        let id = TlsIdentity::from_pem(ca.cert_pem(), &node.cert_pem, &node.key_pem).unwrap();
        assert_eq!(id.id(), 2);
        assert_eq!(id.cert_chain().len(), 1);
        assert_eq!(id.ca_certs(), &[ca.cert_der().clone()]);
        let server = id.rustls_server_config().unwrap();
        assert_eq!(server.alpn_protocols, vec![ALPN.to_vec()]);
        assert_eq!(server.max_early_data_size, 0);
        let client = id.rustls_client_config().unwrap();
        assert!(!client.enable_early_data);
        id.server_config().unwrap();
        id.client_config().unwrap();
        assert_eq!(id.derive_secret(b"a"), id.clone().derive_secret(b"a"));
        assert_ne!(id.derive_secret(b"a"), id.derive_secret(b"b"));
        assert!(!format!("{id:?}").contains("PRIVATE"));
    }

    #[test]
    fn bad_identity_inputs_are_named_errors() {
        let ca = ClusterCa::generate().unwrap();
        let other_ca = ClusterCa::generate().unwrap();
        let n2 = ca.issue_node(2).unwrap();
        let n3 = ca.issue_node(3).unwrap();
        let foreign = other_ca.issue_node(2).unwrap();
        let (operator, operator_key) = custom_cert(&ca, vec![dns("operator.tenure")]);

        let e = TlsIdentity::from_pem(ca.cert_pem(), &n3.cert_pem, &n2.key_pem).unwrap_err();
        assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e}");
        let e =
            TlsIdentity::from_pem(ca.cert_pem(), &foreign.cert_pem, &foreign.key_pem).unwrap_err();
        assert!(matches!(e, TlsError::NotTrusted { .. }), "{e}");
        let e = TlsIdentity::from_pem(&n2.cert_pem, &n2.cert_pem, &n2.key_pem).unwrap_err();
        assert!(matches!(e, TlsError::NotCa { .. }), "{e}");
        let e = TlsIdentity::from_pem(ca.cert_pem(), &n2.cert_pem, &n2.cert_pem).unwrap_err();
        assert!(matches!(e, TlsError::NoPrivateKey { .. }), "{e}");
        let e = TlsIdentity::from_pem(ca.cert_pem(), &n2.key_pem, &n2.key_pem).unwrap_err();
        assert!(matches!(e, TlsError::NoCertificate { .. }), "{e}");
        let e = TlsIdentity::from_pem("garbage", &n2.cert_pem, &n2.key_pem).unwrap_err();
        assert!(matches!(e, TlsError::NotPem { .. }), "{e}");
        // Corrupt the base64 body, keep the BEGIN/END lines.
        let corrupt = |pem: &str| {
            let mut lines: Vec<&str> = pem.lines().collect();
            lines[1] = "%%%% not base64 %%%%";
            lines.join("\n")
        };
        let broken = corrupt(&n2.cert_pem);
        let e = TlsIdentity::from_pem(ca.cert_pem(), &broken, &n2.key_pem).unwrap_err();
        assert!(matches!(e, TlsError::NotPem { .. }), "{e}");
        let broken = corrupt(&n2.key_pem);
        let e = TlsIdentity::from_pem(ca.cert_pem(), &n2.cert_pem, &broken).unwrap_err();
        assert!(matches!(e, TlsError::NotPem { .. }), "{e}");
        let e = TlsIdentity::from_pem(ca.cert_pem(), &operator, &operator_key).unwrap_err();
        assert!(matches!(e, TlsError::NotNodeCertificate { .. }), "{e}");
    }
}
