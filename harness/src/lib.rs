//! tenure's test harness (`publish = false`): what the tests, the benchmarks and the
//! `local_group` example share, in one crate instead of modules each of them includes
//! by path.
//!
//! | module | what it holds |
//! |---|---|
//! | [`alone`] | a test that needs a process of its own, re-run as a child of its binary |
//! | [`kit`] | worker processes (`tenure-worker`): their command line, events, children, binaries |
//! | [`checker`] | the history checker: judges a run's events against tenure's guarantees (`docs/design.md`, section 10) |
//! | [`cluster`] | a group of in-process nodes over QUIC with RocksDB, and its recorded history |
//! | [`procs`] | a group of worker processes for the tests |
//! | [`netns`] | workers in network namespaces, and the fault schedules run on them (root) |
//! | [`sim`] | the deterministic simulation's world: simulated hosts, UDP, clocks, TLS randomness, schedules |
//! | [`ledger`] | the worker's settlement ledger: seeded, and what the workers settled verified |
//! | [`quic_kit`], [`shared_log`] | bare QUIC transports, and a logger whose lines a test reads |
//! | [`stall_store`], [`stall_group`] | a storage whose syncs a test holds, and a group built on it |
//! | [`torn_store`] | a storage that tears its last write, as a power cut would |
//! | [`faultfs`] | a FUSE filesystem that loses unsynced writes at a power loss, stalls, and fails syncs (root) |
//! | [`pg`] | the PostgreSQL server of the PostgreSQL fence's tests (`TENURE_PG_URL`), a schema per test |
//!
//! Tests name it `tenure_harness`; it depends on `tenure` with the `testing` feature, the
//! same library the tests link (cargo unifies the two), and with `postgres` for [`pg`].

pub mod alone;
pub mod checker;
pub mod cluster;
pub mod faultfs;
pub mod kit;
// The worker's settlement ledger (`src/bin/tenure-worker/ledger.rs`): the tests and
// `local_group` seed it and verify what the workers settled with the code the worker
// settles with. The one file the harness includes by path: the worker is a binary of the
// published crate and cannot depend on this one. Its own docs say the rest.
#[path = "../../src/bin/tenure-worker/ledger.rs"]
pub mod ledger;
pub mod netns;
pub mod pg;
pub mod procs;
pub mod quic_kit;
pub mod shared_log;
pub mod sim;
pub mod stall_group;
pub mod stall_store;
pub mod torn_store;

/// A backup of group `group` taken now by its leader, node 1, at root term `term`, with
/// `voters` and no history or elections: what tests edit into the backup they need.
pub fn backup_taken_now(
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
pub async fn impostor(
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
