//! The Ready loop's one entrance: [`Driver::handle_ready`] persists, sends and applies
//! each raft-rs `Ready` in the order raft-rs 0.7 requires (`docs/design.md`, section 5:
//! persist before send), and keeps the log bounded.

use std::collections::HashMap;

use raft::eraftpb::{ConfChange, ConfChangeV2, Entry, EntryType, Message, MessageType};
use slog::{debug, error, info, warn};

use super::group::{Env, Group};
use super::{joint_config, Driver};
use crate::election::ElectionId;
use crate::error::{StopCause, StorageError};
use crate::mutation;
use crate::state::{Applied, CatalogChange, GroupState};
use crate::storage::{RaftStore, ReadyWrite};

impl<S: RaftStore> Driver<S> {
    /// One pass over raft-rs's Ready ([`Driver::ready_pass`]); a storage error or a panic
    /// stops the driver.
    pub(super) fn handle_ready(&mut self) {
        let r = self.guarded(|| "handling a Ready".into(), super::Driver::ready_pass);
        self.stop_on_error(r);
    }

    /// The writer reported a batch ([`Driver::batch_done`]); a storage error or a panic
    /// stops the driver.
    pub(super) fn on_batch_done(&mut self, done: super::writer::Done) {
        let r = self.guarded(|| "completing a Ready".into(), |d| d.batch_done(done));
        self.stop_on_error(r);
    }

    /// A Ready's storage error stops the node (a panic already did).
    fn stop_on_error(&mut self, r: Option<Result<(), StorageError>>) {
        match r {
            Some(Err(StorageError::LostData { detail })) => {
                error!(self.env.logger, "this node lost its data; stopping"; "detail" => &detail);
                self.fail(StopCause::LostData { detail });
            }
            Some(Err(e)) => self.storage_failed(e),
            _ => {}
        }
    }

    /// The store failed: the node stops. A write that failed with an I/O error (the
    /// writer latched it) stops it with [`StopCause::WriteFailed`], naming the write;
    /// anything else with [`StopCause::Storage`].
    pub(super) fn storage_failed(&mut self, e: StorageError) {
        match self.env.writer.failure() {
            Some((operation, error)) => {
                error!(self.env.logger, "a store write failed; stopping for good (a failed write is never retried)";
                       "operation" => &operation, "error" => %error);
                self.fail(StopCause::WriteFailed { operation, error });
            }
            None => {
                error!(self.env.logger, "storage failed; stopping"; "error" => %e);
                self.fail(StopCause::Storage(e));
            }
        }
    }

