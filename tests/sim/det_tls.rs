//! The simulation's deterministic TLS (the harness's `sim::det_tls`): the same seed draws
//! the same bytes, and every process makes the same certificates.

use rustls::pki_types::PrivateKeyDer;
use rustls::SignatureScheme;
use tenure_harness::sim::det_tls::{identities, provider};

/// The same seed gives the same randoms, key shares and signatures; another seed
/// other randoms and shares.
#[test]
fn a_seed_gives_the_same_bytes() {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let draw = |seed| {
        let p = provider(seed);
        let kx = p.kx_groups[0].start().unwrap();
        let mut r = [0u8; 8];
        p.secure_random.fill(&mut r).unwrap();
        let signer = p
            .key_provider
            .load_private_key(der.clone_key())
            .unwrap()
            .choose_scheme(&[SignatureScheme::ECDSA_NISTP256_SHA256])
            .unwrap();
        (kx.pub_key().to_vec(), r, signer.sign(b"hello").unwrap())
    };
    let (a, b) = (draw(1), draw(1));
    assert_eq!(a, b);
    let c = draw(2);
    assert_ne!((&a.0, &a.1), (&c.0, &c.1));
    assert_eq!(
        a.2, c.2,
        "a signature depends on the key and the message only"
    );
}

/// Every process makes the same certificates, and tenure takes them.
#[test]
fn the_identities_are_the_same_bytes_and_valid() {
    let (ca, nodes) = identities(1..=2);
    assert_eq!((ca.clone(), nodes.clone()), identities(1..=2));
    for (cert, key) in &nodes {
        tenure::transport::tls::TlsIdentity::from_pem(&ca, cert, key).expect("identity");
    }
}
