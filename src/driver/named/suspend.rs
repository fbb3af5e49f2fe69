//! Suspending and resuming a named election (`docs/design.md`, section 11, "Suspending an
//! election"): leases stop, Raft does not.
//!
//! The operator's call is a root catalog entry (`P`, [`GroupState::suspend_entry`]); every
//! node that applies it stops granting, renewing and holding the election's lease at once.
//! Then the election's leader writes the same decision into the election's own log (a
//! mark, [`SUSPEND_MARK`] or [`RESUME_MARK`]), and the caller is answered once that mark is
//! applied here: a later leader of the election has the mark in its log, applied before
//! its first lease, whether or not it has applied the root's entry yet. A lease needs
//! both to say "resumed". A resume mark applied in term `t` allows no lease in `t` or
//! before (`Group::lease_after`): the leader steps into `t + 1`, so the first token after
//! a suspension is above every earlier one.
//!
//! [`GroupState::suspend_entry`]: crate::state::GroupState::suspend_entry

use serde::{Deserialize, Serialize};
use slog::{debug, info};
use tokio::sync::oneshot;
use tokio::time::Instant;

use raft::StateRole;

use super::super::catalog::{CatalogReply, PendingCatalog};
use super::super::group::Env;
use super::super::support::Wake;
use super::super::Driver;
use super::NamedGroup;
use crate::election::{ElectionError, ElectionId, ElectionInfo};
use crate::error::LostReason;
use crate::history::History;
use crate::state::GroupState;
use crate::storage::RaftStore;

/// The mark that suspends a named election in its own log: these two bytes, then the
/// root index of the catalog entry it carries out (8 bytes, big endian).
pub(super) const SUSPEND_MARK: &[u8] = b"S1";
/// The mark that resumes it (the same layout).
pub(super) const RESUME_MARK: &[u8] = b"S0";

/// The mark that writes the catalog's decision (`suspended`, at root index `index`).
fn mark(suspended: bool, index: u64) -> Vec<u8> {
    let mut m = if suspended { SUSPEND_MARK } else { RESUME_MARK }.to_vec();
    m.extend_from_slice(&index.to_be_bytes());
    m
}

/// A mark's decision and root index, if `data` is one.
fn read_mark(data: &[u8]) -> Option<(bool, u64)> {
    let (head, index) = data.split_at_checked(2)?;
    let suspended = match head {
        SUSPEND_MARK => true,
        RESUME_MARK => false,
        _ => return None,
    };
    Some((suspended, u64::from_be_bytes(index.try_into().ok()?)))
}

/// Who waits for a suspension or a resumption.
pub(in crate::driver) type SuspendReply = oneshot::Sender<Result<ElectionInfo, ElectionError>>;

/// A caller waiting for its election's own log to carry the decision.
pub(in crate::driver) struct SuspendWait {
    reply: SuspendReply,
    suspended: bool,
    deadline: Instant,
}

impl SuspendWait {
    /// The node stopped before the election's log carried the decision.
    pub(in crate::driver) fn stopped(self) {
        let e = crate::error::NodeStopped::shutdown("node stopped");
        let _ = self.reply.send(Err(ElectionError::Stopped(e)));
    }
}

/// A named election's snapshot data: its tenure history, and whether its own log
/// suspended it (written only when it did, so a snapshot of an election never suspended
/// is what it was before suspensions existed). Its key, `log_suspended`, is not one of
/// the root's group state: every snapshot's data must read as a group state
/// (`peer_input`), where `suspended` is the set of suspended ids.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(in crate::driver) struct NamedState {
    #[serde(flatten)]
    pub(in crate::driver) history: History,
    #[serde(
        default,
        rename = "log_suspended",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub(in crate::driver) suspended: bool,
    /// The root index the last mark carried out.
    #[serde(default, rename = "log_mark_index", skip_serializing_if = "is_zero")]
    pub(in crate::driver) mark_index: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// [`NamedState`] to write, borrowing the history.
