//! The driver: one task that owns the raft-rs [`RawNode`] and is the only place where
//! raft state changes.
//!
//! Ticks, inbound messages and commands from [`Node`](crate::Node) and
//! [`Lease`](crate::Lease) handles arrive by channel. After each event the driver handles
//! raft-rs's `Ready` in the order raft-rs 0.7 requires:
//!
//! 1. send `messages` (a leader may send these before persisting);
//! 2. persist snapshot, entries and hard state as **one synced batch**;
//! 3. send `persisted_messages` (votes, append responses: only after step 2);
//! 4. apply committed entries; hand read states to their waiters;
//! 5. `advance`, then the `LightReady`: persist the commit index, send, apply.
//!
//! ## The lease
//!
//! raft-rs's own lease read has no time check, so the driver keeps its own. While this
//! node leads (and has committed in its term), it starts a ReadIndex round every
//! heartbeat. When a quorum acknowledges a round, the lease is extended to the round's
//! send time + [`Timing::lease_duration`]. Every voter that acknowledged refuses votes for
//! an election timeout after it heard that round, and a restarted node refuses votes for
//! an election timeout after it starts, so no new leader can be elected before the lease
//! ends. The lease is revoked the moment it runs out unrenewed, the term moves on, the
//! node steps down, hands over or stops.

use std::collections::BTreeMap;
use std::sync::Arc;

use raft::eraftpb::{ConfChange, ConfChangeV2, Entry, EntryType, Message, MessageType};
use raft::prelude::RawNode;
use raft::StateRole;
use slog::{debug, error, info, o, warn, Logger};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, MissedTickBehavior};

use crate::clock::LocalClock;
use crate::config::{ReadMode, Timing};
use crate::election_rng::ElectionTimeouts;
use crate::error::{LostReason, NodeStopped, StorageError, TransferError};
use crate::history::{History, TenureRecord, TenureStart};
use crate::lease::{FencingToken, Lease, LeaseShared};
use crate::metrics::Metrics;
use crate::mutation;
use crate::node::{Leadership, Role};
use crate::storage::{RaftStore, ReadyWrite};
use crate::transport::{Inbound, NodeId, Transport};

/// Requests from `Node` and `Lease` handles to the driver.
pub(crate) enum Command {
    /// Resolve with a lease once this node holds a confirmed one.
    Lease { reply: oneshot::Sender<Lease> },
    /// A fresh ReadIndex round for the lease of `term`.
    Confirm {
        term: u64,
        reply: oneshot::Sender<Result<FencingToken, LostReason>>,
    },
    /// Hand leadership over.
    Transfer {
        to: Option<NodeId>,
        reply: oneshot::Sender<Result<NodeId, TransferError>>,
    },
    /// Hand over if leading, then stop.
    Shutdown { reply: oneshot::Sender<()> },
    /// Stop at once, as if the process died (no handover).
    Kill { reply: oneshot::Sender<()> },
    /// The replicated leadership history as this node has applied it.
    History {
        reply: oneshot::Sender<Vec<TenureRecord>>,
    },
    /// The log's first and last index (for tests of compaction).
    LogSpan { reply: oneshot::Sender<(u64, u64)> },
}

/// A ReadIndex round in flight.
struct Round {
    /// When `read_index` was called: no acknowledgement can predate it.
    sent: Instant,
    term: u64,
    waiters: Vec<oneshot::Sender<Result<FencingToken, LostReason>>>,
}

struct PendingTransfer {
    to: NodeId,
    deadline: Instant,
    reply: Option<oneshot::Sender<Result<NodeId, TransferError>>>,
}

/// Everything the driver needs at start.
pub(crate) struct DriverParts<S: RaftStore> {
    pub raw: RawNode<S>,
    pub store: S,
    pub transport: Arc<dyn Transport>,
    pub inbound: mpsc::Receiver<Inbound>,
    pub commands: mpsc::Receiver<Command>,
    pub command_tx: mpsc::WeakSender<Command>,
    pub leadership: watch::Sender<Leadership>,
    pub timing: Timing,
    pub read_mode: ReadMode,
    pub logger: Logger,
    pub clock: LocalClock,
    pub metrics: Arc<Metrics>,
    /// The history restored from the store's snapshot, and that snapshot's index.
    pub history: History,
    pub applied: u64,
    pub history_retention: usize,
    pub compact_after: u64,
    /// Seed for the election timeouts (`Config::election_seed`, a test hook).
    pub election_seed: Option<u64>,
}

