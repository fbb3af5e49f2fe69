//! Which messages from peers may reach raft-rs.
//!
//! The transport authenticates every peer (its certificate names it, and a message whose
//! `from` differs is dropped there), but an authenticated peer can still send what a
//! correct peer never sends: raft-rs 0.7 trusts its input and panics on a good part of
//! it (a heartbeat's commit beyond this node's log, an empty `MsgPropose`, a `MsgReadIndex`
//! without entries, an append whose entries do not follow its index, a snapshot whose
//! membership cannot be restored, ...), or acts on it where no correct peer would make it
//! act (a `MsgTimeoutNow` from a node that does not lead starts a forced election; a
//! remote `MsgTransferLeader` makes the leader hand over without revoking its lease).
//!
//! `admit` judges one message against what this node knows (`Local`) before the
//! driver steps it into raft-rs: admitted, refused (dropped and counted by [`Refusal`],
//! in `tenure_peer_messages_refused_total`), or fatal (this node acknowledged entries it
//! no longer has: it must stop). It does no I/O and keeps no state; the driver logs
//! refusals through a `RefusalLog`, which rate-limits the warnings.
//!
//! The rules and the argument for each are in `docs/design.md`, section 7 ("Input from
//! peers"). What a rule refuses is never something a correct tenure peer sends, so
//! refusing it costs nothing; the simulation's seeds (every message of hundreds of runs
//! under faults goes through `admit`) check that no correct message is refused.

use raft::eraftpb::{ConfState, Message, MessageType};
use raft::StateRole;

use crate::error::StopCause;
use crate::state::GroupState;
use crate::transport::NodeId;

/// Terms above this are refused: 2^48 elections take millennia even at one per
/// millisecond, and raft-rs adds to terms without overflow checks.
pub const MAX_TERM: u64 = 1 << 48;

/// Indices above this are refused: no log gets there, and raft-rs adds to indices
/// without overflow checks.
pub const MAX_INDEX: u64 = 1 << 62;

/// Why a message from a peer was dropped before it reached raft-rs.
///
/// Each is counted in `tenure_peer_messages_refused_total{reason}`
/// ([`Metrics::peer_refused`](crate::metrics::Metrics::peer_refused)). A correct tenure
/// peer never sends any of these; a count that grows means a peer is broken, runs
/// other software, or is hostile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Refusal {
    /// A message type no peer sends: raft-rs's local types (`MsgHup`, `MsgBeat`,
    /// `MsgCheckQuorum`, `MsgUnreachable`, `MsgSnapStatus`) and the requests tenure never
    /// forwards between nodes (`MsgPropose`, `MsgReadIndex`, `MsgReadIndexResp`,
    /// `MsgTransferLeader`).
    NotAPeerMessage,
    /// `from` is 0 (raft-rs's "nobody") or this node's own id.
    BadSender,
    /// `to` is not this node (a peer sends each node only what is addressed to it).
    NotForThisNode,
    /// Term 0 (raft-rs takes it for a local message and skips every term check) or
    /// beyond [`MAX_TERM`].
    TermOutOfRange,
    /// Fields that contradict each other or are out of range: entries that do not follow
    /// the append's index or rise above its term, a log term of 0 at a non-zero index, an
    /// index beyond [`MAX_INDEX`], entries on a message that carries none, ...
    Malformed,
    /// An append, heartbeat or snapshot in this node's current term from a node other
    /// than the leader it follows in that term (there is one leader per term).
    NotFromLeader,
    /// A response (append, heartbeat, vote) from a node raft-rs does not track.
    UnknownPeer,
    /// A response claiming an index or commit beyond this leader's last index.
    BeyondLog,
    /// A snapshot whose metadata or data cannot be installed: index or term 0, a term
    /// above the message's, a membership raft-rs cannot restore, data that is not a
    /// tenure group state.
    BadSnapshot,
    /// `MsgTimeoutNow` not from the leader of this node's current term.
    TimeoutNowNotFromLeader,
    /// A vote or pre-vote request to a node that has no membership yet (it is joining):
    /// its log is empty, so raft-rs would find every candidate up to date.
    VoteWithoutMembership,
}

