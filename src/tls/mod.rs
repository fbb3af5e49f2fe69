//! Cluster CA and node identity for mutual TLS.
//!
//! Every member of a group holds a certificate issued by one cluster CA. The certificate
//! names the node **by id, not by address**: its only SubjectAltName is the DNS name
//! `node-<id>.tenure` ([`node_server_name`]). So a node may move to another address and
//! keep its identity, and nobody can claim an id without a certificate from the CA.
//!
//! * [`ClusterCa`] makes the CA (or loads it from PEM) and issues node and operator
//!   certificates.
//! * [`write_cluster_certs`] writes a CA, one certificate per node and one operator
//!   certificate into a directory (`cargo run --example certs -- --nodes 5 --out DIR`
//!   calls it).
//! * [`TlsIdentity`] is what a node loads at start: the CA, its own certificate chain
//!   and key. It checks them up front (key matches certificate, certificate issued by the
//!   CA, certificate names a node) and builds the rustls/quinn configurations: the server
//!   requires a client certificate chained to the cluster CA, the client checks the server
//!   certificate against the CA and against `node-<id>.tenure` of the peer it dials.
//!
//! Only the *ring* crypto provider is used, and only TLS 1.3.
//!
//! * [`OperatorIdentity`] is what the admin tool loads: the CA and an operator
//!   certificate and key.
//!
//! Certificates have a kind ([`CertKind`]), read from their one SubjectAltName: a node
//! (`node-<id>.tenure`, server and client use) or an operator (`operator.tenure`
//! ([`OPERATOR_NAME`]), client use only). The kinds do not stand in for each other:
//! [`node_id_from_cert`] accepts only node certificates, so an operator certificate
//! cannot join the raft transport (and, lacking the serverAuth usage, cannot serve it
//! either); the admin endpoint ([`crate::admin`]) accepts only operator certificates, so
//! a node's files are not enough to act as an operator.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue,
    ExtendedKeyUsagePurpose, GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    NameConstraints, PublicKeyData, SanType, SerialNumber,
};
use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use x509_parser::asn1_rs::Tag;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

use crate::node_id::NodeId;

/// The ALPN protocol both sides must offer: the tenure transport, version 1.
pub const ALPN: &[u8] = b"tenure/1";

/// The DNS suffix of every tenure certificate name.
pub const NAME_SUFFIX: &str = ".tenure";

/// How long a certificate made by [`ClusterCa::generate`] stays valid (about 20 years).
///
/// There is no rotation yet: when it runs out, every handshake fails with an
/// "expired" certificate error and new certificates must be issued.
pub const CA_VALIDITY_DAYS: u64 = 20 * 365;

/// How long a node certificate stays valid (about 10 years; see [`CA_VALIDITY_DAYS`]).
pub const NODE_VALIDITY_DAYS: u64 = 10 * 365;

/// How long an operator certificate stays valid (about 2 years). It is a person's or a
/// tool's credential: re-issue it with [`ClusterCa::issue_operator`] when it runs out.
pub const OPERATOR_VALIDITY_DAYS: u64 = 2 * 365;

/// The DNS name an operator certificate carries: `operator.tenure`.
pub const OPERATOR_NAME: &str = "operator.tenure";

/// Certificates start being valid this long before they were made, so that a peer whose
/// clock is a little behind still accepts them.
const BACKDATE_SECS: u64 = 3600;

/// The DNS name a node certificate carries and a client dials: `node-<id>.tenure`.
pub fn node_server_name(id: NodeId) -> String {
    format!("node-{id}{NAME_SUFFIX}")
}

