//! Input from authenticated peers that a correct peer never sends (docs/design.md,
//! section 7), over the real QUIC transport with a real certificate.
//!
//! A group of three: nodes 1 and 2 are real (`Node::start`, RocksDB, QUIC); node 3 is a
//! bare [`QuicTransport`] holding node 3's certificate, which sends hand-made
//! `raft::eraftpb::Message`s (the wire format stays the transport's own). Each hostile
//! message must be dropped and counted, and change nothing: both nodes keep running,
//! the leader keeps leading in its term, and its lease is never lost. Then a real
//! amnesia: a follower restarted on an older copy of its data directory hears from the
//! leader that it holds entries it no longer has, and stops with a typed cause.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use raft::eraftpb::{ConfState, Entry, Message, MessageType, Snapshot};
use tenure::metrics::Metrics;
use tenure::peer_input::Refusal;
use tenure::storage::{MemDisk, MemStore, RaftStore, ReadyWrite, StorageError};
use tenure::transport::mem::MemNetwork;
use tenure::transport::quic::QuicTransport;
use tenure::transport::{NodeId, Transport};
use tenure::{Config, Node, Role, StopCause};
use tokio::time::Instant;

use tenure_harness::cluster::Cluster;

const WAIT: Duration = Duration::from_secs(20);

/// Node 3's certificate on a bare transport, at node 3's address (what the real nodes
/// send it is swallowed).
async fn impostor(c: &Cluster) -> QuicTransport {
    tenure_harness::impostor(&c.dir.path().join("certs"), 3, &c.addrs, WAIT).await
}

fn msg(t: MessageType, to: NodeId, term: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(t);
    m.from = 3;
    m.to = to;
    m.term = term;
    m
}

/// Sends `m` from the impostor and waits until `to` counted it as refused for `reason`.
async fn refused(c: &Cluster, fake: &QuicTransport, m: Message, reason: Refusal) {
    let what = format!(
        "{:?} from node 3 to node {} refused ({reason})",
        m.get_msg_type(),
        m.to
    );
    sent_until(c, fake, 0, m, &what, |m| m.peer_refused(reason)).await;
    eprintln!("{what}: ok");
}

