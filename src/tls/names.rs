//! How certificates name their holders: the one SubjectAltName of a tenure certificate
//! is `node-<id>.tenure` or `operator.tenure`, and its [`CertKind`] is read from it.
//!
//! The raft transport names a peer by [`node_id_from_cert`] (only node certificates
//! pass), the admin endpoint checks a client with [`check_operator_cert`] (only
//! operator certificates pass).

use std::fmt;

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

use crate::NodeId;

use super::error::{Result, TlsError};

/// The DNS suffix of every tenure certificate name.
pub const NAME_SUFFIX: &str = ".tenure";

/// The DNS name an operator certificate carries: `operator.tenure`.
pub const OPERATOR_NAME: &str = "operator.tenure";

/// The DNS name a node certificate carries and a client dials: `node-<id>.tenure`.
pub fn node_server_name(id: NodeId) -> String {
    format!("node-{id}{NAME_SUFFIX}")
}

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

pub(super) fn node_id_labeled(der: &[u8], file: &str) -> Result<NodeId> {
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

pub(super) fn operator_labeled(der: &[u8], file: &str) -> Result<()> {
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

pub(super) fn parse_x509<'a>(der: &'a [u8], file: &str) -> Result<X509Certificate<'a>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::ca::testing::{custom_cert, der, dns};
    use crate::tls::*;
    use rcgen::SanType;

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
                    assert!(!reason.is_empty(), "{what}");
                }
                other => panic!("{what}: expected NotNodeCertificate, got {other:?}"),
            }
        }
        assert!(matches!(
            node_id_from_cert(b"not a certificate"),
            Err(TlsError::BadCertificate { .. })
        ));
    }
}
