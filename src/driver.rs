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
//! an election timeout after it starts (except a handover's vote: the leader that asked
//! for it revoked its lease first), so no new leader can be elected before the lease
//! ends. The lease is revoked the moment it runs out unrenewed, the term moves on, the
//! node steps down, hands over or stops.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;

use raft::eraftpb::{
    ConfChange, ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2, Entry,
    EntryType, Message, MessageType,
};
use raft::prelude::RawNode;
use raft::StateRole;
use slog::{debug, error, info, o, warn, Logger};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::clock::{LocalClock, Stamp};
use crate::config::{ReadMode, Timing};
use crate::election_rng::ElectionTimeouts;
use crate::error::{
    LostReason, MembershipError, NodeStopped, StopCause, StorageError, TransferError,
};
use crate::history::{History, TenureRecord, TenureStart};
use crate::lease::{FencingToken, Lease, LeaseShared};
use crate::metrics::Metrics;
use crate::mutation;
use crate::node::{Leadership, Membership, Role, Status};
use crate::peer_input::{self, Local, RefusalLog, Verdict};
use crate::state::{decode_addrs, encode_addrs, Applied, GroupState};
use crate::storage::{RaftStore, ReadyWrite};
use crate::transport::{Hello, Inbound, NodeId, Standing, Transport};

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
    /// Role, term, membership, health.
    Status { reply: oneshot::Sender<Status> },
    /// Change the membership or drain a node (leader only).
    ChangeMembers {
        change: MemberChange,
        reply: oneshot::Sender<Result<Membership, MembershipError>>,
    },
}

/// A change an operator asks for.
#[derive(Debug, Clone)]
pub(crate) enum MemberChange {
    AddLearner(NodeId, SocketAddr),
    Promote(NodeId),
    Remove(NodeId),
    Replace {
        old: NodeId,
        new: NodeId,
    },
    /// As `Replace`, but the group stays joint until a leader leaves explicitly (tests).
    ReplaceExplicit {
        old: NodeId,
        new: NodeId,
    },
    Drain(NodeId, bool),
}

/// A node that left the group, told so until `until`.
struct Farewell {
    to: NodeId,
    /// The last index it acknowledged before the removal, if this node led then.
    matched: Option<u64>,
    /// The index of the conf change that removed it.
    removal: u64,
    until: Instant,
    last_sent: Option<Instant>,
}

/// A proposed membership change or drain, answered once its entry is applied.
struct PendingChange {
    /// The entry's index and term: the same index and term mean the same entry.
    index: u64,
    term: u64,
    what: String,
    /// Answer only once the group has also left the joint configuration.
    until_not_joint: bool,
    /// A conf change (not a drain): only one may be in flight.
    conf: bool,
    /// The entry is applied (waiting for the joint configuration to be left).
    applied: bool,
    /// Another entry was applied at `index`: a new leader overwrote the proposal.
    superseded: bool,
    deadline: Instant,
    reply: Option<oneshot::Sender<Result<Membership, MembershipError>>>,
}

/// A ReadIndex round in flight.
struct Round {
    /// When `read_index` was called, on both clocks: no acknowledgement can predate it.
    sent: Stamp,
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
    /// The replicated state restored from the store's snapshot, and that snapshot's index.
    pub state: GroupState,
    pub applied: u64,
    /// The peers given in the configuration (their addresses win over replicated ones).
    pub configured: BTreeSet<NodeId>,
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
    /// The replicated state the log builds: history, drained nodes, addresses.
    state: GroupState,
    configured: BTreeSet<NodeId>,
    /// Compact at the next chance even below the threshold (after a conf change, so a
    /// node that joins gets a snapshot whose membership includes it).
    force_compact: bool,
    pending_changes: Vec<PendingChange>,
    /// Nodes that just left the group: until `until`, the leader resends them the
    /// entries up to their removal with its commit index (raft-rs stops replicating to a
    /// node the moment the removal applies, so it would never learn it was removed), and
    /// the transport keeps them; then they are forgotten.
    farewells: Vec<Farewell>,
    /// When each peer was last heard from (any message): raft-rs's `recent_active` is
    /// reset at every check-quorum and only means "heard since the last check".
    last_heard: BTreeMap<NodeId, Instant>,
    /// Whether the applied configuration is joint (kept here: raft-rs only tells by
    /// building a whole `ConfState`). Set where the configuration changes: start,
    /// snapshots, conf changes.
    joint: bool,
    /// A MsgTimeoutNow that arrived while this node was drained (see `on_inbound`).
    held_timeout_now: Option<(Message, Instant)>,
    /// The term in which this leader entered a joint configuration meant to be left
    /// explicitly (a test hook): it does not leave it itself.
    explicit_joint_term: Option<u64>,
    /// The index of the last entry applied.
    applied: u64,
    history_retention: usize,
    /// Compact the log when this many applied entries sit above the last snapshot.
    compact_after: u64,
    /// The term this node recorded its tenure for (one record per tenure).
    recorded_term: u64,
    /// The term a leadership transfer to this node (MsgTimeoutNow) would start.
    handover_term: Option<u64>,
    /// The term in which this node, leading, last sent MsgTimeoutNow: it never holds a
    /// lease in that term again (docs/design.md, section 4).
    timeout_now_sent: Option<u64>,
    /// raft-rs panicked: the RawNode is never used again (the driver stops).
    raft_panicked: bool,
    /// Nesting of [`Driver::guarded`] calls (only the outermost catches).
    guard_depth: u32,
    /// Rate limit of the warnings about refused peer messages.
    refusals: RefusalLog,

