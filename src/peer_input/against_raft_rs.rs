//! Random message sequences stepped into real raft-rs nodes: nothing admitted makes
//! raft-rs panic.

use super::*;
use raft::eraftpb::{Entry, HardState, Snapshot};
use raft::storage::MemStorage;
use raft::RawNode;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use MessageType::*;

const TERMS: [u64; 10] = [1, 1, 2, 2, 3, 3, 4, 5, 5, 5];

fn logger() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

/// Node `id` of the group {1, 2, 3} with entries 1..=10 (terms `TERMS`), commit 8.
fn member(id: u64) -> RawNode<MemStorage> {
    let store = MemStorage::new_with_conf_state(ConfState::from((vec![1, 2, 3], vec![])));
    let entries: Vec<Entry> = TERMS
        .iter()
        .enumerate()
        .map(|(i, t)| Entry {
            index: i as u64 + 1,
            term: *t,
            ..Default::default()
        })
        .collect();
    store.wl().append(&entries).unwrap();
    store.wl().set_hardstate(HardState {
        term: 5,
        vote: 1,
        commit: 8,
        ..Default::default()
    });
    raw(id, store)
}

fn raw(id: u64, store: MemStorage) -> RawNode<MemStorage> {
    let config = raft::Config {
        id,
        election_tick: 15,
        heartbeat_tick: 3,
        pre_vote: true,
        check_quorum: true,
        read_only_option: raft::ReadOnlyOption::Safe,
        ..Default::default()
    };
    RawNode::new(&config, store, &logger()).unwrap()
}

/// Persists, "applies" and advances whatever raft-rs has ready, as the driver does.
fn drain(raw: &mut RawNode<MemStorage>) {
    while raw.has_ready() {
        let mut rd = raw.ready();
        let store = raw.raft.raft_log.store().clone();
        if !rd.snapshot().is_empty() {
            // tenure's stores refuse the same snapshots (not newer than theirs): the
            // driver would stop on that error, so it counts as a failure here too.
            if let Err(e) = store.wl().apply_snapshot(rd.snapshot().clone()) {
                panic!("the store refused the snapshot: {e}");
            }
        }
        store.wl().append(rd.entries()).unwrap();
        if let Some(hs) = rd.hs() {
            store.wl().set_hardstate(hs.clone());
        }
        let _ = rd.take_committed_entries();
        let mut light = raw.advance(rd);
        if let Some(c) = light.commit_index() {
            store.wl().mut_hard_state().commit = c;
        }
        let _ = light.take_committed_entries();
        raw.advance_apply();
    }
}

fn msg(t: MessageType, from: u64, to: u64, term: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(t);
    m.from = from;
    m.to = to;
    m.term = term;
    m
}

/// The four starting states.
fn start(state: usize) -> RawNode<MemStorage> {
    match state {
        0 => {
            let mut n = member(2);
            n.step(msg(MsgHeartbeat, 1, 2, 5)).unwrap();
            drain(&mut n);
            n
        }
        1 => {
            let mut n = member(1);
            n.raft.campaign(raft::CAMPAIGN_ELECTION); // term 6
            drain(&mut n);
            let mut vote = msg(MsgRequestVoteResponse, 2, 1, 6);
            vote.reject = false;
            n.step(vote).unwrap();
            drain(&mut n);
            assert_eq!(n.raft.state, StateRole::Leader);
            n
        }
        2 => {
            let mut n = member(3);
            n.campaign().unwrap();
            drain(&mut n);
            n
        }
        _ => raw(4, MemStorage::new()),
    }
}

fn view(n: &RawNode<MemStorage>, from: u64) -> Local {
    Local::of(&n.raft, from)
}

