//! The driver: one task that owns the raft-rs [`RawNode`] and is the only place where
//! raft state changes. Ticks, inbound messages, commands from [`Node`](crate::Node)
//! handles and confirms from [`Lease`] handles arrive by channel; after each event the
//! driver handles raft-rs's `Ready` (one entrance: [`Driver::handle_ready`]) and then
//! does its bookkeeping in named phases ([`Driver::after_ready`]).
//!
//! The arguments the driver implements are in `docs/design.md`: the lease (section 2),
//! the restart quiet period (3), handover (4), persist before send (5), founding and
//! amnesia (6), input from peers (7), clocks (8).
//!
//! | file | concept |
//! |---|---|
//! | `mod.rs` | the loop, start and stop, panics inside raft-rs |
//! | `command.rs` | what `Node` handles ask, and the answers |
//! | `inbound.rs` | messages from peers: admission, quiet period, held handovers |
//! | `ready.rs` | the Ready: persist, send, apply, compact |
//! | `keeper.rs` | the lease's arithmetic and rounds (no I/O, takes `now`) |
//! | `leases.rs` | rounds through raft-rs, granting, renewing, revoking `Lease`s |
//! | `handover.rs` | transfers, shutdown handovers, failed handovers |
//! | `membership.rs` | conf changes, drains, farewells, reachability |
//! | `publish.rs` | leadership, role, health, status, tenure records |

mod command;
mod handover;
mod inbound;
mod keeper;
mod leases;
mod membership;
mod publish;
mod ready;

pub(crate) use command::{Command, MemberChange};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use raft::eraftpb::Message;
use raft::prelude::RawNode;
use slog::{error, info, o, Logger};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::clock::{LocalClock, Stamp};
use crate::config::{ReadMode, Timing};
use crate::election_rng::ElectionTimeouts;
use crate::error::{LostReason, NodeStopped, StopCause, TransferError};
use crate::lease::{ConfirmRequest, Lease, LeaseShared};
use crate::metrics::Metrics;
use crate::mutation;
use crate::peer_input::RefusalLog;
use crate::state::GroupState;
use crate::status::{Leadership, Role};
use crate::storage::RaftStore;
use crate::transport::{Hello, Inbox, NodeId, Standing, Transport};
use keeper::LeaseKeeper;
use membership::{Farewell, PendingChange};
use publish::role_code;

pub(super) struct PendingTransfer {
    pub(super) to: NodeId,
    pub(super) deadline: Instant,
    pub(super) reply: Option<oneshot::Sender<Result<NodeId, TransferError>>>,
}

/// Everything the driver needs at start.
pub(crate) struct DriverParts<S: RaftStore> {
    pub raw: RawNode<S>,
    pub store: S,
    pub transport: Arc<dyn Transport>,
    pub inbound: Inbox,
    pub commands: mpsc::Receiver<Command>,
    /// Confirms from `Lease` handles. Every `Node` and `Lease` handle holds a sender:
    /// when the channel closes, every handle is gone.
    pub confirms: mpsc::Receiver<ConfirmRequest>,
    pub confirm_tx: mpsc::WeakSender<ConfirmRequest>,
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
    /// Seed for the election timeouts (a test hook, `TestHooks::election_seed`).
    pub election_seed: Option<u64>,
    /// Every election timeout at its minimum (a test hook).
    pub election_timeouts_at_minimum: bool,
}

pub(crate) struct Driver<S: RaftStore> {
    id: NodeId,
    raw: RawNode<S>,
    store: S,
    transport: Arc<dyn Transport>,
    inbound: Inbox,
    commands: mpsc::Receiver<Command>,
    /// Every `Node` handle is gone (`Lease` handles may remain).
    commands_closed: bool,
    confirms: mpsc::Receiver<ConfirmRequest>,
    confirm_tx: mpsc::WeakSender<ConfirmRequest>,
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