impl Refusal {
    /// Every refusal, in counter order.
    pub const ALL: [Refusal; 11] = [
        Refusal::NotAPeerMessage,
        Refusal::BadSender,
        Refusal::NotForThisNode,
        Refusal::TermOutOfRange,
        Refusal::Malformed,
        Refusal::NotFromLeader,
        Refusal::UnknownPeer,
        Refusal::BeyondLog,
        Refusal::BadSnapshot,
        Refusal::TimeoutNowNotFromLeader,
        Refusal::VoteWithoutMembership,
    ];

    /// A short snake_case name, stable for logs and metrics labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            Refusal::NotAPeerMessage => "not_a_peer_message",
            Refusal::BadSender => "bad_sender",
            Refusal::NotForThisNode => "not_for_this_node",
            Refusal::TermOutOfRange => "term_out_of_range",
            Refusal::Malformed => "malformed",
            Refusal::NotFromLeader => "not_from_leader",
            Refusal::UnknownPeer => "unknown_peer",
            Refusal::BeyondLog => "beyond_log",
            Refusal::BadSnapshot => "bad_snapshot",
            Refusal::TimeoutNowNotFromLeader => "timeout_now_not_from_leader",
            Refusal::VoteWithoutMembership => "vote_without_membership",
        }
    }

    /// The position in [`Refusal::ALL`].
    pub(crate) fn index(&self) -> usize {
        Refusal::ALL.iter().position(|r| r == self).unwrap_or(0)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What this node knows when a message arrives (read from raft-rs by the driver).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Local {
    pub id: NodeId,
    pub term: u64,
    pub role: StateRole,
    /// The leader this node follows in `term` (0: none known).
    pub leader: NodeId,
    /// The last index of this node's log (entries or a pending snapshot).
    pub last_index: u64,
    /// This node's commit index and the term of the entry there.
    pub committed: (u64, u64),
    /// This node has a membership (voters or learners): false while it joins.
    pub has_membership: bool,
    /// raft-rs tracks the sender's progress (it is a member this node knows of).
    pub sender_tracked: bool,
}

impl Local {
    /// What `raft` knows, for a message from `from`.
    pub(crate) fn of<T: raft::Storage>(raft: &raft::Raft<T>, from: NodeId) -> Local {
        Local {
            id: raft.id,
            term: raft.term,
            role: raft.state,
            leader: raft.leader_id,
            last_index: raft.raft_log.last_index(),
            committed: {
                let c = raft.raft_log.committed;
                (c, raft.raft_log.term(c).unwrap_or(0))
            },
            has_membership: raft.prs().iter().len() > 0,
            sender_tracked: raft.prs().get(from).is_some(),
        }
    }
}

/// What to do with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Step it into raft-rs.
    Admit,
    /// Drop it and count it.
    Refuse(Refusal),
    /// Stop the node: what the message says can only be true if this node lost data.
    Fatal(StopCause),
}

