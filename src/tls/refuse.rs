//! Shutting out removed nodes at the handshake: [`RemovedIds`], the ids the group
//! removed (kept current by the node from its replicated state), and the client
//! certificate verifier that refuses a certificate naming one of them, however valid it
//! is under the CA (`docs/design.md`, section 6, "Shutting out a node").

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, RwLock};

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, OtherError, SignatureScheme};

use crate::NodeId;

use super::names::node_id_from_cert;

/// The node ids the group removed: never admitted again. Shared by the transport's
/// verifier and its accept path; cheap to clone (every clone is the same set).
#[derive(Debug, Clone, Default)]
pub(crate) struct RemovedIds(Arc<RwLock<BTreeSet<NodeId>>>);

impl RemovedIds {
    /// Replaces the set.
    pub(crate) fn set(&self, ids: &BTreeSet<NodeId>) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = ids.clone();
    }

    /// Whether `id` was removed.
    pub(crate) fn contains(&self, id: NodeId) -> bool {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&id)
    }
}

/// Why a removed node's certificate is refused: the text its client reads in the
/// handshake's close reason, and this node's log.
#[derive(Debug)]
pub(crate) struct RemovedNode(pub(crate) NodeId);

impl fmt::Display for RemovedNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} was removed from the group: its id is never admitted again (a \
             replacement gets a new id and certificate)",
            self.0
        )
    }
}

impl std::error::Error for RemovedNode {}

/// A client verifier that asks `inner` (the CA check) first and then refuses a node
/// certificate whose id is in `removed`.
#[derive(Debug)]
pub(crate) struct RefuseRemoved {
    pub(crate) inner: Arc<dyn ClientCertVerifier>,
    pub(crate) removed: RemovedIds,
}

impl ClientCertVerifier for RefuseRemoved {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        // A certificate that names no node is the accept path's to refuse, with its own
        // reason (an operator certificate, say).
        match node_id_from_cert(end_entity) {
            Ok(id) if self.removed.contains(id) => {
                Err(rustls::Error::Other(OtherError(Arc::new(RemovedNode(id)))))
            }
            _ => Ok(verified),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::credential::{provider, roots_of};
    use crate::tls::*;
    use rustls::pki_types::pem::PemObject;
    use rustls::server::WebPkiClientVerifier;

    #[test]
    fn a_removed_nodes_certificate_is_refused_with_the_reason_and_others_pass() {
        let ca = ClusterCa::generate().unwrap();
        let inner = WebPkiClientVerifier::builder_with_provider(
            roots_of(&[ca.cert_der().clone()]).unwrap(),
            provider(),
        )
        .build()
        .unwrap();
        let removed = RemovedIds::default();
        let v = RefuseRemoved {
            inner,
            removed: removed.clone(),
        };
        let der = |id| {
            CertificateDer::from_pem_slice(ca.issue_node(id).unwrap().cert_pem.as_bytes()).unwrap()
        };
        let (n2, n3) = (der(2), der(3));
        v.verify_client_cert(&n3, &[], UnixTime::now()).unwrap();
        removed.set(&[3].into());
        let e = v.verify_client_cert(&n3, &[], UnixTime::now()).unwrap_err();
        assert!(
            e.to_string().contains("node 3 was removed from the group"),
            "{e}"
        );
        v.verify_client_cert(&n2, &[], UnixTime::now()).unwrap();
        // The CA check still comes first.
        let other = ClusterCa::generate().unwrap().issue_node(2).unwrap();
        let foreign = CertificateDer::from_pem_slice(other.cert_pem.as_bytes()).unwrap();
        assert!(v
            .verify_client_cert(&foreign, &[], UnixTime::now())
            .is_err());
    }
}