/// Sends `m`, a message of election `election`, from the impostor until `counted` of its
/// addressee's metrics rises: resent meanwhile, since the impostor's connection may
/// still be coming up (a repeat of a message already counted changes nothing).
async fn sent_until(
    c: &Cluster,
    fake: &QuicTransport,
    election: u32,
    m: Message,
    what: &str,
    counted: impl Fn(&Metrics) -> u64,
) {
    let to = c.node(m.to);
    let metrics = to.metrics();
    let before = counted(&metrics);
    let deadline = Instant::now() + WAIT;
    loop {
        fake.send_election(election, m.clone());
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            if counted(&metrics) > before {
                return;
            }
            // A driver that died without a word (a panic) publishes nothing: ask it.
            if to.leadership().role == Role::Stopped || to.status().await.is_err() {
                panic!("node {} stopped on {what}: {:?}", m.to, to.join().await);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
    }
}

/// Nodes 1 and 2 run on with leader `l` in `term`, whose lease was never lost: no lease
/// record was added since there were `leases_before`, and the one held is `l`'s.
fn nothing_changed(c: &Cluster, l: NodeId, term: u64, leases_before: usize) {
    for id in [1, 2] {
        let v = c.view(id);
        assert_ne!(v.role, Role::Stopped, "node {id} stopped");
        assert_eq!(
            (v.term, v.leader),
            (term, Some(l)),
            "node {id}'s view changed"
        );
    }
    assert!(c.view(l).leased, "the leader lost its lease");
    let leases = c.leases.lock().unwrap();
    assert_eq!(
        leases.len(),
        leases_before,
        "a lease was acquired meanwhile (the leader's lease was lost): {leases:?}"
    );
    let held: Vec<_> = leases.iter().filter(|r| r.reason.is_none()).collect();
    assert!(
        held.len() == 1 && held[0].node == l && held[0].term == term,
        "the leader's lease was lost: {leases:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_messages_from_an_authenticated_peer_are_dropped_and_change_nothing() {
    let mut c = Cluster::start(3).await;
    // Founding needs every first member: let the group exist before node 3 goes.
    c.steady_leader(WAIT).await;
    c.kill(3).await;
    let (l, term) = c.steady_leader(WAIT).await;
    let f = if l == 1 { 2 } else { 1 };
    let fake = impostor(&c).await;
    let leases_before = c.leases.lock().unwrap().len();
    let last = c.node(l).status().await.expect("leader runs").commit;

    // 1. An empty proposal to the leader (raft-rs: "stepped empty MsgProp").
    refused(
        &c,
        &fake,
        msg(MessageType::MsgPropose, l, 0),
        Refusal::NotAPeerMessage,
    )
    .await;
    // 2. MsgTimeoutNow to the follower from a node that does not lead (raft-rs: a
    //    forced election, whose votes skip the voters' in-lease refusal).
    refused(
        &c,
        &fake,
        msg(MessageType::MsgTimeoutNow, f, term),
        Refusal::TimeoutNowNotFromLeader,
    )
    .await;
    // 3. A heartbeat in the current term from a node that does not lead, with a commit
    //    far beyond the follower's log (raft-rs: "to_commit ... out of range").
    let mut hb = msg(MessageType::MsgHeartbeat, f, term);
    hb.commit = 1 << 40;
    refused(&c, &fake, hb, Refusal::NotFromLeader).await;
    // 4. A read request without entries (raft-rs indexes its first entry).
    refused(
        &c,
        &fake,
        msg(MessageType::MsgReadIndex, l, term),
        Refusal::NotAPeerMessage,
    )
    .await;
    // 5. "Transfer leadership to me" (raft-rs: the leader sends MsgTimeoutNow to node 3
    //    without tenure revoking its lease first).
    refused(
        &c,
        &fake,
        msg(MessageType::MsgTransferLeader, l, term),
        Refusal::NotAPeerMessage,
    )
    .await;
    // 6. An acknowledgement of entries the leader never had.
    let mut ack = msg(MessageType::MsgAppendResponse, l, term);
    ack.index = 1 << 40;
    refused(&c, &fake, ack, Refusal::BeyondLog).await;
    let mut hbr = msg(MessageType::MsgHeartbeatResponse, l, term);
    hbr.commit = 1 << 40;
    refused(&c, &fake, hbr, Refusal::BeyondLog).await;
    // 7. An append whose entries do not follow its index, in a term node 3 does not lead.
    let mut app = msg(MessageType::MsgAppend, f, term);
    app.index = last;
    app.log_term = term;
    app.entries = vec![Entry {
        index: last + 5,
        term,
        ..Default::default()
    }]
    .into();
    refused(&c, &fake, app.clone(), Refusal::NotFromLeader).await;
    app.term = 0;
    refused(&c, &fake, app, Refusal::TermOutOfRange).await;
    // 8. A snapshot whose membership raft-rs cannot restore ("unable to restore config").
    let mut snap = msg(MessageType::MsgSnapshot, f, 1 << 50);
    let mut s = Snapshot::default();
    s.mut_metadata().index = last + 10;
    s.mut_metadata().term = term;
    s.mut_metadata().set_conf_state(ConfState {
        voters: vec![1, 2],
        learners: vec![2],
        ..Default::default()
    });
    snap.set_snapshot(s);
    refused(&c, &fake, snap.clone(), Refusal::TermOutOfRange).await;
    snap.term = term;
    refused(&c, &fake, snap, Refusal::NotFromLeader).await;
    // 9. Messages claiming to come from nobody, or from their receiver (the transport
    //    checks the certificate's id against `from`, so this one never gets past it).
    let mut vote = msg(MessageType::MsgRequestVote, f, term + 1);
    vote.index = last;
    vote.log_term = term;
    vote.commit = last + 1;
    refused(&c, &fake, vote, Refusal::Malformed).await;

    // Nothing changed: the same leader in the same term, holding the same lease.
    nothing_changed(&c, l, term, leases_before);
    assert!(c.node(l).metrics().peer_refused(Refusal::NotAPeerMessage) >= 3);
    let text = c.node(l).metrics_text();
    let line = format!("tenure_peer_messages_refused_total{{node=\"{l}\",reason=\"beyond_log\"}} ");
    assert!(text.contains(&line), "{text}");
    fake.shutdown().await;
    c.shutdown().await;
}

/// A follower restarted on an older copy of its data directory has forgotten entries it
/// acknowledged; the leader's next heartbeat carries a commit index above its log (a
/// leader sends a follower at most what the follower acknowledged), and the follower
/// stops with [`StopCause::LostAcknowledgedData`] instead of panicking in raft-rs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_rolled_back_to_an_old_copy_of_its_data_stops_with_a_typed_cause() {
    let mut c = Cluster::start(3).await;
    let (l, term) = c.steady_leader(WAIT).await;
    let f = [1, 2, 3]
        .into_iter()
        .find(|id| *id != l)
        .expect("a follower");
    // A copy of f's data directory as it is now (f stopped for the copy).
    c.kill(f).await;
    let data = c.dir.path().join(format!("data-{f}"));
    let copy = c.dir.path().join("old-copy");
    copy_dir(&data, &copy);
    c.start_node(f).await;
    // f acknowledges more entries: drains and undrains are entries of the log.
    let leader: Node = c.node(l).clone();
    let other = [1, 2, 3]
        .into_iter()
        .find(|id| *id != l && *id != f)
        .unwrap();
    for drained in [true, false, true, false] {
        leader
            .set_drained(other, drained)
            .await
            .expect("the leader commits a drain");
    }
    let commit = leader.status().await.unwrap().commit;
    let deadline = Instant::now() + WAIT;
    while !c.node(f).status().await.is_ok_and(|s| s.commit >= commit) {
        assert!(
            Instant::now() < deadline,
            "node {f} never had the leader's log"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Roll f back to the copy and start it again.
    c.kill(f).await;
    std::fs::remove_dir_all(&data).unwrap();
    copy_dir(&copy, &data);
    c.start_node(f).await;
    let stopped = tokio::time::timeout(WAIT, c.node(f).join())
        .await
        .expect("the rolled-back follower stops");
    let err = stopped.expect_err("it stops on an error");
    eprintln!("node {f} stopped: {err}");
    match err.cause {
        StopCause::LostAcknowledgedData {
            leader,
            term: t,
            commit: said,
            last_index,
        } => {
            assert_eq!((leader, t), (l, term));
            assert!(said > last_index, "{said} > {last_index}");
        }
        other => panic!("stopped for another cause: {other:?}"),
    }
    assert!(err.is_fatal());
    // The others go on.
    assert_eq!(c.view(l).term, term);
    assert!(c.view(l).leased);
    c.shutdown().await;
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// A store whose reads fail once `broken` is set: raft-rs treats an unexpected storage
/// error as a broken invariant and panics (raft_log.rs: "unexpected error").
#[derive(Clone)]
struct BreakableStore {
    inner: MemStore,
    broken: Arc<AtomicBool>,
}

impl raft::Storage for BreakableStore {
    fn initial_state(&self) -> raft::Result<raft::RaftState> {
        self.inner.initial_state()
    }
    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: raft::GetEntriesContext,
    ) -> raft::Result<Vec<raft::eraftpb::Entry>> {
        self.inner.entries(low, high, max_size, context)
    }
    fn term(&self, idx: u64) -> raft::Result<u64> {
        if self.broken.load(Ordering::SeqCst) {
            let e = std::io::Error::other("the disk is gone (simulated)");
            return Err(raft::Error::Store(raft::StorageError::Other(Box::new(e))));
        }
        self.inner.term(idx)
    }
    fn first_index(&self) -> raft::Result<u64> {
        self.inner.first_index()
    }
    fn last_index(&self) -> raft::Result<u64> {
        self.inner.last_index()
    }
    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<raft::eraftpb::Snapshot> {
        self.inner.snapshot(request_index, to)
    }
}

impl RaftStore for BreakableStore {
    fn write(&self, write: ReadyWrite) -> Result<(), StorageError> {
        self.inner.write(write)
    }
    fn compact(&self, index: u64, cs: ConfState, data: Vec<u8>) -> Result<(), StorageError> {
        self.inner.compact(index, cs, data)
    }
    fn hard_state(&self) -> raft::eraftpb::HardState {
        self.inner.hard_state()
    }
    fn conf_state(&self) -> ConfState {
        self.inner.conf_state()
    }
    fn node_id(&self) -> Option<u64> {
        self.inner.node_id()
    }
}

/// A panic inside raft-rs (here: a store read that fails in a way raft-rs does not
/// expect) stops that node with [`StopCause::RaftPanicked`], naming what it was doing;
/// the process and the other nodes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_inside_raft_rs_stops_the_node_with_a_typed_cause() {
    let net = MemNetwork::new();
    let group = tenure::GroupId::random();
    let broken: Vec<Arc<AtomicBool>> = (0..3).map(|_| Arc::default()).collect();
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let peers = [1u64, 2, 3].map(|p| (p, SocketAddr::from(([127, 0, 0, 1], 7000 + p as u16))));
        let config = Config::builder(id)
            .peers(peers)
            .timing(tenure_harness::cluster::test_timing())
            .found(group)
            .build();
        let store = BreakableStore {
            inner: MemStore::open(MemDisk::for_node(id)),
            broken: broken[id as usize - 1].clone(),
        };
        let (transport, inbound) = net.endpoint(id);
        nodes.push(
            Node::start_with(config, store, Arc::new(transport), inbound)
                .await
                .expect("starts"),
        );
    }
    let deadline = Instant::now() + WAIT;
    let l = loop {
        if let Some(n) = nodes.iter().find(|n| n.leadership().leased) {
            break n.id();
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let f = if l == 1 { 2 } else { 1 };
    broken[f as usize - 1].store(true, Ordering::SeqCst);
    // An entry: the follower looks up the term of the append's previous index.
    let leader = nodes[l as usize - 1].clone();
    let _ = leader.set_drained(6 - l - f, true).await;
    let stopped = tokio::time::timeout(WAIT, nodes[f as usize - 1].join())
        .await
        .expect("the follower stops");
    let err = stopped.expect_err("on an error");
    eprintln!("node {f} stopped: {err}");
    match &err.cause {
        StopCause::RaftPanicked { during, message } => {
            assert!(message.contains("unexpected error"), "{message}");
            assert!(!during.is_empty());
        }
        other => panic!("stopped for another cause: {other:?}"),
    }
    assert!(
        err.reason.contains("raft-rs panicked while"),
        "{}",
        err.reason
    );
    assert_eq!(nodes[f as usize - 1].leadership().role, Role::Stopped);
    for n in &nodes {
        n.kill().await;
    }
}

/// A node that is joining has no membership and an empty log: raft-rs would find every
/// candidate up to date and grant its vote (a node that lost its data and came back
/// empty could vote twice in a term). It grants none; the request is refused and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_node_grants_no_votes() {
    let net = MemNetwork::new();
    let peers = [1u64, 2, 3, 4].map(|p| (p, SocketAddr::from(([127, 0, 0, 1], 7000 + p as u16))));
    let config = Config::builder(4)
        .peers(peers)
        .timing(tenure_harness::cluster::test_timing())
        .join(true)
        .build();
    let (transport, inbound) = net.endpoint(4);
    let joining = Node::start_with(
        config,
        MemStore::open(MemDisk::for_node(4)),
        Arc::new(transport),
        inbound,
    )
    .await
    .expect("a joining node starts");
    assert_eq!(joining.leadership().role, Role::Joining);
    // Node 3, campaigning in term 7 with a log of 12 entries.
    let (candidate, mut answers) = net.endpoint(3);
    let mut vote = msg(MessageType::MsgRequestVote, 4, 7);
    vote.index = 12;
    vote.log_term = 6;
    // Sent until the joining node refuses it or answers it (it ignores vote requests
    // for an election timeout after its start, the restart quiet period).
    let deadline = Instant::now() + WAIT;
    let answer = loop {
        candidate.send(vote.clone());
        let until = Instant::now() + Duration::from_millis(20);
        let answered = tokio::time::timeout_at(until, answers.recv()).await;
        if let Ok(Some(tenure::transport::Inbound::Message(m))) = answered {
            if m.get_msg_type() == MessageType::MsgRequestVoteResponse {
                break Some(m);
            }
        }
        if joining
            .metrics()
            .peer_refused(Refusal::VoteWithoutMembership)
            > 0
        {
            break None;
        }
        assert!(
            Instant::now() < deadline,
            "the vote request was neither refused nor answered"
        );
    };
    if let Some(m) = answer.filter(|m| !m.reject) {
        panic!(
            "the joining node granted its vote to node 3 in term {}: {m:?}",
            m.term
        );
    }
    assert_eq!(joining.leadership().term, 0, "the request moved its term");
    joining.kill().await;
}

/// A support request from node 3 to `to` (the wire format of the support stream,
/// `src/driver/support/wire.rs`): sequence number `seq`, the sender's incarnation, the
/// highest ack it processed (`acked`), an offer of each election in `ids` in term 1.
fn support_request(to: NodeId, seq: u64, acked: u64, ids: std::ops::Range<u32>) -> Message {
    let mut ctx = vec![1u8];
    ctx.extend_from_slice(&acked.to_be_bytes());
    ctx.extend_from_slice(&ids.len().to_be_bytes()[4..]);
    for id in ids {
        ctx.push(1); // an offer: id, term, last index, commit
        ctx.extend_from_slice(&id.to_be_bytes());
        for n in [1u64, 0, 0] {
            ctx.extend_from_slice(&n.to_be_bytes());
        }
    }
    let mut m = msg(MessageType::MsgHeartbeat, to, 0);
    m.index = seq;
    m.commit = 0x5eed_0001; // the impostor's incarnation
    m.context = ctx.into();
    m
}

/// Sends support request `m` from the impostor until its addressee judged it: it
/// answered it, or dropped the impostor's book, or refused it as malformed
/// (`malformed`: which one).
async fn judged(c: &Cluster, fake: &QuicTransport, m: Message, malformed: bool) {
    let what = format!("support request {} to node {} judged", m.index, m.to);
    sent_until(c, fake, u32::MAX, m, &what, |m| {
        if malformed {
            m.support_messages_malformed()
        } else {
            m.support_acks_sent() + m.support_books_dropped()
        }
    })
    .await;
}

/// A member that abuses the support stream (`docs/design.md`, section 12, "A member
/// cannot grow a book"), with node 3's certificate over real QUIC, against both real
/// nodes: offers of millions of elections that do not exist, refusals it never
/// confirms, and a sequence number at the end of the range. Each node's book of it
/// stays within the cap (the catalog's election limit) and is dropped instead, counted;
/// a sequence number past 2^62 is malformed and the stream goes on after it; the
/// leader's lease is never lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_abuses_the_support_stream_keeps_a_bounded_book_and_costs_no_lease() {
    let mut c = Cluster::start(3).await;
    c.steady_leader(WAIT).await;
    c.kill(3).await;
    let (l, term) = c.steady_leader(WAIT).await;
    let fake = impostor(&c).await;
    let leases_before = c.leases.lock().unwrap().len();
    let cap = tenure::election::MAX_ELECTIONS as u64;
    // Checked after every request, so that a book without bounds fails at the first.
    let within_cap = |id: NodeId| {
        let max = c.node(id).metrics().support_book_max();
        assert!(
            max <= cap,
            "node {id}'s book of node 3 grew to {max} entries, past {cap}"
        );
    };
    let mut seq = 0;
    // 1. Ten requests of 130,000 offers of elections nobody runs (a frame each), never
    //    confirmed: 1.3 million refusals to keep. Each request is dropped, book and all,
    //    after the 4,096 refusals of elections not run here that a request may cost.
    const FRAME: u32 = 130_000;
    for k in 0..10u32 {
        seq += 1;
        for to in [1, 2] {
            let ids = 1_000 + k * FRAME..1_000 + (k + 1) * FRAME;
            judged(&c, &fake, support_request(to, seq, 0, ids), false).await;
            within_cap(to);
        }
    }
    // 2. Twenty requests of 4,000, never confirmed: the reports reach the cap (65,536)
    //    at the 17th, whose refusal past it drops the book.
    for k in 0..20u32 {
        seq += 1;
        for to in [1, 2] {
            let ids = 1_400_000 + k * 4_000..1_400_000 + (k + 1) * 4_000;
            judged(&c, &fake, support_request(to, seq, 0, ids), false).await;
            within_cap(to);
        }
    }
    // 3. Small requests whose refusals it never confirms: the book is dropped once the
    //    oldest report is 128 requests old.
    for k in 0..140u32 {
        seq += 1;
        for to in [1, 2] {
            let ids = 2_000_000 + k * 100..2_000_000 + (k + 1) * 100;
            judged(&c, &fake, support_request(to, seq, 0, ids), false).await;
            within_cap(to);
        }
    }
    // 4. The last sequence numbers: refused as malformed, and the next request is judged.
    for to in [1, 2] {
        let end = support_request(to, u64::MAX, 0, 5..6);
        judged(&c, &fake, end, true).await;
        judged(&c, &fake, support_request(to, seq + 1, 0, 5..6), false).await;
    }
    {
        let again = c.leases.lock().unwrap().len() - leases_before;
        eprintln!("leases acquired while attacked (each after one was lost): {again}");
    }
    for id in [1, 2] {
        let m = c.node(id).metrics();
        let (max, drops) = (m.support_book_max(), m.support_books_dropped());
        eprintln!("node {id}: largest book {max} entries (cap {cap}), {drops} books dropped");
        assert!(
            max <= cap,
            "node {id}'s book of node 3 grew to {max} entries, past {cap}"
        );
        // Ten in step 1, one at the cap, one at the deadline.
        assert_eq!(
            drops, 12,
            "node {id} dropped {drops} books of node 3, not 10 + 1 + 1"
        );
    }
    nothing_changed(&c, l, term, leases_before);
    fake.shutdown().await;
    c.shutdown().await;
}

/// Messages of quiet elections that no correct peer sends (`docs/design.md`, section
/// 12, "Judged before waking"): node 3's certificate sends each of twenty quiet
/// elections a heartbeat in term 0, to both real nodes, three times over. Every one is
/// refused, and none wakes its election: before, each woke it (and it went quiet again
/// only after the settle time), so a peer could keep a group's elections awake at will.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_messages_of_quiet_elections_wake_nothing() {
    const NAMES: usize = 20;
    let mut c = Cluster::start(3).await;
    c.steady_leader(WAIT).await;
    c.kill(3).await;
    let (l, term) = c.steady_leader(WAIT).await;
    for i in 0..NAMES {
        let name = format!("q-{i}");
        c.node(l)
            .create_election(&name, tenure::ElectionOptions::new())
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
    }
    // Balanced (ten each: the balancer moves nothing, a move wakes an election rightly)
    // and quiet on both nodes.
    let settled = |c: &Cluster| {
        let quiet = [1, 2].map(|id| c.node(id).metrics().named_quiet());
        let led = [1, 2].map(|id| c.node(id).metrics().named_elections().0);
        quiet == [NAMES as u64; 2] && led == [NAMES as u64 / 2; 2]
    };
    tenure_harness::cluster::wait_for("every election quiet, ten led by each node", WAIT, || {
        settled(&c).then_some(())
    })
    .await;
    let ids: Vec<u32> = c
        .node(l)
        .list_elections()
        .await
        .expect("the catalog")
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(ids.len(), NAMES);
    let fake = impostor(&c).await;
    let leases_before = c.leases.lock().unwrap().len();
    let woken = |c: &Cluster| [1, 2].map(|id| c.node(id).metrics().named_wakes_by_message());
    let woken_before = woken(&c);
    for round in 0..3 {
        for to in [1, 2] {
            for &id in &ids {
                let m = msg(MessageType::MsgHeartbeat, to, 0);
                let what = format!("round {round}: a heartbeat in term 0 of election {id}");
                sent_until(&c, &fake, id, m, &what, |m| {
                    m.peer_refused(Refusal::TermOutOfRange)
                })
                .await;
                let woke = woken(&c);
                assert_eq!(
                    woke, woken_before,
                    "{what} to node {to} was refused, and woke it: wakes by a message on nodes 1, 2: {woke:?}"
                );
            }
        }
    }
    nothing_changed(&c, l, term, leases_before);
    fake.shutdown().await;
    c.shutdown().await;
}

