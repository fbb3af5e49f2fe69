//! Named elections on this node (`docs/design.md`, section 11): each one a raft group of
//! its own, founded and removed when this node applies the root's catalog entries, run by
//! the same driver turn as the root (one synced write for all, see `ready.rs`).
//!
//! | what | where |
//! |---|---|
//! | the table of groups, founding and removal | [`Named`], `Driver::open_election`, `Driver::close_election`; `retire.rs`: `Driver::begin_retire`, `Driver::progress_retirements` |
//! | messages of named elections from peers | `Driver::on_election_message` |
//! | catalog commands (create, remove, list) | `catalog.rs` |
//! | ticks, per-turn duties (leases, transfers, drains, publishing) | `turn.rs`: `Driver::tick_named`, `Driver::named_after_ready` |
//! | suspension and resumption: the catalog's decision, the election's own mark | `suspend.rs` |

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use raft::eraftpb::{ConfChangeV2, ConfState, Entry, EntryType, MessageType, Snapshot};
use raft::prelude::RawNode;
use raft::StateRole;
use slog::{debug, error, info, warn, Logger};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

mod leases;
mod retire;
mod suspend;
mod turn;

pub(super) use suspend::{NamedState, SuspendReply, SuspendWait};

use super::catalog::PendingCatalog;

/// Who waits for a removal.
pub(super) type RemoveReply = oneshot::Sender<Result<Removed, ElectionError>>;
use super::group::{Env, Group, LeaseWaiter};
use super::{Driver, PendingTransfer};
use crate::clock::Stamp;
use crate::election::{term_floor, ElectionError, ElectionId, ElectionOptions, Removed};
use crate::election_rng::{draw, Draw, ElectionTimeouts};
use crate::error::{LostReason, NodeStopped, StopCause, TransferError};
use crate::history::History;
use crate::mutation;
use crate::peer_input::{self, Local, Verdict};
use crate::state::ElectionSpec;
use crate::status::{Leadership, Role};
use crate::storage::{RaftStore, ReadyWrite, StorageError};
use crate::transport::NodeId;

pub(crate) use crate::election::ElectionsView;

/// The watch senders of every named election's leadership, by name, shared with the
/// `Node` handles (so `Node::election(name)` can watch a name this node does not know yet).
pub(crate) type Watches = Arc<Mutex<HashMap<Arc<str>, Arc<watch::Sender<Leadership>>>>>;

/// The sender of `name`'s leadership watch, made if nobody asked for it before.
pub(crate) fn watch_of(watches: &Watches, name: &str) -> Arc<watch::Sender<Leadership>> {
    let mut map = watches
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(w) = map.get(name) {
        return Arc::clone(w);
    }
    let name: Arc<str> = name.into();
    let (tx, _) = watch::channel(Leadership {
        term: 0,
        leader: None,
        role: Role::Follower,
        leased: false,
        election: Some(Arc::clone(&name)),
        suspended: false,
    });
    let tx = Arc::new(tx);
    map.insert(name, Arc::clone(&tx));
    tx
}

/// One named election's group and the state its log builds (its tenure history).
pub(super) struct NamedGroup<S: RaftStore> {
    pub(super) g: Group<S>,
    pub(super) history: History,
    /// The root removed the election: it holds no lease and grants none, its leader
    /// proposes the retirement entry, and it runs until that entry is applied here.
    pub(super) retiring: bool,
    /// The term in which this node, leading, proposed the retirement entry.
    retire_proposed: Option<u64>,
    /// When this node applied the retirement entry (the group closes soon after).
    pub(super) retired_at: Option<Instant>,
    /// The root's catalog suspends the election (`suspend.rs`).
    pub(super) catalog_suspended: bool,
    /// Its own log suspends it (the last mark applied).
    pub(super) log_suspended: bool,
    /// The root index of the catalog's decision (of the entry, or of the root state it
    /// was read from: not below the entry's), and of the one the last mark carried out:
    /// the newer of the two records decides (`suspend.rs`).
    pub(super) catalog_index: u64,
    pub(super) log_index: u64,
    /// The term and decision of the last mark this node, leading, proposed.
    mark_proposed: Option<(u64, bool)>,
}

