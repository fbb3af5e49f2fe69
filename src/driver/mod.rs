//! The driver: one task that owns the raft-rs [`RawNode`]s (the root election's and every
//! named election's) and is the only place where raft state changes. Ticks, inbound messages, commands from [`Node`](crate::Node)
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
//! | `group.rs` | one election's state (root or named) and the node's `Env` |
//! | `ready.rs` | the Ready of every election in one turn: persist (one write), send, apply, compact |
//! | `keeper.rs` | the lease's arithmetic and rounds (no I/O, takes `now`) |
//! | `leases.rs` | rounds through raft-rs, granting, renewing, revoking `Lease`s |
//! | `handover.rs` | transfers, shutdown handovers, failed handovers |
//! | `membership.rs` | conf changes, drains, farewells, reachability |
//! | `publish.rs` | leadership, role, health, status, tenure records |
//! | `named/` | named elections: founding and routing (`mod.rs`), per-turn duties (`turn.rs`), the bookkeeping of their leases (`leases.rs`), removal (`retire.rs`), suspending and resuming (`suspend.rs`) |
//! | `support/` | the support stream that renews quiet elections' leases (section 12; its module docs map the files) |
//! | `catalog.rs` | the catalog: create and remove calls, declared elections |
//! | `writer.rs` | the store writer: synced writes on a thread of their own; a Ready batch waited for at most half the stall bound, the rest waited for off the runtime when slow |
//! | `disk.rs` | a stalled disk: the node stands down until probe writes are fast (section 15) |
//! | `spread.rs` | spreading leaderships, named elections following the root's membership |

mod catalog;
mod command;
mod disk;
mod group;
mod handover;
mod inbound;
mod keeper;
mod leases;
mod membership;
mod named;
mod publish;
mod ready;
mod spread;
mod support;
#[cfg(feature = "testing")]
pub use support::wire::forged_support_request;
mod writer;

pub(crate) use command::{Command, MemberChange};
pub(crate) use named::ElectionsView;
pub(crate) use named::{watch_of, NamedParts, Watches};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use raft::prelude::RawNode;
use slog::{error, info, o, Logger};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::clock::{LocalClock, Stamp};
use crate::config::{ReadMode, Timing};
use crate::election_rng::ElectionTimeouts;
use crate::error::{LostReason, NodeStopped, StopCause, TransferError};
use crate::lease::ConfirmRequest;
use crate::metrics::Metrics;
use crate::mutation;
use crate::peer_input::RefusalLog;
use crate::state::GroupState;
use crate::status::{Leadership, Role};
use crate::storage::RaftStore;
use crate::transport::{Hello, Inbox, NodeId, Standing, Transport};
use group::{Env, Group};
use membership::{Farewell, PendingChange};
use publish::role_code;

pub(super) struct PendingTransfer {
    pub(super) to: NodeId,
    pub(super) deadline: Instant,
    pub(super) reply: Option<oneshot::Sender<Result<NodeId, TransferError>>>,
}

/// Everything the driver needs at start.
pub(crate) struct DriverParts<S: RaftStore> {
    pub raw: RawNode<crate::storage::Staged<S>>,
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
    /// The most bytes the catalog may take (`TestHooks::catalog_limit`).
    pub catalog_limit: u64,
    pub compact_after: u64,
    /// A synced write slower than this is a disk stall (`Config::disk_stall_bound`).
    pub disk_stall_bound: std::time::Duration,
    /// Where the disk's health is published ([`crate::Node::disk`]).
    pub disk: watch::Sender<crate::status::DiskHealth>,
    /// Seed for the election timeouts (a test hook, `TestHooks::election_seed`).
    pub election_seed: Option<u64>,
    /// Every election timeout at its minimum (a test hook).
    pub election_timeouts_at_minimum: bool,
    /// What the named elections need.
    pub named: NamedParts,
    /// The founding nonces this node's hellos quote to the first members still to be
    /// heard as members (`docs/design.md`, section 6); set on the transport already.
    pub quotes: BTreeMap<NodeId, u128>,
}

