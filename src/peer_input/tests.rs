//! Each admission rule, case by case.

use super::*;
use raft::eraftpb::{Entry, Snapshot};
use MessageType::*;

fn follower() -> Local {
    Local {
        id: 2,
        term: 5,
        role: StateRole::Follower,
        leader: 1,
        last_index: 10,
        committed: (8, 4),
        has_membership: true,
        sender_tracked: true,
        election: 0,
    }
}

/// Node 2 leading (every message here is addressed to node 2).
fn leader() -> Local {
    Local {
        role: StateRole::Leader,
        leader: 2,
        ..follower()
    }
}

fn msg(t: MessageType, from: NodeId, term: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(t);
    m.from = from;
    m.to = 2;
    m.term = term;
    m
}

fn entry(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        ..Default::default()
    }
}

fn refused(m: &Message, l: &Local) -> Option<Refusal> {
    match admit(m, l) {
        Verdict::Refuse(r) => Some(r),
        _ => None,
    }
}

#[test]
fn local_and_forwarded_types_never_come_from_peers() {
    for t in [
        MsgHup,
        MsgBeat,
        MsgPropose,
        MsgUnreachable,
        MsgSnapStatus,
        MsgCheckQuorum,
        MsgTransferLeader,
        MsgReadIndex,
        MsgReadIndexResp,
    ] {
        for l in [follower(), leader()] {
            assert_eq!(
                refused(&msg(t, 1, 5), &l),
                Some(Refusal::NotAPeerMessage),
                "{t:?}"
            );
        }
    }
}

#[test]
fn senders_zero_and_self_and_terms_zero_and_huge_are_refused() {
    let l = follower();
    assert_eq!(
        refused(&msg(MsgHeartbeat, 0, 5), &l),
        Some(Refusal::BadSender)
    );
    assert_eq!(
        refused(&msg(MsgHeartbeat, 2, 5), &l),
        Some(Refusal::BadSender)
    );
    assert_eq!(
        refused(&msg(MsgHeartbeat, 1, 0), &l),
        Some(Refusal::TermOutOfRange)
    );
    assert_eq!(
        refused(&msg(MsgRequestVote, 3, MAX_TERM + 1), &l),
        Some(Refusal::TermOutOfRange)
    );
    assert_eq!(admit(&msg(MsgHeartbeat, 1, 5), &l), Verdict::Admit);
    let mut elsewhere = msg(MsgHeartbeat, 1, 5);
    elsewhere.to = 3;
    assert_eq!(refused(&elsewhere, &l), Some(Refusal::NotForThisNode));
    elsewhere.to = 0;
    assert_eq!(refused(&elsewhere, &l), Some(Refusal::NotForThisNode));
}

#[test]
fn a_heartbeat_commit_beyond_the_log_is_lost_data_from_the_leader_and_refused_otherwise() {
    let l = follower();
    let mut m = msg(MsgHeartbeat, 1, 5);
    m.commit = 1 << 40;
    assert_eq!(
        admit(&m, &l),
        Verdict::Fatal(StopCause::LostAcknowledgedData {
            leader: 1,
            term: 5,
            commit: 1 << 40,
            last_index: 10
        })
    );
    // A new leader (higher term) too.
    let mut m6 = m.clone();
    m6.term = 6;
    m6.from = 3;
    assert!(matches!(admit(&m6, &l), Verdict::Fatal(_)));
    // Not the leader of this term: a second leader in one term does not exist.
    let mut m3 = m.clone();
    m3.from = 3;
    assert_eq!(refused(&m3, &l), Some(Refusal::NotFromLeader));
    // An old term: raft-rs only answers it.
    let mut old = m.clone();
    old.term = 4;
    assert_eq!(admit(&old, &l), Verdict::Admit);
    // Within the log: fine.
    m.commit = 10;
    assert_eq!(admit(&m, &l), Verdict::Admit);
    // Beyond any log: malformed, not lost data.
    m.commit = u64::MAX;
    assert_eq!(refused(&m, &l), Some(Refusal::Malformed));
}