/// The entry that retires a named election in its own log.
const RETIRE_ENTRY: &[u8] = b"R";

/// The named elections this node runs, and what the driver needs to run them.
pub(super) struct Named<S: RaftStore> {
    pub(super) groups: BTreeMap<ElectionId, NamedGroup<S>>,
    /// Each running election's options (as the catalog had them when it was opened).
    options: HashMap<ElectionId, ElectionOptions>,
    by_name: HashMap<Arc<str>, ElectionId>,
    pub(super) watches: Watches,
    view: watch::Sender<ElectionsView>,
    view_dirty: bool,
    /// Counts the changes of any election's published leadership (the balancer looks
    /// again only after one, or after a while).
    pub(super) changes: u64,
    /// When the view was last published (at most once per heartbeat interval).
    view_at: Option<Instant>,
    /// No named lease ends before this (the earliest end at the last expiry pass, lowered
    /// by every lease granted since; leases only grow otherwise): until then the pass is
    /// skipped.
    pub(super) lease_floor: Option<Stamp>,
    /// When the gauges were last counted over every election.
    pub(super) counted_at: Option<Instant>,
    /// How many elections were not quiet here when the gauges were last counted.
    pub(super) awake: usize,
    /// When the after-Ready pass last visited every awake election, not only the busy
    /// ones (a sweep: what no event marks, such as forgotten rounds, is done there).
    pub(super) swept_at: Option<Instant>,
    /// While this node stands down or stops, whether the after-Ready pass has visited
    /// every election since it began to (then only the busy ones, and every one at each
    /// sweep: a handover that could not start is tried again there).
    pub(super) visited_all: bool,
    /// Ids removed here (tombstoned): never founded again.
    pub(super) removed: BTreeSet<ElectionId>,
    pub(super) pending: Vec<PendingCatalog>,
    /// Removals this node proposed, waiting for the election's retirement to commit:
    /// by id, the caller, its answer, and until when.
    pub(super) removing: BTreeMap<ElectionId, (RemoveReply, Removed, Instant)>,
    /// Elections whose catalog and own log may disagree on their suspension, or whose
    /// suspension a caller here waits for (`suspend.rs`).
    pub(super) unsettled: BTreeSet<ElectionId>,
    /// Suspensions and resumptions this node proposed, waiting for the election's log.
    pub(super) suspending: BTreeMap<ElectionId, Vec<SuspendWait>>,
    pub(super) next_nonce: u64,
    /// Lease requests for names this node does not run (yet).
    waiting: BTreeMap<Arc<str>, Vec<LeaseWaiter>>,
    raft_config: raft::Config,
    raft_logger: Logger,
    election_seed: Option<u64>,
    timeouts_at_minimum: bool,
    /// Elections the configuration declares: the root leader creates those missing.
    pub(super) declared: Vec<(String, ElectionOptions)>,
    pub(super) last_declared_check: Option<Instant>,
    /// Where in `declared` the last look for missing ones stopped.
    pub(super) declared_cursor: usize,
}

/// What `Named` is built from.
pub(crate) struct NamedParts {
    pub(crate) watches: Watches,
    pub(crate) view: watch::Sender<ElectionsView>,
    pub(crate) raft_config: raft::Config,
    pub(crate) raft_logger: Logger,
    pub(crate) election_seed: Option<u64>,
    pub(crate) timeouts_at_minimum: bool,
    pub(crate) declared: Vec<(String, ElectionOptions)>,
}