/// Errors of loading, checking and making certificates.
///
/// Every variant names the file (or, for in-memory PEM, what the text was) and the
/// problem. None of these is retried: they need an operator to fix the files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read. Cause: wrong path, missing file or no permission. Fix:
    /// check the path; `cargo run --example certs -- --nodes N --out DIR` writes the
    /// expected layout (`ca.pem`, `node-<id>.pem`, `node-<id>-key.pem`).
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// A file could not be written. Cause: no permission, disk full, or the directory is
    /// not writable. Fix: choose a writable directory.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// Refused to overwrite an existing file. Cause: the output directory already holds
    /// certificates (overwriting a CA would lock out every node that uses the old one).
    /// Fix: use an empty directory, or delete the old files on purpose.
    #[error("{} already exists; refusing to overwrite certificates", path.display())]
    AlreadyExists {
        /// The file.
        path: PathBuf,
    },
    /// The text is not valid PEM. Cause: wrong file, truncated file, or DER instead of
    /// PEM. Fix: point at the PEM file (`-----BEGIN ...-----` blocks).
    #[error("{file}: not valid PEM: {detail}")]
    NotPem {
        /// The file (or what the text was).
        file: String,
        /// What the PEM parser said.
        detail: String,
    },
    /// The PEM text holds no `CERTIFICATE` block. Cause: a key file or an empty file where
    /// a certificate was expected. Fix: check that the certificate and key paths are not
    /// swapped.
    #[error("{file}: no CERTIFICATE block found")]
    NoCertificate {
        /// The file (or what the text was).
        file: String,
    },
    /// The PEM text holds no private key block (`PRIVATE KEY`, `EC PRIVATE KEY` or
    /// `RSA PRIVATE KEY`). Cause: a certificate file where a key was expected. Fix: check
    /// that the certificate and key paths are not swapped.
    #[error("{file}: no private key block found")]
    NoPrivateKey {
        /// The file (or what the text was).
        file: String,
    },
    /// A certificate could not be parsed as X.509. Cause: corrupted file. Fix: re-issue it.
    #[error("{file}: not a valid X.509 certificate: {reason}")]
    BadCertificate {
        /// The file (or what the text was).
        file: String,
        /// What the parser said.
        reason: String,
    },
    /// A private key could not be used. Cause: corrupted file or an algorithm the ring
    /// provider does not support. Fix: re-issue the key (ECDSA P-256 is what tenure makes).
    #[error("{file}: unusable private key: {reason}")]
    BadKey {
        /// The file (or what the text was).
        file: String,
        /// What the crypto provider said.
        reason: String,
    },
    /// A certificate does not name a tenure node. Cause: its SubjectAltName is not
    /// exactly one DNS name `node-<id>.tenure` with id > 0 (for example an operator or a
    /// web server certificate, an IP address name, or several names). Fix: use a node
    /// certificate issued by [`ClusterCa::issue_node`].
    #[error("{file}: not a tenure node certificate: {reason}")]
    NotNodeCertificate {
        /// The file (or what the text was, e.g. "peer certificate").
        file: String,
        /// Which rule failed.
        reason: String,
    },
    /// A certificate is not an operator certificate. Cause: a node certificate (or any
    /// other) given where an operator's was expected, e.g. `node-1.pem` instead of
    /// `operator.pem`. Fix: use the operator certificate issued by
    /// [`ClusterCa::issue_operator`] (`operator.pem`, `operator-key.pem`).
    #[error("{file}: not a tenure operator certificate: {reason}")]
    NotOperatorCertificate {
        /// The file (or what the text was).
        file: String,
        /// Which rule failed.
        reason: String,
    },
    /// The CA file holds a certificate that is not a CA (no `basicConstraints CA:TRUE`).
    /// Cause: a node certificate given as the CA. Fix: point at `ca.pem`.
    #[error("{file}: certificate is not a CA certificate")]
    NotCa {
        /// The file (or what the text was).
        file: String,
    },
    /// The private key does not belong to the certificate. Cause: files of two different
    /// nodes (or two runs of the certs tool) mixed. Fix: use the key written together with
    /// the certificate.
    #[error("{key} is not the private key of {cert} (public keys differ)")]
    KeyMismatch {
        /// The certificate file.
        cert: String,
        /// The key file.
        key: String,
    },
    /// The certificate is not accepted under the cluster CA. Cause: issued by another CA
    /// (another cluster, or the CA was regenerated), expired or not yet valid, or missing
    /// the clientAuth/serverAuth usage. Fix: issue the node certificate from the CA in
    /// `ca`, check the clock.
    #[error("{file} is not accepted under the CA in {ca}: {reason}")]
    NotTrusted {
        /// The certificate file.
        file: String,
        /// The CA file.
        ca: String,
        /// What the verifier said.
        reason: String,
    },
    /// The certificate names another node than the one asked for. Cause: the files of
    /// node `found` were given to node `expected`. Fix: give each node its own files.
    #[error("{file} names node {found}, but node {expected} was asked for")]
    WrongNode {
        /// The certificate file.
        file: String,
        /// The id the caller asked for.
        expected: NodeId,
        /// The id in the certificate.
        found: NodeId,
    },
    /// Node id 0 was given. Cause: raft-rs reserves 0 for "no node". Fix: number nodes
    /// from 1.
    #[error("node id 0 is not valid (raft-rs reserves 0); number nodes from 1")]
    InvalidNodeId,
    /// The CA certificate cannot be used to issue certificates with this library. Cause:
    /// a subject name with several attributes in one RDN, or string types tenure does not
    /// re-encode. Fix: use a CA made by [`ClusterCa::generate`].
    #[error("{file}: CA certificate not usable for issuing: {reason}")]
    UnsupportedCa {
        /// The file (or what the text was).
        file: String,
        /// Why.
        reason: String,
    },
    /// rustls refused the configuration. Cause: usually a key type the ring provider does
    /// not support. Fix: re-issue with [`ClusterCa`] (ECDSA P-256).
    #[error("TLS configuration rejected: {0}")]
    Rustls(#[from] rustls::Error),
    /// rcgen failed to make a key or certificate. Cause: see the message (rare: bad names,
    /// unsupported key). Fix: report it; inputs made by tenure should not fail.
    #[error("certificate generation failed: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// quinn refused the TLS configuration. Cause: the provider lacks the TLS 1.3 suite
    /// QUIC needs for its initial packets (AES-128-GCM-SHA256). Fix: use the default ring
    /// provider (tenure always does; this indicates a bug).
    #[error("QUIC cannot use this TLS configuration: {0}")]
    Quic(String),
}

/// Result alias of this module.
pub type Result<T, E = TlsError> = std::result::Result<T, E>;

/// What a certificate issued by the cluster CA is for. The kind decides the certificate's
/// one SubjectAltName and its key usages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CertKind {
    /// A group member: server and client of the raft transport, named `node-<id>.tenure`,
    /// with the clientAuth and serverAuth extended key usages.
    Node(NodeId),
    /// An operator: client of a node's admin endpoint ([`crate::admin`]), named
    /// [`OPERATOR_NAME`], with the clientAuth extended key usage only. It cannot act as
    /// a node, and a node certificate cannot act as an operator.
    Operator,
}

impl CertKind {
    /// The certificate's DNS SubjectAltName.
    pub fn dns_name(&self) -> String {
        match self {
            CertKind::Node(id) => node_server_name(*id),
            CertKind::Operator => OPERATOR_NAME.to_owned(),
        }
    }

    fn common_name(&self) -> String {
        match self {
            CertKind::Node(id) => format!("tenure node {id}"),
            CertKind::Operator => "tenure operator".to_owned(),
        }
    }

    fn extended_key_usages(&self) -> Vec<ExtendedKeyUsagePurpose> {
        match self {
            CertKind::Node(_) => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            CertKind::Operator => vec![ExtendedKeyUsagePurpose::ClientAuth],
        }
    }

    fn validity_days(&self) -> u64 {
        match self {
            CertKind::Node(_) => NODE_VALIDITY_DAYS,
            CertKind::Operator => OPERATOR_VALIDITY_DAYS,
        }
    }

    /// Reads the kind from a DNS name: [`OPERATOR_NAME`], or `node-<id>.tenure` with a
    /// canonical decimal id > 0.
    fn from_dns_name(name: &str) -> Result<CertKind, String> {
        if name == OPERATOR_NAME {
            return Ok(CertKind::Operator);
        }
        let Some(stem) = name.strip_suffix(NAME_SUFFIX) else {
            return Err(format!("name {name:?} does not end in {NAME_SUFFIX:?}"));
        };
        let Some(digits) = stem.strip_prefix("node-") else {
            return Err(format!(
                "name {name:?} is neither node-<id>{NAME_SUFFIX} nor {OPERATOR_NAME}"
            ));
        };
        let id: NodeId = match digits.parse() {
            Ok(id) if id > 0 && digits.bytes().all(|b| b.is_ascii_digit()) => id,
            _ => {
                return Err(format!(
                    "name {name:?}: {digits:?} is not a node id (1..=2^64-1)"
                ))
            }
        };
        if id.to_string() != digits {
            return Err(format!(
                "name {name:?}: node id {digits:?} is not in canonical form"
            ));
        }
        Ok(CertKind::Node(id))
    }
}

