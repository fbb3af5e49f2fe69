//! The Ready loop's one entrance: [`Driver::handle_ready`] persists, sends and applies
//! each raft-rs `Ready` in the order raft-rs 0.7 requires (`docs/design.md`, section 5:
//! persist before send), and keeps the log bounded.

use raft::eraftpb::{ConfChange, ConfChangeV2, Entry, EntryType, Message, MessageType};
use slog::{debug, error, info, warn};

use super::{joint_config, Driver};
use crate::error::{StopCause, StorageError};
use crate::mutation;
use crate::state::{Applied, GroupState};
use crate::storage::{RaftStore, ReadyWrite};

impl<S: RaftStore> Driver<S> {
    /// One pass over raft-rs's Ready ([`Driver::ready_pass`]); a storage error or a panic
    /// stops the driver.
    pub(super) fn handle_ready(&mut self) {
        match self.guarded(|| "handling a Ready".into(), super::Driver::ready_pass) {
            Some(Err(StorageError::LostData { detail })) => {
                error!(self.logger, "this node lost its data; stopping"; "detail" => &detail);
                self.fail(StopCause::LostData { detail });
            }
            Some(Err(e)) => {
                error!(self.logger, "storage failed; stopping"; "error" => %e);
                self.fail(StopCause::Storage(e));
            }
            _ => {}
        }
    }