impl<S: RaftStore> Named<S> {
    pub(super) fn new(parts: NamedParts) -> Self {
        Named {
            groups: BTreeMap::new(),
            options: HashMap::new(),
            by_name: HashMap::new(),
            watches: parts.watches,
            view: parts.view,
            view_dirty: false,
            changes: 0,
            view_at: None,
            lease_floor: None,
            counted_at: None,
            awake: 0,
            swept_at: None,
            visited_all: false,
            removed: BTreeSet::new(),
            pending: Vec::new(),
            removing: BTreeMap::new(),
            unsettled: BTreeSet::new(),
            suspending: BTreeMap::new(),
            // Random, so a restarted proposer's requests never match an entry of its
            // previous run still in the log.
            next_nonce: draw::<u64>(parts.election_seed, Draw::ProposalNonce) >> 1,
            waiting: BTreeMap::new(),
            raft_config: parts.raft_config,
            raft_logger: parts.raft_logger,
            election_seed: parts.election_seed,
            timeouts_at_minimum: parts.timeouts_at_minimum,
            declared: parts.declared,
            last_declared_check: None,
            declared_cursor: 0,
        }
    }

    /// The catalog options of election `id` (from the root's applied state).
    pub(super) fn options_of(&self, id: ElectionId) -> Option<&ElectionOptions> {
        self.options.get(&id)
    }

    /// The group of election `name`, if this node runs it.
    fn by_name_mut(&mut self, name: &str) -> Option<&mut NamedGroup<S>> {
        let id = *self.by_name.get(name)?;
        self.groups.get_mut(&id)
    }
}

impl<S: RaftStore> NamedGroup<S> {
    /// Decodes a snapshot's data (the election's tenure history, its suspension) before
    /// anything is written.
    pub(super) fn decode_snapshot(
        &self,
        snap: &Snapshot,
    ) -> Result<(NamedState, u64), StorageError> {
        let index = snap.get_metadata().index;
        if snap.data.is_empty() {
            return Ok((NamedState::default(), index));
        }
        serde_json::from_slice(&snap.data)
            .map(|h| (h, index))
            .map_err(|e| StorageError::BadSnapshot {
                detail: format!(
                    "the snapshot at index {} of election {:?} (id {}) that node {} sent does not \
                 decode ({e}); nothing was written",
                    snap.get_metadata().index,
                    self.g.name.as_deref().unwrap_or(""),
                    self.g.election,
                    self.g.raw.raft.leader_id
                ),
            })
    }

    /// Pass 3 of a turn for a named election: advance, install, apply.
    pub(super) fn after_write(
        &mut self,
        env: &Env,
        drained: bool,
        taken: super::ready::Taken,
        snapshot: Option<(NamedState, u64)>,
        retention: usize,
    ) {
        let (committed, read_states, applies_to) = self.g.persisted(env, drained, taken);
        if let Some((state, index)) = snapshot {
            self.g.joint = super::joint_config(&self.g.raw);
            self.g.applied = self.g.applied.max(index);
            self.history = state.history;
            self.log_suspended = state.suspended;
            self.log_index = state.mark_index;
            self.follow_suspension(env);
        }
        self.apply(env, committed, retention);
        self.g.on_read_states(env, read_states);
        self.g.applied_to(applies_to);
    }