/// A message in the shape a correct peer would send to `n`, often with one or two
/// fields then set to something else: what `admit` must judge.
fn random_message(rng: &mut StdRng, n: &RawNode<MemStorage>) -> Message {
    let types = [
        MsgAppend,
        MsgAppendResponse,
        MsgRequestVote,
        MsgRequestVoteResponse,
        MsgRequestPreVote,
        MsgRequestPreVoteResponse,
        MsgSnapshot,
        MsgHeartbeat,
        MsgHeartbeatResponse,
        MsgTimeoutNow,
        MsgPropose,
        MsgReadIndex,
        MsgReadIndexResp,
        MsgTransferLeader,
    ];
    let (to, term, last) = (n.raft.id, n.raft.term, n.raft.raft_log.last_index());
    let term_at = |i: u64| {
        if i == 0 {
            0
        } else {
            n.raft.raft_log.term(i).unwrap_or(1).max(1)
        }
    };
    let t = *types.choose(rng).unwrap();
    let leader = if n.raft.leader_id != 0 && n.raft.leader_id != to {
        n.raft.leader_id
    } else {
        *[1, 2, 3]
            .iter()
            .filter(|i| **i != to)
            .collect::<Vec<_>>()
            .choose(rng)
            .unwrap()
            .to_owned()
    };
    let peer = *[1u64, 2, 3]
        .iter()
        .filter(|i| **i != to)
        .collect::<Vec<_>>()
        .choose(rng)
        .unwrap()
        .to_owned();
    let from_leader = matches!(t, MsgAppend | MsgHeartbeat | MsgSnapshot | MsgTimeoutNow);
    let mut m = msg(
        t,
        if from_leader { leader } else { peer },
        to,
        (term + rng.gen_range(0..2)).max(1),
    );
    // Plausible fields.
    let index = rng.gen_range(0..=last + 2);
    m.index = index;
    m.log_term = term_at(index.min(last)).min(m.term);
    m.commit = rng.gen_range(0..=index);
    m.commit_term = term_at(m.commit.min(last)).min(m.log_term);
    m.reject = rng.gen_bool(0.3);
    m.reject_hint = rng.gen_range(0..=index);
    if t == MsgAppend {
        let len = rng.gen_range(0..4);
        let mut et = m.log_term.max(1);
        m.entries = (0..len)
            .map(|i| {
                et = rng.gen_range(et..=m.term);
                Entry {
                    index: index + 1 + i,
                    term: et,
                    ..Default::default()
                }
            })
            .collect::<Vec<_>>()
            .into();
    }
    if t == MsgSnapshot {
        let mut s = Snapshot::default();
        s.mut_metadata().index = rng.gen_range(1..=last + 5);
        s.mut_metadata().term = rng.gen_range(1..=m.term);
        s.mut_metadata()
            .set_conf_state(ConfState::from((vec![1, 2, 3], vec![])));
        s.data = GroupState::default().to_snapshot().into();
        m.set_snapshot(s);
    }
    if rng.gen_bool(0.1) {
        m.context = raft::CAMPAIGN_TRANSFER.to_vec().into();
    }
    // Then, half of the time, something a correct peer would not send.
    let odd = [
        0,
        1,
        2,
        5,
        9,
        10,
        11,
        12,
        20,
        1 << 40,
        MAX_INDEX + 1,
        u64::MAX,
    ];
    for _ in 0..rng.gen_range(0..3) {
        let v = *odd.choose(rng).unwrap();
        match rng.gen_range(0..12) {
            0 => m.from = *[0, 1, 2, 3, 4, 9].choose(rng).unwrap(),
            1 => {
                m.term = *[0, term.saturating_sub(1), term + 3, MAX_TERM + 1]
                    .choose(rng)
                    .unwrap();
            }
            2 => m.index = v,
            3 => m.log_term = *[0, 1, 4, 5, 6, 7].choose(rng).unwrap(),
            4 => m.commit = v,
            5 => m.commit_term = *[0, 1, 5, 6, 7].choose(rng).unwrap(),
            6 => m.reject_hint = v,
            7 => m.request_snapshot = v,
            8 => {
                let mut e = m.entries.to_vec();
                e.push(Entry {
                    index: v,
                    term: *[0, 1, 5, 6, 7].choose(rng).unwrap(),
                    ..Default::default()
                });
                m.entries = e.into();
            }
            9 => {
                let ids = |rng: &mut StdRng| -> Vec<u64> {
                    let k = rng.gen_range(0..4);
                    (0..k)
                        .map(|_| *[0, 1, 2, 3, 3, 4].choose(rng).unwrap())
                        .collect()
                };
                let cs = ConfState {
                    voters: ids(rng),
                    learners: ids(rng),
                    voters_outgoing: if rng.gen_bool(0.3) { ids(rng) } else { vec![] },
                    learners_next: if rng.gen_bool(0.2) { ids(rng) } else { vec![] },
                    auto_leave: rng.gen_bool(0.1),
                    ..Default::default()
                };
                m.mut_snapshot().mut_metadata().set_conf_state(cs);
            }
            10 => {
                let meta = m.mut_snapshot().mut_metadata();
                meta.index = v;
                meta.term = *[0, 1, 5, 6, 7].choose(rng).unwrap();
            }
            _ => m.mut_snapshot().data = b"garbage".to_vec().into(),
        }
    }
    m
}

#[test]
fn raft_rs_never_panics_on_what_admit_lets_through() {
    let seed: u64 = std::env::var("TENURE_PEER_INPUT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x7e4e);
    let rounds: usize = std::env::var("TENURE_PEER_INPUT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000);
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut admitted, mut panics_refused) = (0, 0);
    let mut failures = Vec::new();
    for round in 0..rounds {
        let state = round % 4;
        let mut n = start(state);
        for _ in 0..4 {
            let m = random_message(&mut rng, &n);
            let verdict = admit(&m, &view(&n, m.from));
            let shown = format!("{m:?}");
            let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _ = n.step(m);
                drain(&mut n);
            }));
            match (verdict == Verdict::Admit, stepped) {
                (true, Ok(())) => admitted += 1,
                (true, Err(p)) => {
                    let why = p.downcast_ref::<String>().cloned().or_else(|| {
                        p.downcast_ref::<&str>()
                            .map(std::string::ToString::to_string)
                    });
                    failures.push(format!("state {state}: {why:?} on {shown}"));
                    break;
                }
                // A refused message ends the sequence: a node never sees one, so
                // what follows it would be judged against a state no node has.
                (false, r) => {
                    panics_refused += usize::from(r.is_err());
                    break;
                }
            }
        }
    }
    eprintln!(
        "admitted {admitted}, refused-and-panicked {panics_refused}, failures {}",
        failures.len()
    );
    for f in failures.iter().take(10) {
        eprintln!("{f}");
    }
    assert!(
        failures.is_empty(),
        "{} admitted messages made raft-rs panic; the first: {}",
        failures.len(),
        failures[0]
    );
    assert!(admitted > 1000, "only {admitted} messages admitted");
    assert!(
        panics_refused > 20,
        "only {panics_refused} refused messages made raft-rs panic: does the harness see panics?"
    );
}