    /// The lease's arithmetic and rounds (no I/O; see `keeper.rs`).
    keeper: LeaseKeeper,
    /// The tenure handed out to users, while valid.
    lease: Option<Arc<LeaseShared>>,
    lease_waiters: Vec<oneshot::Sender<Lease>>,

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
            commands_closed: false,
            confirms: parts.confirms,
            confirm_tx: parts.confirm_tx,
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
            keeper: LeaseKeeper::new(parts.timing.lease_duration()),
            lease: None,
            lease_waiters: Vec::new(),
            transfer: None,
            shutdown: None,
            stop: None,
            last_published: initial,
            election_timeouts: {
                let t = &parts.timing;
                if parts.election_timeouts_at_minimum {
                    Some(ElectionTimeouts::new(
                        0,
                        id,
                        t.election_ticks,
                        t.election_ticks,
                    ))
                } else {
                    parts.election_seed.map(|seed| {
                        ElectionTimeouts::new(seed, id, t.election_ticks, t.election_ticks_max)
                    })
                }
            },
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
                cmd = self.commands.recv(), if !self.commands_closed => match cmd {
                    Some(cmd) => {
                        self.guarded(|| "handling a command".into(), |d| {
                            d.on_command(cmd);
                            while let Ok(cmd) = d.commands.try_recv() {
                                d.on_command(cmd);
                            }
                        });
                    }
                    // Every Node handle is gone; Lease handles may still confirm.
                    None => self.commands_closed = true,
                },
                req = self.confirms.recv() => match req {
                    Some(req) => {
                        self.on_confirm(req);
                        while let Ok(req) = self.confirms.try_recv() {
                            self.on_confirm(req);
                        }
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
                                    Some(item) => self.on_inbound(item),
                                    None => break,
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
                    .or_else(|| {
                        payload
                            .downcast_ref::<&str>()
                            .map(std::string::ToString::to_string)
                    })
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

    /// Bookkeeping after raft state may have changed, phase by phase: the lease follows
    /// the role, transfers and a failed handover progress, an expired lease ends,
    /// membership changes are answered, a leader does its duties and says farewells, a
    /// held `MsgTimeoutNow` is stepped or refused, a new leader records its tenure, the
    /// lease is granted and renewed, unanswered rounds are retried, a shutdown waiting
    /// for its handover ends, and the leadership is published.
    fn after_ready(&mut self, at: Stamp) {
        let now = at.mono;
        self.lease_follows_role();
        self.progress_transfer(now);
        self.end_failed_handover();
        self.expire_lease(at);
        self.progress_changes(now);
        self.leader_duties(now);
        self.say_farewells(now);
        self.release_held_timeout_now(now);
        // The phases above may have moved the term or the role.
        self.record_tenure();
        self.grant_and_renew(at);
        self.keeper
            .forget_unanswered(now, self.timing.election_timeout() * 2);
        self.progress_shutdown(now);
        self.publish();
    }

    fn finish(mut self, stop: StopKind) -> Result<(), NodeStopped> {
        let (reason, result) = match &stop {
            StopKind::Graceful(_) | StopKind::Dropped => (LostReason::Shutdown, Ok(())),
            StopKind::Killed(_) => (LostReason::Shutdown, Ok(())),
            StopKind::Failed(cause) => (LostReason::Failed, Err(NodeStopped::new(cause.clone()))),
        };
        self.revoke(reason);
        self.keeper.finish(reason);
        if let Some(t) = self.transfer.take() {
            if let Some(reply) = t.reply {
                let _ = reply.send(Err(TransferError::Stopped(NodeStopped::shutdown(
                    "node stopped",
                ))));
            }
        }
        self.lease_waiters.clear();
        self.transport.close();
        // Close the store before saying "stopped": whoever waits for that (Node::shutdown,
        // Node::join) may exit the process next, and RocksDB must not be closing then
        // (a worker aborted with "pthread lock: Invalid argument" in 1 of 20 stops).
        drop(self.raw);
        drop(self.store);
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
pub(super) fn joint_config<S: RaftStore>(raw: &RawNode<S>) -> bool {
    !raw.raft
        .prs()
        .conf()
        .to_conf_state()
        .voters_outgoing
        .is_empty()
}

/// Sleeps until a lease that ends at `deadline` ran out on either of `clock`'s clocks.
async fn sleep_until_opt(clock: &LocalClock, deadline: Option<Stamp>) {
    match deadline {
        Some(d) => clock.sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// A logger that drops everything, for nodes started without one.
pub(crate) fn discard_logger() -> Logger {
    Logger::root(slog::Discard, o!())
}