    fn apply(&mut self, env: &Env, entries: Vec<Entry>, retention: usize) {
        for e in entries {
            self.g.applied = self.g.applied.max(e.index);
            match e.get_entry_type() {
                EntryType::EntryNormal => {
                    if self.apply_mark(env, &e.data, e.term) {
                        // A suspension or a resumption (`suspend.rs`).
                    } else if e.data.as_ref() == RETIRE_ENTRY {
                        if self.retired_at.is_none() {
                            self.retired_at = Some(env.clock.now());
                        }
                    } else if !e.data.is_empty() {
                        self.history
                            .apply_in(&e.data, retention, self.log_suspended);
                    }
                }
                EntryType::EntryConfChange | EntryType::EntryConfChangeV2 => {
                    let cc = if e.get_entry_type() == EntryType::EntryConfChange {
                        protobuf::Message::parse_from_bytes(&e.data).map(
                            |cc: raft::eraftpb::ConfChange| raft_proto::ConfChangeI::into_v2(cc),
                        )
                    } else {
                        protobuf::Message::parse_from_bytes(&e.data)
                    };
                    let cc: ConfChangeV2 = match cc {
                        Ok(cc) => cc,
                        Err(err) => {
                            warn!(env.logger, "undecodable conf change skipped"; "index" => e.index,
                                  "election" => self.g.name.as_deref(), "error" => %err);
                            continue;
                        }
                    };
                    match self.g.raw.apply_conf_change(&cc) {
                        Ok(cs) => {
                            self.g.joint = !cs.voters_outgoing.is_empty();
                            self.g.force_compact = true;
                            let me = self.g.raw.raft.id;
                            let member = [&cs.voters, &cs.voters_outgoing, &cs.learners]
                                .iter()
                                .any(|ids| ids.contains(&me));
                            if !member && self.g.raw.raft.state == StateRole::Leader {
                                // A removal an earlier leader appended, committed under
                                // this one: raft-rs keeps it leading without its own
                                // progress, and panics on the next acknowledgement
                                // (`maybe_commit`). It steps down, as the root does.
                                warn!(env.logger, "removed from the election while leading it: stepping down";
                                      "election" => self.g.name.as_deref(), "index" => e.index);
                                self.g.revoke(env, LostReason::SteppedDown);
                                let term = self.g.raw.raft.term;
                                self.g.become_follower(term, raft::INVALID_ID);
                                self.g.touch(env);
                            }
                        }
                        Err(err) => {
                            warn!(env.logger, "conf change rejected by raft"; "error" => %err,
                                  "election" => self.g.name.as_deref());
                        }
                    }
                }
            }
        }
    }

    /// Keeps the election's log bounded ([`Group::maybe_compact`]), its tenure history
    /// as the snapshot's data.
    pub(super) fn maybe_compact(
        &mut self,
        env: &Env,
        compact_after: u64,
    ) -> Result<(), StorageError> {
        let (history, suspended, at) = (&self.history, self.log_suspended, self.log_index);
        self.g.maybe_compact(env, compact_after, || {
            suspend::snapshot_data(history, suspended, at)
        })
    }
}

impl<S: RaftStore> Driver<S> {
    /// The group of `election` (0: the root) and the node's environment.
    pub(super) fn group_mut(&mut self, election: ElectionId) -> Option<(&mut Group<S>, &Env)> {
        if election == 0 {
            return Some((&mut self.root, &self.env));
        }
        let ng = self.named.groups.get_mut(&election)?;
        Some((&mut ng.g, &self.env))
    }

    /// Runs every election of the catalog restored from the root's snapshot (the log
    /// above it founds and removes the rest as it is replayed).
    pub(super) fn open_catalog(&mut self) {
        if let Err(e) = self.sync_catalog() {
            self.storage_failed(e);
        }
    }

    /// Makes the elections this node runs those of the applied catalog: opens (or
    /// founds) the missing ones, closes (removes) those the catalog lost, as after a
    /// root snapshot that carried the catalog past several creates and removes.
    pub(super) fn sync_catalog(&mut self) -> Result<(), StorageError> {
        let gone: Vec<(String, ElectionId)> = self
            .named
            .groups
            .values()
            .filter(|ng| {
                let name = ng.g.name.as_deref().unwrap_or("");
                self.state.elections.get(name).map(|s| s.id) != Some(ng.g.election)
            })
            .map(|ng| {
                (
                    ng.g.name.as_deref().unwrap_or("").to_string(),
                    ng.g.election,
                )
            })
            .collect();
        for (name, id) in gone {
            self.close_election(&name, id)?;
        }
        // Stores of elections removed while this node was away (the catalog moved past
        // their id and no longer holds it): delete them, tombstone kept.
        let live: BTreeSet<ElectionId> = self.state.elections.values().map(|s| s.id).collect();
        let next = self.state.next_election_id.max(1);
        for id in self.root.store.election_ids()?.live {
            if id < next && !live.contains(&id) {
                info!(self.env.logger, "deleting the store of an election removed meanwhile"; "id" => id);
                self.delete_election_store(id)?;
                self.named.removed.insert(id);
            }
        }
        let specs: Vec<(String, ElectionSpec)> = self
            .state
            .elections
            .iter()
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect();
        for (name, spec) in specs {
            self.open_election(&name, &spec)?;
        }
        // Suspensions the snapshot carried past.
        let applied = self.root.applied;
        for (id, ng) in &mut self.named.groups {
            let suspended = self.state.suspended.contains(id);
            if ng.catalog_suspended != suspended {
                ng.set_catalog_suspended(&self.env, suspended, applied);
                self.named.unsettled.insert(*id);
            }
        }
        Ok(())
    }