pub(crate) struct Driver<S: RaftStore> {
    /// What every group's code needs of this node.
    env: Env,
    /// The root election: the group's own (id 0), which replicates the membership, the
    /// drains and the catalog of named elections.
    root: Group<S>,
    /// The named elections this node runs (docs/design.md, section 11).
    named: named::Named<S>,
    /// The balancer's memory (`spread.rs`).
    spread: spread::Spread,
    /// The support stream: quiet elections' leases (`support/`).
    support: support::Support,
    inbound: Inbox,
    commands: mpsc::Receiver<Command>,
    /// Every `Node` handle is gone (`Lease` handles may remain).
    commands_closed: bool,
    confirms: mpsc::Receiver<ConfirmRequest>,
    /// The replicated state the log builds: history, drained nodes, addresses.
    state: GroupState,
    configured: BTreeSet<NodeId>,
    pending_changes: Vec<PendingChange>,
    /// Nodes that just left the group: until `until`, the leader resends them the
    /// entries up to their removal with its commit index (raft-rs stops replicating to a
    /// node the moment the removal applies, so it would never learn it was removed), and
    /// the transport keeps them; then they are forgotten.
    farewells: Vec<Farewell>,
    /// When each peer was last heard from (any message): raft-rs's `recent_active` is
    /// reset at every check-quorum and only means "heard since the last check".
    last_heard: BTreeMap<NodeId, Instant>,
    /// The term in which this leader entered a joint configuration meant to be left
    /// explicitly (a test hook): it does not leave it itself.
    explicit_joint_term: Option<u64>,
    history_retention: usize,
    /// The most bytes the catalog may take (`MAX_CATALOG_BYTES` but in tests).
    catalog_limit: u64,
    /// Compact the log when this many applied entries sit above the last snapshot.
    compact_after: u64,
    /// raft-rs panicked: the RawNode is never used again (the driver stops).
    raft_panicked: bool,
    /// Nesting of [`Driver::guarded`] calls (only the outermost catches).
    guard_depth: u32,
    /// Rate limit of the warnings about refused peer messages.
    refusals: RefusalLog,

    /// Until then, vote and pre-vote requests are dropped: a restarted node has forgotten
    /// when it last heard from a leader that may still hold a lease.
    quiet_until: Instant,

    shutdown: Option<(Instant, oneshot::Sender<()>)>,
    stop: Option<StopKind>,
    /// What this node last told the transport to say to peers (`update_hello`).
    hello: Option<Hello>,
    /// The founding nonces the hellos quote, per first member not yet heard as a member
    /// since this start (a member has a store: the quote can no longer help it).
    quotes: BTreeMap<NodeId, u128>,
    /// When the last slow turn was reported (at most one warning per second).
    slow_turns: Option<std::time::Instant>,
    /// The last Ready pass's number (`ready.rs`): passes and their batches are numbered
    /// in the order they are written.
    batches: u64,
    /// The Ready passes waiting for their batch, oldest first.
    passes: std::collections::VecDeque<ready::Pass>,
    /// The writes of the passes made while a batch was out, merged per group: the next
    /// batch, handed over when the one out is durable ([`ready::Held`]).
    held: Option<ready::Held<S>>,
    /// Where the writer says a batch ended.
    done: writer::DoneRx,
    /// Where the disk's health is published ([`crate::Node::disk`]).
    disk: watch::Sender<crate::status::DiskHealth>,
    /// When the disk stalled (the machine's clock: a report).
    disk_since: Option<std::time::Instant>,
    /// When the peers were last told that this node's disk is stalled (`disk.rs`).
    stall_told: Option<Instant>,
}

enum StopKind {
    Graceful(Option<oneshot::Sender<()>>),
    Killed(oneshot::Sender<()>),
    Failed(StopCause),
    Dropped,
}

/// A turn longer than this is reported (a warning naming where its time went): the
/// peers hear nothing from this node while it lasts, so a lease's length of them lapses
/// every lease this node supports.
const SLOW_TURN: std::time::Duration = std::time::Duration::from_millis(200);