    /// One pass over every group's Ready, raft-rs's asynchronous Ready
    /// (`docs/design.md`, section 15): each group's Ready is taken (a leader's messages
    /// leave), what it persists is staged where raft-rs reads (`Staged`) and raft-rs
    /// advances at once; the pass's one batch (every group's part, one synced write) goes
    /// to the writer, and the driver goes on. The rest of the pass
    /// ([`Driver::complete_pass`]: the messages that promise what the batch holds, what
    /// was committed) waits for the batch, and for every batch before it.
    pub(super) fn ready_pass(&mut self) -> Result<(), StorageError> {
        let drained = self.state.is_drained(self.env.id);
        let seq = self.batches + 1;
        let mut parts = Vec::new();
        let root = match self.root.take_ready(&self.env, drained) {
            Some((rd, write)) => {
                let snapshot_state = match &write.snapshot {
                    Some(snap) => Some(self.check_root_snapshot(snap)?),
                    None => None,
                };
                let taken = self.root.stage(seq, rd, &write);
                if !write.is_empty() {
                    parts.push((None, self.root.store.clone(), write));
                }
                Some((taken, snapshot_state))
            }
            None => None,
        };
        let mut named = Vec::new();
        // Only the elections something happened to (`Env::busy`): nothing else can have
        // a Ready (a sweep of the after-Ready pass catches any that slipped by).
        let busy: Vec<_> = self.env.busy.borrow().iter().copied().collect();
        for id in busy {
            let Some(ng) = self.named.groups.get_mut(&id) else {
                continue;
            };
            if let Some((rd, write)) = ng.g.take_ready(&self.env, drained) {
                let history = match &write.snapshot {
                    Some(snap) => Some(ng.decode_snapshot(snap)?),
                    None => None,
                };
                let taken = ng.g.stage(seq, rd, &write);
                if !write.is_empty() {
                    parts.push((Some(id), ng.g.store.clone(), write));
                }
                named.push((id, taken, history));
            }
        }
        if root.is_none() && named.is_empty() {
            return Ok(());
        }
        self.batches = seq;
        let writes = !parts.is_empty();
        // Handed over now when no batch is out; else held, merged with what the passes
        // before it held, and handed over when the batch out is durable: one batch on
        // the disk at a time, as when the driver waited for each, so that a busy turn
        // does not queue a synced write per pass behind a slow one.
        let handed = writes && self.env.writer.outstanding() == 0;
        if writes {
            if !handed {
                self.env.metrics.pass_held();
            }
            let held = self.held.get_or_insert_with(Held::default);
            for (id, store, write) in parts {
                held.add(id, store, write);
            }
            held.seq = seq;
            if handed {
                self.hand_over_held()?;
            }
        }
        let pass = Pass {
            seq,
            writes,
            root,
            named,
        };
        if writes && mutation::active("driver-waits-for-the-disk") {
            // Broken on purpose (mutation testing): the driver waits for its batch, as it
            // did before, and a stall is named only once the batch is back.
            self.passes.push_back(pass);
            while self.env.writer.outstanding() > 0 {
                let Some(done) = super::writer::wait_on(&self.done.rx, None) else {
                    break;
                };
                self.batch_done(done)?;
            }
            return Ok(());
        }
        let wait = self.env.writer.wait_for_batch();
        if handed && !wait.is_zero() {
            // A healthy disk answers within the hand-off time, and a busy one within half
            // the stall bound (waited for off the runtime, as the writer's other writes
            // are): this pass completes now.
            if let Some(done) = super::writer::wait_on(&self.done.rx, Some(wait)) {
                self.passes.push_back(pass);
                return self.batch_done(done);
            }
        }
        if !writes && self.passes.is_empty() {
            // Nothing to wait for.
            self.complete_pass(pass)
        } else {
            self.passes.push_back(pass);
            Ok(())
        }
    }

    /// The writer reported a batch: it failed (the node stops) or is durable, and every
    /// pass that waited for it (or for nothing but the batches before it) completes.
    /// What the passes made meanwhile held is the next batch.
    pub(super) fn batch_done(&mut self, done: super::writer::Done) -> Result<(), StorageError> {
        let seq = done.seq;
        self.env.writer.completed(done)?;
        while let Some(front) = self.passes.front() {
            if front.seq > seq && front.writes {
                break;
            }
            let Some(pass) = self.passes.pop_front() else {
                break;
            };
            self.complete_pass(pass)?;
        }
        if self.env.writer.outstanding() == 0 {
            self.hand_over_held()?;
        }
        Ok(())
    }

