//! The admin endpoint of real nodes (QUIC on loopback): who may use it, what bad input
//! gets, and that its commands act on the group.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tenure::admin::{self, AdminServer, Client, ClientError, ErrorKind, Reply, MAX_REQUEST};
use tenure::transport::tls::{node_server_name, ClusterCa, OperatorIdentity, TlsIdentity};
use tenure::NodeId;
use tenure_harness::cluster::{wait_for, Cluster};

const LONG: Duration = Duration::from_secs(20);

fn logger() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

/// A running cluster with an admin endpoint on every node.
struct Admin {
    cluster: Cluster,
    servers: BTreeMap<NodeId, AdminServer>,
}

impl Admin {
    async fn start(n: u64) -> Admin {
        let cluster = Cluster::start(n).await;
        let mut servers = BTreeMap::new();
        for (id, node) in &cluster.nodes {
            let identity = TlsIdentity::from_dir(cluster.dir.path().join("certs"), *id).unwrap();
            let server = admin::serve(
                node.clone(),
                "127.0.0.1:0".parse().unwrap(),
                &identity,
                logger(),
            )
            .unwrap();
            servers.insert(*id, server);
        }
        Admin { cluster, servers }
    }

    fn certs(&self) -> std::path::PathBuf {
        self.cluster.dir.path().join("certs")
    }

    fn operator(&self) -> OperatorIdentity {
        OperatorIdentity::from_dir(self.certs()).unwrap()
    }

    fn addr(&self, id: NodeId) -> SocketAddr {
        self.servers[&id].local_addr()
    }

    async fn client(&self, id: NodeId) -> Client {
        Client::connect(self.addr(id), &self.operator(), Some(id))
            .await
            .unwrap_or_else(|e| panic!("operator cannot connect to node {id}: {e}"))
    }

    async fn shutdown(self) {
        for (_, s) in self.servers {
            s.close().await;
        }
        self.cluster.shutdown().await;
    }
}