pub(crate) struct Driver<S: RaftStore> {
    id: NodeId,
    raw: RawNode<S>,
    store: S,
    transport: Arc<dyn Transport>,
    inbound: mpsc::Receiver<Inbound>,
    commands: mpsc::Receiver<Command>,
    command_tx: mpsc::WeakSender<Command>,
    leadership: watch::Sender<Leadership>,
    timing: Timing,
    read_mode: ReadMode,
    logger: Logger,
    /// This node's clock: real time, except in clock-skew tests.
    clock: LocalClock,
    metrics: Arc<Metrics>,
    /// Since when this node has known no leader (for the failover histogram).
    leaderless_since: Option<Instant>,
    /// The replicated leadership history (the state the log builds).
    history: History,
    /// The index of the last entry applied.
    applied: u64,
    history_retention: usize,
    /// Compact the log when this many applied entries sit above the last snapshot.
    compact_after: u64,
    /// The term this node recorded its tenure for (one record per tenure).
    recorded_term: u64,
    /// The term a leadership transfer to this node (MsgTimeoutNow) would start.
    handover_term: Option<u64>,

    /// Until then, vote and pre-vote requests are dropped: a restarted node has forgotten
    /// when it last heard from a leader that may still hold a lease.
    quiet_until: Instant,
    /// A base for the lease's atomic clock.
    epoch: Instant,

    /// The lease validity earned by acknowledged rounds in the current leader term.
    lease_until: Option<Instant>,
    /// The tenure handed out to users, while valid.
    lease: Option<Arc<LeaseShared>>,
    lease_waiters: Vec<oneshot::Sender<Lease>>,
    /// By context id: a BTreeMap, so waiters are answered in the same order every run.
    rounds: BTreeMap<u64, Round>,
    next_ctx: u64,
    last_round: Option<Instant>,
    /// Confirms that arrived in this turn of the loop: they share one fresh round.
    pending_confirms: Vec<oneshot::Sender<Result<FencingToken, LostReason>>>,

    transfer: Option<PendingTransfer>,
    shutdown: Option<(Instant, oneshot::Sender<()>)>,
    stop: Option<StopKind>,
    last_published: Leadership,
    /// Seeded election timeouts in place of raft-rs's own draws (simulation only).
    election_timeouts: Option<ElectionTimeouts>,
}

enum StopKind {
    Graceful(Option<oneshot::Sender<()>>),
    Killed(oneshot::Sender<()>),
    Failed(String),
    Dropped,
}

impl<S: RaftStore> Driver<S> {
    pub(crate) fn new(parts: DriverParts<S>) -> Self {
        let now = parts.clock.now();
        let id = parts.raw.raft.id;
        let initial = Leadership {
            term: parts.raw.raft.term,
            leader: None,
            role: Role::Follower,
            leased: false,
        };
        Driver {
            id,
            quiet_until: if mutation::active("no-restart-quiet") {
                now
            } else {
                now + parts.timing.election_timeout()
            },
            epoch: now,
            raw: parts.raw,
            store: parts.store,
            transport: parts.transport,
            inbound: parts.inbound,
            commands: parts.commands,
            command_tx: parts.command_tx,
            leadership: parts.leadership,
            timing: parts.timing,
            read_mode: parts.read_mode,
            logger: parts.logger,
            clock: parts.clock,
            metrics: parts.metrics,
            leaderless_since: Some(now),
            history: parts.history,
            applied: parts.applied,
            history_retention: parts.history_retention,
            compact_after: parts.compact_after.max(1),
            recorded_term: 0,
            handover_term: None,
            lease_until: None,
            lease: None,
            lease_waiters: Vec::new(),
            rounds: BTreeMap::new(),
            next_ctx: 1,
            last_round: None,
            pending_confirms: Vec::new(),
            transfer: None,
            shutdown: None,
            stop: None,
            last_published: initial,
            election_timeouts: parts.election_seed.map(|seed| {
                let t = &parts.timing;
                ElectionTimeouts::new(seed, id, t.election_ticks, t.election_ticks_max)
            }),
        }
    }