    /// Notes the ids this store removed before (their tombstones), at start.
    pub(super) fn load_removed_elections(&mut self) -> Result<(), StorageError> {
        let ids = self.root.store.election_ids()?;
        self.named.removed = ids.removed;
        Ok(())
    }

    /// Runs election `name` (catalog entry `spec`) on this node: opens its store, or
    /// founds it at its term floor if this node has none (section 11, "Founding an
    /// election's group"). A removed id is never founded again.
    pub(super) fn open_election(
        &mut self,
        name: &str,
        spec: &ElectionSpec,
    ) -> Result<(), StorageError> {
        if self.named.groups.contains_key(&spec.id) || self.named.removed.contains(&spec.id) {
            return Ok(());
        }
        let store = match self.root.store.election(spec.id)? {
            Some(s) => s,
            None => {
                let me = self.env.id;
                if spec.voters.contains(&me) || spec.learners.contains(&me) {
                    let cs = ConfState {
                        voters: spec.voters.clone(),
                        learners: spec.learners.clone(),
                        ..Default::default()
                    };
                    let data = serde_json::to_vec(&History::default()).unwrap_or_default();
                    let (id, floor) = (spec.id, spec.floor.unwrap_or(term_floor(spec.id)));
                    self.env.writer.store_write(
                        &self.root.store,
                        true,
                        || format!("founding election {id}'s store"),
                        move |s| s.found_election(id, floor, cs, data),
                    )?
                } else {
                    // Not among its first members (a node that joined later): a store with
                    // no membership, as a joiner's (section 6); a member's snapshot brings it.
                    let id = spec.id;
                    self.env.writer.store_write(
                        &self.root.store,
                        true,
                        || format!("creating election {id}'s store to join it"),
                        move |s| s.join_election(id, ConfState::default()),
                    )?
                }
            }
        };
        let snap = raft::Storage::snapshot(&store, 0, 0).map_err(|e| StorageError::Corrupt {
            path: std::path::PathBuf::new(),
            detail: format!("election {name:?} (id {}): {e}", spec.id),
        })?;
        let applied = snap.get_metadata().index;
        let state: NamedState = if snap.data.is_empty() {
            NamedState::default()
        } else {
            serde_json::from_slice(&snap.data).map_err(|e| StorageError::Corrupt {
                path: std::path::PathBuf::new(),
                detail: format!("election {name:?} (id {}): snapshot data: {e}", spec.id),
            })?
        };
        let mut cfg = self.named.raft_config.clone();
        cfg.id = self.env.id;
        let logger = self
            .named
            .raft_logger
            .new(slog::o!("election" => name.to_string()));
        let raw = match RawNode::new(&cfg, crate::storage::Staged::new(store.clone()), &logger) {
            Ok(raw) => raw,
            Err(e) => {
                return Err(StorageError::Corrupt {
                    path: std::path::PathBuf::new(),
                    detail: format!("election {name:?} (id {}) does not start: {e}", spec.id),
                })
            }
        };
        let t = self.env.timing;
        let seed_mix = u64::from(spec.id).wrapping_mul(0x2545_f491_4f6c_dd1d);
        let timeouts = if self.named.timeouts_at_minimum {
            Some(ElectionTimeouts::new(
                seed_mix,
                self.env.id,
                t.election_ticks,
                t.election_ticks,
            ))
        } else {
            self.named.election_seed.map(|seed| {
                ElectionTimeouts::new(
                    seed ^ seed_mix,
                    self.env.id,
                    t.election_ticks,
                    t.election_ticks_max,
                )
            })
        };
        let name: Arc<str> = name.into();
        let watch = watch_of(&self.named.watches, &name);
        let group = Group::new(
            spec.id,
            Some(Arc::clone(&name)),
            raw,
            store,
            applied,
            watch,
            &t,
            timeouts,
            self.env.clock.now(),
        );
        info!(self.env.logger, "election running"; "election" => &*name, "id" => spec.id,
              "term" => group.raw.raft.term);
        self.env.hot.borrow_mut().insert(spec.id);
        self.env.busy.borrow_mut().insert(spec.id);
        self.named.by_name.insert(Arc::clone(&name), spec.id);
        self.named.options.insert(spec.id, spec.options.clone());
        self.named.groups.insert(
            spec.id,
            NamedGroup {
                g: group,
                history: state.history,
                retiring: false,
                retire_proposed: None,
                retired_at: None,
                catalog_suspended: false,
                log_suspended: state.suspended,
                catalog_index: 0,
                log_index: state.mark_index,
                mark_proposed: None,
            },
        );
        let applied = self.root.applied;
        if let Some(ng) = self.named.groups.get_mut(&spec.id) {
            // (Also follows the log's record, read from the snapshot above.)
            let suspended = self.state.suspended.contains(&spec.id);
            ng.set_catalog_suspended(&self.env, suspended, applied);
            if ng.catalog_suspended != ng.log_suspended {
                self.named.unsettled.insert(spec.id);
            }
        }
        self.named.view_dirty = true;
        self.named.changes += 1;
        // Lease requests that waited for this name.
        let now_known = self.named.waiting.remove(&name).unwrap_or_default();
        if let Some(ng) = self.named.groups.get_mut(&spec.id) {
            ng.g.lease_waiters.extend(now_known);
        }
        Ok(())
    }