/// Judges message `m` against `local`. See the module docs and `docs/design.md`
/// section 7.
pub(crate) fn admit(m: &Message, local: &Local) -> Verdict {
    use MessageType::*;
    let t = m.get_msg_type();
    let refuse = Verdict::Refuse;
    if m.to != local.id {
        return refuse(Refusal::NotForThisNode);
    }
    if !matches!(
        t,
        MsgAppend
            | MsgAppendResponse
            | MsgRequestVote
            | MsgRequestVoteResponse
            | MsgRequestPreVote
            | MsgRequestPreVoteResponse
            | MsgSnapshot
            | MsgHeartbeat
            | MsgHeartbeatResponse
            | MsgTimeoutNow
    ) {
        return refuse(Refusal::NotAPeerMessage);
    }
    if m.from == raft::INVALID_ID || m.from == local.id {
        return refuse(Refusal::BadSender);
    }
    if m.term == 0 || m.term > MAX_TERM {
        return refuse(Refusal::TermOutOfRange);
    }
    let indices = [m.index, m.commit, m.reject_hint, m.request_snapshot];
    if indices.iter().any(|i| *i > MAX_INDEX)
        || m.log_term > m.term
        || m.commit_term > m.term
        || (t != MsgAppend && !m.entries.is_empty())
    {
        return refuse(Refusal::Malformed);
    }
    // One leader per term: in this node's term, only the leader it follows appends,
    // beats and sends snapshots (a leader knows itself, so another "leader" of its own
    // term is refused too). A higher term is a new leader raft-rs will follow.
    let from_leader_msg = matches!(t, MsgAppend | MsgHeartbeat | MsgSnapshot);
    if from_leader_msg
        && m.term == local.term
        && local.leader != raft::INVALID_ID
        && m.from != local.leader
    {
        return refuse(Refusal::NotFromLeader);
    }
    // Handled as from this node's leader: a higher term, or this term at a non-leader.
    let handled_as_leader_msg =
        m.term > local.term || (m.term == local.term && local.role != StateRole::Leader);
    match t {
        MsgAppend => append(m),
        MsgHeartbeat => {
            if handled_as_leader_msg && m.commit > local.last_index {
                // A leader sends a follower at most the index the follower acknowledged
                // in the leader's term (raft-rs: min(matched, committed)). Above this
                // node's log, it acknowledged entries it no longer has.
                return Verdict::Fatal(StopCause::LostAcknowledgedData {
                    leader: m.from,
                    term: m.term,
                    commit: m.commit,
                    last_index: local.last_index,
                });
            }
            Verdict::Admit
        }
        MsgSnapshot => snapshot(m, local.committed),
        MsgAppendResponse | MsgHeartbeatResponse => {
            if !local.sender_tracked {
                return refuse(Refusal::UnknownPeer);
            }
            if m.request_snapshot != 0 || (m.reject && m.reject_hint > m.index) {
                // tenure never requests snapshots; a rejection's hint is at most the
                // index it rejects.
                return refuse(Refusal::Malformed);
            }
            if local.role == StateRole::Leader
                && m.term == local.term
                && (m.commit > local.last_index
                    || (t == MsgAppendResponse && m.index > local.last_index))
            {
                // Everything a follower has in this term came from this leader's log,
                // and what it committed is in every later leader's log (this one's).
                return refuse(Refusal::BeyondLog);
            }
            Verdict::Admit
        }
        MsgRequestVote | MsgRequestPreVote => {
            if !local.has_membership {
                return refuse(Refusal::VoteWithoutMembership);
            }
            // A candidate's last entry: index 0 exactly when its log is empty, its commit
            // at or below it.
            if (m.index == 0) != (m.log_term == 0)
                || m.commit > m.index
                || m.commit_term > m.log_term
            {
                return refuse(Refusal::Malformed);
            }
            Verdict::Admit
        }
        MsgRequestVoteResponse | MsgRequestPreVoteResponse => {
            if !local.sender_tracked {
                return refuse(Refusal::UnknownPeer);
            }
            Verdict::Admit
        }
        MsgTimeoutNow => {
            // Only the leader of this node's current term may ask it to campaign at once
            // (section 4: the forced votes it starts are safe only because that leader
            // revoked its lease first).
            if m.term != local.term || local.leader == raft::INVALID_ID || m.from != local.leader {
                return refuse(Refusal::TimeoutNowNotFromLeader);
            }
            Verdict::Admit
        }
        _ => refuse(Refusal::NotAPeerMessage),
    }
}

/// An append's shape: its entries follow its index one by one, in rising terms from its
/// log term up to its term.
fn append(m: &Message) -> Verdict {
    if (m.index == 0) != (m.log_term == 0) {
        // raft-rs reads the term of an index beyond its log as 0: a log term of 0 at a
        // non-zero index would "match" there and append past the end of the log.
        return Verdict::Refuse(Refusal::Malformed);
    }
    let mut prev_term = m.log_term;
    for (i, e) in m.entries.iter().enumerate() {
        let expected = m.index.checked_add(i as u64 + 1);
        if expected != Some(e.index) || e.index > MAX_INDEX {
            return Verdict::Refuse(Refusal::Malformed);
        }
        if e.term == 0 || e.term < prev_term || e.term > m.term {
            return Verdict::Refuse(Refusal::Malformed);
        }
        prev_term = e.term;
    }
    Verdict::Admit
}

