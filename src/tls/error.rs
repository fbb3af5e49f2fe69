//! [`TlsError`]: what can go wrong loading, checking and making certificates, each
//! variant with its cause and its fix.

use std::io;
use std::path::PathBuf;

use crate::NodeId;

#[cfg(doc)]
use super::ClusterCa;

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
    /// A node certificate's validity is out of range. Cause: `--days 0`, or more than the
    /// CA's lifetime. Fix: choose 1 to 7300 days (90 is the default).
    #[error(
        "a node certificate valid for {days} days cannot be issued: choose 1 to {} days",
        super::ca::MAX_NODE_VALIDITY_DAYS
    )]
    InvalidValidity {
        /// The days asked for.
        days: u64,
    },
    /// The node's identity cannot be reloaded. Cause: it was given already loaded
    /// (`TlsSource::Identity`), so there are no files to read again, or the node does not
    /// run the QUIC transport. Fix: start it with `Config::tls_dir` or `TlsSource::Files`.
    #[error("this node's TLS identity has no files to reload from (it was given loaded, or the node runs no QUIC transport)")]
    NotReloadable,
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