/// A member that floods the driver's channels (`docs/design.md`, section 9, "A fair
/// share of the driver's channels"), with node 3's certificate over real QUIC: the
/// leader's channels to its driver are small (64 messages each, a test hook), and the
/// impostor sends it as many frames as it can, root heartbeat responses in term 0 (the
/// urgent lane) and named elections' heartbeats in term 0 (the other), each refused
/// once judged. The impostor may keep only its share of each channel waiting (64 over
/// two peers); the rest is dropped as over its share, so the follower's messages always
/// find room: none is dropped for a full channel, and the leader keeps its lease.
/// Mutation `inbound-lane-unshared` (one channel for every peer, first come first
/// served) lets the flood fill the channels and crowd the follower out (checked in
/// `.ci/run`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_floods_the_driver_gets_its_share_and_crowds_out_nobody() {
    let mut c = Cluster::unstarted(
        3,
        tenure_harness::cluster::test_timing(),
        tenure::ReadMode::Safe,
    );
    c.tweak = Some(|config: &mut Config| config.hooks_mut().inbound_depth = Some(64));
    for id in [1, 2, 3] {
        c.start_node(id).await;
    }
    c.steady_leader(WAIT).await;
    c.kill(3).await;
    let (l, term) = c.steady_leader(WAIT).await;
    let fake = impostor(&c).await;
    let leases_before = c.leases.lock().unwrap().len();
    let stats = |id| c.node(id).transport_stats();
    let before = stats(l);
    let urgent = msg(MessageType::MsgHeartbeatResponse, l, 0);
    let bulk = msg(MessageType::MsgHeartbeat, l, 0);
    // Until the leader dropped 100,000 of the impostor's messages, 400 every 2 ms (the
    // impostor's own queue drops what it cannot send).
    let deadline = Instant::now() + WAIT;
    loop {
        let now = stats(l);
        let dropped = (now.dropped_inbound_share + now.dropped_inbound_full)
            - (before.dropped_inbound_share + before.dropped_inbound_full);
        if dropped >= 100_000 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the flood did not fill node {l}'s channels: {dropped} dropped"
        );
        for _ in 0..200 {
            fake.send_election(0, urgent.clone());
            fake.send_election(7, bulk.clone());
        }
        // The impostor shares the test's two threads with both nodes: bursts, not a
        // busy loop, so that what is measured is the leader's channels, not a starved
        // runtime.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let after = stats(l);
    let (share, full) = (
        after.dropped_inbound_share - before.dropped_inbound_share,
        after.dropped_inbound_full - before.dropped_inbound_full,
    );
    eprintln!("node {l}: {share} of the impostor's messages dropped over its share, {full} for a full channel");
    assert_eq!(
        full, 0,
        "node {l}'s channels to its driver were full {full} times: the flood crowded the other peer out"
    );
    nothing_changed(&c, l, term, leases_before);
    c.shutdown().await;
}