#[derive(Serialize)]
struct NamedStateRef<'a> {
    #[serde(flatten)]
    history: &'a History,
    #[serde(rename = "log_suspended", skip_serializing_if = "std::ops::Not::not")]
    suspended: bool,
    #[serde(rename = "log_mark_index", skip_serializing_if = "is_zero")]
    mark_index: u64,
}

/// A named election's snapshot data: `history`, whether its log suspended it and the
/// root index of the last mark.
pub(super) fn snapshot_data(history: &History, suspended: bool, mark_index: u64) -> Vec<u8> {
    let state = NamedStateRef {
        history,
        suspended,
        mark_index,
    };
    serde_json::to_vec(&state).unwrap_or_default()
}

impl<S: RaftStore> NamedGroup<S> {
    /// The root's catalog says the election is suspended (or not), as of root index
    /// `index` (the entry's, or a later one).
    pub(super) fn set_catalog_suspended(&mut self, env: &Env, suspended: bool, index: u64) {
        self.catalog_suspended = suspended;
        self.catalog_index = index;
        self.follow_suspension(env);
    }

    /// Whether the catalog's record is not older than the log's: then the log must
    /// carry it (a mark is due if they differ). An older one is stale: this node's root
    /// log lags behind a decision the election's log carries out already.
    pub(super) fn catalog_current(&self) -> bool {
        self.catalog_index >= self.log_index
    }

    /// Applies a mark of the election's own log at `term`; false if `data` is not one.
    pub(super) fn apply_mark(&mut self, env: &Env, data: &[u8], term: u64) -> bool {
        let Some((suspended, index)) = read_mark(data) else {
            return false;
        };
        self.log_suspended = suspended;
        self.log_index = self.log_index.max(index);
        if suspended {
            self.history.mark_suspended();
        } else {
            self.g.lease_after = self.g.lease_after.max(term);
        }
        self.follow_suspension(env);
        true
    }

    /// The lease follows the two records of the decision: none while the log says
    /// suspended, or the catalog does and is not older than the log; one held is
    /// revoked at once.
    pub(super) fn follow_suspension(&mut self, env: &Env) {
        let suspended = self.log_suspended || (self.catalog_suspended && self.catalog_current());
        if suspended == self.g.suspended {
            return;
        }
        self.g.suspended = suspended;
        if suspended {
            self.g.revoke(env, LostReason::Suspended);
        }
        let (name, term) = (self.g.name.as_deref(), self.g.raw.raft.term);
        if suspended {
            info!(env.logger, "election suspended"; "election" => name, "term" => term);
        } else {
            info!(env.logger, "election resumed"; "election" => name, "term" => term);
        }
        self.g.touch(env);
    }
}

impl<S: RaftStore> Driver<S> {
    /// Proposes the suspension (`suspended`) or resumption of election `name` (root
    /// leader only); the caller is answered once the election's own log carries it.
    pub(in crate::driver) fn suspend_election(
        &mut self,
        name: &str,
        suspended: bool,
        reply: SuspendReply,
    ) {
        let Some(spec) = self.state.elections.get(name) else {
            let _ = reply.send(Err(ElectionError::NotFound(name.into())));
            return;
        };
        let id = spec.id;
        let req = self.next_request();
        let data = GroupState::suspend_entry(name, id, suspended, req);
        self.propose_catalog(data, req.nonce, CatalogReply::Suspend(reply));
    }

    /// The root applied the suspension (or resumption) of election `id`: its lease stops
    /// here at once, its leader writes the mark, and the caller (if it is here) waits for
    /// the mark.
    pub(in crate::driver) fn suspension_applied(
        &mut self,
        id: ElectionId,
        suspended: bool,
        index: u64,
        waiting: Option<PendingCatalog>,
    ) {
        self.wake_leader(id, Wake::Activity);
        if let Some(ng) = self.named.groups.get_mut(&id) {
            ng.set_catalog_suspended(&self.env, suspended, index);
        }
        self.named.unsettled.insert(id);
        if let Some(PendingCatalog {
            reply: CatalogReply::Suspend(reply),
            ..
        }) = waiting
        {
            let deadline = self.env.clock.now() + self.env.timing.election_timeout() * 10;
            self.named
                .suspending
                .entry(id)
                .or_default()
                .push(SuspendWait {
                    reply,
                    suspended,
                    deadline,
                });
        }
    }