#[test]
fn appends_must_follow_their_index_in_rising_terms() {
    let l = follower();
    let mut m = msg(MsgAppend, 1, 5);
    m.index = 10;
    m.log_term = 4;
    m.entries = vec![entry(11, 4), entry(12, 5)].into();
    assert_eq!(admit(&m, &l), Verdict::Admit);
    let mut gap = m.clone();
    gap.entries = vec![entry(12, 5)].into();
    assert_eq!(refused(&gap, &l), Some(Refusal::Malformed));
    let mut below = m.clone();
    below.entries = vec![entry(3, 5)].into();
    assert_eq!(refused(&below, &l), Some(Refusal::Malformed));
    let mut falling = m.clone();
    falling.entries = vec![entry(11, 5), entry(12, 4)].into();
    assert_eq!(refused(&falling, &l), Some(Refusal::Malformed));
    let mut future = m.clone();
    future.entries = vec![entry(11, 6)].into();
    assert_eq!(refused(&future, &l), Some(Refusal::Malformed));
    let mut older_than_prev = m.clone();
    older_than_prev.entries = vec![entry(11, 3)].into();
    assert_eq!(refused(&older_than_prev, &l), Some(Refusal::Malformed));
    // Past the end of this node's log with log term 0: would "match" in raft-rs.
    let mut zero = msg(MsgAppend, 1, 5);
    zero.index = 50;
    zero.commit = 60;
    assert_eq!(refused(&zero, &l), Some(Refusal::Malformed));
    // Overflow of index + entries.
    let mut huge = msg(MsgAppend, 1, 5);
    huge.index = u64::MAX;
    huge.log_term = 5;
    huge.entries = vec![entry(0, 5)].into();
    assert_eq!(refused(&huge, &l), Some(Refusal::Malformed));
    // From another node in this term.
    let mut other = m.clone();
    other.from = 3;
    assert_eq!(refused(&other, &l), Some(Refusal::NotFromLeader));
    // Entries on anything but an append.
    let mut hb = msg(MsgHeartbeat, 1, 5);
    hb.entries = vec![entry(11, 5)].into();
    assert_eq!(refused(&hb, &l), Some(Refusal::Malformed));
}

#[test]
fn responses_beyond_the_leaders_log_or_from_strangers_are_refused() {
    let l = leader();
    let mut m = msg(MsgAppendResponse, 3, 5);
    m.index = 10;
    m.commit = 9;
    assert_eq!(admit(&m, &l), Verdict::Admit);
    let mut far = m.clone();
    far.index = 11;
    assert_eq!(refused(&far, &l), Some(Refusal::BeyondLog));
    let mut hb = msg(MsgHeartbeatResponse, 3, 5);
    hb.commit = 1 << 40;
    assert_eq!(refused(&hb, &l), Some(Refusal::BeyondLog));
    let mut reject = m.clone();
    reject.reject = true;
    reject.reject_hint = 12;
    assert_eq!(refused(&reject, &l), Some(Refusal::Malformed));
    let mut snap = m.clone();
    snap.request_snapshot = 4;
    assert_eq!(refused(&snap, &l), Some(Refusal::Malformed));
    let stranger = Local {
        sender_tracked: false,
        election: 0,
        ..l
    };
    assert_eq!(refused(&m, &stranger), Some(Refusal::UnknownPeer));
    assert_eq!(
        refused(&msg(MsgRequestVoteResponse, 9, 5), &stranger),
        Some(Refusal::UnknownPeer)
    );
    // Not leading in that term: raft-rs does not read the fields.
    assert_eq!(admit(&far, &follower()), Verdict::Admit);
}

#[test]
fn timeout_now_only_from_the_leader_of_the_current_term() {
    let l = follower();
    assert_eq!(admit(&msg(MsgTimeoutNow, 1, 5), &l), Verdict::Admit);
    for m in [
        msg(MsgTimeoutNow, 3, 5), // not the leader
        msg(MsgTimeoutNow, 1, 4), // an old term
        msg(MsgTimeoutNow, 1, 6), // a term this node has not seen a leader of
    ] {
        assert_eq!(
            refused(&m, &l),
            Some(Refusal::TimeoutNowNotFromLeader),
            "{m:?}"
        );
    }
    let leaderless = Local { leader: 0, ..l };
    assert_eq!(
        refused(&msg(MsgTimeoutNow, 1, 5), &leaderless),
        Some(Refusal::TimeoutNowNotFromLeader)
    );
}

#[test]
fn a_node_without_membership_grants_no_votes() {
    let joining = Local {
        has_membership: false,
        leader: 0,
        last_index: 0,
        term: 0,
        ..follower()
    };
    for t in [MsgRequestVote, MsgRequestPreVote] {
        let mut m = msg(t, 3, 7);
        m.index = 12;
        m.log_term = 6;
        assert_eq!(refused(&m, &joining), Some(Refusal::VoteWithoutMembership));
        assert_eq!(admit(&m, &follower()), Verdict::Admit);
    }
    let mut bad = msg(MsgRequestVote, 3, 7);
    bad.index = 12;
    bad.log_term = 0;
    assert_eq!(refused(&bad, &follower()), Some(Refusal::Malformed));
    bad.log_term = 6;
    bad.commit = 13;
    assert_eq!(refused(&bad, &follower()), Some(Refusal::Malformed));
}