    /// Hands the held writes to the writer as one batch, numbered by the last pass they
    /// hold.
    fn hand_over_held(&mut self) -> Result<(), StorageError> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        let groups = held.parts.len();
        self.env.metrics.turn_write(groups);
        let parts: Vec<_> = held.parts.into_iter().map(|(_, s, w)| (s, w)).collect();
        self.env.writer.submit(
            &self.root.store,
            held.seq,
            format!("writing one turn's Ready ({groups} groups)"),
            move |_| S::write_all(parts),
        )
    }

    /// Election `id`'s store is deleted: a write held for it has nowhere to go (the
    /// election's passes complete without it, as a removed election's do).
    pub(super) fn drop_held(&mut self, id: ElectionId) {
        if let Some(held) = &mut self.held {
            // Its passes still wait for a batch numbered as theirs (if nothing else is
            // left, an empty one).
            held.remove(Some(id));
        }
    }

    /// The rest of a pass once its batch is durable: each group hears it, sends what it
    /// promised and applies what it committed.
    fn complete_pass(&mut self, pass: Pass) -> Result<(), StorageError> {
        let drained = self.state.is_drained(self.env.id);
        if let Some((taken, snapshot_state)) = pass.root {
            self.root_after_write(taken, snapshot_state)?;
        }
        let mut quiet = Vec::new();
        for (id, taken, history) in pass.named {
            // An election removed meanwhile has nothing left to say.
            if let Some(ng) = self.named.groups.get_mut(&id) {
                ng.after_write(&self.env, drained, taken, history, self.history_retention);
                ng.maybe_compact(&self.env, self.compact_after)?;
                // What it applied is looked at in this turn (leases, publishing).
                ng.g.touch(&self.env);
                if ng.g.quiet != super::group::Quiet::Awake {
                    quiet.push(id);
                }
            }
        }
        // A quiet election that acted wakes (section 12).
        self.wake_active(quiet);
        Ok(())
    }

    /// The root snapshot a Ready installs, checked before anything is written: a joiner
    /// must not be named a voter by its first one, and the data must decode.
    fn check_root_snapshot(
        &self,
        snap: &raft::eraftpb::Snapshot,
    ) -> Result<(GroupState, u64), StorageError> {
        let cs = snap.get_metadata().get_conf_state();
        // raft-rs has already taken the snapshot's membership in memory; the store
        // still holds what this node had: no membership at all when it is joining.
        let stored = self.root.store.conf_state();
        let joining = stored.voters.is_empty()
            && stored.learners.is_empty()
            && stored.voters_outgoing.is_empty();
        if joining
            && (cs.voters.contains(&self.env.id) || cs.voters_outgoing.contains(&self.env.id))
        {
            // A node that joins is added as a learner and promoted only once it has
            // caught up, so its first snapshot names it a learner. One that names it
            // a voter means the group counts on a vote and log this (empty) store
            // never held: the node lost its data. Refuse before writing anything.
            return Err(StorageError::LostData {
                detail: format!(
                    "node {} started with an empty store to join, but the leader's snapshot \
                     (index {}) names it a voter of the group: it was a member and lost its \
                     data folder. It must not return as that voter: replace it by a new node \
                     id that joins (README: a replacement machine)",
                    self.env.id,
                    snap.get_metadata().index
                ),
            });
        }
        // A snapshot replaces the applied state: decode it before anything changes.
        match GroupState::from_snapshot(&snap.data) {
            Ok(h) => Ok((h, snap.get_metadata().index)),
            Err(e) => Err(StorageError::BadSnapshot {
                detail: format!(
                    "the snapshot at index {} that node {} sent does not decode ({e}); \
                     nothing was written",
                    snap.get_metadata().index,
                    self.root.raw.raft.leader_id
                ),
            }),
        }
    }

    /// Pass 3 for the root.
    fn root_after_write(
        &mut self,
        taken: Taken,
        snapshot_state: Option<(GroupState, u64)>,
    ) -> Result<(), StorageError> {
        let drained = self.state.is_drained(self.env.id);
        let (committed, read_states, applies_to) = self.root.persisted(&self.env, drained, taken);
        // An installed snapshot replaces the group state.
        if let Some((state, index)) = snapshot_state {
            self.root.joint = joint_config(&self.root.raw);
            info!(self.env.logger, "installed a snapshot of the group"; "index" => index);
            self.apply_addrs(&state.addrs);
            self.state = state;
            self.shut_out_removed();
            self.root.applied = self.root.applied.max(index);
            // The catalog came with it: run what it holds, stop what it no longer does.
            self.sync_catalog()?;
        }
        // Apply, then say so (raft-rs leaves a joint configuration once it is applied).
        self.apply(committed)?;
        self.root.on_read_states(&self.env, read_states);
        self.root.applied_to(applies_to);
        self.maybe_compact()?;
        Ok(())
    }

    /// Keeps the root's log bounded ([`Group::maybe_compact`]), the group state (history,
    /// drains, addresses, catalog) as the snapshot's data.
    pub(super) fn maybe_compact(&mut self) -> Result<(), StorageError> {
        let state = &self.state;
        self.root
            .maybe_compact(&self.env, self.compact_after, || state.to_snapshot())
    }

    pub(super) fn apply(&mut self, entries: Vec<Entry>) -> Result<(), StorageError> {
        for e in entries {
            self.root.applied = self.root.applied.max(e.index);
            self.entry_applied(e.index, e.term);
            match e.get_entry_type() {
                EntryType::EntryNormal => {
                    if !e.data.is_empty() {
                        let conf = self.root.raw.raft.prs().conf();
                        let voters: Vec<_> = conf.voters().ids().iter().collect();
                        let learners: Vec<_> = conf.learners().iter().copied().collect();
                        match self.state.apply_catalog(
                            &e.data,
                            e.index,
                            &voters,
                            &learners,
                            self.catalog_limit,
                        ) {
                            CatalogChange::NotCatalog => {
                                if let Applied::Drain(id, drained) =
                                    self.state.apply(&e.data, self.history_retention)
                                {
                                    info!(self.env.logger, "drain applied"; "node" => id, "drained" => drained);
                                }
                            }
                            change => self.catalog_applied(change)?,
                        }
                    }
                }
                EntryType::EntryConfChange => {
                    let cc: ConfChange = match protobuf::Message::parse_from_bytes(&e.data) {
                        Ok(cc) => cc,
                        Err(err) => {
                            warn!(self.env.logger, "undecodable conf change skipped"; "index" => e.index, "error" => %err);
                            continue;
                        }
                    };
                    self.apply_conf_change(&raft_proto::ConfChangeI::into_v2(cc), e.index)?;
                }
                EntryType::EntryConfChangeV2 => {
                    let cc: ConfChangeV2 = match protobuf::Message::parse_from_bytes(&e.data) {
                        Ok(cc) => cc,
                        Err(err) => {
                            warn!(self.env.logger, "undecodable conf change skipped"; "index" => e.index, "error" => %err);
                            continue;
                        }
                    };
                    self.apply_conf_change(&cc, e.index)?;
                }
            }
        }
        Ok(())
    }
}