/// Runs `f` and fails the test if it does not finish within `LONG` (a refusal must be an
/// answer, not a hang).
async fn answered<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LONG, f)
        .await
        .unwrap_or_else(|_| panic!("no answer within {LONG:?}: {what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_certificate_reads_status_and_history_on_every_node() {
    let a = Admin::start(3).await;
    let (leader, term) = a.cluster.steady_leader(LONG).await;
    for id in 1..=3 {
        let client = a.client(id).await;
        assert_eq!(client.node_id(), id);
        let status = client.status().await.unwrap();
        assert_eq!(status.id, id);
        assert!(status.term >= term, "{status:?}");
        assert_eq!(status.leader, Some(leader), "{status:?}");
        assert_eq!(status.role == tenure::Role::Leader, id == leader);
        // The leader's tenure is recorded everywhere (replicated, so wait for it).
        let mut history = Vec::new();
        for _ in 0..400 {
            history = client.history().await.unwrap();
            if history.iter().any(|r| r.term == term && r.leader == leader) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            history.iter().any(|r| r.term == term && r.leader == leader),
            "node {id}'s history lacks term {term} of node {leader}: {history:?}"
        );
        client.close().await;
    }
    // "Any node" learns which node it reached; asking for the wrong one is refused.
    let any = Client::connect(a.addr(2), &a.operator(), None)
        .await
        .unwrap();
    assert_eq!(any.node_id(), 2);
    let e = Client::connect(a.addr(2), &a.operator(), Some(3))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::Handshake { reason, .. } if reason.contains("not node 3")),
        "{e}"
    );
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_certificate_is_refused_as_operator() {
    let a = Admin::start(3).await;
    let node3 = TlsIdentity::from_dir(a.certs(), 3).unwrap();
    // The handshake passes (node 3's certificate is from the CA) ...
    let client = answered("connect", Client::connect(a.addr(1), &node3, Some(1)))
        .await
        .unwrap();
    // ... but the endpoint refuses it as an operator, and says why.
    let e = answered("status with a node certificate", client.status())
        .await
        .unwrap_err();
    match &e {
        ClientError::Refused { reason, .. } => assert!(
            reason.contains("certificate of node 3 is not an operator certificate"),
            "{reason}"
        ),
        other => panic!("expected Refused, got {other}"),
    }
    // Nothing changed: the node still leads or follows as before, and an operator works.
    a.client(1).await.status().await.unwrap();
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_certificate_of_another_ca_is_refused() {
    let a = Admin::start(3).await;
    let cluster_ca = std::fs::read_to_string(a.certs().join("ca.pem")).unwrap();
    let rogue_ca = ClusterCa::generate().unwrap();
    let rogue = rogue_ca.issue_operator().unwrap();
    // The rogue trusts the cluster's (public) CA so it accepts the node as a server, but
    // its own operator certificate comes from its own CA.
    let both = format!("{cluster_ca}{}", rogue_ca.cert_pem());
    let rogue_id = OperatorIdentity::from_pem(&both, &rogue.cert_pem, &rogue.key_pem).unwrap();
    let result = answered("a rogue operator", async {
        let client = Client::connect(a.addr(1), &rogue_id, Some(1)).await?;
        client.status().await
    })
    .await;
    match result {
        Err(ClientError::Handshake { reason, .. }) => {
            assert!(!reason.is_empty());
        }
        other => panic!("expected a handshake failure, got {other:?}"),
    }
    // And an operator identity of another CA does not trust the group's nodes at all.
    let rogue_only =
        OperatorIdentity::from_pem(rogue_ca.cert_pem(), &rogue.cert_pem, &rogue.key_pem).unwrap();
    let e = answered(
        "an operator of another group",
        Client::connect(a.addr(1), &rogue_only, None),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, ClientError::Handshake { .. }), "{e}");
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_certificate_is_refused_by_the_raft_transport() {
    let a = Admin::start(3).await;
    a.cluster.steady_leader(LONG).await;
    let raft_addr = a.cluster.addrs[&1];
    // Pointed at the raft port, the admin client is told it is the wrong port.
    let e = answered(
        "admin client at the raft port",
        Client::connect(raft_addr, &a.operator(), Some(1)),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, ClientError::WrongProtocol { .. }), "{e}");

    // Speaking the raft protocol with the operator certificate: refused, with the reason.
    let refused_before = a.cluster.node(1).transport_stats().connections_refused;
    let ca = std::fs::read(a.certs().join("ca.pem")).unwrap();
    let cert = std::fs::read(a.certs().join("operator.pem")).unwrap();
    let key = std::fs::read(a.certs().join("operator-key.pem")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(&ca).unwrap())
        .unwrap();
    let mut crypto = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(
        vec![CertificateDer::from_pem_slice(&cert).unwrap()],
        PrivateKeyDer::from_pem_slice(&key).unwrap(),
    )
    .unwrap();
    crypto.alpn_protocols = vec![tenure::transport::tls::ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(crypto).unwrap();
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let conn = answered("raft handshake", async {
        endpoint
            .connect_with(
                quinn::ClientConfig::new(Arc::new(quic)),
                raft_addr,
                &node_server_name(1),
            )
            .unwrap()
            .await
    })
    .await
    .unwrap();
    match answered("raft refusal", conn.closed()).await {
        quinn::ConnectionError::ApplicationClosed(c) => {
            assert_eq!(
                c.error_code.into_inner(),
                u64::from(tenure::transport::quic::close_code::REFUSED)
            );
            let reason = String::from_utf8_lossy(&c.reason);
            assert!(reason.contains("operator"), "{reason}");
        }
        other => panic!("expected the raft transport to refuse, got {other}"),
    }
    wait_for("node 1 counts the refusal", LONG, || {
        (a.cluster.node(1).transport_stats().connections_refused > refused_before).then_some(())
    })
    .await;
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_a_clear_error_and_the_connection_keeps_working() {
    let a = Admin::start(3).await;
    let client = a.client(1).await;
    let oversize = vec![b' '; MAX_REQUEST + 1];
    let cases: Vec<(&[u8], ErrorKind, &str)> = vec![
        (b"", ErrorKind::BadRequest, "not valid JSON"),
        (b"\xff\xfe garbage", ErrorKind::BadRequest, "not valid JSON"),
        (
            b"{\"v\":1,\"command\":\"format_disk\"}",
            ErrorKind::BadRequest,
            "unknown command",
        ),
        (
            b"{\"v\":1,\"command\":\"promote\"}",
            ErrorKind::BadRequest,
            "missing field `id`",
        ),
        (
            b"{\"v\":9,\"command\":\"status\"}",
            ErrorKind::UnsupportedVersion,
            "version 9",
        ),
        (&oversize, ErrorKind::BadRequest, "larger than"),
    ];
    for (input, kind, needle) in cases {
        let what = String::from_utf8_lossy(&input[..input.len().min(40)]).into_owned();
        let reply = answered(&what, client.request_bytes(input))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let e = reply.expect_err(&what);
        assert_eq!(e.kind, kind, "{what}: {e:?}");
        assert!(e.message.contains(needle), "{what}: {}", e.message);
    }
    // The same connection still answers well-formed requests.
    assert!(matches!(
        client.request(&admin::Request::Status).await.unwrap(),
        Reply::Status(_)
    ));
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_only_command_on_a_follower_answers_not_leader_with_the_hint() {
    let a = Admin::start(3).await;
    let (leader, _) = a.cluster.steady_leader(LONG).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let client = a.client(follower).await;
    let e = answered("transfer on a follower", client.transfer(None))
        .await
        .unwrap_err();
    let reply = e
        .reply()
        .unwrap_or_else(|| panic!("not a node refusal: {e}"));
    assert_eq!(reply.kind, ErrorKind::NotLeader, "{reply:?}");
    assert_eq!(reply.leader_hint, Some(leader), "{reply:?}");
    assert!(
        reply.message.contains(&format!("node {leader} leads")),
        "{}",
        reply.message
    );
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_via_admin_moves_leadership() {
    let a = Admin::start(3).await;
    let (leader, term) = a.cluster.steady_leader(LONG).await;
    let target = (1..=3).find(|id| *id != leader).unwrap();
    let client = a.client(leader).await;
    let new = answered("transfer", client.transfer(Some(target)))
        .await
        .unwrap();
    assert_eq!(new, target);
    let (now, new_term) = a.cluster.steady_leader(LONG).await;
    assert_eq!(now, target);
    assert!(new_term > term);
    // The old leader, asked again, points at the new one.
    let e = client.transfer(None).await.unwrap_err();
    assert_eq!(e.reply().map(|r| r.leader_hint), Some(Some(target)), "{e}");
    // Transferring to the node that leads already is a clear refusal, not a hang.
    let c2 = a.client(target).await;
    let e = answered("transfer to self", c2.transfer(Some(target)))
        .await
        .unwrap_err();
    assert_eq!(
        e.reply().map(|r| r.kind),
        Some(ErrorKind::AlreadyLeader),
        "{e}"
    );
    a.shutdown().await;
}

/// The leader as every node's admin endpoint reports it.
async fn leader_by_status(a: &Admin) -> NodeId {
    let clients: Vec<Client> = {
        let mut v = Vec::new();
        for id in a.servers.keys() {
            v.push(a.client(*id).await);
        }
        v
    };
    for _ in 0..400 {
        let mut leaders = Vec::new();
        for c in &clients {
            if let Ok(s) = c.status().await {
                if s.role == tenure::Role::Leader && s.quorum_healthy {
                    leaders.push(s.id);
                }
            }
        }
        if leaders.len() == 1 {
            return leaders[0];
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no single healthy leader reported by the admin endpoints");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_commands_answer_with_the_configuration_or_a_clear_refusal() {
    let a = Admin::start(3).await;
    let (leader, _) = a.cluster.steady_leader(LONG).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();

    // On a follower: NotLeader with the hint, for every leader-only command.
    let fc = a.client(follower).await;
    let e = fc.drain(leader).await.unwrap_err();
    let r = e.reply().unwrap_or_else(|| panic!("{e}"));
    assert_eq!(
        (r.kind, r.leader_hint),
        (ErrorKind::NotLeader, Some(leader)),
        "{r:?}"
    );

    // Draining the leader: the answer shows it drained, and it hands over at once.
    let lc = a.client(leader).await;
    let m = answered("drain the leader", lc.drain(leader))
        .await
        .unwrap();
    assert!(m.drained.contains(&leader), "{m:?}");
    let next = leader_by_status(&a).await;
    assert_ne!(next, leader, "a drained node kept leading");
    let nc = a.client(next).await;
    let status = nc.status().await.unwrap();
    assert!(status.members.drained.contains(&leader), "{status:?}");
    let m = answered("undrain", nc.undrain(leader)).await.unwrap();
    assert!(!m.drained.contains(&leader), "{m:?}");

    // Unknown nodes and wrong states are named.
    let e = nc.promote(9).await.unwrap_err();
    let kind = e.reply().map(|r| r.kind);
    assert!(
        matches!(kind, Some(ErrorKind::NotALearner | ErrorKind::UnknownNode)),
        "{e}"
    );
    assert!(e.to_string().contains('9'), "{e}");
    let e = nc.remove(9).await.unwrap_err();
    assert_eq!(
        e.reply().map(|r| r.kind),
        Some(ErrorKind::UnknownNode),
        "{e}"
    );

    // A learner that never started: added, but not promotable, then removed.
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let m = answered("add learner 4", nc.add_learner(4, addr))
        .await
        .unwrap();
    assert!(m.learners.contains(&4), "{m:?}");
    let e = nc.add_learner(4, addr).await.unwrap_err();
    assert_eq!(
        e.reply().map(|r| r.kind),
        Some(ErrorKind::AlreadyMember),
        "{e}"
    );
    let e = answered("promote a learner that is not running", nc.promote(4))
        .await
        .unwrap_err();
    assert_eq!(
        e.reply().map(|r| r.kind),
        Some(ErrorKind::LearnerBehind),
        "{e}"
    );
    let m = answered("remove learner 4", nc.remove(4)).await.unwrap();
    assert!(!m.learners.contains(&4) && !m.voters.contains(&4), "{m:?}");
    a.shutdown().await;
}

/// Polls `f` until it returns `Some`, failing the test with `what` after `LONG`.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {LONG:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The node that leads election `name` with a lease, and its term, as the nodes'
/// `leaderships` say (exactly one of them).
async fn named_leader(clients: &BTreeMap<NodeId, Client>, name: &str) -> Option<(NodeId, u64)> {
    let mut leading = Vec::new();
    for c in clients.values() {
        let l = c.leaderships().await.ok()?;
        assert_eq!(l.node, c.node_id());
        if let Some(e) = l.led.iter().find(|e| e.name == name && e.leased) {
            leading.push((l.node, e.term));
        }
    }
    (leading.len() == 1).then(|| leading[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_election_requests_round_trip_and_refusals_say_where_to_go() {
    let a = Admin::start(3).await;
    let (leader, _) = a.cluster.steady_leader(LONG).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let mut clients = BTreeMap::new();
    for id in 1..=3 {
        clients.insert(id, a.client(id).await);
    }
    let (lc, fc) = (&clients[&leader], &clients[&follower]);

    // The catalog is empty, and nobody leads a named election.
    assert!(lc.elections().await.unwrap().is_empty());
    let l = fc.leaderships().await.unwrap();
    assert_eq!(
        (l.node, l.elections, l.led.len()),
        (follower, 0, 0),
        "{l:?}"
    );

    // Catalog changes are the group leader's: a follower names it.
    let e = answered(
        "create on a follower",
        fc.create_election("shard-0", vec![], None),
    )
    .await
    .unwrap_err();
    let r = e.reply().unwrap_or_else(|| panic!("not a refusal: {e}"));
    assert_eq!(
        (r.kind, r.leader_hint),
        (ErrorKind::NotLeader, Some(leader)),
        "{r:?}"
    );
    assert!(r.message.contains(&format!("node {leader} leads")), "{r:?}");

    // Invalid names are refused with what is wrong, before anything is proposed.
    let e = lc
        .create_election("shard 0", vec![], None)
        .await
        .unwrap_err();
    let r = e.reply().unwrap_or_else(|| panic!("{e}"));
    assert_eq!(r.kind, ErrorKind::InvalidName, "{r:?}");
    assert!(
        r.message.contains("invalid election name \"shard 0\"") && r.message.contains("' '"),
        "{}",
        r.message
    );

    // Create, with options; the same name again is refused.
    let info = answered(
        "create shard-0",
        lc.create_election("shard-0", vec![2, 1], Some(7)),
    )
    .await
    .unwrap();
    assert_eq!((info.name.as_str(), info.id), ("shard-0", 1));
    assert_eq!(
        (info.options.affinity.clone(), info.options.priority),
        (vec![2, 1], 7)
    );
    let e = lc
        .create_election("shard-0", vec![], None)
        .await
        .unwrap_err();
    assert_eq!(
        e.reply().map(|r| r.kind),
        Some(ErrorKind::ElectionExists),
        "{e}"
    );
    let info1 = answered(
        "create shard-1",
        lc.create_election("shard-1", vec![], None),
    )
    .await
    .unwrap();
    assert_eq!((info1.id, info1.options.priority), (2, 128));

    // Each election gets one leased leader, in its own term range, and every node's list
    // shows the catalog with that leader and term.
    let (l0, t0) = eventually("a leased leader of shard-0", || {
        named_leader(&clients, "shard-0")
    })
    .await;
    assert_eq!(tenure::election::election_of_term(t0), 1, "term {t0}");
    for c in clients.values() {
        let entries = eventually("the list shows shard-0's leader", || async {
            let entries = c.elections().await.ok()?;
            let e0 = entries.iter().find(|e| e.name == "shard-0")?;
            (entries.len() == 2 && e0.leader == Some(l0) && e0.term == t0).then_some(entries)
        })
        .await;
        assert_eq!(
            entries
                .iter()
                .map(|e| (e.name.as_str(), e.id))
                .collect::<Vec<_>>(),
            vec![("shard-0", 1), ("shard-1", 2)]
        );
        assert_eq!(entries[0].options.affinity, vec![2, 1]);
        let l = c.leaderships().await.unwrap();
        assert_eq!(l.elections, 2, "{l:?}");
    }

    // Transfer: a node that does not lead the election names the one that does.
    let other = (1..=3).find(|id| *id != l0).unwrap();
    let e = answered(
        "transfer shard-0 on a non-leader",
        clients[&other].transfer_election("shard-0", None),
    )
    .await
    .unwrap_err();
    let r = e.reply().unwrap_or_else(|| panic!("{e}"));
    assert_eq!(
        (r.kind, r.leader_hint),
        (ErrorKind::NotLeader, Some(l0)),
        "{r:?}"
    );
    assert!(
        r.message.contains(&format!(
            "does not lead election \"shard-0\"; node {l0} leads it"
        )),
        "{}",
        r.message
    );
    let target = (1..=3).find(|id| *id != l0 && *id != other).unwrap();
    let new = answered(
        "transfer shard-0",
        clients[&l0].transfer_election("shard-0", Some(target)),
    )
    .await
    .unwrap();
    assert_eq!(new, target);
    let (l0b, t0b) = eventually("shard-0 leased by the target", || async {
        named_leader(&clients, "shard-0")
            .await
            .filter(|(l, _)| *l == target)
    })
    .await;
    assert_eq!(l0b, target);
    assert!(t0b > t0, "term {t0b} after {t0}");
    // Transferring to the node that leads it already is a clear refusal.
    let e = clients[&target]
        .transfer_election("shard-0", Some(target))
        .await
        .unwrap_err();
    assert_eq!(
        e.reply().map(|r| r.kind),
        Some(ErrorKind::AlreadyLeader),
        "{e}"
    );

    // An unknown election is named as such, by every request that takes a name.
    for c in [lc, fc] {
        let e = c.transfer_election("nope", Some(target)).await.unwrap_err();
        let r = e.reply().unwrap_or_else(|| panic!("{e}"));
        assert_eq!(r.kind, ErrorKind::UnknownElection, "{r:?}");
        assert_eq!(r.message, "no election named \"nope\"");
    }
    let e = lc.remove_election("nope").await.unwrap_err();
    assert_eq!(
        e.reply().map(|r| (r.kind, r.message.as_str())),
        Some((ErrorKind::UnknownElection, "no election named \"nope\"")),
        "{e}"
    );

    // Remove: the group leader only; the answer retires every token of the incarnation.
    let e = fc.remove_election("shard-0").await.unwrap_err();
    assert_eq!(
        e.reply().map(|r| (r.kind, r.leader_hint)),
        Some((ErrorKind::NotLeader, Some(leader))),
        "{e}"
    );
    let (id, retired_above) = answered("remove shard-0", lc.remove_election("shard-0"))
        .await
        .unwrap();
    assert_eq!(id, 1);
    assert_eq!(retired_above, tenure::election::term_floor(2));
    assert!(retired_above > t0b);
    for c in clients.values() {
        eventually("shard-0 gone from every list and leadership", || async {
            let names: Vec<String> = c
                .elections()
                .await
                .ok()?
                .into_iter()
                .map(|e| e.name)
                .collect();
            let l = c.leaderships().await.ok()?;
            (names == ["shard-1"] && l.elections == 1 && l.led.iter().all(|e| e.name != "shard-0"))
                .then_some(())
        })
        .await;
    }
    a.shutdown().await;
}