    /// Elections whose catalog and own log disagree: their leader here writes the
    /// catalog's decision into the log (once per term and decision); callers are
    /// answered once the log carries what they asked, or after their deadline.
    pub(super) fn progress_suspensions(&mut self, now: Instant) {
        if self.named.unsettled.is_empty() {
            return;
        }
        let ids: Vec<ElectionId> = self.named.unsettled.iter().copied().collect();
        for id in ids {
            let Some(ng) = self.named.groups.get_mut(&id) else {
                self.named.unsettled.remove(&id);
                self.answer_suspensions(id, None, now);
                continue;
            };
            let (want, has) = (ng.catalog_suspended, ng.log_suspended);
            let current = ng.catalog_current();
            let raft = &ng.g.raw.raft;
            if want != has
                && current
                && raft.state == StateRole::Leader
                && ng.mark_proposed != Some((raft.term, want))
            {
                let term = raft.term;
                let mark = mark(want, ng.catalog_index);
                ng.g.touch(&self.env);
                match ng.g.raw.propose(vec![], mark) {
                    Ok(()) => ng.mark_proposed = Some((term, want)),
                    Err(e) => debug!(self.env.logger, "suspension mark not proposed yet";
                                     "election" => ng.g.name.as_deref(), "error" => %e),
                }
            }
            // (A stale catalog is not this node's to settle: the root's newer entry, once
            // applied here, brings the election back.)
            let settled = want == has || !current;
            self.answer_suspensions(id, Some(has), now);
            if settled && !self.named.suspending.contains_key(&id) {
                self.named.unsettled.remove(&id);
            }
        }
    }

    /// Answers the callers waiting on election `id` whose decision its log carries
    /// (`has`: what it carries; `None`: the election does not run here), and those whose
    /// deadline passed.
    fn answer_suspensions(&mut self, id: ElectionId, has: Option<bool>, now: Instant) {
        let Some(waits) = self.named.suspending.remove(&id) else {
            return;
        };
        let ms = self.env.timing.election_timeout().as_millis() as u64 * 10;
        let mut left = Vec::new();
        for w in waits {
            if has.is_none_or(|h| h == w.suspended) {
                let info = self.info_of(id);
                let _ = w
                    .reply
                    .send(info.ok_or_else(|| ElectionError::Removed(format!("election id {id}"))));
            } else if now >= w.deadline {
                let _ = w.reply.send(Err(ElectionError::TimedOut(ms)));
            } else {
                left.push(w);
            }
        }
        if !left.is_empty() {
            self.named.suspending.insert(id, left);
        }
    }

    /// Election `id` as the catalog holds it.
    fn info_of(&self, id: ElectionId) -> Option<ElectionInfo> {
        let (name, spec) = self.state.elections.iter().find(|(_, s)| s.id == id)?;
        Some(self.election_info(name, spec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suspended_elections_snapshot_reads_back_and_as_a_group_state() {
        let data = snapshot_data(&History::default(), true, 1 << 40);
        let back: NamedState = serde_json::from_slice(&data).unwrap();
        assert!(back.suspended);
        assert_eq!(back.mark_index, 1 << 40);
        // Every snapshot a peer sends is judged as a group state first (`peer_input`).
        assert!(crate::state::GroupState::from_snapshot(&data).is_ok());
        // Never suspended: what it was before suspensions existed.
        let plain = snapshot_data(&History::default(), false, 0);
        assert_eq!(plain, serde_json::to_vec(&History::default()).unwrap());
        let back: NamedState = serde_json::from_slice(&plain).unwrap();
        assert!(!back.suspended);
    }

    #[test]
    fn marks_carry_the_root_index_of_their_decision() {
        assert_eq!(read_mark(&mark(true, 7)), Some((true, 7)));
        assert_eq!(read_mark(&mark(false, u64::MAX)), Some((false, u64::MAX)));
        assert_eq!(read_mark(b"S1"), None);
        assert_eq!(read_mark(b"R"), None);
        assert_eq!(read_mark(b"S1\0\0\0\0\0\0\0"), None);
    }
}