/// A snapshot raft-rs can restore: index and term set, the term not above the message's,
/// not at this node's commit index with another term (raft-rs would replace a committed
/// entry, and the store refuses a snapshot that is not newer than its own), a membership
/// that raft-rs's restore accepts, tenure group state as its data.
fn snapshot(m: &Message, (committed, committed_term): (u64, u64)) -> Verdict {
    let bad = Verdict::Refuse(Refusal::BadSnapshot);
    let meta = m.get_snapshot().get_metadata();
    if meta.index == 0 || meta.index > MAX_INDEX || meta.term == 0 || meta.term > m.term {
        return bad;
    }
    if meta.index == committed && meta.term != committed_term {
        return bad;
    }
    if !restorable(meta.get_conf_state()) {
        return bad;
    }
    if GroupState::from_snapshot(&m.get_snapshot().data).is_err() {
        return bad;
    }
    Verdict::Admit
}

/// Whether raft-rs's `restore` takes this membership without panicking ("unable to
/// restore config", "invalid restore"): voters, no id 0, no id twice in a list, learners
/// apart from both voter sets, staged learners (`learners_next`) only among the outgoing
/// voters and not incoming ones, `auto_leave` only while joint.
pub(crate) fn restorable(cs: &ConfState) -> bool {
    use std::collections::BTreeSet;
    let set = |ids: &[u64]| -> Option<BTreeSet<u64>> {
        let s: BTreeSet<u64> = ids.iter().copied().collect();
        (s.len() == ids.len() && !s.contains(&0)).then_some(s)
    };
    let (Some(voters), Some(learners), Some(outgoing), Some(next)) = (
        set(&cs.voters),
        set(&cs.learners),
        set(&cs.voters_outgoing),
        set(&cs.learners_next),
    ) else {
        return false;
    };
    !voters.is_empty()
        && learners.is_disjoint(&voters)
        && learners.is_disjoint(&outgoing)
        && next.is_subset(&outgoing)
        && next.is_disjoint(&voters)
        && next.is_disjoint(&learners)
        && (!cs.auto_leave || !outgoing.is_empty())
}

/// Rate-limits the warnings about refused messages: at most one per reason per
/// `every`; the driver logs the others at debug level. Time is passed in.
#[derive(Debug)]
pub(crate) struct RefusalLog {
    every: std::time::Duration,
    last: [Option<tokio::time::Instant>; Refusal::ALL.len()],
    suppressed: [u64; Refusal::ALL.len()],
}

impl RefusalLog {
    pub(crate) fn new(every: std::time::Duration) -> RefusalLog {
        RefusalLog {
            every,
            last: [None; Refusal::ALL.len()],
            suppressed: [0; Refusal::ALL.len()],
        }
    }

    /// Notes a refusal at `now`: `Some(n)` when it is to be warned about, `n` being the
    /// refusals of this reason left unwarned since the last warning; `None` otherwise.
    pub(crate) fn note(&mut self, r: Refusal, now: tokio::time::Instant) -> Option<u64> {
        let i = r.index();
        match self.last[i] {
            Some(at) if now.saturating_duration_since(at) < self.every => {
                self.suppressed[i] += 1;
                None
            }
            _ => {
                self.last[i] = Some(now);
                Some(std::mem::take(&mut self.suppressed[i]))
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
            Refusal::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), Refusal::ALL.len());
        for (i, r) in Refusal::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }
}

/// Random messages, one after another, stepped into real raft-rs nodes (a follower, a
/// leader, a pre-candidate, a node that is joining): whatever [`admit`] lets through never
/// makes raft-rs panic, whether it steps the message or handles the Ready after it. And
/// the harness can fail: some of what `admit` refuses does make raft-rs panic.
///
/// `TENURE_PEER_INPUT_ROUNDS=N` (default 4000 sequences of up to four messages) and
/// `TENURE_PEER_INPUT_SEED=S` explore further.
#[cfg(test)]
mod against_raft_rs {
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
                        .unwrap()
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
                        let why = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
                        failures.push(format!("state {state}: {why:?} on {shown}"));
                        break;
                    }
                    // A refused message ends the sequence: a node never sees one, so
                    // what follows it would be judged against a state no node has.
                    (false, r) => {
                        panics_refused += r.is_err() as usize;
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
}