    /// Stops election `id` on this node: its lease is revoked before anything else, its
    /// waiters are told, its group dropped and its data deleted with a tombstone
    /// (section 11, "Removal").
    pub(super) fn close_election(
        &mut self,
        name: &str,
        id: ElectionId,
    ) -> Result<(), StorageError> {
        self.support_forget(id);
        self.env.hot.borrow_mut().remove(&id);
        self.env.busy.borrow_mut().remove(&id);
        if let Some(mut ng) = self.named.groups.remove(&id) {
            ng.g.end_for_users(&self.env, LostReason::Removed, name);
            // (A retiring group said so already; and a newer incarnation of the name
            // may own the name's watch by now.)
            let newer = self
                .named
                .by_name
                .get(name)
                .is_some_and(|other| *other != id);
            if !ng.retiring && !newer {
                ng.g.publish_stopped();
            }
            info!(self.env.logger, "election removed"; "election" => name, "id" => id);
        }
        if self.named.by_name.get(name) == Some(&id) {
            self.named.by_name.remove(name);
        }
        self.named.options.remove(&id);
        self.named.removed.insert(id);
        self.named.view_dirty = true;
        self.named.changes += 1;
        self.delete_election_store(id)
    }

    /// Deletes election `id`'s store, its tombstone kept (synced).
    fn delete_election_store(&mut self, id: ElectionId) -> Result<(), StorageError> {
        self.drop_held(id);
        self.env.writer.store_write(
            &self.root.store,
            true,
            || format!("deleting the store of removed election {id}"),
            move |s| s.remove_election(id),
        )
    }