impl fmt::Display for CertKind {
    /// `node 3` or `operator`: what the certificate makes its holder.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CertKind::Node(id) => write!(f, "node {id}"),
            CertKind::Operator => f.write_str("operator"),
        }
    }
}

/// Reads the [`CertKind`] of a DER certificate from its SubjectAltName: exactly one
/// name, a DNS name of a known kind. Any other certificate is
/// [`TlsError::NotNodeCertificate`] (the reason says which rule failed). Does not check
/// the signature (the TLS handshake does).
pub fn cert_kind(der: &[u8]) -> Result<CertKind> {
    cert_kind_labeled(der, "certificate")
}

/// The node id a node certificate names (see [`node_server_name`]).
///
/// Accepts only a certificate whose SubjectAltName is exactly one DNS name
/// `node-<id>.tenure`, with `id` a canonical decimal `u64` > 0. Any other certificate
/// (an operator certificate, no SAN, an IP address SAN, several names, a foreign name)
/// is [`TlsError::NotNodeCertificate`]. Does not check the signature: call it on a
/// certificate the TLS handshake has verified.
pub fn node_id_from_cert(der: &[u8]) -> Result<NodeId> {
    node_id_labeled(der, "certificate")
}

fn node_id_labeled(der: &[u8], file: &str) -> Result<NodeId> {
    match cert_kind_labeled(der, file)? {
        CertKind::Node(id) => Ok(id),
        CertKind::Operator => Err(TlsError::NotNodeCertificate {
            file: file.to_owned(),
            reason: format!(
                "it is an operator certificate ({OPERATOR_NAME}); an operator cannot act as a node"
            ),
        }),
    }
}

/// Checks that a DER certificate is an operator certificate ([`CertKind::Operator`]).
///
/// A node certificate is [`TlsError::NotOperatorCertificate`] with the reason
/// "certificate of node 3 is not an operator certificate"; so is any certificate whose
/// name is not a tenure name. Does not check the signature.
pub fn check_operator_cert(der: &[u8]) -> Result<()> {
    operator_labeled(der, "certificate")
}

fn operator_labeled(der: &[u8], file: &str) -> Result<()> {
    let not_operator = |reason: String| TlsError::NotOperatorCertificate {
        file: file.to_owned(),
        reason,
    };
    match cert_kind_labeled(der, file) {
        Ok(CertKind::Operator) => Ok(()),
        Ok(kind) => Err(not_operator(format!(
            "certificate of {kind} is not an operator certificate"
        ))),
        Err(TlsError::NotNodeCertificate { reason, .. }) => Err(not_operator(reason)),
        Err(e) => Err(e),
    }
}

fn parse_x509<'a>(der: &'a [u8], file: &str) -> Result<X509Certificate<'a>> {
    match x509_parser::parse_x509_certificate(der) {
        Ok(([], cert)) => Ok(cert),
        Ok(_) => Err(TlsError::BadCertificate {
            file: file.to_owned(),
            reason: "trailing bytes after the certificate".into(),
        }),
        Err(e) => Err(TlsError::BadCertificate {
            file: file.to_owned(),
            reason: e.to_string(),
        }),
    }
}

fn cert_kind_labeled(der: &[u8], file: &str) -> Result<CertKind> {
    let not_node = |reason: String| TlsError::NotNodeCertificate {
        file: file.to_owned(),
        reason,
    };
    let cert = parse_x509(der, file)?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| not_node(format!("bad SubjectAltName extension: {e}")))?
        .ok_or_else(|| not_node("no SubjectAltName extension".into()))?;
    let names = &san.value.general_names;
    if names.len() != 1 {
        return Err(not_node(format!(
            "{} SubjectAltNames, expected exactly one DNS name",
            names.len()
        )));
    }
    match &names[0] {
        GeneralName::DNSName(name) => CertKind::from_dns_name(name).map_err(not_node),
        GeneralName::IPAddress(_) => Err(not_node(
            "the SubjectAltName is an IP address; tenure names nodes by id".into(),
        )),
        other => Err(not_node(format!(
            "the SubjectAltName is not a DNS name: {other:?}"
        ))),
    }
}

/// The ring crypto provider, which is the only one tenure uses.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Sets `not_before` (an hour ago) and `not_after` (`days` from now).
fn set_validity(params: &mut CertificateParams, days: u64) -> Result<()> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let at = |secs: u64| {
        let secs = i64::try_from(secs).unwrap_or(i64::MAX);
        x509_parser::time::ASN1Time::from_timestamp(secs)
            .map(|t| t.to_datetime())
            .map_err(|_| TlsError::Rcgen(rcgen::Error::Time))
    };
    params.not_before = at(now.saturating_sub(BACKDATE_SECS))?;
    params.not_after = at(now.saturating_add(days.saturating_mul(86_400)))?;
    Ok(())
}

/// A certificate issued by the CA for one node, in PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeCertificate {
    /// The node the certificate names.
    pub id: NodeId,
    /// The certificate (PEM, one `CERTIFICATE` block).
    pub cert_pem: String,
    /// The node's private key (PEM, PKCS#8). Secret: store with mode 0600.
    pub key_pem: String,
}

impl fmt::Debug for NodeCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeCertificate")
            .field("id", &self.id)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// An operator certificate issued by the CA, in PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct OperatorCertificate {
    /// The certificate (PEM, one `CERTIFICATE` block).
    pub cert_pem: String,
    /// The operator's private key (PEM, PKCS#8). Secret: store with mode 0600.
    pub key_pem: String,
}

impl fmt::Debug for OperatorCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorCertificate")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// A random positive 16-byte certificate serial number.
fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::from_slice(&bytes)
}

fn tenure_dn(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "tenure");
    dn.push(DnType::CommonName, common_name);
    dn
}

/// PEM text (or file contents) with what to call it in errors.
struct Src<'a> {
    label: String,
    text: &'a [u8],
}

impl<'a> Src<'a> {
    fn new(label: impl Into<String>, text: &'a [u8]) -> Self {
        Src {
            label: label.into(),
            text,
        }
    }