/// The writes of passes made while a batch was out ([`Driver::ready_pass`]): one part
/// per group (the root's key is `None`), each the group's writes in order merged into
/// one ([`ReadyWrite::then`]).
pub(super) struct Held<S> {
    /// The last pass that added to it (the batch's number).
    seq: u64,
    parts: Vec<(Option<ElectionId>, S, ReadyWrite)>,
    /// Where each group's part is in `parts`.
    at: HashMap<Option<ElectionId>, usize>,
}

impl<S> Default for Held<S> {
    fn default() -> Self {
        Held {
            seq: 0,
            parts: Vec::new(),
            at: HashMap::new(),
        }
    }
}

impl<S> Held<S> {
    fn add(&mut self, id: Option<ElectionId>, store: S, write: ReadyWrite) {
        match self.at.get(&id) {
            // Broken on purpose (mutation testing): a group's later writes are lost.
            Some(_) if crate::mutation::active("held-writes-keep-the-first") => {}
            Some(&i) => self.parts[i].2.then(write),
            None => {
                self.at.insert(id, self.parts.len());
                self.parts.push((id, store, write));
            }
        }
    }

    fn remove(&mut self, id: Option<ElectionId>) {
        if self.at.remove(&id).is_some() {
            self.parts.retain(|(part, _, _)| *part != id);
            self.at = (self.parts.iter().enumerate())
                .map(|(i, (part, _, _))| (*part, i))
                .collect();
        }
    }
}

/// One Ready pass waiting for its batch ([`Driver::ready_pass`]).
pub(super) struct Pass {
    /// Its batch's sequence number (the passes' order).
    seq: u64,
    /// Whether it wrote a batch (else it waits only for the batches before it).
    writes: bool,
    /// The root's part, and the group state its snapshot installs.
    root: Option<(Taken, Option<(GroupState, u64)>)>,
    named: Vec<NamedPart>,
}

/// A named election's part of a pass, and the history its snapshot installs.
type NamedPart = (
    crate::election::ElectionId,
    Taken,
    Option<(super::named::NamedState, u64)>,
);

