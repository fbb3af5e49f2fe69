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
//!
//! # Layout
//!
//! | file | holds |
//! |---|---|
//! | `error.rs` | [`TlsError`]: every failure, with its cause and fix |
//! | `names.rs` | certificate names: [`node_server_name`], [`CertKind`], [`node_id_from_cert`], [`check_operator_cert`] |
//! | `ca.rs` | [`ClusterCa`]: making the CA, issuing node and operator certificates |
//! | `pem.rs` | reading PEM text and files, with errors in words |
//! | `files.rs` | the certificate folders: file names, both layouts, writing them; key-permission warnings |
//! | `identity.rs` | [`TlsIdentity`] and [`OperatorIdentity`]: what each accepts; the quinn configurations |
//! | `reload.rs` | [`TlsFiles`]: where a node's files are, read again and checked while it runs; [`TlsReload`] |
//! | `refuse.rs` | refusing a removed node's certificate at the handshake |
//! | `rotate.rs` | rotation on disk: [`renew_node_cert`], a new CA ([`write_ca`]), a bundle of CAs ([`write_ca_bundle`]) |
//! | `credential.rs` | the core both identities and the admin client's [`Credentials`](crate::admin::Credentials) share: loading, checking, the rustls configurations |

mod ca;
mod credential;
mod error;
mod files;
mod identity;
mod names;
mod pem;
mod refuse;
mod reload;
mod rotate;

pub use ca::{
    ClusterCa, NodeCertificate, OperatorCertificate, CA_VALIDITY_DAYS, MAX_NODE_VALIDITY_DAYS,
    NODE_VALIDITY_DAYS, OPERATOR_VALIDITY_DAYS,
};
#[doc(hidden)]
pub use credential::set_thread_crypto_provider;
pub(crate) use credential::{client_builder, ring_provider, Credential};
pub use error::{Result, TlsError};
pub use files::{
    node_cert_file, node_dir, node_key_file, write_cluster_certs, write_cluster_certs_per_node,
    write_cluster_certs_per_node_valid_for, write_cluster_certs_valid_for, write_node_cert,
    IdentityWarning, CA_CERT_FILE, CA_DIR, CA_KEY_FILE, OPERATOR_CERT_FILE, OPERATOR_DIR,
    OPERATOR_KEY_FILE,
};
pub use identity::{OperatorIdentity, TlsIdentity, ALPN};
pub use names::{
    cert_kind, check_operator_cert, node_id_from_cert, node_server_name, CertKind, NAME_SUFFIX,
    OPERATOR_NAME,
};
pub(crate) use refuse::{RemovedIds, RemovedNode};
pub(crate) use reload::FileSnapshot;
pub use reload::{TlsFiles, TlsReload};
pub use rotate::{renew_node_cert, renew_operator_cert, write_ca, write_ca_bundle};
