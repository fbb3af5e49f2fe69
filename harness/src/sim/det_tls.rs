//! A rustls crypto provider whose randomness comes from the run's seed, so that a run's
//! handshakes are the same bytes each time it runs (tenure's own, installed for the
//! simulation's thread with `tenure::tls::set_thread_crypto_provider`).
//!
//! Why bytes matter: a peer that lost a connection (a crash, an abandoned dial) still gets
//! the other side's retransmitted Initial packets. It opens them with keys derived from an
//! id it never issued, so their bits after header protection are garbage, and quinn drops
//! such a packet or takes it for a connection attempt by those bits: one more task, and
//! every later turn of that host's runtime interleaves differently (seed 78 found it).
//!
//! Seeded here: the TLS randoms and session ids (`secure_random`), the X25519 key shares,
//! and the nonces of ECDSA P-256 signatures (ring mixes the key and the message into the
//! nonce, so fixed "random" bytes still give each message its own nonce). Not for anything
//! but tests: keys drawn from a public seed protect nothing.

use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use ring::agreement;
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
use rustls::crypto::{
    ActiveKeyExchange, CryptoProvider, GetRandomFailed, KeyProvider, SecureRandom, SharedSecret,
    SupportedKxGroup,
};
use rustls::pki_types::{PrivateKeyDer, SubjectPublicKeyInfoDer};
use rustls::sign::{Signer, SigningKey};
use rustls::{NamedGroup, SignatureAlgorithm, SignatureScheme};

/// ring's provider with every draw of randomness taken from `seed`. Its parts are
/// `'static` in rustls's types: each call leaks a few small objects (once per run).
pub fn provider(seed: u64) -> Arc<CryptoProvider> {
    let rng: &'static Seeded = Box::leak(Box::new(Seeded(Mutex::new(StdRng::seed_from_u64(
        seed ^ 0x7150_5eed,
    )))));
    let base = rustls::crypto::ring::default_provider();
    Arc::new(CryptoProvider {
        kx_groups: vec![Box::leak(Box::new(SeededX25519(rng)))],
        secure_random: rng,
        key_provider: Box::leak(Box::new(SeededKeys(base.key_provider))),
        ..base
    })
}

/// The run's random bytes.
#[derive(Debug)]
struct Seeded(Mutex<StdRng>);

impl Seeded {
    fn fill_bytes(&self, buf: &mut [u8]) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .fill_bytes(buf);
    }
}

impl SecureRandom for Seeded {
    fn fill(&self, buf: &mut [u8]) -> Result<(), GetRandomFailed> {
        self.fill_bytes(buf);
        Ok(())
    }
}

/// X25519 with private keys drawn from the run's bytes.
#[derive(Debug)]
struct SeededX25519(&'static Seeded);

impl SupportedKxGroup for SeededX25519 {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, rustls::Error> {
        let mut seed = [0u8; 32];
        self.0.fill_bytes(&mut seed);
        // ring takes the private key's bytes only from a `SecureRandom` of its own (a
        // sealed trait): its test module's fixed-bytes source is the way in.
        #[allow(deprecated)]
        let fixed = ring::test::rand::FixedSliceRandom { bytes: &seed };
        let private = agreement::EphemeralPrivateKey::generate(&agreement::X25519, &fixed)
            .map_err(|_| rustls::Error::FailedToGetRandomBytes)?;
        let public = private
            .compute_public_key()
            .map_err(|_| rustls::Error::FailedToGetRandomBytes)?
            .as_ref()
            .to_vec();
        Ok(Box::new(X25519Share { private, public }))
    }

    fn name(&self) -> NamedGroup {
        NamedGroup::X25519
    }
}

/// One side's share of a [`SeededX25519`] exchange.
struct X25519Share {
    private: agreement::EphemeralPrivateKey,
    public: Vec<u8>,
}

impl ActiveKeyExchange for X25519Share {
    fn complete(self: Box<Self>, peer_pub_key: &[u8]) -> Result<SharedSecret, rustls::Error> {
        let peer = agreement::UnparsedPublicKey::new(&agreement::X25519, peer_pub_key);
        agreement::agree_ephemeral(self.private, &peer, |secret| SharedSecret::from(secret))
            .map_err(|_| rustls::Error::PeerMisbehaved(rustls::PeerMisbehaved::InvalidKeyShare))
    }

    fn pub_key(&self) -> &[u8] {
        &self.public
    }

    fn group(&self) -> NamedGroup {
        NamedGroup::X25519
    }
}

/// ring's keys, but ECDSA P-256 keys sign with nonces that depend on the key and the
/// message only (ring's nonce is a hash of the key, the message and two draws of bytes:
/// here both fixed).
#[derive(Debug)]
struct SeededKeys(&'static dyn KeyProvider);

impl KeyProvider for SeededKeys {
    fn load_private_key(
        &self,
        key_der: PrivateKeyDer<'static>,
    ) -> Result<Arc<dyn SigningKey>, rustls::Error> {
        // ring keys each key pair's nonces with bytes it draws here, then mixes them
        // with the key, the message and the signature's own draw: both fixed.
        #[allow(deprecated)]
        let fixed = ring::test::rand::FixedByteRandom { byte: 0x5e };
        let ecdsa = match &key_der {
            PrivateKeyDer::Pkcs8(der) => EcdsaKeyPair::from_pkcs8(
                &ECDSA_P256_SHA256_ASN1_SIGNING,
                der.secret_pkcs8_der(),
                &fixed,
            )
            .ok()
            .map(Arc::new),
            _ => None,
        };
        let inner = self.0.load_private_key(key_der)?;
        Ok(Arc::new(SeededKey { inner, ecdsa }))
    }
}

#[derive(Debug)]
struct SeededKey {
    inner: Arc<dyn SigningKey>,
    ecdsa: Option<Arc<EcdsaKeyPair>>,
}

impl SigningKey for SeededKey {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        match &self.ecdsa {
            Some(key) if offered.contains(&SignatureScheme::ECDSA_NISTP256_SHA256) => {
                Some(Box::new(FixedNonceSigner(key.clone())))
            }
            _ => self.inner.choose_scheme(offered),
        }
    }

    fn public_key(&self) -> Option<SubjectPublicKeyInfoDer<'_>> {
        self.inner.public_key()
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        self.inner.algorithm()
    }
}

