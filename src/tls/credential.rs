//! The core every holder of a certificate shares: [`Credential`], the trusted CA
//! certificates, the holder's certificate chain and its private key, loaded and checked
//! the same way, and the rustls configurations made of them.
//!
//! A node's [`TlsIdentity`], an operator's [`OperatorIdentity`] and the admin client's
//! [`Credentials`](crate::admin::Credentials) are each a `Credential`; what differs is
//! the kind of certificate they accept (a node's or an operator's) and, for a node, that
//! its certificate must also verify as a server.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::ServerCertVerifier;
use rustls::client::{WantsClientCert, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ConfigBuilder, RootCertStore, WantsVerifier};

use super::error::{Result, TlsError};
use super::files::{key_file_warnings, IdentityWarning};
use super::names::parse_x509;
use super::pem::{read_files, Src};
use super::refuse::{RefuseRemoved, RemovedIds};

#[cfg(doc)]
use super::{OperatorIdentity, TlsIdentity};

thread_local! {
    /// [`set_thread_crypto_provider`]'s provider, for configurations made on this thread.
    static THREAD_PROVIDER: std::cell::RefCell<Option<Arc<CryptoProvider>>> =
        const { std::cell::RefCell::new(None) };
}

/// Test hook, not part of the API: TLS configurations made on this thread from now on use
/// `provider` (`None`: ring's, as always). The simulation runs a whole group on one
/// thread and gives it a provider whose randomness comes from the seed: the bytes of a
/// handshake reach decisions (a stray Initial packet that another key opens to garbage
/// is dropped or taken for a connection attempt by its bits), so a run replays only if
/// they are the same.
#[doc(hidden)]
pub fn set_thread_crypto_provider(provider: Option<Arc<CryptoProvider>>) {
    THREAD_PROVIDER.with(|p| *p.borrow_mut() = provider);
}

