pub(crate) mod cluster;
pub(crate) mod kit;
pub(crate) mod netns;
pub(crate) mod procs;

/// The history checker, as the tests have always named it (it is the kit's).
pub(crate) use kit::checker;

/// A backup of group `group` taken now by its leader, node 1, at root term `term`, with
/// `voters` and no history or elections: what tests edit into the backup they need.
#[allow(dead_code)] // not every test file restores
pub(crate) fn backup_taken_now(
    group: tenure::GroupId,
    term: u64,
    voters: Vec<tenure::NodeId>,
) -> tenure::backup::Backup {
    tenure::backup::Backup {
        version: tenure::backup::BACKUP_VERSION,
        group,
        taken_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        taken_by: 1,
        taken_from_leader: true,
        term,
        members: tenure::Membership {
            voters,
            ..Default::default()
        },
        history: vec![],
        next_election_id: 1,
        elections: Default::default(),
    }
}

/// Node `id`'s certificate (from the folder `certs`) on a bare QUIC transport at its
/// address in `addrs`, as a stolen or misused certificate would be used: what the group
/// sends it is swallowed. Binding is retried for `wait`: a killed node's endpoint
/// releases its port a moment after it exits.
#[allow(dead_code)] // not every test file impersonates a node
pub(crate) async fn impostor(
    certs: &std::path::Path,
    id: tenure::NodeId,
    addrs: &std::collections::BTreeMap<tenure::NodeId, std::net::SocketAddr>,
    wait: std::time::Duration,
) -> tenure::transport::quic::QuicTransport {
    use tenure::transport::quic::{QuicConfig, QuicTransport, TransportError};
    let identity = tenure::transport::tls::TlsIdentity::from_dir(certs, id)
        .unwrap_or_else(|e| panic!("node {id}'s files: {e}"));
    let peers: std::collections::HashMap<_, _> = addrs
        .iter()
        .filter(|(peer, _)| **peer != id)
        .map(|(peer, a)| (*peer, *a))
        .collect();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let cfg = QuicConfig::new(id, addrs[&id], peers.clone(), identity.clone());
        match QuicTransport::start(cfg) {
            Ok((t, mut inbound)) => {
                tokio::spawn(async move { while inbound.recv().await.is_some() {} });
                return t;
            }
            Err(TransportError::Bind { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => panic!("the impostor's transport does not start: {e}"),
        }
    }
}