/// Where one driver turn's time went, on the machine's clock (not the node's: a report,
/// never a decision). Laps: the event that woke the turn, the messages drained after it,
/// the tick, the Ready pass (its synced write included), the after-Ready pass.
#[derive(Default)]
struct TurnClock {
    start: Option<std::time::Instant>,
    laps: [std::time::Duration; 5],
    last: Option<std::time::Instant>,
}

impl TurnClock {
    /// A turn woken at `start`.
    fn from(start: Option<std::time::Instant>) -> Self {
        TurnClock {
            start,
            ..TurnClock::default()
        }
    }

    fn lap(&mut self, i: usize) {
        let now = std::time::Instant::now();
        let since = self.last.or(self.start).unwrap_or(now);
        self.laps[i] = now.saturating_duration_since(since);
        self.last = Some(now);
    }

    /// Warns if the turn (from the end of its event's wait) was slow, at most once a
    /// second.
    fn report(&self, log: &slog::Logger, last: &mut Option<std::time::Instant>) {
        let total: std::time::Duration = self.laps.iter().sum();
        if total < SLOW_TURN {
            return;
        }
        let now = std::time::Instant::now();
        if last
            .is_some_and(|t| now.saturating_duration_since(t) < std::time::Duration::from_secs(1))
        {
            return;
        }
        *last = Some(now);
        let ms = |d: std::time::Duration| d.as_millis() as u64;
        slog::warn!(log, "slow driver turn: peers heard nothing from this node meanwhile";
            "total_ms" => ms(total), "event_ms" => ms(self.laps[0]),
            "drain_ms" => ms(self.laps[1]), "tick_ms" => ms(self.laps[2]),
            "ready_ms" => ms(self.laps[3]), "after_ready_ms" => ms(self.laps[4]));
    }
}

/// When the future that woke a turn resolved (the machine's clock).
#[derive(Default)]
struct Woke(std::sync::OnceLock<std::time::Instant>);

impl Woke {
    /// `fut`, noting when it resolves.
    async fn stamp<F: std::future::Future>(&self, fut: F) -> F::Output {
        let out = fut.await;
        let _ = self.0.set(std::time::Instant::now());
        out
    }
}

/// The most inbound items one turn takes before it writes, sends and ticks.
const INBOUND_PER_TURN: usize = 4096;

/// The most commands (or confirms) one turn takes: the rest wait for the next turn, after
/// the peers' messages that arrived meanwhile.
const COMMANDS_PER_TURN: usize = 1024;

impl<S: RaftStore> Driver<S> {
    pub(crate) fn new(parts: DriverParts<S>) -> Self {
        let (writer, done) = writer::Writer::new(parts.disk_stall_bound);
        let now = parts.clock.now();
        let id = parts.raw.raft.id;
        let t = parts.timing;
        let election_timeouts = if parts.election_timeouts_at_minimum {
            Some(ElectionTimeouts::new(
                0,
                id,
                t.election_ticks,
                t.election_ticks,
            ))
        } else {
            parts
                .election_seed
                .map(|seed| ElectionTimeouts::new(seed, id, t.election_ticks, t.election_ticks_max))
        };
        let root = Group::new(
            0,
            None,
            parts.raw,
            parts.store,
            parts.applied,
            Arc::new(parts.leadership),
            &t,
            election_timeouts,
            now,
        );
        Driver {
            env: Env {
                id,
                timing: parts.timing,
                read_mode: parts.read_mode,
                logger: parts.logger,
                lease_clock: crate::lease_clock::LeaseClock::new(parts.clock.clone()),
                writer,
                clock: parts.clock,
                metrics: parts.metrics,
                transport: parts.transport,
                confirm_tx: parts.confirm_tx,
                epoch: now,
                hot: std::cell::RefCell::new(BTreeSet::new()),
                busy: std::cell::RefCell::new(BTreeSet::new()),
                leased: std::cell::RefCell::new(BTreeMap::new()),
                stalled_peers: std::cell::RefCell::new(BTreeMap::new()),
            },
            root,
            named: named::Named::new(parts.named),
            spread: spread::Spread::default(),
            support: support::Support::new(false, parts.election_seed),
            quiet_until: if mutation::active("no-restart-quiet") {
                now
            } else {
                now + parts.timing.election_timeout()
            },
            inbound: parts.inbound,
            commands: parts.commands,
            commands_closed: false,
            confirms: parts.confirms,
            state: parts.state,
            configured: parts.configured,
            pending_changes: Vec::new(),
            explicit_joint_term: None,
            farewells: Vec::new(),
            last_heard: BTreeMap::new(),
            history_retention: parts.history_retention,
            catalog_limit: parts.catalog_limit,
            compact_after: parts.compact_after.max(1),
            raft_panicked: false,
            guard_depth: 0,
            refusals: RefusalLog::new(std::time::Duration::from_secs(10)),
            shutdown: None,
            stop: None,
            hello: None,
            quotes: parts.quotes,
            slow_turns: None,
            batches: 0,
            passes: Default::default(),
            held: None,
            done,
            disk: parts.disk,
            disk_since: None,
            stall_told: None,
        }
    }