    fn contains(&self, needle: &[u8]) -> bool {
        self.text.windows(needle.len()).any(|w| w == needle)
    }

    fn has_pem_block(&self) -> bool {
        self.contains(b"-----BEGIN ")
    }

    /// A block of the wanted kind is there but did not decode.
    fn undecodable(&self, kind: &str) -> TlsError {
        TlsError::NotPem {
            file: self.label.clone(),
            detail: format!("a {kind} block is present but does not decode (corrupted base64?)"),
        }
    }

    fn not_pem(&self) -> TlsError {
        TlsError::NotPem {
            file: self.label.clone(),
            detail: "no PEM block (-----BEGIN ...-----) found; DER files are not accepted".into(),
        }
    }

    /// Every `CERTIFICATE` block, in order; at least one.
    fn certs(&self) -> Result<Vec<CertificateDer<'static>>> {
        let mut certs = Vec::new();
        for item in CertificateDer::pem_slice_iter(self.text) {
            match item {
                Ok(c) => certs.push(c),
                Err(e) => {
                    return Err(TlsError::NotPem {
                        file: self.label.clone(),
                        detail: pem_problem(&e),
                    })
                }
            }
        }
        if certs.is_empty() {
            return Err(if self.contains(b"-----BEGIN CERTIFICATE-----") {
                self.undecodable("CERTIFICATE")
            } else if self.has_pem_block() {
                TlsError::NoCertificate {
                    file: self.label.clone(),
                }
            } else {
                self.not_pem()
            });
        }
        Ok(certs)
    }

    /// The first private key block.
    fn key(&self) -> Result<PrivateKeyDer<'static>> {
        match PrivateKeyDer::from_pem_slice(self.text) {
            Ok(k) => Ok(k),
            Err(pem::Error::NoItemsFound) if self.contains(b"PRIVATE KEY-----") => {
                Err(self.undecodable("PRIVATE KEY"))
            }
            Err(pem::Error::NoItemsFound) if self.has_pem_block() => Err(TlsError::NoPrivateKey {
                file: self.label.clone(),
            }),
            Err(pem::Error::NoItemsFound) => Err(self.not_pem()),
            Err(e) => Err(TlsError::NotPem {
                file: self.label.clone(),
                detail: pem_problem(&e),
            }),
        }
    }
}

/// What the PEM parser found wrong, in words (its own messages print byte lists, such as
/// `missing section end marker: [67, 69, 82, ...]`).
fn pem_problem(e: &pem::Error) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    match e {
        pem::Error::MissingSectionEnd { end_marker } => {
            let label = text(end_marker);
            format!(
                "the {label} block has no \"-----END {label}-----\" line: the file is cut \
                 off (an incomplete copy, or a full disk when it was written)"
            )
        }
        pem::Error::IllegalSectionStart { line } => {
            format!("malformed BEGIN line {:?}", text(line))
        }
        pem::Error::Base64Decode(detail) => {
            format!("the text between the BEGIN and END lines is not valid base64 ({detail})")
        }
        pem::Error::SectionTooLarge => "a block is larger than 256 MB".into(),
        pem::Error::NoItemsFound => "no PEM block (-----BEGIN ...-----) found".into(),
        other => other.to_string(),
    }
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

/// Something worth fixing in the files of an identity that does not stop it from loading
/// ([`TlsIdentity::warnings`], [`OperatorIdentity::warnings`]). The QUIC transport logs
/// each at start.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdentityWarning {
    /// A private key file can be read (or written) by its group or by others (mode bits
    /// `0o077`). Anyone who can read it can act as this node (or operator). Fix:
    /// `chmod 600` it, owned by the user the process runs as.
    KeyReadableByOthers {
        /// The key file.
        path: PathBuf,
        /// Its permission bits (e.g. `0o644`).
        mode: u32,
    },
}

impl fmt::Display for IdentityWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentityWarning::KeyReadableByOthers { path, mode } => write!(
                f,
                "private key {} has mode {mode:04o}: its group or others can read it; \
                 chmod 600 it",
                path.display()
            ),
        }
    }
}

/// The warnings about the private key file at `path`: permission bits beyond the owner's.
fn key_file_warnings(path: &Path) -> Vec<IdentityWarning> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = fs::metadata(path) {
            let mode = meta.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                return vec![IdentityWarning::KeyReadableByOthers {
                    path: path.to_owned(),
                    mode,
                }];
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Vec::new()
}

/// A file read whole, labelled by its path for error messages.
struct ReadFile {
    label: String,
    text: Vec<u8>,
}

impl ReadFile {
    fn src(&self) -> Src<'_> {
        Src::new(self.label.clone(), &self.text)
    }
}