    /// Until then, vote and pre-vote requests are dropped: a restarted node has forgotten
    /// when it last heard from a leader that may still hold a lease.
    quiet_until: Instant,
    /// A base for the lease's atomic clock.
    epoch: Instant,

    /// The lease validity earned by acknowledged rounds in the current leader term (on
    /// both clocks: it runs out when either says so).
    lease_until: Option<Stamp>,
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
    /// What this node last told the transport to say to peers (`update_hello`).
    hello: Option<Hello>,
}

enum StopKind {
    Graceful(Option<oneshot::Sender<()>>),
    Killed(oneshot::Sender<()>),
    Failed(StopCause),
    Dropped,
}

impl<S: RaftStore> Driver<S> {
    pub(crate) fn new(parts: DriverParts<S>) -> Self {
        let now = parts.clock.now();
        let id = parts.raw.raft.id;
        let initial = parts.leadership.borrow().clone();
        let joint = joint_config(&parts.raw);
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
            state: parts.state,
            configured: parts.configured,
            force_compact: false,
            pending_changes: Vec::new(),
            explicit_joint_term: None,
            farewells: Vec::new(),
            held_timeout_now: None,
            joint,
            last_heard: BTreeMap::new(),
            applied: parts.applied,
            history_retention: parts.history_retention,
            compact_after: parts.compact_after.max(1),
            recorded_term: 0,
            handover_term: None,
            timeout_now_sent: None,
            raft_panicked: false,
            guard_depth: 0,
            refusals: RefusalLog::new(std::time::Duration::from_secs(10)),
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
            hello: None,
        }
    }

    /// Runs until shutdown, kill, a fatal error, or every handle is dropped.
    pub(crate) async fn run(mut self) -> Result<(), NodeStopped> {
        // Ticks on this node's clock: a stalled clock stalls them, as in a frozen guest.
        let mut ticker = self.clock.ticker(self.timing.tick);
        info!(self.logger, "driver started"; "term" => self.raw.raft.term,
              "quiet_ms" => self.timing.election_timeout().as_millis() as u64);
        // Replay the committed log above the snapshot (history, drains, conf changes)
        // before anything else, so the membership is current from the first message on.
        self.apply_addrs(&self.state.addrs.clone());
        self.handle_ready();
        self.publish();
        self.update_hello();
        loop {
            self.redraw_election_timeout();
            // A stalled process must not act on a lease that ran out while it slept
            // (suspended: by the boot-time clock): check before anything else.
            self.expire_lease(self.clock.stamp());
            let deadline = self.lease.as_ref().map(|l| l.valid_until());
            let clock = self.clock.clone();
            tokio::select! {
                biased;
                cmd = self.commands.recv() => match cmd {
                    Some(cmd) => {
                        self.guarded(|| "handling a command".into(), |d| {
                            d.on_command(cmd);
                            while let Ok(cmd) = d.commands.try_recv() {
                                d.on_command(cmd);
                            }
                        });
                    }
                    None => {
                        // Every Node and Lease handle is gone: leave gracefully.
                        self.guarded(|| "shutting down".into(), |d| d.begin_shutdown(None));
                        if self.stop.is_none() && self.shutdown.is_none() {
                            self.stop = Some(StopKind::Dropped);
                        }
                    }
                },
                _ = sleep_until_opt(&clock, deadline) => {
                    self.expire_lease(self.clock.stamp());
                }
                inbound = self.inbound.recv() => {
                    match inbound {
                        Some(item) => {
                            self.on_inbound(item);
                            for _ in 0..256 {
                                if self.stop.is_some() {
                                    break; // a fatal message or a panic: stop here
                                }
                                match self.inbound.try_recv() {
                                    Ok(item) => self.on_inbound(item),
                                    Err(_) => break,
                                }
                            }
                        }
                        None => {
                            // The transport is gone: nothing can reach us any more.
                            self.fail(StopCause::TransportClosed);
                        }
                    }
                }
                _ = ticker.tick() => {
                    self.guarded(|| "ticking".into(), |d| d.raw.tick());
                    self.update_health();
                }
            }
            if self.stop.is_none() {
                self.handle_ready();
            }
            if self.stop.is_none() {
                let now = self.clock.stamp();
                self.guarded(
                    || "acting on a Ready (leases, handover, membership)".into(),
                    |d| d.after_ready(now),
                );
                self.update_hello();
            }
            if let Some(stop) = self.stop.take() {
                return self.finish(stop);
            }
        }
    }

    /// Tells the transport what to say to peers when it connects: joining until this
    /// node has the group's state, then a member with its term (pristine while nothing
    /// happened since founding).
    fn update_hello(&mut self) {
        let raft = &self.raw.raft;
        let hello = if self.role() == Role::Joining {
            Hello {
                group: self.state.group,
                standing: Standing::Joining,
            }
        } else {
            Hello::member(
                self.state.group,
                raft.term,
                raft.vote,
                raft.raft_log.last_index(),
            )
        };
        if self.hello != Some(hello) {
            self.transport.set_hello(hello);
            self.hello = Some(hello);
        }
    }

    /// With a seeded election RNG: replaces any timeout raft-rs drew since the last
    /// turn of the loop (before the next tick reads it).
    fn redraw_election_timeout(&mut self) {
        if let Some(t) = &mut self.election_timeouts {
            t.redraw(&mut self.raw.raft);
        }
    }

    /// Judges and steps one inbound item (a panic in raft-rs stops the driver).
    fn on_inbound(&mut self, item: Inbound) {
        let during = match &item {
            Inbound::Message(m) => format!(
                "stepping {:?} from node {} (term {})",
                m.get_msg_type(),
                m.from,
                m.term
            ),
            Inbound::Unreachable(peer) => format!("reporting node {peer} unreachable"),
            Inbound::Hello { from, .. } => format!("noting node {from}'s hello"),
        };
        self.guarded(|| during, |d| d.inbound_item(item));
    }

    fn inbound_item(&mut self, item: Inbound) {
        match item {
            Inbound::Message(m) => {
                // Only what a correct peer may send, in a state where it may send it,
                // reaches raft-rs (docs/design.md, section 7).
                match peer_input::admit(&m, &self.local_view(m.from)) {
                    Verdict::Admit => {}
                    Verdict::Refuse(r) => {
                        if !matches!(
                            r,
                            peer_input::Refusal::BadSender | peer_input::Refusal::NotForThisNode
                        ) {
                            self.last_heard.insert(m.from, self.clock.now());
                        }
                        self.refused(r, &m);
                        return;
                    }
                    Verdict::Fatal(cause) => {
                        error!(self.logger, "stopping: this node lost entries it had acknowledged";
                               "from" => m.from, "type" => ?m.get_msg_type(), "term" => m.term,
                               "commit" => m.commit, "last_index" => self.raw.raft.raft_log.last_index(),
                               "detail" => %cause);
                        self.fail(cause);
                        return;
                    }
                }
                self.last_heard.insert(m.from, self.clock.now());
                let t = m.get_msg_type();
                if t == MessageType::MsgTimeoutNow && self.state.is_drained(self.id) {
                    // Drained nodes do not take over. The leader checked its own (newer)
                    // state before sending, so an undrain may just not be applied here
                    // yet: hold the message for a heartbeat before refusing it.
                    self.held_timeout_now = Some((m, self.clock.now()));
                    return;
                }
                if t == MessageType::MsgTimeoutNow {
                    // The leader hands over to us: the election it starts is a handover.
                    self.handover_term = Some(self.raw.raft.term + 1);
                }
                // A handover's vote request passes: the leader that asked for it (with
                // MsgTimeoutNow, in its own term) revoked its lease before asking.
                let handover_vote = t == MessageType::MsgRequestVote
                    && m.context.as_ref() == raft::CAMPAIGN_TRANSFER;
                if matches!(
                    t,
                    MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
                ) && !handover_vote
                    && self.clock.now() < self.quiet_until
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
            // Hellos matter before the group exists (founding) and at the transport
            // (groups are checked there).
            Inbound::Hello { .. } => {}
        }
    }

    /// What [`peer_input::admit`] needs to know of this node, for a message from `from`.
    fn local_view(&self, from: NodeId) -> Local {
        let raft = &self.raw.raft;
        Local {
            id: self.id,
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

    /// Counts a refused peer message; warns about it at most once per reason every 10 s.
    fn refused(&mut self, r: peer_input::Refusal, m: &Message) {
        self.metrics.peer_refused_one(r);
        let t = m.get_msg_type();
        match self.refusals.note(r, self.clock.now()) {
            Some(suppressed) => warn!(self.logger, "refused a message from a peer";
                "reason" => r.as_str(), "from" => m.from, "type" => ?t, "term" => m.term,
                "index" => m.index, "commit" => m.commit,
                "refused_since_last_warning" => suppressed),
            None => debug!(self.logger, "refused a message from a peer";
                "reason" => r.as_str(), "from" => m.from, "type" => ?t, "term" => m.term),
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
                    if self.read_mode == ReadMode::LeaseBased && l.is_valid_at(self.clock.stamp()) {
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
                    let _ = reply.send(Err(TransferError::Stopped(NodeStopped::shutdown(
                        "shutting down",
                    ))));
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
                let _ = reply.send(self.state.history.records());
            }
            Command::Status { reply } => {
                let _ = reply.send(self.status());
            }
            Command::ChangeMembers { change, reply } => {
                let now = self.clock.now();
                match self.propose_change(change, now) {
                    Ok(mut pending) => {
                        pending.reply = Some(reply);
                        self.pending_changes.push(pending);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
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
            Some(t) if self.state.is_drained(t) => return Err(TransferError::Drained(t)),
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
            .filter(|(id, _)| {
                **id != self.id && voters.contains(**id) && !self.state.is_drained(**id)
            })
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
                            let _ = r.send(Err(TransferError::Stopped(NodeStopped::shutdown(
                                "shutting down",
                            ))));
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

    fn fail(&mut self, cause: StopCause) {
        if self.stop.is_none() {
            self.stop = Some(StopKind::Failed(cause));
        }
    }

    /// Runs `f` on the driver, catching a panic inside it (raft-rs asserts its invariants
    /// by panicking): a panic stops the driver with [`StopCause::RaftPanicked`], logged
    /// with `during`, and the RawNode is never used again. `None` after a panic, or when
    /// an earlier one stopped the driver. Every use of the RawNode in the loop runs
    /// inside one; nested calls run `f` as is, so that a panic unwinds to the outermost
    /// and nothing after it touches the RawNode.
    fn guarded<T>(
        &mut self,
        during: impl FnOnce() -> String,
        f: impl FnOnce(&mut Self) -> T,
    ) -> Option<T> {
        if self.raft_panicked {
            return None;
        }
        if self.guard_depth > 0 {
            return Some(f(self));
        }
        self.guard_depth += 1;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut *self)));
        self.guard_depth = 0;
        match result {
            Ok(v) => Some(v),
            Err(payload) => {
                let message = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "(no message)".into());
                let during = during();
                error!(self.logger, "raft-rs panicked; stopping this node (its raft state is not used again)";
                       "during" => &during, "panic" => &message);
                self.raft_panicked = true;
                self.fail(StopCause::RaftPanicked { during, message });
                None
            }
        }
    }

    /// One pass over raft-rs's Ready ([`Driver::ready_pass`]); a storage error or a panic
    /// stops the driver.
    fn handle_ready(&mut self) {
        match self.guarded(|| "handling a Ready".into(), |d| d.ready_pass()) {
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
    fn ready_pass(&mut self) -> Result<(), StorageError> {
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
        // 4. Apply.
        if let Some((state, index)) = snapshot_state {
            self.joint = joint_config(&self.raw);
            info!(self.logger, "installed a snapshot of the group"; "index" => index);
            self.apply_addrs(&state.addrs);
            self.state = state;
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

    fn send(&mut self, msgs: Vec<Message>) {
        let drained = self.state.is_drained(self.id);
        for m in msgs {
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

    fn apply(&mut self, entries: Vec<Entry>) -> Result<(), StorageError> {
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

    /// Applies a committed conf change. The new membership is not written on its own:
    /// it goes to disk with a snapshot taken right after (so the stored membership is
    /// always a snapshot's, and conf changes above it are replayed exactly once).
    fn apply_conf_change(&mut self, cc: &ConfChangeV2, index: u64) -> Result<(), StorageError> {
        let before = self.members_now();
        let leading = self.raw.raft.state == StateRole::Leader;
        let matched: BTreeMap<NodeId, u64> = self
            .raw
            .raft
            .prs()
            .iter()
            .map(|(id, p)| (*id, p.matched))
            .collect();
        match self.raw.apply_conf_change(cc) {
            Ok(cs) => {
                self.joint = !cs.voters_outgoing.is_empty();
                info!(self.logger, "membership changed";
                      "voters" => ?cs.voters, "learners" => ?cs.learners,
                      "outgoing" => ?cs.voters_outgoing);
                let added = decode_addrs(&cc.context);
                for (id, addr) in &added {
                    self.state.addrs.insert(*id, *addr);
                }
                self.apply_addrs(&added);
                let after = self.members_now();
                for gone in before.difference(&after) {
                    self.state.addrs.remove(gone);
                    self.state.drained.remove(gone);
                    if *gone != self.id {
                        info!(self.logger, "node left the group"; "node" => *gone);
                        self.farewells.push(Farewell {
                            to: *gone,
                            matched: matched.get(gone).copied().filter(|_| leading),
                            removal: index,
                            until: self.clock.now() + self.timing.election_timeout() * 3,
                            last_sent: None,
                        });
                    }
                }
                self.force_compact = true;
                Ok(())
            }
            Err(e) => {
                warn!(self.logger, "conf change rejected by raft"; "error" => %e);
                Ok(())
            }
        }
    }

    /// Tells nodes that left the group so (see `farewells`), then forgets them.
    fn say_farewells(&mut self, now: Instant) {
        if self.farewells.is_empty() {
            return;
        }
        let mut keep = Vec::new();
        for mut f in std::mem::take(&mut self.farewells) {
            if now >= f.until {
                self.transport.set_peer(f.to, None);
                continue;
            }
            let due = f
                .last_sent
                .is_none_or(|t| now.duration_since(t) >= self.timing.heartbeat_interval());
            if due && self.raw.raft.state == StateRole::Leader {
                if let Some(m) = self.farewell_message(&f) {
                    self.transport.send(m);
                }
                f.last_sent = Some(now);
            }
            keep.push(f);
        }
        self.farewells = keep;
    }

    /// An append carrying the entries up to the removal and a commit index covering it.
    fn farewell_message(&self, f: &Farewell) -> Option<Message> {
        let prev = f.matched?;
        let log_term = self.store.term(prev).ok()?;
        let entries = if prev < f.removal {
            self.store
                .entries(
                    prev + 1,
                    f.removal + 1,
                    Some(1 << 20),
                    raft::GetEntriesContext::empty(false),
                )
                .ok()?
        } else {
            Vec::new()
        };
        let last = prev + entries.len() as u64;
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.to = f.to;
        m.from = self.id;
        m.term = self.raw.raft.term;
        m.index = prev;
        m.log_term = log_term;
        m.commit = f.removal.min(last).min(self.raw.raft.raft_log.committed);
        m.entries = entries.into();
        Some(m)
    }

    /// Every member of the applied configuration (voters of both halves, learners).
    fn members_now(&self) -> BTreeSet<NodeId> {
        let cs = self.raw.raft.prs().conf().to_conf_state();
        cs.voters
            .iter()
            .chain(&cs.voters_outgoing)
            .chain(&cs.learners)
            .chain(&cs.learners_next)
            .copied()
            .collect()
    }

    fn is_voter(&self, id: NodeId) -> bool {
        self.raw.raft.prs().conf().voters().contains(id)
    }

    /// Tells the transport where replicated members listen (configured peers keep the
    /// address they were started with).
    fn apply_addrs(&self, addrs: &BTreeMap<NodeId, SocketAddr>) {
        for (id, addr) in addrs {
            if *id != self.id && !self.configured.contains(id) {
                self.transport.set_peer(*id, Some(*addr));
            }
        }
    }

    /// Marks the pending changes whose entry is `index`: applied if the entry is theirs
    /// (same term), superseded otherwise (a new leader overwrote the proposal).
    fn entry_applied(&mut self, index: u64, term: u64) {
        for p in self.pending_changes.iter_mut() {
            if p.index == index && !p.applied {
                if p.term == term {
                    p.applied = true;
                } else {
                    p.superseded = true; // answered in `progress_changes`
                }
            }
        }
    }

    /// Answers pending changes that are done, superseded or out of time.
    fn progress_changes(&mut self, now: Instant) {
        if self.pending_changes.is_empty() {
            return;
        }
        let joint = self.is_joint();
        let members = self.membership();
        let leader_hint = (self.raw.raft.leader_id != 0).then_some(self.raw.raft.leader_id);
        let mut keep = Vec::new();
        for p in self.pending_changes.drain(..) {
            let result = if p.applied && !(p.until_not_joint && joint) {
                Some(Ok(members.clone()))
            } else if p.superseded {
                Some(Err(MembershipError::NotLeader { leader_hint }))
            } else if now >= p.deadline {
                Some(Err(MembershipError::TimedOut {
                    what: p.what.clone(),
                }))
            } else {
                None
            };
            match (result, p.reply) {
                (Some(r), Some(reply)) => {
                    let _ = reply.send(r);
                }
                (Some(_), None) => {}
                (None, reply) => keep.push(PendingChange { reply, ..p }),
            }
        }
        self.pending_changes = keep;
    }

    fn is_joint(&self) -> bool {
        self.joint
    }

    /// Validates and proposes a membership change or drain (leader only).
    fn propose_change(
        &mut self,
        change: MemberChange,
        now: Instant,
    ) -> Result<PendingChange, MembershipError> {
        let raft = &self.raw.raft;
        if raft.state != StateRole::Leader {
            let leader_hint = (raft.leader_id != 0).then_some(raft.leader_id);
            return Err(MembershipError::NotLeader { leader_hint });
        }
        let m = self.membership();
        self.check_quorum_now(&m)?;
        let in_flight = self.change_in_flight();
        let commit = raft.raft_log.committed;
        let matched = |id: NodeId| raft.prs().get(id).map_or(0, |p| p.matched);
        let single = |id, t| {
            let mut c = ConfChangeSingle {
                node_id: id,
                ..Default::default()
            };
            c.set_change_type(t);
            c
        };
        let mut cc = ConfChangeV2::default();
        let mut until_not_joint = false;
        let what;
        match change {
            MemberChange::Drain(id, drained) => {
                if !m.contains(id) {
                    return Err(MembershipError::UnknownNode(id));
                }
                let leaders_left = m
                    .voters
                    .iter()
                    .filter(|v| **v != id && !m.drained.contains(v))
                    .count();
                if drained && leaders_left == 0 {
                    return Err(MembershipError::WouldLoseQuorum {
                        reason: format!("draining node {id} would leave no voter that may lead"),
                    });
                }
                let data = GroupState::drain_entry(id, drained);
                let what = format!("{} node {id}", if drained { "drain" } else { "undrain" });
                return self.propose_entry(data, what, now);
            }
            _ if in_flight => return Err(MembershipError::ChangeInFlight),
            MemberChange::AddLearner(id, addr) => {
                if id == 0 {
                    return Err(MembershipError::UnknownNode(0));
                }
                if m.contains(id) {
                    return Err(MembershipError::AlreadyMember(id));
                }
                cc.changes.push(single(id, ConfChangeType::AddLearnerNode));
                let mut addrs = BTreeMap::new();
                addrs.insert(id, addr);
                cc.context = encode_addrs(&addrs).into();
                what = format!("adding node {id} as a learner");
            }
            MemberChange::Promote(id) => {
                if !m.contains(id) {
                    return Err(MembershipError::UnknownNode(id));
                }
                if !m.learners.contains(&id) {
                    return Err(MembershipError::NotALearner(id));
                }
                if matched(id) < commit {
                    return Err(MembershipError::LearnerBehind {
                        id,
                        matched: matched(id),
                        commit,
                    });
                }
                cc.changes.push(single(id, ConfChangeType::AddNode));
                what = format!("promoting node {id}");
            }
            MemberChange::Remove(id) => {
                if !m.contains(id) {
                    return Err(MembershipError::UnknownNode(id));
                }
                if m.is_voter(id) {
                    let rest: Vec<NodeId> = m.voters.iter().copied().filter(|v| *v != id).collect();
                    if rest.is_empty() {
                        return Err(MembershipError::WouldLoseQuorum {
                            reason: format!("node {id} is the last voter"),
                        });
                    }
                    self.check_reachable_quorum(&rest)?;
                }
                cc.changes.push(single(id, ConfChangeType::RemoveNode));
                what = format!("removing node {id}");
            }
            MemberChange::Replace { old, new } | MemberChange::ReplaceExplicit { old, new } => {
                if !m.is_voter(old) {
                    return Err(MembershipError::UnknownNode(old));
                }
                if !m.contains(new) {
                    return Err(MembershipError::UnknownNode(new));
                }
                if !m.learners.contains(&new) {
                    return Err(MembershipError::NotALearner(new));
                }
                if matched(new) < commit {
                    return Err(MembershipError::LearnerBehind {
                        id: new,
                        matched: matched(new),
                        commit,
                    });
                }
                let rest: Vec<NodeId> = m
                    .voters
                    .iter()
                    .copied()
                    .filter(|v| *v != old)
                    .chain([new])
                    .collect();
                self.check_reachable_quorum(&rest)?;
                cc.changes.push(single(new, ConfChangeType::AddNode));
                cc.changes.push(single(old, ConfChangeType::RemoveNode));
                if matches!(change, MemberChange::ReplaceExplicit { .. }) {
                    cc.set_transition(ConfChangeTransition::Explicit);
                    self.explicit_joint_term = Some(self.raw.raft.term);
                } else {
                    until_not_joint = true;
                }
                what = format!("replacing node {old} by node {new}");
            }
        }
        if let Err(e) = self.raw.propose_conf_change(vec![], cc) {
            warn!(self.logger, "conf change not proposed"; "error" => %e);
            return Err(MembershipError::ChangeInFlight);
        }
        let index = self.raw.raft.raft_log.last_index();
        if self.raw.raft.pending_conf_index != index {
            // raft-rs turned it into an empty entry (it saw a change in flight).
            return Err(MembershipError::ChangeInFlight);
        }
        info!(self.logger, "membership change proposed"; "what" => &what, "index" => index);
        Ok(self.pending(index, what, true, until_not_joint, now))
    }

    fn propose_entry(
        &mut self,
        data: Vec<u8>,
        what: String,
        now: Instant,
    ) -> Result<PendingChange, MembershipError> {
        if let Err(e) = self.raw.propose(vec![], data) {
            warn!(self.logger, "proposal dropped"; "what" => &what, "error" => %e);
            return Err(MembershipError::TimedOut { what });
        }
        let index = self.raw.raft.raft_log.last_index();
        Ok(self.pending(index, what, false, false, now))
    }

    fn pending(
        &self,
        index: u64,
        what: String,
        conf: bool,
        until_not_joint: bool,
        now: Instant,
    ) -> PendingChange {
        let wait = (self.timing.election_timeout() * 5).max(std::time::Duration::from_secs(2));
        PendingChange {
            index,
            term: self.raw.raft.term,
            what,
            conf,
            until_not_joint,
            applied: false,
            superseded: false,
            deadline: now + wait,
            reply: None,
        }
    }

    /// Refuses a change after which the voters this leader reaches now (itself included)
    /// would not form a quorum of `voters`.
    fn check_reachable_quorum(&self, voters: &[NodeId]) -> Result<(), MembershipError> {
        let reachable = voters.iter().filter(|v| self.heard_recently(**v)).count();
        let quorum = voters.len() / 2 + 1;
        if reachable < quorum {
            return Err(MembershipError::WouldLoseQuorum {
                reason: format!(
                    "the new group {voters:?} needs {quorum} voters, but only {reachable} are reachable now"
                ),
            });
        }
        Ok(())
    }

    /// Refuses at once when this leader does not reach a quorum (of both halves while
    /// joint): the change could not commit, and an operator should hear why.
    fn check_quorum_now(&self, m: &Membership) -> Result<(), MembershipError> {
        // The lease ran out unrenewed (on either clock): no quorum acknowledged a round
        // for a lease period.
        let lapsed = self
            .lease_until
            .is_some_and(|u| !self.clock.stamp().before(u));
        let active = |v: &NodeId| self.heard_recently(*v);
        let majority = |set: &[NodeId]| {
            set.is_empty() || set.iter().filter(|v| active(v)).count() > set.len() / 2
        };
        if !lapsed && majority(&m.voters) && majority(&m.outgoing) {
            return Ok(());
        }
        let mut voters: Vec<NodeId> = m.voters.iter().chain(&m.outgoing).copied().collect();
        voters.sort_unstable();
        voters.dedup();
        let reachable = if lapsed {
            1 // only itself, as far as its lease can tell
        } else {
            voters.iter().filter(|v| active(v)).count()
        };
        Err(MembershipError::NoQuorum { reachable, voters })
    }

    /// Whether `id` is this node or was heard from within an election timeout.
    fn heard_recently(&self, id: NodeId) -> bool {
        id == self.id
            || self.last_heard.get(&id).is_some_and(|t| {
                self.clock.now().saturating_duration_since(*t) < self.timing.election_timeout()
            })
    }

    fn change_in_flight(&self) -> bool {
        self.raw.raft.has_pending_conf()
            || self.is_joint()
            || self.pending_changes.iter().any(|p| p.conf && !p.applied)
    }

    /// The applied membership, drains and addresses.
    fn membership(&self) -> Membership {
        let cs = self.raw.raft.prs().conf().to_conf_state();
        let sorted = |v: &[NodeId]| {
            let mut v = v.to_vec();
            v.sort_unstable();
            v.dedup();
            v
        };
        let mut learners = cs.learners.clone();
        learners.extend(&cs.learners_next);
        Membership {
            voters: sorted(&cs.voters),
            learners: sorted(&learners),
            outgoing: sorted(&cs.voters_outgoing),
            drained: self.state.drained.iter().copied().collect(),
            addrs: self
                .state
                .addrs
                .iter()
                .map(|(id, a)| (*id, a.to_string()))
                .collect(),
        }
    }

    fn status(&self) -> Status {
        let raft = &self.raw.raft;
        let (reachable, healthy) = self.health();
        Status {
            id: self.id,
            term: raft.term,
            role: self.last_published.role,
            leader: (raft.leader_id != 0).then_some(raft.leader_id),
            leased: self.lease.is_some(),
            members: self.membership(),
            quorum_healthy: healthy,
            peers_reachable: reachable,
            commit: raft.raft_log.committed,
            applied: self.applied,
            change_in_flight: self.change_in_flight(),
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
                    .renew_round_trip(self.clock.now().saturating_duration_since(round.sent.mono));
                let until = round.sent.add(self.timing.lease_duration());
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
    fn after_ready(&mut self, at: Stamp) {
        let now = at.mono;
        let raft = &self.raw.raft;
        let term = raft.term;
        // A leader that is no longer a voter (removed) keeps raft-rs's leader role until
        // it hands over, but may not hold a lease or act.
        let leading = raft.state == StateRole::Leader && self.is_voter(self.id);

        // A lease lives only while this node leads in its term. A leader that applied its
        // own removal hands over (it stops acting now, before it sends MsgTimeoutNow).
        let removed_leader = raft.state == StateRole::Leader && !leading;
        if let Some(l) = &self.lease {
            if l.token.0 != term {
                self.revoke(LostReason::TermChanged);
            } else if removed_leader {
                self.revoke(LostReason::HandedOver);
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
        self.end_failed_handover();
        self.expire_lease(at);
        self.progress_changes(now);
        self.leader_duties(now);
        self.say_farewells(now);
        if let Some((m, at)) = self.held_timeout_now.take() {
            if !self.state.is_drained(self.id) {
                self.on_inbound(Inbound::Message(m));
                self.handle_ready();
            } else if now.duration_since(at) < self.timing.heartbeat_interval() * 2 {
                self.held_timeout_now = Some((m, at));
            } else {
                info!(self.logger, "drained: refused to take over leadership"; "from" => m.from);
            }
        }

        // The duties above may have moved the term or the role.
        let term = self.raw.raft.term;
        let leading = self.raw.raft.state == StateRole::Leader && self.is_voter(self.id);
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
            self.lease_until = Some(at.add(self.timing.lease_duration()));
            if let Some(l) = &self.lease {
                l.extend(at.add(self.timing.lease_duration()));
            }
        }
        if leading
            && !handing_over
            && self.may_hold_lease_in(term)
            && self.raw.raft.commit_to_current_term()
        {
            // Grant or extend the tenure.
            if let Some(until) = self.lease_until.filter(|u| at.before(*u)) {
                if self.lease.is_none() {
                    let shared =
                        LeaseShared::new(FencingToken(term), self.epoch, until, self.clock.clone());
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
                self.start_round(at, waiters);
                // The round's heartbeats are in a new Ready: send them now.
                self.handle_ready();
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
            .filter(|(_, r)| now.duration_since(r.sent.mono) > horizon)
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

    /// What a leader owes the group beyond raft-rs: hand over when drained or removed,
    /// and finish a joint configuration a previous leader left behind.
    fn leader_duties(&mut self, now: Instant) {
        if self.raw.raft.state != StateRole::Leader || self.shutdown.is_some() {
            return;
        }
        let removed = !self.is_voter(self.id);
        let drained = self.state.is_drained(self.id);
        if (removed || drained)
            && self.transfer.is_none()
            && self.raw.raft.lead_transferee.is_none()
        {
            let why = if removed {
                "removed from the group"
            } else {
                "drained"
            };
            match self.start_transfer(None) {
                Ok(to) => {
                    info!(self.logger, "handing leadership over"; "why" => why, "to" => to);
                    self.transfer = Some(PendingTransfer {
                        to,
                        deadline: now + self.timing.election_timeout() * 2,
                        reply: None,
                    });
                }
                Err(e) => {
                    warn!(self.logger, "cannot hand leadership over"; "why" => why, "error" => %e);
                    if removed {
                        // Nobody to hand to: stop leading; the voters elect among themselves.
                        self.revoke(LostReason::SteppedDown);
                        let term = self.raw.raft.term;
                        self.raw.raft.become_follower(term + 1, raft::INVALID_ID);
                    }
                }
            }
            return;
        }
        let raft = &self.raw.raft;
        if self.is_joint()
            && !raft.has_pending_conf()
            && raft.commit_to_current_term()
            && self.explicit_joint_term != Some(raft.term)
        {
            // A joint configuration nobody is leaving (its leader crashed, or the change
            // asked for an explicit leave): leave it, so the group does not stay joint.
            info!(self.logger, "leaving the joint configuration"; "config" => ?raft.prs().conf());
            if let Err(e) = self
                .raw
                .propose_conf_change(vec![], ConfChangeV2::default())
            {
                debug!(self.logger, "leave-joint not proposed yet"; "error" => %e);
            }
        }
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

    /// Section 4 of docs/design.md: a leader that sent MsgTimeoutNow in term `t` never
    /// holds a lease in `t` again (the forced election that message may still start, at
    /// `t + 1`, skips the voters' in-lease refusal).
    fn may_hold_lease_in(&self, term: u64) -> bool {
        self.timeout_now_sent != Some(term) || mutation::active("lease-after-failed-transfer")
    }

    /// A handover that failed (the transfer is over, and this node still leads in the
    /// term it sent MsgTimeoutNow in) ends in a new election: this node steps down into
    /// the next term, because it may not hold a lease in this one again.
    fn end_failed_handover(&mut self) {
        let raft = &self.raw.raft;
        let term = raft.term;
        if raft.state != StateRole::Leader
            || self.may_hold_lease_in(term)
            || raft.lead_transferee.is_some()
            || self.transfer.is_some()
            || self.shutdown.is_some()
        {
            return;
        }
        warn!(self.logger,
            "leadership transfer failed; stepping down into the next term (a leader that asked for a handover holds no lease in that term again)";
            "term" => term, "next_term" => term + 1);
        self.raw.raft.become_follower(term + 1, raft::INVALID_ID);
        self.handle_ready();
    }

    fn start_round(
        &mut self,
        now: Stamp,
        waiters: Vec<oneshot::Sender<Result<FencingToken, LostReason>>>,
    ) {
        let ctx = self.next_ctx;
        self.next_ctx += 1;
        self.raw.read_index(ctx.to_be_bytes().to_vec());
        let sent = if mutation::active("lease-ignores-boottime") {
            // Broken on purpose (mutation testing): the lease's period is counted on the
            // monotonic clock alone, so time suspended (or stalled but counted by
            // CLOCK_BOOTTIME) does not count against it.
            Stamp {
                boot: std::time::Duration::MAX,
                ..now
            }
        } else {
            now
        };
        self.rounds.insert(
            ctx,
            Round {
                sent,
                term: self.raw.raft.term,
                waiters,
            },
        );
        self.last_round = Some(now.mono);
    }

    fn current_lease(&self) -> Option<Lease> {
        let shared = self.lease.as_ref()?;
        if !shared.is_valid_at(self.clock.stamp()) {
            return None;
        }
        let commands = self.command_tx.upgrade()?;
        Some(Lease {
            shared: shared.clone(),
            commands,
            mode: self.read_mode,
        })
    }

    /// Revokes a lease whose period ran out on either clock.
    fn expire_lease(&mut self, now: Stamp) {
        if let Some(l) = &self.lease {
            if !now.before(l.valid_until()) {
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
        let role = self.role();
        if role != self.last_published.role {
            match role {
                Role::Removed => warn!(self.logger,
                    "this node was removed from the group: it no longer votes or campaigns; stop it"),
                Role::Learner => info!(self.logger, "this node is a learner: it replicates the log but does not vote"),
                Role::Joining => info!(self.logger, "joining: waiting for a member to add this node"),
                _ => {}
            }
        }
        let raft = &self.raw.raft;
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

    /// This node's role: raft-rs's, unless it is not a voter.
    fn role(&self) -> Role {
        let raft = &self.raw.raft;
        if raft.state == StateRole::Leader {
            return Role::Leader; // until a removed leader has handed over
        }
        let conf = raft.prs().conf();
        if !conf.voters().contains(self.id) {
            if conf.learners().contains(&self.id) || conf.learners_next().contains(&self.id) {
                return Role::Learner;
            }
            if raft.prs().iter().len() == 0 {
                return Role::Joining; // no membership at all yet
            }
            return Role::Removed;
        }
        match raft.state {
            StateRole::Follower => Role::Follower,
            StateRole::PreCandidate => Role::PreCandidate,
            StateRole::Candidate => Role::Candidate,
            StateRole::Leader => Role::Leader,
        }
    }

    /// Peers reachable and quorum health, for the metrics.
    fn update_health(&self) {
        let members = self.raw.raft.prs().conf().voters().ids().len() as u64;
        let (reachable, healthy) = self.health();
        self.metrics.set_health(members, reachable, healthy);
    }

    /// Voters reachable (this node included) and whether the quorum looks healthy: a
    /// leader counts voters recently active and needs its lease; a follower counts itself
    /// and the leader it hears.
    fn health(&self) -> (u64, bool) {
        let raft = &self.raw.raft;
        let voters = raft.prs().conf().voters().ids();
        if raft.state == StateRole::Leader {
            let active = raft
                .prs()
                .iter()
                .filter(|(id, _)| {
                    **id != self.id && voters.contains(**id) && self.heard_recently(**id)
                })
                .count() as u64;
            (
                voters.contains(self.id) as u64 + active,
                self.lease.is_some(),
            )
        } else {
            let hears = raft.leader_id != 0 && raft.election_elapsed < raft.election_timeout();
            (1 + hears as u64, hears)
        }
    }

    fn finish(mut self, stop: StopKind) -> Result<(), NodeStopped> {
        let (reason, result) = match &stop {
            StopKind::Graceful(_) | StopKind::Dropped => (LostReason::Shutdown, Ok(())),
            StopKind::Killed(_) => (LostReason::Shutdown, Ok(())),
            StopKind::Failed(cause) => (LostReason::Failed, Err(NodeStopped::new(cause.clone()))),
        };
        self.revoke(reason);
        for (_, r) in std::mem::take(&mut self.rounds) {
            for w in r.waiters {
                let _ = w.send(Err(reason));
            }
        }
        if let Some(t) = self.transfer.take() {
            if let Some(reply) = t.reply {
                let _ = reply.send(Err(TransferError::Stopped(NodeStopped::shutdown(
                    "node stopped",
                ))));
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

/// Whether raft-rs's applied configuration is joint (has an outgoing half).
fn joint_config<S: RaftStore>(raw: &RawNode<S>) -> bool {
    !raw.raft
        .prs()
        .conf()
        .to_conf_state()
        .voters_outgoing
        .is_empty()
}

fn role_code(r: Role) -> u64 {
    match r {
        Role::Follower => 0,
        Role::PreCandidate => 1,
        Role::Candidate => 2,
        Role::Leader => 3,
        Role::Stopped => 4,
        Role::Learner => 5,
        Role::Removed => 6,
        Role::Joining => 7,
        Role::Founding => 8,
    }
}

/// Sleeps until a lease that ends at `deadline` ran out on either of `clock`'s clocks.
async fn sleep_until_opt(clock: &LocalClock, deadline: Option<Stamp>) {
    match deadline {
        Some(d) => clock.sleep_until(d).await,
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