/// The ring crypto provider, which is the only one tenure uses (or the one
/// [`set_thread_crypto_provider`] set).
pub(super) fn provider() -> Arc<CryptoProvider> {
    THREAD_PROVIDER
        .with(|p| p.borrow().clone())
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// The ring crypto provider tenure uses (for the admin endpoint's TLS configurations).
pub(crate) fn ring_provider() -> Arc<CryptoProvider> {
    provider()
}

/// The start of every client configuration tenure makes: the ring provider, TLS 1.3
/// only. The caller chooses how the server is verified, then finishes it with
/// [`Credential::client_config`].
pub(crate) fn client_builder(
) -> Result<ConfigBuilder<rustls::ClientConfig, WantsVerifier>, rustls::Error> {
    rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
}

/// What holds a [`Credential`] of one kind ([`TlsIdentity`], [`OperatorIdentity`]): made
/// from PEM text or files the same way, only the checks of [`Holder::from_src`] differ.
pub(super) trait Holder: Sized {
    /// What to call the certificate and key in errors about PEM text (`node`, ...).
    const HOLDER: &'static str;

    /// Parses and checks the CA, certificate and key (see [`Credential::from_src`]).
    fn from_src(ca: Src<'_>, cert: Src<'_>, key: Src<'_>) -> Result<Self>;

    /// The credential it holds.
    fn credential_mut(&mut self) -> &mut Credential;

    /// Reads the PEM files (CA, certificate, key: all three before any is checked),
    /// checks them, and notes the warnings about the key file (see [`IdentityWarning`]).
    fn from_files(ca: &Path, cert: &Path, key: &Path) -> Result<Self> {
        let [ca_file, cert_file, key_file] = read_files([ca, cert, key])?;
        let mut holder = Self::from_src(ca_file.src(), cert_file.src(), key_file.src())?;
        holder.credential_mut().warnings = key_file_warnings(key);
        Ok(holder)
    }

    /// Checks PEM text, labelled for errors `CA certificate (PEM text)`,
    /// `<HOLDER> certificate (PEM text)` and `<HOLDER> key (PEM text)`.
    fn from_texts(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<Self> {
        let holder = Self::HOLDER;
        Self::from_src(
            Src::new("CA certificate (PEM text)", ca_pem.as_bytes()),
            Src::new(
                format!("{holder} certificate (PEM text)"),
                cert_pem.as_bytes(),
            ),
            Src::new(format!("{holder} key (PEM text)"), key_pem.as_bytes()),
        )
    }
}

/// The trusted CA certificates, a certificate chain and its private key, checked
/// together (see [`Credential::from_src`]).
pub(crate) struct Credential {
    ca_certs: Vec<CertificateDer<'static>>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    pub(super) warnings: Vec<IdentityWarning>,
}

impl Clone for Credential {
    fn clone(&self) -> Self {
        Credential {
            ca_certs: self.ca_certs.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            warnings: self.warnings.clone(),
        }
    }
}

impl Credential {
    /// Parses and checks a credential: the CA text holds CA certificates only, the
    /// certificate text a chain whose end-entity certificate is of the kind `kind`
    /// accepts (it returns what it read, e.g. the node id), the key text the private
    /// key of that certificate, and the chain verifies under the CA for client use.
    /// Checked in that order; the first failure is the error.
    pub(super) fn from_src<K>(
        ca: &Src<'_>,
        cert: &Src<'_>,
        key: &Src<'_>,
        kind: impl FnOnce(&[u8], &str) -> Result<K>,
    ) -> Result<(Credential, K)> {
        let ca_certs = ca_certs_of(ca)?;
        let chain = cert.certs()?;
        let key_der = key.key()?;
        let kind = kind(&chain[0], &cert.label)?;
        let provider = provider();
        check_key_matches(&chain, &key_der, cert, key, &provider)?;
        verify_as_client(&chain, roots_of(&ca_certs)?, provider, cert, ca)?;
        let credential = Credential {
            ca_certs,
            chain,
            key: key_der,
            warnings: Vec::new(),
        };
        Ok((credential, kind))
    }

    /// Checks that the chain also verifies under the CA as a server named `name`.
    pub(super) fn verify_as_server(
        &self,
        name: String,
        cert: &Src<'_>,
        ca: &Src<'_>,
    ) -> Result<()> {
        let roots = self.roots()?;
        let name = ServerName::try_from(name)
            .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?;
        WebPkiServerVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?
            .verify_server_cert(
                &self.chain[0],
                &self.chain[1..],
                &name,
                &[],
                UnixTime::now(),
            )
            .map_err(|e| not_trusted(cert, ca, e))?;
        Ok(())
    }

    /// Whether `other` holds the same CA certificates, chain and key.
    pub(super) fn same_as(&self, other: &Credential) -> bool {
        self.ca_certs == other.ca_certs
            && self.chain == other.chain
            && self.key.secret_der() == other.key.secret_der()
    }

    /// The trusted CA certificates (DER).
    pub(crate) fn ca_certs(&self) -> &[CertificateDer<'static>] {
        &self.ca_certs
    }

    /// The certificate chain (DER), end-entity first.
    pub(crate) fn chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    /// The private key of the chain's end-entity certificate.
    pub(super) fn key(&self) -> &PrivateKeyDer<'static> {
        &self.key
    }

    /// What was found worth fixing in the files it was loaded from.
    pub(super) fn warnings(&self) -> &[IdentityWarning] {
        &self.warnings
    }

    /// A root store holding the trusted CA certificates.
    pub(crate) fn roots(&self) -> Result<Arc<RootCertStore>> {
        roots_of(&self.ca_certs)
    }

    /// The rustls server side: TLS 1.3 only, ring provider, ALPN `alpn`, presents this
    /// chain, requires a client certificate that verifies under the CA (the only root).
    /// No 0-RTT, no session tickets.
    ///
    /// With `removed`, a client certificate naming a removed node is refused too.
    pub(super) fn server_config(
        &self,
        alpn: &[u8],
        removed: Option<&RemovedIds>,
    ) -> Result<rustls::ServerConfig> {
        let provider = provider();
        let mut verifier =
            WebPkiClientVerifier::builder_with_provider(self.roots()?, provider.clone())
                .build()
                .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?;
        if let Some(removed) = removed {
            verifier = Arc::new(RefuseRemoved {
                inner: verifier,
                removed: removed.clone(),
            });
        }
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())?;
        cfg.alpn_protocols = vec![alpn.to_vec()];
        cfg.max_early_data_size = 0;
        cfg.send_tls13_tickets = 0;
        Ok(cfg)
    }

    /// Finishes a client configuration begun with [`client_builder`] and given its server
    /// verifier: presents this chain, offers ALPN `alpn`, no resumption, no 0-RTT.
    pub(crate) fn client_config(
        &self,
        builder: ConfigBuilder<rustls::ClientConfig, WantsClientCert>,
        alpn: &[u8],
    ) -> Result<rustls::ClientConfig, rustls::Error> {
        let mut cfg = builder.with_client_auth_cert(self.chain.clone(), self.key.clone_key())?;
        cfg.alpn_protocols = vec![alpn.to_vec()];
        cfg.resumption = rustls::client::Resumption::disabled();
        cfg.enable_early_data = false;
        Ok(cfg)
    }

    /// The fields a holder's `Debug` shows: counts of certificates, never the key.
    pub(super) fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("ca_certs", &self.ca_certs.len())
            .field("chain", &self.chain.len())
            .field("key", &"<redacted>")
            .field("warnings", &self.warnings);
    }
}

fn not_trusted(cert: &Src<'_>, ca: &Src<'_>, e: impl fmt::Display) -> TlsError {
    TlsError::NotTrusted {
        file: cert.label.clone(),
        ca: ca.label.clone(),
        reason: e.to_string(),
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
        .map_err(|e| not_trusted(cert, ca, e))?;
    Ok(())
}

/// The CA certificates of `ca`, each checked to be a CA.
pub(super) fn ca_certs_of(ca: &Src<'_>) -> Result<Vec<CertificateDer<'static>>> {
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

/// A root store holding `ca_certs`.
pub(super) fn roots_of(ca_certs: &[CertificateDer<'static>]) -> Result<Arc<RootCertStore>> {
    let mut roots = RootCertStore::empty();
    for c in ca_certs {
        roots.add(c.clone())?;
    }
    Ok(Arc::new(roots))
}