    /// A message of a named election from a peer: judged against that election's group,
    /// then stepped. An id this node does not run is counted and dropped.
    pub(super) fn on_election_message(&mut self, election: ElectionId, m: raft::eraftpb::Message) {
        if self.quiet_ignores(election, &m) {
            self.env.metrics.prevote_ignored_quiet();
            return;
        }
        if mutation::active("wake-before-judging") {
            self.wake_for_message(election, &m);
        }
        let Some(ng) = self.named.groups.get_mut(&election) else {
            let removed = self.named.removed.contains(&election)
                || election < self.state.next_election_id.max(1);
            self.env.metrics.election_message_dropped(removed);
            debug!(self.env.logger, "message of an election this node does not run dropped";
                   "election_id" => election, "from" => m.from, "removed" => removed);
            return;
        };
        let mut local = Local::of(&ng.g.raw.raft, m.from);
        local.election = election;
        match peer_input::admit(&m, &local) {
            Verdict::Admit => {}
            Verdict::Refuse(r) => {
                self.refused(r, &m);
                return;
            }
            Verdict::Fatal(cause) => {
                error!(self.env.logger, "stopping: this node lost entries it had acknowledged";
                       "election_id" => election, "from" => m.from, "detail" => %cause);
                self.fail(cause);
                return;
            }
        }
        // Judged before it wakes anything (section 12, "Judged before waking"): a message
        // a correct peer never sends leaves a quiet election quiet.
        if !mutation::active("wake-before-judging") {
            self.wake_for_message(election, &m);
        }
        let Some(ng) = self.named.groups.get_mut(&election) else {
            return;
        };
        self.last_heard.insert(m.from, self.env.clock.now());
        let t = m.get_msg_type();
        if t == MessageType::MsgTimeoutNow
            && (self.state.is_drained(self.env.id) || self.env.disk_stalled())
        {
            debug!(self.env.logger, "drained or disk stalled: refused to take over an election";
                   "election_id" => election);
            self.env.metrics.takeover_refused();
            return;
        }
        if t == MessageType::MsgTimeoutNow {
            ng.g.handover_term = Some(ng.g.raw.raft.term + 1);
            // An election handed over (by a balancer or an operator) waits out the
            // cooldown here too before it moves on (section 11, "Moves").
            self.spread.handed_here(election, self.env.clock.now());
        }
        let handover_vote =
            t == MessageType::MsgRequestVote && m.context.as_ref() == raft::CAMPAIGN_TRANSFER;
        if matches!(
            t,
            MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
        ) && !handover_vote
            && self.env.clock.now() < self.quiet_until
        {
            return;
        }
        if matches!(
            t,
            MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
        ) && !handover_vote
            && ng.g.refuse_until.is_some_and(|u| self.env.clock.now() < u)
        {
            // The promise made on the support stream (section 12).
            debug!(self.env.logger, "vote refused: supporting the leader";
                   "election_id" => election, "from" => m.from, "type" => ?t);
            return;
        }
        ng.g.touch(&self.env);
        if let Err(e) = ng.g.raw.step(m) {
            debug!(self.env.logger, "raft rejected a message"; "error" => %e, "election_id" => election);
        }
    }