    /// Runs until shutdown, kill, a fatal error, or every handle is dropped.
    pub(crate) async fn run(mut self) -> Result<(), NodeStopped> {
        let mut ticker = tokio::time::interval(self.clock.real_duration(self.timing.tick));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        info!(self.logger, "driver started"; "term" => self.raw.raft.term,
              "quiet_ms" => self.timing.election_timeout().as_millis() as u64);
        loop {
            self.redraw_election_timeout();
            // A stalled process must not act on a lease that ran out while it slept:
            // check before anything else.
            self.expire_lease(self.clock.now());
            let deadline = self
                .lease
                .as_ref()
                .map(|l| self.clock.to_real(l.valid_until()));
            tokio::select! {
                biased;
                cmd = self.commands.recv() => match cmd {
                    Some(cmd) => {
                        self.on_command(cmd);
                        while let Ok(cmd) = self.commands.try_recv() {
                            self.on_command(cmd);
                        }
                    }
                    None => {
                        // Every Node and Lease handle is gone: leave gracefully.
                        self.begin_shutdown(None);
                        if self.stop.is_none() && self.shutdown.is_none() {
                            self.stop = Some(StopKind::Dropped);
                        }
                    }
                },
                _ = sleep_until_opt(deadline) => {
                    self.expire_lease(self.clock.now());
                }
                inbound = self.inbound.recv() => {
                    match inbound {
                        Some(item) => {
                            self.on_inbound(item);
                            for _ in 0..256 {
                                match self.inbound.try_recv() {
                                    Ok(item) => self.on_inbound(item),
                                    Err(_) => break,
                                }
                            }
                        }
                        None => {
                            // The transport is gone: nothing can reach us any more.
                            self.fail("transport closed".into());
                        }
                    }
                }
                _ = ticker.tick() => {
                    self.raw.tick();
                    self.update_health();
                }
            }
            if self.stop.is_none() {
                if let Err(e) = self.handle_ready() {
                    error!(self.logger, "storage failed; stopping"; "error" => %e);
                    self.fail(format!("storage failed: {e}"));
                }
            }
            if self.stop.is_none() {
                self.after_ready(self.clock.now());
            }
            if let Some(stop) = self.stop.take() {
                return self.finish(stop);
            }
        }
    }

    /// With a seeded election RNG: replaces any timeout raft-rs drew since the last
    /// turn of the loop (before the next tick reads it).
    fn redraw_election_timeout(&mut self) {
        if let Some(t) = &mut self.election_timeouts {
            t.redraw(&mut self.raw.raft);
        }
    }

    fn on_inbound(&mut self, item: Inbound) {
        match item {
            Inbound::Message(m) => {
                if m.to != self.id {
                    debug!(self.logger, "dropping message for another node"; "to" => m.to, "from" => m.from);
                    return;
                }
                let t = m.get_msg_type();
                if t == MessageType::MsgTimeoutNow {
                    // The leader hands over to us: the election it starts is a handover.
                    self.handover_term = Some(self.raw.raft.term + 1);
                }
                if matches!(
                    t,
                    MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
                ) && self.clock.now() < self.quiet_until
                {
                    debug!(self.logger, "ignoring vote request during restart quiet period";
                           "from" => m.from, "type" => ?t, "term" => m.term);
                    return;
                }
                if let Err(e) = self.raw.step(m) {
                    debug!(self.logger, "raft rejected a message"; "error" => %e);
                }
            }
            Inbound::Unreachable(peer) => self.raw.report_unreachable(peer),
        }
    }

    fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Lease { reply } => {
                if let Some(lease) = self.current_lease() {
                    let _ = reply.send(lease);
                } else {
                    self.lease_waiters.push(reply);
                }
            }
            Command::Confirm { term, reply } => match &self.lease {
                Some(l) if l.token.0 == term && self.raw.raft.term == term => {
                    if self.read_mode == ReadMode::LeaseBased && l.is_valid_at(self.clock.now()) {
                        let _ = reply.send(Ok(l.token));
                    } else {
                        self.pending_confirms.push(reply);
                    }
                }
                _ => {
                    let reason = if self.raw.raft.term != term {
                        LostReason::TermChanged
                    } else {
                        LostReason::Expired
                    };
                    let _ = reply.send(Err(reason));
                }
            },
            Command::Transfer { to, reply } => {
                if self.shutdown.is_some() {
                    let _ = reply.send(Err(TransferError::Stopped(NodeStopped {
                        reason: "shutting down".into(),
                    })));
                    return;
                }
                match self.start_transfer(to) {
                    Ok(target) => {
                        self.transfer = Some(PendingTransfer {
                            to: target,
                            deadline: self.clock.now() + self.timing.election_timeout() * 2,
                            reply: Some(reply),
                        });
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            Command::Shutdown { reply } => self.begin_shutdown(Some(reply)),
            Command::Kill { reply } => self.stop = Some(StopKind::Killed(reply)),
            Command::History { reply } => {
                let _ = reply.send(self.history.records());
            }
            Command::LogSpan { reply } => {
                let first = self.store.first_index().unwrap_or(0);
                let last = self.store.last_index().unwrap_or(0);
                let _ = reply.send((first, last));
            }
        }
    }

    /// Validates and starts a transfer; revokes the lease first.
    fn start_transfer(&mut self, to: Option<NodeId>) -> Result<NodeId, TransferError> {
        let raft = &self.raw.raft;
        if raft.state != StateRole::Leader {
            let hint = (raft.leader_id != 0).then_some(raft.leader_id);
            return Err(TransferError::NotLeader { leader_hint: hint });
        }
        let voters: Vec<NodeId> = raft.prs().conf().voters().ids().iter().collect();
        let target = match to {
            Some(t) if t == self.id => return Err(TransferError::AlreadyLeader(t)),
            Some(t) if !voters.contains(&t) => return Err(TransferError::UnknownNode(t)),
            Some(t) => t,
            None => self.best_follower().ok_or(TransferError::NoCandidate)?,
        };
        info!(self.logger, "handing leadership over"; "to" => target, "term" => raft.term);
        self.revoke(LostReason::HandedOver);
        self.raw.transfer_leader(target);
        Ok(target)
    }

    /// The most up-to-date voter other than this node (recently active ones first).
    fn best_follower(&self) -> Option<NodeId> {
        let raft = &self.raw.raft;
        let voters = raft.prs().conf().voters().ids();
        raft.prs()
            .iter()
            .filter(|(id, _)| **id != self.id && voters.contains(**id))
            .max_by_key(|(id, pr)| (pr.recent_active, pr.matched, std::cmp::Reverse(**id)))
            .map(|(id, _)| *id)
    }

    fn begin_shutdown(&mut self, reply: Option<oneshot::Sender<()>>) {
        if self.shutdown.is_some() || self.stop.is_some() {
            // Already on the way out; answer when done (or now, if no slot).
            if let Some(r) = reply {
                if self.shutdown.is_none() {
                    let _ = r.send(());
                } else {
                    // Keep the first reply; the second caller just learns it is stopping.
                    drop(r);
                }
            }
            return;
        }
        let leading = self.raw.raft.state == StateRole::Leader;
        if leading && self.raw.raft.prs().conf().voters().ids().len() > 1 {
            match self.start_transfer(None) {
                Ok(target) => {
                    let deadline = self.clock.now() + self.timing.election_timeout();
                    info!(self.logger, "shutdown: waiting for handover"; "to" => target);
                    if let Some(t) = self.transfer.take() {
                        if let Some(r) = t.reply {
                            let _ = r.send(Err(TransferError::Stopped(NodeStopped {
                                reason: "shutting down".into(),
                            })));
                        }
                    }
                    self.transfer = Some(PendingTransfer {
                        to: target,
                        deadline,
                        reply: None,
                    });
                    let (tx, rx) = oneshot::channel();
                    drop(rx);
                    self.shutdown = Some((deadline, reply.unwrap_or(tx)));
                    return;
                }
                Err(e) => debug!(self.logger, "shutdown without handover"; "why" => %e),
            }
        }
        self.stop = Some(StopKind::Graceful(reply));
    }

    fn fail(&mut self, why: String) {
        if self.stop.is_none() {
            self.stop = Some(StopKind::Failed(why));
        }
    }

    /// One pass over raft-rs's Ready, in the required order.
    fn handle_ready(&mut self) -> Result<(), StorageError> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut rd = self.raw.ready();
        // 1. A leader's messages may leave before its own log is persisted.
        if !rd.messages().is_empty() {
            self.send(rd.take_messages());
        }
        // 2. One synced batch for everything this Ready asks to persist.
        let mut write = ReadyWrite::default();
        let mut snapshot_history = None;
        if !rd.snapshot().is_empty() {
            let snap = rd.snapshot().clone();
            // A snapshot replaces the applied state: decode it before anything changes.
            match History::from_snapshot(&snap.data) {
                Ok(h) => snapshot_history = Some((h, snap.get_metadata().index)),
                Err(e) => {
                    return Err(StorageError::Corrupt {
                        path: Default::default(),
                        detail: format!(
                            "snapshot {} from the leader: {e}",
                            snap.get_metadata().index
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
        // 4. Apply.
        if let Some((h, index)) = snapshot_history {
            self.history = h;
            self.applied = self.applied.max(index);
        }
        let committed = rd.take_committed_entries();
        self.apply(committed)?;
        let read_states = rd.take_read_states();
        self.on_read_states(read_states);
        // 5. Advance and the light ready.
        let mut light = self.raw.advance(rd);
        if let Some(commit) = light.commit_index() {
            self.store.write(ReadyWrite {
                commit: Some(commit),
                ..Default::default()
            })?;
        }
        self.send(light.take_messages());
        self.apply(light.take_committed_entries())?;
        self.raw.advance_apply();
        self.maybe_compact()?;
        Ok(())
    }

    /// Keeps the log bounded: once `compact_after` applied entries sit above the last
    /// snapshot, snapshot the history at the applied index and drop the entries below.
    fn maybe_compact(&mut self) -> Result<(), StorageError> {
        let first = self.store.first_index().unwrap_or(1);
        if self.applied + 1 < first + self.compact_after {
            return Ok(());
        }
        let commit = self.store.hard_state().commit;
        let index = self.applied.min(commit);
        if index < first {
            return Ok(());
        }
        self.store.compact(index, self.history.to_snapshot())?;
        debug!(self.logger, "log compacted"; "index" => index);
        Ok(())
    }

    fn send(&self, msgs: Vec<Message>) {
        for m in msgs {
            self.transport.send(m);
        }
    }

    fn apply(&mut self, entries: Vec<Entry>) -> Result<(), StorageError> {
        for e in entries {
            self.applied = self.applied.max(e.index);
            match e.get_entry_type() {
                EntryType::EntryNormal => {
                    if !e.data.is_empty() {
                        self.history.apply(&e.data, self.history_retention);
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
                    self.apply_conf_change(&cc)?;
                }
                EntryType::EntryConfChangeV2 => {
                    let cc: ConfChangeV2 = match protobuf::Message::parse_from_bytes(&e.data) {
                        Ok(cc) => cc,
                        Err(err) => {
                            warn!(self.logger, "undecodable conf change skipped"; "index" => e.index, "error" => %err);
                            continue;
                        }
                    };
                    self.apply_conf_change(&cc)?;
                }
            }
        }
        Ok(())
    }

    fn apply_conf_change(&mut self, cc: &impl raft_proto::ConfChangeI) -> Result<(), StorageError> {
        match self.raw.apply_conf_change(cc) {
            Ok(cs) => self.store.write(ReadyWrite {
                conf_state: Some(cs),
                ..Default::default()
            }),
            Err(e) => {
                warn!(self.logger, "conf change rejected by raft"; "error" => %e);
                Ok(())
            }
        }
    }

    fn on_read_states(&mut self, states: Vec<raft::ReadState>) {
        let term = self.raw.raft.term;
        let leading = self.raw.raft.state == StateRole::Leader;
        for rs in states {
            let Some(ctx) = decode_ctx(&rs.request_ctx) else {
                continue;
            };
            let Some(round) = self.rounds.remove(&ctx) else {
                continue;
            };
            if leading && round.term == term {
                self.metrics
                    .renew_round_trip(self.clock.now().saturating_duration_since(round.sent));
                let until = round.sent + self.timing.lease_duration();
                self.lease_until = Some(self.lease_until.map_or(until, |u| u.max(until)));
                if let Some(l) = &self.lease {
                    l.extend(until);
                }
                for w in round.waiters {
                    let _ = w.send(Ok(FencingToken(term)));
                }
            } else {
                for w in round.waiters {
                    let _ = w.send(Err(LostReason::TermChanged));
                }
            }
        }
    }

    /// Bookkeeping after raft state may have changed: leases, rounds, transfer,
    /// shutdown, and the published leadership.
    fn after_ready(&mut self, now: Instant) {
        let raft = &self.raw.raft;
        let term = raft.term;
        let leading = raft.state == StateRole::Leader;

        // A lease lives only while this node leads in its term.
        if let Some(l) = &self.lease {
            if l.token.0 != term {
                self.revoke(LostReason::TermChanged);
            } else if !leading {
                self.revoke(LostReason::SteppedDown);
            }
        }
        if !leading || self.rounds.values().any(|r| r.term != term) {
            self.lease_until = self.lease_until.filter(|_| leading);
            let stale: Vec<u64> = self
                .rounds
                .iter()
                .filter(|(_, r)| !leading || r.term != term)
                .map(|(k, _)| *k)
                .collect();
            for k in stale {
                if let Some(r) = self.rounds.remove(&k) {
                    for w in r.waiters {
                        let _ = w.send(Err(LostReason::TermChanged));
                    }
                }
            }
        }
        if !leading {
            self.lease_until = None;
            self.last_round = None;
            for w in self.pending_confirms.drain(..) {
                let _ = w.send(Err(LostReason::SteppedDown));
            }
        }

        self.progress_transfer(now);
        self.expire_lease(now);

        let handing_over = self.raw.raft.lead_transferee.is_some() || self.shutdown.is_some();
        if leading && self.recorded_term != term && !handing_over {
            // Record this tenure in the replicated history (once per term).
            let started_by = if self.handover_term == Some(term) {
                TenureStart::Handover
            } else {
                TenureStart::Election
            };
            let data = History::entry(term, self.id, started_by);
            match self.raw.propose(vec![], data) {
                Ok(()) => self.recorded_term = term,
                Err(e) => debug!(self.logger, "history record not proposed yet"; "error" => %e),
            }
        }
        if leading && mutation::active("lease-before-read-index") {
            // Broken on purpose (mutation testing): the lease is granted and renewed on
            // the leader's word alone, without waiting for quorum-acknowledged rounds
            // (what raft-rs's own LeaseBased read does).
            self.lease_until = Some(now + self.timing.lease_duration());
            if let Some(l) = &self.lease {
                l.extend(now + self.timing.lease_duration());
            }
        }
        if leading && !handing_over && self.raw.raft.commit_to_current_term() {
            // Grant or extend the tenure.
            if let Some(until) = self.lease_until.filter(|u| now < *u) {
                if self.lease.is_none() {
                    let shared =
                        LeaseShared::new(FencingToken(term), self.epoch, until, self.clock);
                    info!(self.logger, "lease acquired"; "token" => term);
                    self.metrics.lease_acquired();
                    self.lease = Some(shared);
                }
            }
            if let Some(lease) = self.current_lease() {
                for w in self.lease_waiters.drain(..) {
                    let _ = w.send(lease.clone());
                }
            }
            self.lease_waiters.retain(|w| !w.is_closed());
            // Confirms get a round of their own; otherwise renew every heartbeat.
            let due = self
                .last_round
                .is_none_or(|t| now.duration_since(t) >= self.timing.heartbeat_interval());
            if !self.pending_confirms.is_empty() || due {
                let waiters = std::mem::take(&mut self.pending_confirms);
                self.start_round(now, waiters);
                // The round's heartbeats are in a new Ready: send them now.
                if let Err(e) = self.handle_ready() {
                    self.fail(format!("storage failed: {e}"));
                }
            }
        } else if leading {
            for w in self.pending_confirms.drain(..) {
                let _ = w.send(Err(LostReason::HandedOver));
            }
        }
        // Forget rounds nobody will answer (raft-rs drops some silently).
        let horizon = self.timing.election_timeout() * 2;
        let old: Vec<u64> = self
            .rounds
            .iter()
            .filter(|(_, r)| now.duration_since(r.sent) > horizon)
            .map(|(k, _)| *k)
            .collect();
        for k in old {
            if let Some(r) = self.rounds.remove(&k) {
                if !r.waiters.is_empty() {
                    // Retry for the waiters in a fresh round next turn.
                    self.pending_confirms.extend(r.waiters);
                }
            }
        }

        if let Some((deadline, _)) = &self.shutdown {
            let handed = self.raw.raft.state != StateRole::Leader;
            if handed || now >= *deadline {
                if !handed {
                    warn!(
                        self.logger,
                        "shutdown: handover did not finish in time; stopping anyway"
                    );
                }
                if let Some((_, reply)) = self.shutdown.take() {
                    self.stop = Some(StopKind::Graceful(Some(reply)));
                }
            }
        }
        self.publish();
    }

    fn progress_transfer(&mut self, now: Instant) {
        let Some(t) = &mut self.transfer else {
            return;
        };
        let raft = &self.raw.raft;
        let done = raft.leader_id == t.to && raft.state != StateRole::Leader;
        let lost = raft.state != StateRole::Leader && raft.leader_id != t.to && raft.leader_id != 0;
        let result = if done {
            Some(Ok(t.to))
        } else if now >= t.deadline
            || lost
            || (raft.state == StateRole::Leader && raft.lead_transferee.is_none())
        {
            Some(Err(TransferError::TimedOut {
                to: t.to,
                timeout_ms: self.timing.election_timeout().as_millis() as u64 * 2,
            }))
        } else {
            None
        };
        if let Some(r) = result {
            if let Some(reply) = t.reply.take() {
                let _ = reply.send(r);
            }
            self.transfer = None;
        }
    }

    fn start_round(
        &mut self,
        now: Instant,
        waiters: Vec<oneshot::Sender<Result<FencingToken, LostReason>>>,
    ) {
        let ctx = self.next_ctx;
        self.next_ctx += 1;
        self.raw.read_index(ctx.to_be_bytes().to_vec());
        self.rounds.insert(
            ctx,
            Round {
                sent: now,
                term: self.raw.raft.term,
                waiters,
            },
        );
        self.last_round = Some(now);
    }

    fn current_lease(&self) -> Option<Lease> {
        let shared = self.lease.as_ref()?;
        if !shared.is_valid_at(self.clock.now()) {
            return None;
        }
        let commands = self.command_tx.upgrade()?;
        Some(Lease {
            shared: shared.clone(),
            commands,
            mode: self.read_mode,
        })
    }

    fn expire_lease(&mut self, now: Instant) {
        if let Some(l) = &self.lease {
            if now >= l.valid_until() {
                warn!(self.logger, "lease expired unrenewed"; "token" => l.token.0);
                self.revoke(LostReason::Expired);
                self.publish();
            }
        }
    }

    fn revoke(&mut self, reason: LostReason) {
        if let Some(l) = self.lease.take() {
            info!(self.logger, "lease revoked"; "token" => l.token.0, "reason" => reason.as_str());
            l.revoke(reason);
            self.metrics.lease_revoked(reason);
        }
        for w in self.pending_confirms.drain(..) {
            let _ = w.send(Err(reason));
        }
        for r in self.rounds.values_mut() {
            for w in r.waiters.drain(..) {
                let _ = w.send(Err(reason));
            }
        }
        if reason != LostReason::Expired {
            self.lease_until = None;
        }
    }

    fn publish(&mut self) {
        let raft = &self.raw.raft;
        let role = match raft.state {
            StateRole::Follower => Role::Follower,
            StateRole::PreCandidate => Role::PreCandidate,
            StateRole::Candidate => Role::Candidate,
            StateRole::Leader => Role::Leader,
        };
        let now = Leadership {
            term: raft.term,
            leader: (raft.leader_id != 0).then_some(raft.leader_id),
            role,
            leased: self.lease.is_some(),
        };
        if now != self.last_published {
            if now.role != self.last_published.role {
                match now.role {
                    Role::Candidate => self.metrics.election_started(),
                    Role::Leader => self.metrics.election_won(),
                    _ => {}
                }
            }
            let t = self.clock.now();
            match (now.leader, self.leaderless_since) {
                (None, None) => self.leaderless_since = Some(t),
                (Some(_), Some(since)) => {
                    self.metrics
                        .leaderless_for(t.saturating_duration_since(since));
                    self.leaderless_since = None;
                }
                _ => {}
            }
            self.metrics.set_state(
                now.term,
                role_code(now.role),
                now.leader.unwrap_or(0),
                now.leased,
            );
            self.last_published = now.clone();
            self.leadership.send_replace(now);
        }
    }

    /// Peers reachable and quorum health, for the metrics.
    fn update_health(&self) {
        let raft = &self.raw.raft;
        let voters = raft.prs().conf().voters().ids();
        let members = voters.len() as u64;
        if raft.state == StateRole::Leader {
            let active = raft
                .prs()
                .iter()
                .filter(|(id, pr)| **id != self.id && voters.contains(**id) && pr.recent_active)
                .count() as u64;
            self.metrics
                .set_health(members, 1 + active, self.lease.is_some());
        } else {
            let hears = raft.leader_id != 0 && raft.election_elapsed < raft.election_timeout();
            self.metrics.set_health(members, 1 + hears as u64, hears);
        }
    }

    fn finish(mut self, stop: StopKind) -> Result<(), NodeStopped> {
        let (reason, result) = match &stop {
            StopKind::Graceful(_) | StopKind::Dropped => (LostReason::Shutdown, Ok(())),
            StopKind::Killed(_) => (LostReason::Shutdown, Ok(())),
            StopKind::Failed(why) => (
                LostReason::Failed,
                Err(NodeStopped {
                    reason: why.clone(),
                }),
            ),
        };
        self.revoke(reason);
        for (_, r) in std::mem::take(&mut self.rounds) {
            for w in r.waiters {
                let _ = w.send(Err(reason));
            }
        }
        if let Some(t) = self.transfer.take() {
            if let Some(reply) = t.reply {
                let _ = reply.send(Err(TransferError::Stopped(NodeStopped {
                    reason: "node stopped".into(),
                })));
            }
        }
        self.lease_waiters.clear();
        self.transport.close();
        let mut last = self.last_published.clone();
        self.metrics
            .set_state(last.term, role_code(Role::Stopped), 0, false);
        last.role = Role::Stopped;
        last.leased = false;
        last.leader = None;
        self.leadership.send_replace(last);
        info!(self.logger, "driver stopped");
        match stop {
            StopKind::Graceful(Some(r)) | StopKind::Killed(r) => {
                let _ = r.send(());
            }
            _ => {}
        }
        result
    }
}

fn role_code(r: Role) -> u64 {
    match r {
        Role::Follower => 0,
        Role::PreCandidate => 1,
        Role::Candidate => 2,
        Role::Leader => 3,
        Role::Stopped => 4,
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn decode_ctx(ctx: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = ctx.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// A logger that drops everything, for nodes started without one.
pub(crate) fn discard_logger() -> Logger {
    Logger::root(slog::Discard, o!())
}
