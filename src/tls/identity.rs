//! What a holder of a certificate loads: [`TlsIdentity`] (a node) and
//! [`OperatorIdentity`] (an operator), each checked up front, and the rustls and quinn
//! configurations a node's identity makes.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use crate::node_id::NodeId;

use super::error::{Result, TlsError};
use super::files::{
    key_file_warnings, node_cert_file, node_key_file, IdentityWarning, CA_CERT_FILE,
    OPERATOR_CERT_FILE, OPERATOR_KEY_FILE,
};
use super::names::{node_id_labeled, node_server_name, operator_labeled, parse_x509};
use super::pem::{read_files, Src};

#[cfg(doc)]
use super::{node_id_from_cert, write_cluster_certs, CertKind};

/// The ALPN protocol both sides must offer: the tenure transport, version 1.
pub const ALPN: &[u8] = b"tenure/1";

/// The ring crypto provider, which is the only one tenure uses.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Checks that `chain` (end-entity first) is a client certificate the cluster CA accepts.
fn verify_as_client(
    chain: &[CertificateDer<'static>],
    roots: Arc<RootCertStore>,
    provider: Arc<rustls::crypto::CryptoProvider>,
    cert: &Src<'_>,
    ca: &Src<'_>,
) -> Result<()> {
    WebPkiClientVerifier::builder_with_provider(roots, provider)
        .build()
        .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?
        .verify_client_cert(&chain[0], &chain[1..], UnixTime::now())
        .map_err(|e| TlsError::NotTrusted {
            file: cert.label.clone(),
            ca: ca.label.clone(),
            reason: e.to_string(),
        })?;
    Ok(())
}

/// What a node loads at start: the cluster CA, its own certificate chain and private key,
/// and its node id (read from its certificate).
///
/// Every constructor checks the files up front: PEM well-formed, certificate names a node,
/// key belongs to the certificate, certificate verifies under the CA for both client and
/// server use. A node with bad files fails at start with a message naming the file.
///
/// The CA file may hold several CA certificates (all are trusted: useful while moving to
/// a new CA).
pub struct TlsIdentity {
    id: NodeId,
    ca_certs: Vec<CertificateDer<'static>>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    warnings: Vec<IdentityWarning>,
}

impl Clone for TlsIdentity {
    fn clone(&self) -> Self {
        TlsIdentity {
            id: self.id,
            ca_certs: self.ca_certs.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            warnings: self.warnings.clone(),
        }
    }
}

impl fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsIdentity")
            .field("id", &self.id)
            .field("ca_certs", &self.ca_certs.len())
            .field("chain", &self.chain.len())
            .field("key", &"<redacted>")
            .field("warnings", &self.warnings)
            .finish()
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
        let [ca, cert, key] = read_files([
            ca_pem_path.as_ref(),
            cert_pem_path.as_ref(),
            key_pem_path.as_ref(),
        ])?;
        let mut identity = Self::from_src(ca.src(), cert.src(), key.src())?;
        identity.warnings = key_file_warnings(key_pem_path.as_ref());
        Ok(identity)
    }

    /// What was found worth fixing in the files it was loaded from (empty for identities
    /// made from PEM text). The QUIC transport logs each at start.
    pub fn warnings(&self) -> &[IdentityWarning] {
        &self.warnings
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
        Self::from_src(
            Src::new("CA certificate (PEM text)", ca_pem.as_bytes()),
            Src::new("node certificate (PEM text)", cert_pem.as_bytes()),
            Src::new("node key (PEM text)", key_pem.as_bytes()),
        )
    }

    pub(super) fn from_src(ca: Src<'_>, cert: Src<'_>, key: Src<'_>) -> Result<TlsIdentity> {
        let ca_certs = ca_certs_of(&ca)?;
        let chain = cert.certs()?;
        let key_der = key.key()?;
        let id = node_id_labeled(&chain[0], &cert.label)?;

        let provider = provider();
        check_key_matches(&chain, &key_der, &cert, &key, &provider)?;

        let identity = TlsIdentity {
            id,
            ca_certs,
            chain,
            key: key_der,
            warnings: Vec::new(),
        };
        let not_trusted = |e: rustls::Error| TlsError::NotTrusted {
            file: cert.label.clone(),
            ca: ca.label.clone(),
            reason: e.to_string(),
        };
        let roots = identity.roots()?;
        let now = UnixTime::now();
        let (end_entity, intermediates) = (&identity.chain[0], &identity.chain[1..]);
        verify_as_client(&identity.chain, roots.clone(), provider.clone(), &cert, &ca)?;
        let name = ServerName::try_from(node_server_name(id))
            .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?;
        WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?
            .verify_server_cert(end_entity, intermediates, &name, &[], now)
            .map_err(not_trusted)?;
        Ok(identity)
    }

    /// The node id this identity's certificate names.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The trusted CA certificates (DER).
    pub fn ca_certs(&self) -> &[CertificateDer<'static>] {
        &self.ca_certs
    }

    /// The node's certificate chain (DER), end-entity first.
    pub fn cert_chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    fn roots(&self) -> Result<Arc<RootCertStore>> {
        roots_of(&self.ca_certs)
    }

    /// The rustls server side: TLS 1.3 only, ring provider, ALPN [`ALPN`], requires a
    /// client certificate that verifies under the cluster CA (the only root). No 0-RTT,
    /// no session tickets (every connection presents its certificate).
    ///
    /// The client's node id is not checked here: the caller reads it from the
    /// certificate ([`node_id_from_cert`]) and decides whether it is a known peer.
    pub fn rustls_server_config(&self) -> Result<rustls::ServerConfig> {
        let provider = provider();
        let verifier = WebPkiClientVerifier::builder_with_provider(self.roots()?, provider.clone())
            .build()
            .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        cfg.max_early_data_size = 0;
        cfg.send_tls13_tickets = 0;
        Ok(cfg)
    }

    /// The rustls client side: TLS 1.3 only, ring provider, ALPN [`ALPN`], presents this
    /// node's certificate, verifies the server's certificate under the cluster CA (the
    /// only root) and against the server name the caller dials, which tenure always sets
    /// to `node-<id>.tenure` of the peer ([`node_server_name`]): identity is checked by
    /// id, never by IP address. No 0-RTT, no resumption.
    pub fn rustls_client_config(&self) -> Result<rustls::ClientConfig> {
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        cfg.resumption = rustls::client::Resumption::disabled();
        cfg.enable_early_data = false;
        Ok(cfg)
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

    /// The node's private key.
    pub(crate) fn key(&self) -> &PrivateKeyDer<'static> {
        &self.key
    }

    /// 32 secret bytes derived from the private key for `purpose` (HMAC-SHA256 keyed with
    /// the key's DER). Stable across restarts of the node, so it can key QUIC stateless
    /// resets: a restarted node can tell peers that their old connection to it is gone.
    pub(crate) fn derive_secret(&self, purpose: &[u8]) -> [u8; 32] {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, self.key.secret_der());
        let tag = ring::hmac::sign(&key, purpose);
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        out
    }
}

