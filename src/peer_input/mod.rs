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
//!
//! The rules are all here; `tests.rs` tries each rule case by case, and
//! `against_raft_rs.rs` steps random message sequences into real raft-rs nodes (nothing
//! admitted makes raft-rs panic).

use raft::eraftpb::{ConfState, Message, MessageType};
use raft::StateRole;

use crate::error::StopCause;
use crate::state::GroupState;
use crate::transport::NodeId;

/// The root election's terms above this are refused: 2^40 elections take centuries even
/// at one per 10 ms, raft-rs adds to terms without overflow checks, and the terms above
/// belong to the named elections (election `i` uses `[i × 2^40, (i + 1) × 2^40)`,
/// [`crate::election::term_range`]; a message of election `i` outside its range is
/// refused the same way).
pub const MAX_TERM: u64 = (1 << crate::election::TERM_BITS) - 1;

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
    /// The election the message belongs to (0: the root): its terms' range.
    pub election: crate::election::ElectionId,
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
            election: crate::election::election_of_term(raft.term),
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
    if !crate::election::term_range(local.election).contains(&m.term) {
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
mod tests;

#[cfg(test)]
mod against_raft_rs;