#[derive(Debug)]
struct FixedNonceSigner(Arc<EcdsaKeyPair>);

impl Signer for FixedNonceSigner {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, rustls::Error> {
        #[allow(deprecated)]
        let fixed = ring::test::rand::FixedByteRandom { byte: 0x5e };
        self.0
            .sign(&fixed, message)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| rustls::Error::General("ECDSA signing failed".into()))
    }

    fn scheme(&self) -> SignatureScheme {
        SignatureScheme::ECDSA_NISTP256_SHA256
    }
}

/// The CA certificate, and for each of `ids` its node certificate and key (PEM), the
/// same bytes in every process: fixed keys, serials and dates, ECDSA signatures with
/// fixed nonces. Made as `ClusterCa` makes them (the names, usages and constraints tenure
/// checks), valid from 2025 to 2125.
pub fn identities(ids: std::ops::RangeInclusive<u64>) -> (String, Vec<(String, String)>) {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
        GeneralSubtree, IsCa, Issuer, KeyUsagePurpose, NameConstraints, SanType, SerialNumber,
    };
    let dn = |cn: &str| {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "tenure");
        dn.push(DnType::CommonName, cn);
        dn
    };
    let dated = |params: &mut CertificateParams, serial: u8| {
        params.not_before = rcgen::date_time_ymd(2025, 1, 1);
        params.not_after = rcgen::date_time_ymd(2125, 1, 1);
        params.serial_number = Some(SerialNumber::from_slice(&[0x40, serial]));
    };
    let mut ca = CertificateParams::default();
    ca.distinguished_name = dn("tenure cluster CA simulation");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.name_constraints = Some(NameConstraints {
        permitted_subtrees: vec![GeneralSubtree::DnsName("tenure".into())],
        excluded_subtrees: Vec::new(),
    });
    dated(&mut ca, 0);
    let ca_key = FixedKey::new(0xca);
    let ca_pem = ca.self_signed(&ca_key).expect("CA certificate").pem();
    let issuer = Issuer::new(ca, ca_key);
    let nodes = ids
        .map(|id| {
            let mut params = CertificateParams::default();
            let name = format!("node-{id}.tenure");
            params.subject_alt_names = vec![SanType::DnsName(name.try_into().expect("name"))];
            params.distinguished_name = dn(&format!("tenure node {id}"));
            params.is_ca = IsCa::ExplicitNoCa;
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            params.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            params.use_authority_key_identifier_extension = true;
            dated(&mut params, id as u8);
            let key = FixedKey::new(id as u8);
            let cert = params.signed_by(&key, &issuer).expect("node certificate");
            (cert.pem(), key.pem())
        })
        .collect();
    (ca_pem, nodes)
}

/// A P-256 key whose scalar is one byte repeated, signing with fixed nonces.
struct FixedKey {
    pair: EcdsaKeyPair,
    pkcs8: Vec<u8>,
}

impl FixedKey {
    fn new(byte: u8) -> FixedKey {
        #[allow(deprecated)]
        let fixed = ring::test::rand::FixedByteRandom { byte };
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &fixed)
            .expect("P-256 key")
            .as_ref()
            .to_vec();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &pkcs8, &fixed)
            .expect("P-256 key");
        FixedKey { pair, pkcs8 }
    }

    fn pem(&self) -> String {
        rcgen::KeyPair::try_from(self.pkcs8.as_slice())
            .expect("P-256 key")
            .serialize_pem()
    }
}

impl rcgen::PublicKeyData for FixedKey {
    fn der_bytes(&self) -> &[u8] {
        use ring::signature::KeyPair;
        self.pair.public_key().as_ref()
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

impl rcgen::SigningKey for FixedKey {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        #[allow(deprecated)]
        let fixed = ring::test::rand::FixedByteRandom { byte: 0x5e };
        self.pair
            .sign(&fixed, msg)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| rcgen::Error::RingUnspecified)
    }
}