    /// Runs until shutdown, kill, a fatal error, or every handle is dropped. `early`:
    /// commands that came before the driver ran (while the node waited to found), handled
    /// first and in order, before any from the channel.
    pub(crate) async fn run(mut self, early: Vec<Command>) -> Result<(), NodeStopped> {
        // Ticks on this node's clock: a stalled clock stalls them, as in a frozen guest.
        let mut ticker = self.env.clock.ticker(self.env.timing.tick);
        // The lease clock ends leases on time even while this task is stuck (a synced
        // write to a stalled disk): docs/design.md, section 2. Aborted when the driver
        // stops (it revokes what is left itself).
        let clock_on = !mutation::active("lease-ends-with-the-driver");
        let _lease_clock =
            clock_on.then(|| AbortOnDrop(tokio::spawn(Arc::clone(&self.env.lease_clock).run())));
        let lease_clock = Arc::clone(&self.env.lease_clock);
        let done_ready = Arc::clone(&self.done.ready);
        info!(self.env.logger, "driver started"; "term" => self.root.raw.raft.term,
              "quiet_ms" => self.env.timing.election_timeout().as_millis() as u64);
        // Replay the committed log above the snapshot (history, drains, conf changes)
        // before anything else, so the membership is current from the first message on.
        self.apply_addrs(&self.state.addrs.clone());
        self.shut_out_removed();
        if let Err(e) = self.load_removed_elections() {
            self.storage_failed(e);
        }
        self.open_catalog();
        self.handle_ready();
        self.publish();
        self.guarded(|| "updating the hello".into(), Self::update_hello);
        for cmd in early {
            self.guarded(|| "handling a command".into(), |d| d.on_command(cmd));
        }
        loop {
            self.redraw_election_timeout();
            // A stalled process must not act on a lease that ran out while it slept
            // (suspended: by the boot-time clock): check before anything else.
            self.expire_lease(self.env.clock.stamp());
            // The named leases: the lease clock watches their ends and says when one
            // lapsed (below), so the loop neither scans them every turn nor sleeps
            // towards them (with thousands held, both cost as much as the clock's own
            // visits). Without the clock (the mutation) the loop does it, as before.
            let named_deadline = if clock_on {
                None
            } else {
                self.expire_named_leases(self.env.clock.stamp())
            };
            let deadline = self.lease_deadline(named_deadline);
            let clock = self.env.clock.clone();
            let mut took_inbound = false;
            let woke = Woke::default();
            tokio::select! {
                biased;
                // A batch is durable: what waited for it goes first.
                () = woke.stamp(done_ready.notified()) => {
                    while let Ok(done) = self.done.rx.try_recv() {
                        self.on_batch_done(done);
                    }
                }
                cmd = woke.stamp(self.commands.recv()), if !self.commands_closed => match cmd {
                    Some(cmd) => {
                        self.guarded(|| "handling a command".into(), |d| {
                            d.on_command(cmd);
                            for _ in 0..COMMANDS_PER_TURN {
                                match d.commands.try_recv() {
                                    Ok(cmd) => d.on_command(cmd),
                                    Err(_) => break,
                                }
                            }
                        });
                    }
                    // Every Node handle is gone; Lease handles may still confirm.
                    None => self.commands_closed = true,
                },
                req = woke.stamp(self.confirms.recv()) => match req {
                    Some(req) => {
                        self.on_confirm(req);
                        for _ in 0..COMMANDS_PER_TURN {
                            match self.confirms.try_recv() {
                                Ok(req) => self.on_confirm(req),
                                Err(_) => break,
                            }
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
                _ = woke.stamp(sleep_until_opt(&clock, deadline)) => {
                    self.expire_lease(self.env.clock.stamp());
                    if !clock_on {
                        self.expire_named_leases(self.env.clock.stamp());
                    }
                }
                // The lease clock ended a lease (the loop may have been busy): the
                // bookkeeping follows (the log line, the metrics, a quiet election's
                // lapse).
                () = woke.stamp(lease_clock.lapsed.notified()) => {
                    self.named.lease_floor = None;
                    self.expire_lease(self.env.clock.stamp());
                    self.expire_named_leases(self.env.clock.stamp());
                }
                inbound = woke.stamp(self.inbound.recv()) => {
                    took_inbound = true;
                    match inbound {
                        Some(item) => {
                            self.on_inbound(item);
                            // Many per turn: the turn's one synced write is shared by all
                            // of them (with thousands of elections, bursts are large).
                            self.drain_inbound();
                        }
                        None => {
                            // The transport is gone: nothing can reach us any more.
                            self.fail(StopCause::TransportClosed);
                        }
                    }
                }
                _ = woke.stamp(ticker.tick()) => self.on_tick(),
            }
            let mut turn = TurnClock::from(woke.0.get().copied());
            turn.lap(0);
            // A flood of commands or confirms (an application asking 10,000 elections'
            // histories at once) must not starve the peers' messages: the support acks
            // that renew every quiet lease are among them. A turn that served something
            // else takes what waits from the peers too.
            if !took_inbound && self.stop.is_none() {
                self.drain_inbound();
            }
            turn.lap(1);
            // A flood of commands or messages must not starve the ticks (raft-rs's clock,
            // the leases' renewals and the support stream run on them), nor ticks the
            // messages: a turn that did not tick ticks too if one is due.
            if ticker.is_due() && self.stop.is_none() {
                ticker.tick().await;
                self.on_tick();
            }
            turn.lap(2);
            if self.stop.is_none() {
                self.handle_ready();
            }
            turn.lap(3);
            if self.stop.is_none() {
                let now = self.env.clock.stamp();
                self.guarded(
                    || "acting on a Ready (leases, handover, membership)".into(),
                    |d| d.after_ready(now),
                );
                self.guarded(|| "updating the hello".into(), Self::update_hello);
            }
            if self.stop.is_none() {
                self.tend_disk();
            }
            turn.lap(4);
            turn.report(&self.env.logger, &mut self.slow_turns);
            if let Some(stop) = self.stop.take() {
                return self.finish(stop);
            }
        }
    }

    /// The peers' messages that wait, up to [`INBOUND_PER_TURN`], without waiting.
    fn drain_inbound(&mut self) {
        for _ in 0..INBOUND_PER_TURN {
            if self.stop.is_some() {
                break; // a fatal message or a panic: stop here
            }
            match self.inbound.try_recv() {
                Some(item) => self.on_inbound(item),
                None => break,
            }
        }
    }

    /// One tick of every election's clock, and the support stream's.
    fn on_tick(&mut self) {
        self.guarded(
            || "ticking".into(),
            |d| {
                d.root.raw.tick();
                d.tick_named();
                d.support_tick(d.env.clock.stamp());
            },
        );
        self.update_health();
    }

    /// Tells the transport what to say to peers when it connects: joining until this
    /// node has the group's state, then a member with its term (pristine while nothing
    /// happened since founding). It reads the log through raft-rs, which panics on a
    /// store error it does not expect: callers run it `guarded`.
    fn update_hello(&mut self) {
        let raft = &self.root.raw.raft;
        let hello = if self.role() == Role::Joining {
            Hello {
                group: self.state.group,
                standing: Standing::Joining,
                ..Hello::default()
            }
        } else {
            // The founding snapshot's term: above 1 when founded from a term floor.
            let founded_at = raft.raft_log.term(1).unwrap_or(1);
            Hello::member_founded_at(
                self.state.group,
                raft.term,
                raft.vote,
                raft.raft_log.last_index(),
                founded_at,
            )
        };
        if self.hello != Some(hello) {
            self.env.transport.set_hello(hello);
            self.hello = Some(hello);
        }
    }

    /// With a seeded election RNG: replaces any timeout raft-rs drew since the last
    /// turn of the loop (before the next tick reads it).
    fn redraw_election_timeout(&mut self) {
        if let Some(t) = &mut self.root.election_timeouts {
            t.redraw(&mut self.root.raw.raft);
        }
        if self.root.election_timeouts.is_none() {
            return; // not seeded: raft-rs's own draws stand
        }
        let hot: Vec<_> = self.env.hot.borrow().iter().copied().collect();
        for id in hot {
            let Some(ng) = self.named.groups.get_mut(&id) else {
                continue;
            };
            if ng.g.untouched_quiet() {
                continue; // it does not tick
            }
            if let Some(t) = &mut ng.g.election_timeouts {
                t.redraw(&mut ng.g.raw.raft);
            }
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
                error!(self.env.logger, "raft-rs panicked; stopping this node (its raft state is not used again)";
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
        self.root
            .keeper
            .forget_unanswered(now, self.env.timing.election_timeout() * 2);
        self.progress_shutdown(now);
        self.publish();
        if self.named_after_ready(at) {
            self.handle_ready();
        }
        if self.support.urgent {
            self.send_support(self.env.clock.stamp());
        }
    }

    fn finish(mut self, stop: StopKind) -> Result<(), NodeStopped> {
        // The writer's batches end before the store closes (below): the writer thread
        // holds handles of it while they are out. What passes held and never handed over
        // is dropped: nothing that promised it left (a crash a moment earlier).
        let out = self.env.writer.outstanding();
        if out > 0 {
            info!(self.env.logger, "waiting for the store's writes in flight before closing it";
                  "batches" => out);
            while self.env.writer.outstanding() > 0 {
                let Some(done) = writer::wait_on(&self.done.rx, None) else {
                    break;
                };
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.env.writer.completed(done)
                }));
            }
        }
        let (reason, result) = match &stop {
            StopKind::Graceful(_) | StopKind::Dropped => (LostReason::Shutdown, Ok(())),
            StopKind::Killed(_) => (LostReason::Shutdown, Ok(())),
            StopKind::Failed(cause) => (LostReason::Failed, Err(NodeStopped::new(cause.clone()))),
        };
        self.revoke(reason);
        self.root.keeper.finish(reason);
        self.finish_named(reason);
        if let Some(t) = self.root.transfer.take() {
            if let Some(reply) = t.reply {
                let _ = reply.send(Err(TransferError::Stopped(NodeStopped::shutdown(
                    "node stopped",
                ))));
            }
        }
        self.root.lease_waiters.clear();
        self.env.transport.close();
        // Close the store before saying "stopped": whoever waits for that (Node::shutdown,
        // Node::join) may exit the process next, and RocksDB must not be closing then
        // (a worker aborted with "pthread lock: Invalid argument" in 1 of 20 stops).
        drop(self.root.raw);
        drop(self.root.store);
        let mut last = self.root.last_published.clone();
        self.env
            .metrics
            .set_state(last.term, role_code(Role::Stopped), 0, false);
        last.role = Role::Stopped;
        last.leased = false;
        last.leader = None;
        self.root.leadership.send_replace(last);
        info!(self.env.logger, "driver stopped");
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
pub(super) fn joint_config<T: raft::Storage>(raw: &RawNode<T>) -> bool {
    !raw.raft
        .prs()
        .conf()
        .to_conf_state()
        .voters_outgoing
        .is_empty()
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