/// Reads the PEM files of an identity: CA, certificate, key.
fn read_files([ca, cert, key]: [&Path; 3]) -> Result<[ReadFile; 3]> {
    let read = |p: &Path| -> Result<ReadFile> {
        Ok(ReadFile {
            label: p.display().to_string(),
            text: read_file(p)?,
        })
    };
    Ok([read(ca)?, read(cert)?, read(key)?])
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The cluster certificate authority: a self-signed ECDSA P-256 CA that issues the
/// certificates of the group's nodes.
///
/// A CA made by [`ClusterCa::generate`] may only sign names under `.tenure` (an X.509
/// name constraint) and no intermediate CAs (path length 0). Its key is the root of trust
/// of the group: whoever holds it can mint any node id. Keep `ca-key.pem` off the nodes.
pub struct ClusterCa {
    cert_pem: String,
    key_pem: String,
    cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterCa")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

impl ClusterCa {
    /// Makes a new CA: fresh ECDSA P-256 key, self-signed, valid for
    /// [`CA_VALIDITY_DAYS`], limited to names under `.tenure`.
    pub fn generate() -> Result<ClusterCa> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = tenure_dn("tenure cluster CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: vec![GeneralSubtree::DnsName(
                NAME_SUFFIX.trim_start_matches('.').to_owned(),
            )],
            excluded_subtrees: Vec::new(),
        });
        params.serial_number = Some(random_serial());
        set_validity(&mut params, CA_VALIDITY_DAYS)?;
        let cert = params.self_signed(&key)?;
        Ok(ClusterCa {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads a CA from its certificate and key (PEM text, key in PKCS#8).
    ///
    /// Checks that the certificate is a CA, that the key is its key, and that
    /// certificates issued with it verify under it.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<ClusterCa> {
        Self::from_src(
            Src::new("CA certificate (PEM text)", cert_pem.as_bytes()),
            Src::new("CA key (PEM text)", key_pem.as_bytes()),
        )
    }

    /// Loads a CA from `ca.pem` and `ca-key.pem` style files (see [`ClusterCa::from_pem`]).
    pub fn load(cert_path: impl AsRef<Path>, key_path: impl AsRef<Path>) -> Result<ClusterCa> {
        let (cert_path, key_path) = (cert_path.as_ref(), key_path.as_ref());
        let cert = read_file(cert_path)?;
        let key = read_file(key_path)?;
        Self::from_src(
            Src::new(cert_path.display().to_string(), &cert),
            Src::new(key_path.display().to_string(), &key),
        )
    }

    fn from_src(cert: Src<'_>, key: Src<'_>) -> Result<ClusterCa> {
        let cert_der = cert.certs()?.remove(0);
        let key_der = key.key()?;
        let key_pair = KeyPair::try_from(&key_der).map_err(|e| TlsError::BadKey {
            file: key.label.clone(),
            reason: format!("{e} (tenure reads PKCS#8 ECDSA, Ed25519 and RSA keys)"),
        })?;
        let x509 = parse_x509(&cert_der, &cert.label)?;
        if !x509.is_ca() {
            return Err(TlsError::NotCa { file: cert.label });
        }
        if key_pair.subject_public_key_info() != x509.public_key().raw {
            return Err(TlsError::KeyMismatch {
                cert: cert.label,
                key: key.label,
            });
        }
        let mut params = CertificateParams::default();
        params.distinguished_name =
            dn_from_x509(x509.subject()).map_err(|reason| TlsError::UnsupportedCa {
                file: cert.label.clone(),
                reason,
            })?;
        drop(x509);
        let ca = ClusterCa {
            cert_pem: String::from_utf8_lossy(cert.text).into_owned(),
            key_pem: String::from_utf8_lossy(key.text).into_owned(),
            cert_der,
            issuer: Issuer::new(params, key_pair),
        };
        // Certificates we issue must chain to this certificate byte for byte (issuer name);
        // prove it once with a throwaway certificate.
        let probe = ca.issue_node(1)?;
        let probe = TlsIdentity::from_src(
            Src::new(cert.label.clone(), ca.cert_pem.as_bytes()),
            Src::new("probe certificate", probe.cert_pem.as_bytes()),
            Src::new("probe key", probe.key_pem.as_bytes()),
        );
        match probe {
            Ok(_) => Ok(ca),
            Err(e) => Err(TlsError::UnsupportedCa {
                file: cert.label,
                reason: format!("a certificate issued with it does not verify: {e}"),
            }),
        }
    }

    /// The CA certificate, PEM. This is the `ca.pem` every node trusts.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA private key, PEM (PKCS#8). Secret.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// Issues a certificate for node `id`: fresh ECDSA P-256 key, the one SubjectAltName
    /// `node-<id>.tenure`, clientAuth and serverAuth usages, valid for
    /// [`NODE_VALIDITY_DAYS`].
    pub fn issue_node(&self, id: NodeId) -> Result<NodeCertificate> {
        if id == 0 {
            return Err(TlsError::InvalidNodeId);
        }
        let (cert_pem, key_pem) = self.issue(CertKind::Node(id))?;
        Ok(NodeCertificate {
            id,
            cert_pem,
            key_pem,
        })
    }

    /// Issues an operator certificate: fresh ECDSA P-256 key, the one SubjectAltName
    /// [`OPERATOR_NAME`], the clientAuth usage only, valid for
    /// [`OPERATOR_VALIDITY_DAYS`]. It lets its holder use the admin endpoint of every
    /// node of the group ([`crate::admin`]), and nothing else.
    pub fn issue_operator(&self) -> Result<OperatorCertificate> {
        let (cert_pem, key_pem) = self.issue(CertKind::Operator)?;
        Ok(OperatorCertificate { cert_pem, key_pem })
    }

    /// Issues a certificate of `kind`: returns (certificate PEM, key PEM).
    fn issue(&self, kind: CertKind) -> Result<(String, String)> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![SanType::DnsName(kind.dns_name().try_into()?)];
        params.distinguished_name = tenure_dn(&kind.common_name());
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = kind.extended_key_usages();
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial());
        set_validity(&mut params, kind.validity_days())?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// Re-creates an X.509 subject as an rcgen name, keeping each attribute's string type so
/// that issued certificates carry the CA's subject byte for byte.
fn dn_from_x509(name: &x509_parser::x509::X509Name<'_>) -> Result<DistinguishedName, String> {
    let mut dn = DistinguishedName::new();
    for rdn in name.iter() {
        let mut attrs = rdn.iter();
        let (Some(attr), None) = (attrs.next(), attrs.next()) else {
            return Err("subject has an RDN with zero or several attributes".into());
        };
        let oid: Vec<u64> = attr
            .attr_type()
            .iter()
            .ok_or("subject attribute type does not fit u64 arcs")?
            .collect();
        let text = || {
            std::str::from_utf8(attr.as_slice())
                .map(str::to_owned)
                .map_err(|_| "subject attribute is not valid text".to_string())
        };
        let value = match attr.attr_value().header.tag() {
            Tag::Utf8String => DnValue::Utf8String(text()?),
            Tag::PrintableString => {
                DnValue::PrintableString(text()?.try_into().map_err(|e| format!("{e}"))?)
            }
            Tag::Ia5String => DnValue::Ia5String(text()?.try_into().map_err(|e| format!("{e}"))?),
            t => {
                return Err(format!(
                    "subject attribute uses unsupported string type {t}"
                ))
            }
        };
        dn.push(DnType::from_oid(&oid), value);
    }
    Ok(dn)
}

/// The file holding the CA certificate in the layout of [`write_cluster_certs`].
pub const CA_CERT_FILE: &str = "ca.pem";
/// The file holding the CA private key in the layout of [`write_cluster_certs`].
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// The file holding node `id`'s certificate: `node-<id>.pem`.
pub fn node_cert_file(id: NodeId) -> String {
    format!("node-{id}.pem")
}

/// The file holding node `id`'s private key: `node-<id>-key.pem`.
pub fn node_key_file(id: NodeId) -> String {
    format!("node-{id}-key.pem")
}

/// The file holding the operator certificate in the layout of [`write_cluster_certs`].
pub const OPERATOR_CERT_FILE: &str = "operator.pem";
/// The file holding the operator private key in the layout of [`write_cluster_certs`].
pub const OPERATOR_KEY_FILE: &str = "operator-key.pem";

/// Makes a new CA, one certificate per node and one operator certificate, and writes them
/// into `dir` (created if missing): `ca.pem`, `ca-key.pem`, `node-<id>.pem`,
/// `node-<id>-key.pem`, `operator.pem`, `operator-key.pem`. Key files get mode 0600.
///
/// Refuses ([`TlsError::AlreadyExists`]) if any of these files exists, before writing
/// anything. Give each node `ca.pem` and its own two files; give the operator (the admin
/// tool) `ca.pem` and the two operator files; keep `ca-key.pem` elsewhere.
pub fn write_cluster_certs(
    dir: impl AsRef<Path>,
    nodes: impl IntoIterator<Item = NodeId>,
) -> Result<()> {
    let dir = dir.as_ref();
    let mut nodes: Vec<NodeId> = nodes.into_iter().collect();
    nodes.sort_unstable();
    nodes.dedup();
    if nodes.contains(&0) {
        return Err(TlsError::InvalidNodeId);
    }
    let mut names = vec![
        CA_CERT_FILE.to_owned(),
        CA_KEY_FILE.to_owned(),
        OPERATOR_CERT_FILE.to_owned(),
        OPERATOR_KEY_FILE.to_owned(),
    ];
    for &id in &nodes {
        names.push(node_cert_file(id));
        names.push(node_key_file(id));
    }
    fs::create_dir_all(dir).map_err(|source| TlsError::Write {
        path: dir.to_owned(),
        source,
    })?;
    for name in &names {
        let path = dir.join(name);
        if path.exists() {
            return Err(TlsError::AlreadyExists { path });
        }
    }
    let ca = ClusterCa::generate()?;
    write_new_file(&dir.join(CA_CERT_FILE), ca.cert_pem(), false)?;
    write_new_file(&dir.join(CA_KEY_FILE), ca.key_pem(), true)?;
    for id in nodes {
        let node = ca.issue_node(id)?;
        write_new_file(&dir.join(node_cert_file(id)), &node.cert_pem, false)?;
        write_new_file(&dir.join(node_key_file(id)), &node.key_pem, true)?;
    }
    let operator = ca.issue_operator()?;
    write_new_file(&dir.join(OPERATOR_CERT_FILE), &operator.cert_pem, false)?;
    write_new_file(&dir.join(OPERATOR_KEY_FILE), &operator.key_pem, true)?;
    Ok(())
}

/// The folder of the CA's files in the layout of [`write_cluster_certs_per_node`]: `ca`.
pub const CA_DIR: &str = "ca";
/// The folder of the operator's files in the layout of [`write_cluster_certs_per_node`]:
/// `operator`.
pub const OPERATOR_DIR: &str = "operator";

/// The folder of node `id`'s files in the layout of [`write_cluster_certs_per_node`]:
/// `node-<id>`.
pub fn node_dir(id: NodeId) -> String {
    format!("node-{id}")
}

/// Like [`write_cluster_certs`], but one folder per holder, so that no node holds the
/// CA key:
///
/// ```text
/// dir/ca/        ca.pem ca-key.pem              the CA: keep it off the nodes
/// dir/node-<id>/ ca.pem node-<id>.pem node-<id>-key.pem   copy to node <id> only
/// dir/operator/  ca.pem operator.pem operator-key.pem     for the admin tool
/// ```
///
/// Each node folder is what [`TlsIdentity::from_dir`] reads (`--certs dir/node-<id>` in
/// the example worker), the operator folder what [`OperatorIdentity::from_dir`] reads.
/// Key files get mode 0600, folders 0700. Refuses ([`TlsError::AlreadyExists`]) if any
/// of these files exists, before writing anything. A node that joins later gets its
/// files with [`write_node_cert`] on `dir/ca`, moved to a folder of its own.
pub fn write_cluster_certs_per_node(
    dir: impl AsRef<Path>,
    nodes: impl IntoIterator<Item = NodeId>,
) -> Result<()> {
    let dir = dir.as_ref();
    let mut nodes: Vec<NodeId> = nodes.into_iter().collect();
    nodes.sort_unstable();
    nodes.dedup();
    if nodes.contains(&0) {
        return Err(TlsError::InvalidNodeId);
    }
    let mut files: Vec<PathBuf> = vec![
        dir.join(CA_DIR).join(CA_CERT_FILE),
        dir.join(CA_DIR).join(CA_KEY_FILE),
        dir.join(OPERATOR_DIR).join(CA_CERT_FILE),
        dir.join(OPERATOR_DIR).join(OPERATOR_CERT_FILE),
        dir.join(OPERATOR_DIR).join(OPERATOR_KEY_FILE),
    ];
    for &id in &nodes {
        let d = dir.join(node_dir(id));
        files.extend([
            d.join(CA_CERT_FILE),
            d.join(node_cert_file(id)),
            d.join(node_key_file(id)),
        ]);
    }
    if let Some(path) = files.into_iter().find(|p| p.exists()) {
        return Err(TlsError::AlreadyExists { path });
    }
    let ca = ClusterCa::generate()?;
    let ca_dir = make_private_dir(&dir.join(CA_DIR))?;
    write_new_file(&ca_dir.join(CA_CERT_FILE), ca.cert_pem(), false)?;
    write_new_file(&ca_dir.join(CA_KEY_FILE), ca.key_pem(), true)?;
    for id in nodes {
        let d = make_private_dir(&dir.join(node_dir(id)))?;
        let node = ca.issue_node(id)?;
        write_new_file(&d.join(CA_CERT_FILE), ca.cert_pem(), false)?;
        write_new_file(&d.join(node_cert_file(id)), &node.cert_pem, false)?;
        write_new_file(&d.join(node_key_file(id)), &node.key_pem, true)?;
    }
    let d = make_private_dir(&dir.join(OPERATOR_DIR))?;
    let operator = ca.issue_operator()?;
    write_new_file(&d.join(CA_CERT_FILE), ca.cert_pem(), false)?;
    write_new_file(&d.join(OPERATOR_CERT_FILE), &operator.cert_pem, false)?;
    write_new_file(&d.join(OPERATOR_KEY_FILE), &operator.key_pem, true)?;
    Ok(())
}

/// Creates `dir` (and its parents) if missing; a folder it creates gets mode 0700.
fn make_private_dir(dir: &Path) -> Result<PathBuf> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir).map_err(|source| TlsError::Write {
        path: dir.to_owned(),
        source,
    })?;
    Ok(dir.to_owned())
}