/// The CA certificates of `ca`, each checked to be a CA.
fn ca_certs_of(ca: &Src<'_>) -> Result<Vec<CertificateDer<'static>>> {
    let ca_certs = ca.certs()?;
    for c in &ca_certs {
        if !parse_x509(c, &ca.label)?.is_ca() {
            return Err(TlsError::NotCa {
                file: ca.label.clone(),
            });
        }
    }
    Ok(ca_certs)
}

/// Checks that `key_der` is the private key of the end-entity certificate of `chain`.
fn check_key_matches(
    chain: &[CertificateDer<'static>],
    key_der: &PrivateKeyDer<'static>,
    cert: &Src<'_>,
    key: &Src<'_>,
    provider: &Arc<CryptoProvider>,
) -> Result<()> {
    match rustls::sign::CertifiedKey::from_der(chain.to_vec(), key_der.clone_key(), provider) {
        Ok(_) => Ok(()),
        Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::KeyMismatch {
            cert: cert.label.clone(),
            key: key.label.clone(),
        }),
        Err(e) => Err(TlsError::BadKey {
            file: key.label.clone(),
            reason: e.to_string(),
        }),
    }
}

fn roots_of(ca_certs: &[CertificateDer<'static>]) -> Result<Arc<RootCertStore>> {
    let mut roots = RootCertStore::empty();
    for c in ca_certs {
        roots.add(c.clone())?;
    }
    Ok(Arc::new(roots))
}

/// What the admin tool loads: the cluster CA, an operator certificate chain and its
/// private key.
///
/// Every constructor checks the files up front: PEM well-formed, the certificate is an
/// operator certificate ([`CertKind::Operator`]; a node certificate is
/// [`TlsError::NotOperatorCertificate`]), the key belongs to it, and it verifies under the
/// CA for client use. Present it to a node's admin endpoint with
/// [`admin::Client`](crate::admin::Client).
pub struct OperatorIdentity {
    ca_certs: Vec<CertificateDer<'static>>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    warnings: Vec<IdentityWarning>,
}

impl Clone for OperatorIdentity {
    fn clone(&self) -> Self {
        OperatorIdentity {
            ca_certs: self.ca_certs.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            warnings: self.warnings.clone(),
        }
    }
}

impl fmt::Debug for OperatorIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorIdentity")
            .field("ca_certs", &self.ca_certs.len())
            .field("chain", &self.chain.len())
            .field("key", &"<redacted>")
            .field("warnings", &self.warnings)
            .finish()
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
        let [ca, cert, key] = read_files([
            ca_pem_path.as_ref(),
            cert_pem_path.as_ref(),
            key_pem_path.as_ref(),
        ])?;
        let mut identity = Self::from_src(ca.src(), cert.src(), key.src())?;
        identity.warnings = key_file_warnings(key_pem_path.as_ref());
        Ok(identity)
    }

    /// What was found worth fixing in the files it was loaded from (see
    /// [`TlsIdentity::warnings`]).
    pub fn warnings(&self) -> &[IdentityWarning] {
        &self.warnings
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
        Self::from_src(
            Src::new("CA certificate (PEM text)", ca_pem.as_bytes()),
            Src::new("operator certificate (PEM text)", cert_pem.as_bytes()),
            Src::new("operator key (PEM text)", key_pem.as_bytes()),
        )
    }

    fn from_src(ca: Src<'_>, cert: Src<'_>, key: Src<'_>) -> Result<OperatorIdentity> {
        let ca_certs = ca_certs_of(&ca)?;
        let chain = cert.certs()?;
        let key_der = key.key()?;
        operator_labeled(&chain[0], &cert.label)?;
        let provider = provider();
        check_key_matches(&chain, &key_der, &cert, &key, &provider)?;
        verify_as_client(&chain, roots_of(&ca_certs)?, provider, &cert, &ca)?;
        Ok(OperatorIdentity {
            ca_certs,
            chain,
            key: key_der,
            warnings: Vec::new(),
        })
    }

    /// The trusted CA certificates (DER).
    pub fn ca_certs(&self) -> &[CertificateDer<'static>] {
        &self.ca_certs
    }

    /// The operator's certificate chain (DER), end-entity first.
    pub fn cert_chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    /// The operator's private key.
    pub(crate) fn key(&self) -> &PrivateKeyDer<'static> {
        &self.key
    }
}

/// The ring crypto provider tenure uses (for the admin endpoint's TLS configurations).
pub(crate) fn ring_provider() -> Arc<CryptoProvider> {
    provider()
}

/// A root store holding `ca_certs` (for the admin endpoint's TLS configurations).
pub(crate) fn root_store(ca_certs: &[CertificateDer<'static>]) -> Result<Arc<RootCertStore>> {
    roots_of(ca_certs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::ca::testing::{custom_cert, der, dns};
    use crate::tls::*;
    use rustls::client::danger::ServerCertVerifier;

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
                assert!(reason.contains("operator certificate"), "{reason}")
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