fn snap_msg(index: u64, term: u64, cs: ConfState, data: &[u8]) -> Message {
    let mut m = msg(MsgSnapshot, 1, 5);
    let mut s = Snapshot::default();
    s.mut_metadata().index = index;
    s.mut_metadata().term = term;
    s.mut_metadata().set_conf_state(cs);
    s.data = data.to_vec().into();
    m.set_snapshot(s);
    m
}

fn cs(voters: &[u64], learners: &[u64], outgoing: &[u64], next: &[u64]) -> ConfState {
    ConfState {
        voters: voters.to_vec(),
        learners: learners.to_vec(),
        voters_outgoing: outgoing.to_vec(),
        learners_next: next.to_vec(),
        ..Default::default()
    }
}

#[test]
fn snapshots_must_be_restorable() {
    let l = follower();
    let good = cs(&[1, 2, 3], &[], &[], &[]);
    assert_eq!(
        admit(&snap_msg(20, 5, good.clone(), b""), &l),
        Verdict::Admit
    );
    for m in [
        snap_msg(0, 5, good.clone(), b""),
        snap_msg(20, 0, good.clone(), b""),
        snap_msg(20, 6, good.clone(), b""),
        snap_msg(20, 5, good.clone(), b"not a group state"),
        snap_msg(20, 5, cs(&[], &[2], &[], &[]), b""),
        snap_msg(20, 5, cs(&[1, 2], &[2], &[], &[]), b""),
        snap_msg(20, 5, cs(&[1, 1, 2], &[], &[], &[]), b""),
        snap_msg(20, 5, cs(&[0, 2], &[], &[], &[]), b""),
        snap_msg(20, 5, cs(&[1, 2], &[], &[1, 3], &[2]), b""),
        snap_msg(20, 5, cs(&[1, 2], &[3], &[1, 3], &[]), b""),
        snap_msg(8, 5, good.clone(), b""), // the commit index, another term
    ] {
        assert_eq!(refused(&m, &l), Some(Refusal::BadSnapshot), "{m:?}");
    }
    assert_eq!(
        admit(&snap_msg(20, 5, cs(&[1, 2], &[], &[1, 3], &[3]), b""), &l),
        Verdict::Admit
    );
    // Below the commit index raft-rs ignores it; at it with the same term too.
    assert_eq!(
        admit(&snap_msg(8, 4, good.clone(), b""), &l),
        Verdict::Admit
    );
    assert_eq!(admit(&snap_msg(5, 3, good, b""), &l), Verdict::Admit);
}

#[test]
fn refusal_warnings_are_rate_limited_per_reason() {
    let mut log = RefusalLog::new(std::time::Duration::from_secs(10));
    let t0 = tokio::time::Instant::now();
    let s = std::time::Duration::from_secs(1);
    assert_eq!(log.note(Refusal::Malformed, t0), Some(0));
    assert_eq!(log.note(Refusal::Malformed, t0 + s), None);
    assert_eq!(log.note(Refusal::Malformed, t0 + 2 * s), None);
    assert_eq!(log.note(Refusal::BadSender, t0 + 2 * s), Some(0));
    assert_eq!(log.note(Refusal::Malformed, t0 + 10 * s), Some(2));
    assert_eq!(log.note(Refusal::Malformed, t0 + 11 * s), None);
}

#[test]
fn names_are_distinct() {
    let names: std::collections::BTreeSet<&str> =
        Refusal::ALL.iter().map(super::Refusal::as_str).collect();
    assert_eq!(names.len(), Refusal::ALL.len());
    for (i, r) in Refusal::ALL.iter().enumerate() {
        assert_eq!(r.index(), i);
    }
}

#[test]
fn a_named_elections_messages_carry_terms_of_its_own_range_only() {
    use crate::election::term_floor;
    // Node 2 follows in election 3, whose terms lie in [3 × 2^40, 4 × 2^40).
    let l = Local {
        election: 3,
        term: term_floor(3) + 5,
        committed: (8, term_floor(3) + 4),
        ..follower()
    };
    assert_eq!(
        admit(&msg(MsgHeartbeat, 1, term_floor(3) + 5), &l),
        Verdict::Admit
    );
    // A root term, another election's term, or the next election's floor: refused, so a
    // message routed to the wrong election never reaches its raft group.
    for term in [5, term_floor(2) + 5, term_floor(4), u64::MAX] {
        assert_eq!(
            refused(&msg(MsgHeartbeat, 1, term), &l),
            Some(Refusal::TermOutOfRange),
            "term {term}"
        );
    }
    // And the root refuses named elections' terms.
    assert_eq!(
        refused(&msg(MsgRequestVote, 3, term_floor(1)), &follower()),
        Some(Refusal::TermOutOfRange)
    );
}
