//! Certificate rotation without downtime: every node's certificate renewed, then the CA
//! replaced through a bundle of both, while a 3-node group (real QUIC on loopback) keeps
//! its leader and its lease; a reload that fails keeps the credential in use; a
//! certificate of the retired CA is refused at the handshake, with the reason; and a
//! removed node's certificate is refused by every member, with the reason.

use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tenure::transport::tls::{
    node_cert_file, node_key_file, node_server_name, renew_node_cert, write_ca, write_ca_bundle,
    ClusterCa, TlsError, TlsFiles, TlsIdentity, CA_CERT_FILE, CA_KEY_FILE,
};
use tenure::{Node, NodeId, Role};
use tenure_harness::cluster::{wait_for, Cluster};

const LONG: Duration = Duration::from_secs(15);

/// Has every running node read its files again and checks that each now uses what
/// its files hold.
fn reload_all(c: &Cluster, certs: &Path, step: &str) {
    for (id, node) in &c.nodes {
        // The node may have found the change by its own poll already: either way the
        // files' credential must be the one in use afterwards.
        if let Err(e) = node.reload_tls() {
            panic!("{step}: node {id} refused its new files: {e}");
        }
        let want = TlsFiles::in_dir(certs, *id).load().unwrap();
        let used = node.tls_identity().expect("a QUIC node has an identity");
        assert!(
            used.same_credential(&want),
            "{step}: node {id} does not use its files' credential"
        );
    }
}