/// What a pass took of one group's Ready for its completion ([`Group::stage`]).
pub(super) struct Taken {
    /// The Ready's number (raft-rs hears it durable by this).
    number: u64,
    /// The batch that stages its write, if it has one.
    seq: Option<u64>,
    /// The messages that promise what the write holds (votes, acknowledgements).
    persisted: Vec<Message>,
    /// What it committed: persisted already (raft-rs hands out only what is).
    committed: Vec<Entry>,
    read_states: Vec<raft::ReadState>,
    /// The index raft-rs hears applied once this Ready's part is (0: nothing).
    applies_to: u64,
}

impl<S: RaftStore> Group<S> {
    /// Keeps the log bounded: once `compact_after` applied entries sit above the last
    /// snapshot (or a conf change asks for it), snapshot the state `data` builds at the
    /// applied index and drop the entries below.
    pub(super) fn maybe_compact(
        &mut self,
        env: &Env,
        compact_after: u64,
        data: impl FnOnce() -> Vec<u8>,
    ) -> Result<(), StorageError> {
        let first = self.store.first_index().unwrap_or(1);
        if self.applied.saturating_add(1) < first.saturating_add(compact_after)
            && !self.force_compact
        {
            return Ok(());
        }
        let commit = self.store.hard_state().commit;
        let index = self.applied.min(commit);
        if index < first {
            return Ok(());
        }
        // The snapshot's membership is the one applied at `index` (raft-rs's current
        // configuration: everything up to `applied` is applied).
        let cs = self.raw.raft.prs().conf().to_conf_state();
        let data = data();
        let what = || match &self.name {
            Some(name) => format!("compacting election {name:?}'s log at index {index}"),
            None => format!("compacting the root's log at index {index}"),
        };
        env.writer
            .store_write(&self.store, true, what, move |s| s.compact(index, cs, data))?;
        self.force_compact = false;
        debug!(env.logger, "log compacted"; "index" => index, "election" => self.name.as_deref());
        Ok(())
    }

    /// Pass 1 of a turn for this group: takes its Ready, lets a leader's messages leave
    /// (they may leave before its own log is persisted), and returns what to persist.
    pub(super) fn take_ready(
        &mut self,
        env: &Env,
        drained: bool,
    ) -> Option<(raft::Ready, ReadyWrite)> {
        if !self.raw.has_ready() {
            return None;
        }
        let mut rd = self.raw.ready();
        if self.raw.raft.state == raft::StateRole::Leader {
            // Before this Ready's messages leave: a new leader's first appends are in it.
            self.keeper
                .began_leading(self.raw.raft.term, env.clock.stamp());
        }
        if !rd.messages().is_empty() {
            let msgs = rd.take_messages();
            self.send(env, drained, msgs);
        }
        let mut write = ReadyWrite::default();
        if !rd.snapshot().is_empty() {
            write.snapshot = Some(rd.snapshot().clone());
        }
        if !rd.entries().is_empty() {
            write.entries = rd.take_entries();
        }
        if let Some(hs) = rd.hs() {
            write.hard_state = Some(hs.clone());
        }
        if mutation::active("persist-after-send") && !rd.persisted_messages().is_empty() {
            // Broken on purpose (mutation testing): promises leave before the disk has them.
            let msgs = rd.take_persisted_messages();
            self.send(env, drained, msgs);
        }
        Some((rd, write))
    }