    /// Hands election `name` over.
    pub(super) fn election_transfer(
        &mut self,
        name: &str,
        to: Option<NodeId>,
        reply: oneshot::Sender<Result<NodeId, TransferError>>,
    ) {
        if self.shutdown.is_some() {
            let _ = reply.send(Err(TransferError::Stopped(NodeStopped::shutdown(
                "shutting down",
            ))));
            return;
        }
        let env = &self.env;
        let drained = &self.state.drained;
        let Some(ng) = self.named.by_name_mut(name) else {
            let _ = reply.send(Err(TransferError::NotLeader { leader_hint: None }));
            return;
        };
        match ng.g.start_transfer(env, to, drained) {
            Ok(target) => {
                ng.g.transfer = Some(PendingTransfer {
                    to: target,
                    deadline: env.clock.now() + env.timing.election_timeout() * 2,
                    reply: Some(reply),
                });
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// Election `name`'s replicated history.
    pub(super) fn election_history(
        &self,
        name: &str,
    ) -> Result<Vec<crate::history::TenureRecord>, ElectionError> {
        let id = self
            .named
            .by_name
            .get(name)
            .ok_or_else(|| ElectionError::NotFound(name.into()))?;
        let ng = self
            .named
            .groups
            .get(id)
            .ok_or_else(|| ElectionError::NotFound(name.into()))?;
        Ok(ng.history.records())
    }

    /// Ends every named election on this node as it stops.
    pub(super) fn finish_named(&mut self, reason: LostReason) {
        for ng in self.named.groups.values_mut() {
            let name = ng.g.name.as_deref().unwrap_or("").to_string();
            ng.g.end_for_users(&self.env, reason, &name);
            ng.g.publish_stopped();
        }
        for w in std::mem::take(&mut self.named.waiting)
            .into_values()
            .flatten()
        {
            let _ = w.send(Err(ElectionError::Stopped(NodeStopped::shutdown(
                "node stopped",
            ))));
        }
        for (r, _, _) in std::mem::take(&mut self.named.removing).into_values() {
            let _ = r.send(Err(ElectionError::Stopped(NodeStopped::shutdown(
                "node stopped",
            ))));
        }
        for p in self.named.pending.drain(..) {
            p.reply.fail(ElectionError::Stopped(NodeStopped::shutdown(
                "node stopped",
            )));
        }
        for w in std::mem::take(&mut self.named.suspending)
            .into_values()
            .flatten()
        {
            w.stopped();
        }
        self.named.groups.clear();
        let _ = StopCause::TransportClosed; // (the stop cause is the root's)
        let _ = ReadyWrite::default();
    }
}

impl<S: RaftStore> Group<S> {
    /// Ends everything users hold of this election on this node: its lease (`reason`),
    /// the confirms and lease requests waiting, and a transfer in flight (`name`: the
    /// election's, for the errors).
    pub(super) fn end_for_users(&mut self, env: &Env, reason: LostReason, name: &str) {
        self.revoke(env, reason);
        self.keeper.finish(reason);
        let (waiters, why) = if reason == LostReason::Removed {
            (
                ElectionError::Removed(name.into()),
                "the election was removed",
            )
        } else {
            (
                ElectionError::Stopped(NodeStopped::shutdown("node stopped")),
                "node stopped",
            )
        };
        for w in self.lease_waiters.drain(..) {
            let _ = w.send(Err(waiters.clone()));
        }
        if let Some(t) = self.transfer.take() {
            if let Some(reply) = t.reply {
                let _ = reply.send(Err(TransferError::Stopped(NodeStopped::shutdown(why))));
            }
        }
    }

    /// Tells this election's watchers it stopped on this node (no leader, no lease).
    pub(super) fn publish_stopped(&mut self) {
        let mut last = self.last_published.clone();
        last.role = Role::Stopped;
        last.leased = false;
        last.leader = None;
        self.last_published = last.clone();
        self.leadership.send_replace(last);
    }

    /// Publishes a named election's leadership if it changed; true if it did.
    pub(super) fn publish_named(&mut self, env: &Env) -> bool {
        let raft = &self.raw.raft;
        let now = Leadership {
            term: raft.term,
            leader: (raft.leader_id != 0).then_some(raft.leader_id),
            role: self.role(env),
            leased: self.lease.is_some(),
            election: self.name.clone(),
            suspended: self.suspended,
        };
        if now == self.last_published {
            return false;
        }
        let t = env.clock.now();
        match (now.leader, self.leaderless_since) {
            (None, None) => self.leaderless_since = Some(t),
            (Some(_), Some(_)) => self.leaderless_since = None,
            _ => {}
        }
        self.last_published = now.clone();
        self.leadership.send_replace(now);
        true
    }
}