    /// One pass over raft-rs's Ready, in the required order.
    pub(super) fn ready_pass(&mut self) -> Result<(), StorageError> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut rd = self.raw.ready();
        if self.raw.raft.state == raft::StateRole::Leader {
            // Before this Ready's messages leave: a new leader's first appends are in it.
            let now = self.clock.stamp();
            self.keeper.began_leading(self.raw.raft.term, now);
        }
        // 1. A leader's messages may leave before its own log is persisted.
        if !rd.messages().is_empty() {
            self.send(rd.take_messages());
        }
        // 2. One synced batch for everything this Ready asks to persist.
        let mut write = ReadyWrite::default();
        let mut snapshot_state = None;
        if !rd.snapshot().is_empty() {
            let snap = rd.snapshot().clone();
            let cs = snap.get_metadata().get_conf_state();
            // raft-rs has already taken the snapshot's membership in memory; the store
            // still holds what this node had: no membership at all when it is joining.
            let stored = self.store.conf_state();
            let joining = stored.voters.is_empty()
                && stored.learners.is_empty()
                && stored.voters_outgoing.is_empty();
            if joining && (cs.voters.contains(&self.id) || cs.voters_outgoing.contains(&self.id)) {
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
                        self.id,
                        snap.get_metadata().index
                    ),
                });
            }
            // A snapshot replaces the applied state: decode it before anything changes.
            match GroupState::from_snapshot(&snap.data) {
                Ok(h) => snapshot_state = Some((h, snap.get_metadata().index)),
                Err(e) => {
                    return Err(StorageError::BadSnapshot {
                        detail: format!(
                            "the snapshot at index {} that node {} sent does not decode ({e}); \
                             nothing was written",
                            snap.get_metadata().index,
                            self.raw.raft.leader_id
                        ),
                    })
                }
            }
            write.snapshot = Some(snap);
        }
        if !rd.entries().is_empty() {
            write.entries = rd.take_entries();
        }
        if let Some(hs) = rd.hs() {
            write.hard_state = Some(hs.clone());
        }
        if mutation::active("persist-after-send") {
            // Broken on purpose (mutation testing): promises leave before the disk has them.
            if !rd.persisted_messages().is_empty() {
                self.send(rd.take_persisted_messages());
            }
        }
        if !write.is_empty() {
            self.store.write(write)?;
        }
        // 3. Votes and append responses only once what they promise is on disk.
        if !rd.persisted_messages().is_empty() {
            self.send(rd.take_persisted_messages());
        }
        // 4. An installed snapshot replaces the group state.
        if let Some((state, index)) = snapshot_state {
            self.joint = joint_config(&self.raw);
            info!(self.logger, "installed a snapshot of the group"; "index" => index);
            self.apply_addrs(&state.addrs);
            self.state = state;
            self.applied = self.applied.max(index);
        }
        // 5. Tell raft-rs what is persisted before applying what is committed: a leader
        // that applies its own removal steps down then and there (`step_down_removed`),
        // and must have heard of its persisted entries while it still led, with its own
        // progress still tracked (raft-rs 0.7 unwraps it in `Raft::on_persist_entries`).
        let committed = rd.take_committed_entries();
        let read_states = rd.take_read_states();
        let mut light = self.raw.advance_append(rd);
        if let Some(commit) = light.commit_index() {
            self.store.write(ReadyWrite {
                commit: Some(commit),
                ..Default::default()
            })?;
        }
        self.send(light.take_messages());
        // 6. Apply, then say so (raft-rs leaves a joint configuration once it is applied).
        self.apply(committed)?;
        self.on_read_states(read_states);
        self.apply(light.take_committed_entries())?;
        self.raw.advance_apply();
        self.maybe_compact()?;
        Ok(())
    }

    /// Keeps the log bounded: once `compact_after` applied entries sit above the last
    /// snapshot, snapshot the history at the applied index and drop the entries below.
    pub(super) fn maybe_compact(&mut self) -> Result<(), StorageError> {
        let first = self.store.first_index().unwrap_or(1);
        if self.applied.saturating_add(1) < first.saturating_add(self.compact_after)
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
        self.store.compact(index, cs, self.state.to_snapshot())?;
        self.force_compact = false;
        debug!(self.logger, "log compacted"; "index" => index);
        Ok(())
    }

    pub(super) fn send(&mut self, msgs: Vec<Message>) {
        let drained = self.state.is_drained(self.id);
        // A leader renewing its lease every heartbeat sends its rounds' heartbeats; raft-rs's
        // own ones would only repeat them (docs/design.md, section 2).
        // Within a heartbeat interval and a tick: rounds run by the clock, raft-rs's
        // heartbeats by ticks, and at one interval exactly they met at its edge.
        let rounds_beat = self.raw.raft.state == raft::StateRole::Leader
            && self.keeper.round_within(
                self.clock.now(),
                self.timing.heartbeat_interval() + self.timing.tick,
            );
        for m in msgs {
            if rounds_beat && m.get_msg_type() == MessageType::MsgHeartbeat && m.context.is_empty()
            {
                self.metrics.heartbeat_merged();
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
                // A drained node never campaigns: its (pre-)vote requests stay here.
                debug!(self.logger, "drained: not campaigning"; "to" => m.to);
                continue;
            }
            self.transport.send(m);
        }
    }

    pub(super) fn apply(&mut self, entries: Vec<Entry>) -> Result<(), StorageError> {
        for e in entries {
            self.applied = self.applied.max(e.index);
            self.entry_applied(e.index, e.term);
            match e.get_entry_type() {
                EntryType::EntryNormal => {
                    if !e.data.is_empty() {
                        if let Applied::Drain(id, drained) =
                            self.state.apply(&e.data, self.history_retention)
                        {
                            info!(self.logger, "drain applied"; "node" => id, "drained" => drained);
                        }
                    }
                }
                EntryType::EntryConfChange => {
                    let cc: ConfChange = match protobuf::Message::parse_from_bytes(&e.data) {
                        Ok(cc) => cc,
                        Err(err) => {
                            warn!(self.logger, "undecodable conf change skipped"; "index" => e.index, "error" => %err);
                            continue;
                        }
                    };
                    self.apply_conf_change(&raft_proto::ConfChangeI::into_v2(cc), e.index)?;
                }
                EntryType::EntryConfChangeV2 => {
                    let cc: ConfChangeV2 = match protobuf::Message::parse_from_bytes(&e.data) {
                        Ok(cc) => cc,
                        Err(err) => {
                            warn!(self.logger, "undecodable conf change skipped"; "index" => e.index, "error" => %err);
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