    /// Pass 1's second half, once the Ready is known good: stages `write` (the Ready's,
    /// batch `seq`) where raft-rs reads and advances raft-rs without waiting for it
    /// (`advance_append_async`: raft-rs 0.7 requires only that what it wrote can be read
    /// back). Returns what pass 3 needs: the messages that wait for the write, what was
    /// committed and the acknowledged rounds.
    pub(super) fn stage(&mut self, seq: u64, mut rd: raft::Ready, write: &ReadyWrite) -> Taken {
        if !write.is_empty() {
            self.raw.store().stage(seq, write);
        }
        let committed = rd.take_committed_entries();
        // What this Ready applies up to: its last committed entry, or its snapshot. Not
        // raft-rs's `advance_apply` at completion, which would apply what later Readies
        // (still in flight) hand out.
        let snapshot = rd.snapshot().get_metadata().index;
        let applies_to = committed.last().map_or(snapshot, |e| e.index.max(snapshot));
        let taken = Taken {
            number: rd.number(),
            seq: (!write.is_empty()).then_some(seq),
            persisted: rd.take_persisted_messages(),
            committed,
            read_states: rd.take_read_states(),
            applies_to,
        };
        self.raw.advance_append_async(rd);
        taken
    }

    /// Pass 3's first half: the batch is durable, so raft-rs hears it (before anything
    /// committed is applied: a leader that applies its own removal steps down then and
    /// there, and must have heard of its persisted entries while it still led, with its
    /// own progress still tracked, as raft-rs 0.7 unwraps it in
    /// `Raft::on_persist_entries`), and the votes and append responses may leave.
    /// Returns what to apply, the acknowledged rounds, and the index to tell raft-rs
    /// applied after (0: none).
    pub(super) fn persisted(
        &mut self,
        env: &Env,
        drained: bool,
        taken: Taken,
    ) -> (Vec<Entry>, Vec<raft::ReadState>, u64) {
        if let Some(seq) = taken.seq {
            self.raw.store().durable(seq);
        }
        self.raw.on_persist_ready(taken.number);
        if !taken.persisted.is_empty() {
            self.send(env, drained, taken.persisted);
        }
        (taken.committed, taken.read_states, taken.applies_to)
    }

    /// raft-rs hears that this node applied up to `index` (0: nothing new).
    pub(super) fn applied_to(&mut self, index: u64) {
        if index > 0 {
            self.raw.advance_apply_to(index);
        }
    }

    /// Sends this group's messages, except what this node must not send: raft-rs's own
    /// heartbeats while the lease's rounds beat for them, and a drained node's
    /// (pre-)vote requests.
    pub(super) fn send(&mut self, env: &Env, drained: bool, msgs: Vec<Message>) {
        // A node whose disk is stalled campaigns in nothing, not even as a last resort
        // (section 15): it would win and stall again.
        let drained =
            env.disk_stalled() || (drained && !self.drained_may_campaign(env, env.clock.now()));
        // A leader renewing its lease every heartbeat sends its rounds' heartbeats; raft-rs's
        // own ones would only repeat them (docs/design.md, section 2).
        // Within a heartbeat interval and a tick: rounds run by the clock, raft-rs's
        // heartbeats by ticks, and at one interval exactly they met at its edge.
        let rounds_beat = self.raw.raft.state == raft::StateRole::Leader
            && self.keeper.round_within(
                env.clock.now(),
                env.timing.heartbeat_interval() + env.timing.tick,
            );
        for m in msgs {
            match self.quiet {
                super::group::Quiet::Leading => self.acted = true,
                super::group::Quiet::Offered if m.get_msg_type() != MessageType::MsgHeartbeat => {
                    self.acted = true;
                }
                _ => {}
            }
            if rounds_beat && m.get_msg_type() == MessageType::MsgHeartbeat && m.context.is_empty()
            {
                if self.election == 0 {
                    env.metrics.heartbeat_merged();
                }
                continue;
            }
            if m.get_msg_type() == MessageType::MsgTimeoutNow {
                // From now on this term's leases are over for this node (section 4).
                self.timeout_now_sent = Some(m.term);
            }
            if drained
                && matches!(
                    m.get_msg_type(),
                    MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
                )
            {
                // A drained node does not campaign while a leader may come from elsewhere:
                // its (pre-)vote requests stay here (docs/design.md, section 4), nor does a
                // stalled one (section 15).
                debug!(env.logger, "drained or disk stalled: not campaigning"; "to" => m.to,
                       "election" => self.name.as_deref());
                continue;
            }
            if self.election == 0 {
                env.transport.send(m);
            } else {
                env.transport.send_election(self.election, m);
            }
        }
    }
}