/// The value of `tenure_cert_expiry_seconds` in `node`'s metrics.
fn expiry_seconds(node: &Node) -> f64 {
    let text = node.metrics_text();
    let line = text
        .lines()
        .find(|l| l.starts_with("tenure_cert_expiry_seconds{"))
        .unwrap_or_else(|| panic!("no tenure_cert_expiry_seconds in\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Connects to `addr` as a client presenting `identity` and returns why the connection
/// ended (the server refuses after it saw the client's certificate, which in TLS 1.3
/// comes after the client considers the handshake done: so also wait for the close).
async fn refusal(identity: &TlsIdentity, addr: SocketAddr, server: NodeId) -> String {
    try_refusal(identity, addr, server, LONG)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// [`refusal`], or an error if `addr` kept the connection open for `patience`.
async fn try_refusal(
    identity: &TlsIdentity,
    addr: SocketAddr,
    server: NodeId,
    patience: Duration,
) -> Result<String, String> {
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(identity.client_config().unwrap());
    let connecting = endpoint.connect(addr, &node_server_name(server)).unwrap();
    let why = match tokio::time::timeout(LONG, connecting).await {
        Err(_) => Err(format!("no answer from {addr} within {LONG:?}")),
        Ok(Err(e)) => Ok(e.to_string()),
        Ok(Ok(conn)) => match tokio::time::timeout(patience, conn.closed()).await {
            Ok(e) => Ok(e.to_string()),
            Err(_) => Err(format!("{addr} accepted a certificate it should refuse")),
        },
    };
    endpoint.close(0u32.into(), b"done");
    why
}

/// Waits until node `server` refuses `identity` with a reason containing `want`.
async fn wait_refused(
    identity: &TlsIdentity,
    addr: SocketAddr,
    server: NodeId,
    want: &str,
) -> String {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let got = try_refusal(identity, addr, server, Duration::from_secs(1)).await;
        match got {
            Ok(why) if why.contains(want) => return why,
            _ if tokio::time::Instant::now() >= deadline => {
                panic!("node {server} did not refuse with {want:?} within {LONG:?}: {got:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_every_certificate_and_then_the_ca_keeps_the_leader_and_its_lease() {
    let mut c = Cluster::start(3).await;
    let certs = c.dir.path().join("certs");
    let (leader, term) = c.steady_leader(LONG).await;
    let lease = c.node(leader).lease().await.unwrap();
    let old_ca_pem = fs::read_to_string(certs.join(CA_CERT_FILE)).unwrap();
    let old_ca = ClusterCa::load(certs.join(CA_CERT_FILE), certs.join(CA_KEY_FILE)).unwrap();
    let before = expiry_seconds(c.node(leader));
    assert!(
        before > 80.0 * 86_400.0,
        "a fresh node certificate lives 90 days: {before} s"
    );

    // 1. Every node's certificate renewed from the CA in use (30 days this time).
    for id in 1..=3 {
        renew_node_cert(&certs, id, &certs, 30).unwrap();
    }
    reload_all(&c, &certs, "renewed certificates");
    // The metric follows the swap a moment later (the node's task watching for swaps).
    let after = wait_for("the expiry metric to follow the reload", LONG, || {
        let s = expiry_seconds(c.node(leader));
        (s < 31.0 * 86_400.0).then_some(s)
    })
    .await;
    assert!(after > 29.0 * 86_400.0, "30 days: {after} s");

    // 2. A new CA; every node trusts both (the CA file holds the bundle).
    let new_dir = c.dir.path().join("ca-new");
    write_ca(&new_dir).unwrap();
    let both = [certs.join(CA_CERT_FILE), new_dir.join(CA_CERT_FILE)];
    assert_eq!(write_ca_bundle(&both, certs.join(CA_CERT_FILE)).unwrap(), 2);
    reload_all(&c, &certs, "two-CA bundle");

    // 3. Every node's certificate from the new CA.
    for id in 1..=3 {
        renew_node_cert(&new_dir, id, &certs, 30).unwrap();
    }
    reload_all(&c, &certs, "certificates of the new CA");

    // 4. The new CA alone.
    write_ca_bundle(&[new_dir.join(CA_CERT_FILE)], certs.join(CA_CERT_FILE)).unwrap();
    reload_all(&c, &certs, "the new CA alone");
    for node in c.nodes.values() {
        assert_eq!(node.tls_identity().unwrap().ca_certs().len(), 1);
    }

    // Nothing of that touched the group: same leader, same term, the lease held.
    let l = c.view(leader);
    assert_eq!(
        (l.role, l.term, l.leased),
        (Role::Leader, term, true),
        "leader {leader} of term {term} after the rotation: {l:?}"
    );
    assert!(
        lease.ended_at().is_none(),
        "the leader's lease ended during the rotation"
    );
    assert_eq!(c.leaders(), vec![(leader, term)]);

    // New connections use the new certificates: a restarted follower (its peers trust
    // only the new CA now) rejoins the same leader in the same term.
    let follower = *c.nodes.keys().find(|id| **id != leader).unwrap();
    c.restart(follower).await;
    wait_for(
        "the restarted follower follows the same leader",
        LONG,
        || {
            let v = c.view(follower);
            (v.leader == Some(leader) && v.term == term).then_some(())
        },
    )
    .await;
    assert_eq!(c.leased_leader(), Some((leader, term)));
    assert!(
        lease.ended_at().is_none(),
        "lease lost while the follower rejoined"
    );
    // And the leader hears it: with the other follower stopped, a confirm of the lease
    // needs the restarted follower's answer, which comes over a connection of its new
    // certificate to the leader's reloaded server configuration.
    let other = *c
        .nodes
        .keys()
        .find(|id| **id != leader && **id != follower)
        .unwrap();
    c.kill(other).await;
    let token = tokio::time::timeout(LONG, lease.confirm())
        .await
        .expect("the confirm is answered")
        .expect("the restarted follower confirms the lease");
    assert_eq!(token.term(), term);
    let leases = c.leases.lock().unwrap().clone();
    assert_eq!(leases.len(), 1, "one lease in all: {leases:#?}");

    // A certificate of the retired CA is refused at the handshake, with the reason.
    let new_ca_pem = fs::read_to_string(new_dir.join(CA_CERT_FILE)).unwrap();
    let stale = old_ca.issue_node(follower).unwrap();
    let client = TlsIdentity::from_pem(
        &format!("{old_ca_pem}{new_ca_pem}"),
        &stale.cert_pem,
        &stale.key_pem,
    )
    .unwrap();
    let why = refusal(&client, c.addrs[&leader], leader).await;
    assert!(
        why.contains("invalid peer certificate: UnknownIssuer"),
        "an old-CA certificate must be refused as of an unknown issuer: {why}"
    );
    eprintln!("old-CA certificate refused: {why}");
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_fails_keeps_the_credential_in_use_and_says_why() {
    let c = Cluster::start(3).await;
    let certs = c.dir.path().join("certs");
    let (leader, term) = c.steady_leader(LONG).await;
    let node = c.node(2);
    let in_use = node.tls_identity().unwrap();
    let cert = certs.join(node_cert_file(2));
    let key = certs.join(node_key_file(2));
    let (good_cert, good_key) = (fs::read(&cert).unwrap(), fs::read(&key).unwrap());
    let other_ca = ClusterCa::generate().unwrap().issue_node(2).unwrap();
    let of_node_3 = (
        fs::read(certs.join(node_cert_file(3))).unwrap(),
        fs::read(certs.join(node_key_file(3))).unwrap(),
    );
    let cut: Vec<u8> = good_cert[..good_cert.len() / 2].to_vec();
    let mut other_key = ClusterCa::load(certs.join(CA_CERT_FILE), certs.join(CA_KEY_FILE))
        .unwrap()
        .issue_node(2)
        .unwrap()
        .key_pem
        .into_bytes();
    let cases: [(&str, Vec<u8>, Vec<u8>); 4] = [
        ("cut off", cut, good_key.clone()),
        (
            "key of another certificate",
            good_cert.clone(),
            std::mem::take(&mut other_key),
        ),
        (
            "issued by another CA",
            other_ca.cert_pem.into_bytes(),
            other_ca.key_pem.into_bytes(),
        ),
        ("node 3's certificate", of_node_3.0, of_node_3.1),
    ];
    for (what, cert_bytes, key_bytes) in cases {
        fs::write(&cert, &cert_bytes).unwrap();
        fs::write(&key, &key_bytes).unwrap();
        let e = node.reload_tls().unwrap_err();
        let text = e.to_string();
        match what {
            "cut off" => assert!(text.contains("cut off"), "{what}: {text}"),
            "key of another certificate" => {
                assert!(matches!(e, TlsError::KeyMismatch { .. }), "{what}: {text}");
            }
            "issued by another CA" => {
                assert!(matches!(e, TlsError::NotTrusted { .. }), "{what}: {text}");
            }
            _ => assert!(
                text.contains("names node 3, but node 2 was asked for"),
                "{what}: {text}"
            ),
        }
        assert!(
            node.tls_identity().unwrap().same_credential(&in_use),
            "{what}: the credential in use changed"
        );
        eprintln!("{what}: {text}");
    }
    fs::write(&cert, &good_cert).unwrap();
    fs::write(&key, &good_key).unwrap();
    node.reload_tls().unwrap();
    assert!(node.tls_identity().unwrap().same_credential(&in_use));
    assert_eq!(c.leased_leader(), Some((leader, term)));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_finds_renewed_files_by_itself() {
    let mut c = Cluster::unstarted(
        1,
        tenure_harness::cluster::test_timing(),
        tenure::ReadMode::Safe,
    );
    c.start_node(1).await;
    let certs = c.dir.path().join("certs");
    let in_use = c.node(1).tls_identity().unwrap();
    renew_node_cert(&certs, 1, &certs, 7).unwrap();
    // The default poll is every 5 s.
    wait_for(
        "node 1 to load its renewed certificate by itself",
        LONG,
        || (!c.node(1).tls_identity().unwrap().same_credential(&in_use)).then_some(()),
    )
    .await;
    let left = wait_for("the expiry metric to follow the reload", LONG, || {
        let s = expiry_seconds(c.node(1));
        (s < 7.0 * 86_400.0).then_some(s)
    })
    .await;
    assert!(left > 6.0 * 86_400.0, "{left}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_nodes_certificate_is_refused_at_the_handshake_by_every_member() {
    let mut c = Cluster::start(3).await;
    let certs = c.dir.path().join("certs");
    let (leader, _) = c.steady_leader(LONG).await;
    let out = *c.nodes.keys().find(|id| **id != leader).unwrap();
    let stays = *c
        .nodes
        .keys()
        .find(|id| **id != leader && **id != out)
        .unwrap();
    c.node(leader).remove_member(out).await.expect("remove");
    wait_for("the removed node to say it was removed", LONG, || {
        (c.view(out).role == Role::Removed).then_some(())
    })
    .await;
    c.kill(out).await;
    // Its certificate is as valid under the CA as ever: refused by name.
    let identity = TlsFiles::in_dir(&certs, out).load().unwrap();
    let want = format!("node {out} was removed from the group");
    for id in [leader, stays] {
        let why = wait_refused(&identity, c.addrs[&id], id, &want).await;
        assert!(
            why.contains("handshake failed"),
            "refused at the handshake: {why}"
        );
        eprintln!("node {id} refuses node {out}: {why}");
    }
    // Its id is never admitted again.
    let e = c
        .node(leader)
        .add_learner(out, c.addrs[&out])
        .await
        .unwrap_err();
    assert_eq!(e, tenure::MembershipError::RemovedNode(out), "{e}");
    assert!(e.to_string().contains("never admitted again"), "{e}");
    // A member that restarts (its configuration still lists the removed node) refuses
    // it from its own store.
    c.restart(stays).await;
    c.steady_leader(LONG).await;
    let why = refusal(&identity, c.addrs[&stays], stays).await;
    assert!(why.contains(&want), "after a restart: {why}");
    c.shutdown().await;
}