/// Issues a certificate for node `id` from the CA in `dir` (`ca.pem`, `ca-key.pem`, as
/// [`write_cluster_certs`] left them) and writes `node-<id>.pem` and `node-<id>-key.pem`
/// beside it (key mode 0600): for a node that joins a running group. Refuses
/// ([`TlsError::AlreadyExists`]) if either file exists.
pub fn write_node_cert(dir: impl AsRef<Path>, id: NodeId) -> Result<()> {
    let dir = dir.as_ref();
    if id == 0 {
        return Err(TlsError::InvalidNodeId);
    }
    for name in [node_cert_file(id), node_key_file(id)] {
        let path = dir.join(name);
        if path.exists() {
            return Err(TlsError::AlreadyExists { path });
        }
    }
    let ca = ClusterCa::load(dir.join(CA_CERT_FILE), dir.join(CA_KEY_FILE))?;
    let node = ca.issue_node(id)?;
    write_new_file(&dir.join(node_cert_file(id)), &node.cert_pem, false)?;
    write_new_file(&dir.join(node_key_file(id)), &node.key_pem, true)
}

/// Creates `path` (failing if it exists) and writes `text`; `secret` files get mode 0600.
fn write_new_file(path: &Path, text: &str, secret: bool) -> Result<()> {
    use std::io::Write;
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(if secret { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = secret;
    let werr = |source| TlsError::Write {
        path: path.to_owned(),
        source,
    };
    let mut file = opts.open(path).map_err(|source| {
        if source.kind() == io::ErrorKind::AlreadyExists {
            TlsError::AlreadyExists {
                path: path.to_owned(),
            }
        } else {
            werr(source)
        }
    })?;
    file.write_all(text.as_bytes()).map_err(werr)?;
    file.sync_all().map_err(werr)
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

    fn from_src(ca: Src<'_>, cert: Src<'_>, key: Src<'_>) -> Result<TlsIdentity> {
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

    /// A certificate signed by `ca` with the given SubjectAltNames (PEM cert, PEM key).
    fn custom_cert(ca: &ClusterCa, sans: Vec<SanType>) -> (String, String) {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::default();
        params.subject_alt_names = sans;
        params.extended_key_usages = CertKind::Node(1).extended_key_usages();
        let cert = params.signed_by(&key, &ca.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    fn dns(name: &str) -> SanType {
        SanType::DnsName(name.try_into().unwrap())
    }

    #[test]
    fn node_certificate_names_the_node_by_id_only() {
        let ca = ClusterCa::generate().unwrap();
        let node = ca.issue_node(3).unwrap();
        assert_eq!(node.id, 3);
        assert_eq!(node_server_name(3), "node-3.tenure");
        assert_eq!(node_id_from_cert(&der(&node.cert_pem)).unwrap(), 3);
        assert_eq!(cert_kind(&der(&node.cert_pem)).unwrap(), CertKind::Node(3));
        assert_eq!(
            node_id_from_cert(&der(&ca.issue_node(u64::MAX).unwrap().cert_pem)).unwrap(),
            u64::MAX
        );
        assert!(matches!(ca.issue_node(0), Err(TlsError::InvalidNodeId)));
        // The CA itself is not a node.
        assert!(matches!(
            node_id_from_cert(ca.cert_der()),
            Err(TlsError::NotNodeCertificate { .. })
        ));
    }

    #[test]
    fn operator_like_foreign_and_ambiguous_names_are_not_node_certificates() {
        let ca = ClusterCa::generate().unwrap();
        let cases: Vec<(&str, Vec<SanType>)> = vec![
            ("operator", vec![dns("operator.tenure")]),
            ("foreign domain", vec![dns("node-3.example.com")]),
            ("suffix trick", vec![dns("node-3.tenure.example.com")]),
            ("leading zero", vec![dns("node-03.tenure")]),
            ("plus sign", vec![dns("node-+3.tenure")]),
            ("id zero", vec![dns("node-0.tenure")]),
            ("not a number", vec![dns("node-x.tenure")]),
            ("overflow", vec![dns("node-18446744073709551616.tenure")]),
            ("upper case", vec![dns("NODE-3.TENURE")]),
            (
                "two nodes",
                vec![dns("node-2.tenure"), dns("node-3.tenure")],
            ),
            (
                "node and operator",
                vec![dns("node-2.tenure"), dns("operator.tenure")],
            ),
            (
                "ip address",
                vec![SanType::IpAddress("127.0.0.1".parse().unwrap())],
            ),
            (
                "node and ip",
                vec![
                    dns("node-2.tenure"),
                    SanType::IpAddress("127.0.0.1".parse().unwrap()),
                ],
            ),
            ("no san", vec![]),
        ];
        for (what, sans) in cases {
            let (cert, _) = custom_cert(&ca, sans);
            match node_id_from_cert(&der(&cert)) {
                Err(TlsError::NotNodeCertificate { reason, .. }) => {
                    assert!(!reason.is_empty(), "{what}")
                }
                other => panic!("{what}: expected NotNodeCertificate, got {other:?}"),
            }
        }
        assert!(matches!(
            node_id_from_cert(b"not a certificate"),
            Err(TlsError::BadCertificate { .. })
        ));
    }

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

    #[test]
    fn ca_reloaded_from_pem_issues_certificates_that_verify() {
        let ca = ClusterCa::generate().unwrap();
        let again = ClusterCa::from_pem(ca.cert_pem(), ca.key_pem()).unwrap();
        let node = again.issue_node(5).unwrap();
        let id = TlsIdentity::from_pem(ca.cert_pem(), &node.cert_pem, &node.key_pem).unwrap();
        assert_eq!(id.id(), 5);

        let other = ClusterCa::generate().unwrap();
        let e = ClusterCa::from_pem(ca.cert_pem(), other.key_pem()).unwrap_err();
        assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e}");
        let n = ca.issue_node(1).unwrap();
        let e = ClusterCa::from_pem(&n.cert_pem, &n.key_pem).unwrap_err();
        assert!(matches!(e, TlsError::NotCa { .. }), "{e}");
        assert!(!format!("{ca:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn cluster_certs_directory_layout_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("certs");
        write_cluster_certs(&out, [1, 2, 3]).unwrap();
        for id in 1..=3 {
            assert_eq!(TlsIdentity::from_dir(&out, id).unwrap().id(), id);
        }
        OperatorIdentity::from_dir(&out).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for f in [
                CA_KEY_FILE.to_string(),
                node_key_file(2),
                OPERATOR_KEY_FILE.to_string(),
            ] {
                let mode = fs::metadata(out.join(&f)).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600, "{f}");
            }
        }
        ClusterCa::load(out.join(CA_CERT_FILE), out.join(CA_KEY_FILE)).unwrap();

        let e = write_cluster_certs(&out, [4]).unwrap_err();
        assert!(matches!(e, TlsError::AlreadyExists { .. }), "{e}");
        let e = TlsIdentity::from_dir(&out, 9).unwrap_err();
        assert!(matches!(e, TlsError::Read { .. }), "{e}");
        assert!(e.to_string().contains("node-9.pem"), "{e}");

        // A node added later gets its files from the same CA, never over existing ones.
        write_node_cert(&out, 9).unwrap();
        assert_eq!(TlsIdentity::from_dir(&out, 9).unwrap().id(), 9);
        let e = write_node_cert(&out, 9).unwrap_err();
        assert!(matches!(e, TlsError::AlreadyExists { .. }), "{e}");
        assert!(matches!(
            write_node_cert(&out, 0),
            Err(TlsError::InvalidNodeId)
        ));
        // Node 2's files under node 3's names: the certificate says who it is.
        fs::copy(out.join(node_cert_file(2)), out.join(node_cert_file(3))).unwrap();
        fs::copy(out.join(node_key_file(2)), out.join(node_key_file(3))).unwrap();
        let e = TlsIdentity::from_dir(&out, 3).unwrap_err();
        assert!(
            matches!(
                e,
                TlsError::WrongNode {
                    expected: 3,
                    found: 2,
                    ..
                }
            ),
            "{e}"
        );
        let e = write_cluster_certs(dir.path().join("zero"), [0]).unwrap_err();
        assert!(matches!(e, TlsError::InvalidNodeId), "{e}");
    }

    #[test]
    fn a_cut_off_pem_file_is_named_and_described_in_words() {
        let dir = tempfile::tempdir().unwrap();
        write_cluster_certs(dir.path(), [1]).unwrap();
        for name in [
            node_cert_file(1),
            node_key_file(1),
            CA_CERT_FILE.to_string(),
        ] {
            let path = dir.path().join(&name);
            let full = fs::read_to_string(&path).unwrap();
            // Cut off after the first two lines (BEGIN and some base64): no END line.
            let cut: String = full.lines().take(2).map(|l| format!("{l}\n")).collect();
            fs::write(&path, &cut).unwrap();
            let e = TlsIdentity::from_dir(dir.path(), 1)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&path.display().to_string()), "{e}");
            assert!(
                e.contains("has no \"-----END") && e.contains("cut off"),
                "{e}"
            );
            assert!(
                !e.contains("[45, ") && !e.contains("[67, "),
                "bytes, not words: {e}"
            );
            fs::write(&path, &full).unwrap();
        }
        TlsIdentity::from_dir(dir.path(), 1).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn key_files_readable_by_others_load_with_a_warning_naming_file_and_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        write_cluster_certs(dir.path(), [1]).unwrap();
        assert!(TlsIdentity::from_dir(dir.path(), 1)
            .unwrap()
            .warnings()
            .is_empty());
        assert!(OperatorIdentity::from_dir(dir.path())
            .unwrap()
            .warnings()
            .is_empty());
        for (name, mode) in [
            (node_key_file(1), 0o644),
            (OPERATOR_KEY_FILE.to_string(), 0o640),
        ] {
            let path = dir.path().join(&name);
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        }
        let id = TlsIdentity::from_dir(dir.path(), 1).unwrap();
        let key = dir.path().join(node_key_file(1));
        assert_eq!(
            id.warnings(),
            &[IdentityWarning::KeyReadableByOthers {
                path: key.clone(),
                mode: 0o644
            }]
        );
        let text = id.warnings()[0].to_string();
        assert!(
            text.contains(&key.display().to_string()) && text.contains("0644"),
            "{text}"
        );
        assert_eq!(id.clone().warnings().len(), 1);
        let op = OperatorIdentity::from_dir(dir.path()).unwrap();
        assert!(matches!(
            op.warnings(),
            [IdentityWarning::KeyReadableByOthers { mode: 0o640, .. }]
        ));
    }

    #[test]
    fn per_node_layout_keeps_the_ca_key_in_its_own_folder() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("certs");
        write_cluster_certs_per_node(&out, [1, 2, 3]).unwrap();
        for id in 1..=3u64 {
            let d = out.join(node_dir(id));
            let mut names: Vec<String> = fs::read_dir(&d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            assert_eq!(
                names,
                [
                    CA_CERT_FILE.to_string(),
                    node_key_file(id),
                    node_cert_file(id)
                ]
            );
            let identity = TlsIdentity::from_dir(&d, id).unwrap();
            assert!(identity.warnings().is_empty(), "{:?}", identity.warnings());
        }
        assert!(!out.join(CA_KEY_FILE).exists());
        OperatorIdentity::from_dir(out.join(OPERATOR_DIR)).unwrap();
        assert!(!out.join(OPERATOR_DIR).join(CA_KEY_FILE).exists());
        // The CA folder issues a joining node that trusts the same CA.
        write_node_cert(out.join(CA_DIR), 4).unwrap();
        TlsIdentity::from_dir(out.join(CA_DIR), 4).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: PathBuf| fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(out.join(CA_DIR).join(CA_KEY_FILE)), 0o600);
            assert_eq!(mode(out.join(CA_DIR)), 0o700);
            assert_eq!(mode(out.join(node_dir(2))), 0o700);
        }
        let e = write_cluster_certs_per_node(&out, [5]).unwrap_err();
        assert!(matches!(e, TlsError::AlreadyExists { .. }), "{e}");
    }
}
