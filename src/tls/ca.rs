//! The cluster CA: [`ClusterCa`] makes (or loads) the group's certificate authority and
//! issues node and operator certificates, and how long each stays valid.

use std::fmt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue,
    ExtendedKeyUsagePurpose, GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    NameConstraints, PublicKeyData, SanType, SerialNumber,
};
use rustls::pki_types::CertificateDer;
use x509_parser::asn1_rs::Tag;

use crate::NodeId;

use super::credential::Holder;
use super::error::{Result, TlsError};
use super::identity::TlsIdentity;
use super::names::{parse_x509, CertKind, NAME_SUFFIX};
use super::pem::{read_file, Src};

#[cfg(doc)]
use super::OPERATOR_NAME;

/// How long a certificate made by [`ClusterCa::generate`] stays valid (about 20 years).
///
/// Move a group to a new CA before then, without downtime, through a bundle of both CAs
/// (README, "Rotating certificates").
pub const CA_VALIDITY_DAYS: u64 = 20 * 365;

/// How long a node certificate stays valid unless chosen otherwise
/// ([`ClusterCa::issue_node_for`]): 90 days. Nodes reload renewed files while they run,
/// so short-lived certificates cost no restart; `tenure_cert_expiry_seconds` counts
/// down to the expiry.
pub const NODE_VALIDITY_DAYS: u64 = 90;

/// The longest validity [`ClusterCa::issue_node_for`] issues: the CA's.
pub const MAX_NODE_VALIDITY_DAYS: u64 = CA_VALIDITY_DAYS;

/// How long an operator certificate stays valid (about 2 years). It is a person's or a
/// tool's credential: re-issue it with [`ClusterCa::issue_operator`] when it runs out.
pub const OPERATOR_VALIDITY_DAYS: u64 = 2 * 365;

/// Certificates start being valid this long before they were made, so that a peer whose
/// clock is a little behind still accepts them.
const BACKDATE_SECS: u64 = 3600;

/// What issuing a certificate of each kind puts in it.
impl CertKind {
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
}

/// Sets `not_before` (an hour ago) and `not_after` (`days` from now).
fn set_validity(params: &mut CertificateParams, days: u64) -> Result<()> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
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
    /// [`CA_VALIDITY_DAYS`], limited to names under `.tenure`, named
    /// `tenure cluster CA <8 random hex digits>` (every CA a name of its own).
    pub fn generate() -> Result<ClusterCa> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        // Each CA its own name: while a group moves to a new CA, the bundle holds two,
        // and a certificate of the retired one is then refused as of an unknown issuer
        // (rather than as a bad signature under a CA of the same name).
        let tag: [u8; 4] = rand::random();
        let tag: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        params.distinguished_name = tenure_dn(&format!("tenure cluster CA {tag}"));
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
        self.issue_node_for(id, NODE_VALIDITY_DAYS)
    }

    /// Like [`ClusterCa::issue_node`], valid for `days` (1 to
    /// [`MAX_NODE_VALIDITY_DAYS`]; [`TlsError::InvalidValidity`] otherwise).
    pub fn issue_node_for(&self, id: NodeId, days: u64) -> Result<NodeCertificate> {
        if id == 0 {
            return Err(TlsError::InvalidNodeId);
        }
        if !(1..=MAX_NODE_VALIDITY_DAYS).contains(&days) {
            return Err(TlsError::InvalidValidity { days });
        }
        let (cert_pem, key_pem) = self.issue(CertKind::Node(id), days)?;
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
        let (cert_pem, key_pem) = self.issue(CertKind::Operator, OPERATOR_VALIDITY_DAYS)?;
        Ok(OperatorCertificate { cert_pem, key_pem })
    }

    /// Issues a certificate of `kind` valid for `days`: returns (certificate PEM, key PEM).
    fn issue(&self, kind: CertKind, days: u64) -> Result<(String, String)> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![SanType::DnsName(kind.dns_name().try_into()?)];
        params.distinguished_name = tenure_dn(&kind.common_name());
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = kind.extended_key_usages();
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial());
        set_validity(&mut params, days)?;
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

/// Helpers of the tests of the `tls` files.
#[cfg(test)]
pub(super) mod testing {
    use super::*;
    use rustls::pki_types::pem::PemObject;

    /// A certificate signed by `ca` with the given SubjectAltNames (PEM cert, PEM key).
    pub(in crate::tls) fn custom_cert(ca: &ClusterCa, sans: Vec<SanType>) -> (String, String) {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::default();
        params.subject_alt_names = sans;
        params.extended_key_usages = CertKind::Node(1).extended_key_usages();
        let cert = params.signed_by(&key, &ca.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    pub(in crate::tls) fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    pub(in crate::tls) fn dns(name: &str) -> SanType {
        SanType::DnsName(name.try_into().unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
