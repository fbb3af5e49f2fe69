//! One raft group as the driver runs it: the root election (the group's own, id 0) or a
//! named election (`docs/design.md`, section 11). Everything here is per election: the
//! `RawNode`, its lease, its transfer and handover state, what it last published. What is
//! per node (the clock, timing, logger, metrics, transport) is the [`Env`] every group's
//! code is given.

use std::sync::Arc;

use raft::eraftpb::Message;
use raft::prelude::RawNode;
use slog::Logger;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::keeper::LeaseKeeper;
use super::PendingTransfer;
use crate::clock::LocalClock;
use crate::config::{ReadMode, Timing};
use crate::election::{ElectionError, ElectionId};
use crate::election_rng::ElectionTimeouts;
use crate::lease::{ConfirmRequest, Lease, LeaseShared};
use crate::metrics::Metrics;
use crate::status::Leadership;
use crate::storage::{RaftStore, Staged};
use crate::transport::{NodeId, Transport};

/// Whether an election is quiet on this node (`docs/design.md`, section 12): a quiet
/// election does not tick, and its lease is renewed by the support stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Quiet {
    /// Ticks and renews by its own rounds.
    Awake,
    /// Led here and offered to the voters; still awake until every live voter holds it.
    Offered,
    /// Led here, quiet.
    Leading,
    /// Followed here under this leader, quiet (held on the stream from it).
    Following(NodeId),
}

/// Who waits for a lease of an election.
pub(super) type LeaseWaiter = oneshot::Sender<Result<Lease, ElectionError>>;

/// What every group's code needs of the node it runs on.
pub(super) struct Env {
    pub(super) id: NodeId,
    pub(super) timing: Timing,
    pub(super) read_mode: ReadMode,
    pub(super) logger: Logger,
    /// This node's clock: real time, except in clock-skew tests.
    pub(super) clock: LocalClock,
    pub(super) metrics: Arc<Metrics>,
    pub(super) transport: Arc<dyn Transport>,
    pub(super) confirm_tx: mpsc::WeakSender<ConfirmRequest>,
    /// A base for the leases' atomic clocks.
    pub(super) epoch: Instant,
    /// The named elections a turn must look at: every one that is not quiet, and every
    /// quiet one something happened to since the driver last looked (a superset is
    /// harmless). Per-turn work visits only these, so a turn costs per awake election,
    /// not per name (`docs/design.md`, section 12).
    pub(super) hot: std::cell::RefCell<std::collections::BTreeSet<ElectionId>>,
    /// The named elections something happened to since the driver last looked at them
    /// (a message, a command, a tick that made a Ready or made a timed duty due): a
    /// subset of `hot`. The Ready pass and the after-Ready pass visit only these, and
    /// all of `hot` only on a sweep, so a turn costs per election that acted, not per
    /// awake election.
    pub(super) busy: std::cell::RefCell<std::collections::BTreeSet<ElectionId>>,
    /// The named elections whose lease this node holds, with it: the expiry pass reads
    /// these, not every election (kept where a lease is granted and where it is revoked).
    pub(super) leased: std::cell::RefCell<std::collections::BTreeMap<ElectionId, Arc<LeaseShared>>>,
    /// Ends every lease at its deadline, whatever the driver is doing (`lease_clock.rs`):
    /// each lease granted is queued on it.
    pub(super) lease_clock: Arc<crate::lease_clock::LeaseClock>,
    /// Where the store's synced writes run (`writer.rs`).
    pub(super) writer: super::writer::Writer,
    /// The peers that said their disk is stalled, until when that holds unless they
    /// repeat it (`disk.rs`): no election is handed to them.
    pub(super) stalled_peers: std::cell::RefCell<std::collections::BTreeMap<NodeId, Instant>>,
}

impl Env {
    /// Whether the disk is stalled and this node steps aside for it
    /// (`docs/design.md`, section 15; the mutation `stalled-disk-keeps-leading` notices
    /// the stall and leads on).
    pub(super) fn disk_stalled(&self) -> bool {
        self.writer.stalled() && !crate::mutation::active("stalled-disk-keeps-leading")
    }

    /// Whether peer `id` said its disk is stalled, recently enough that it still holds
    /// (`docs/design.md`, section 15): it is handed nothing meanwhile (the mutation
    /// `stalled-peer-takes-over` hands it elections anyway).
    pub(super) fn peer_stalled(&self, id: NodeId, now: Instant) -> bool {
        !crate::mutation::active("stalled-peer-takes-over")
            && self
                .stalled_peers
                .borrow()
                .get(&id)
                .is_some_and(|until| now < *until)
    }
}

/// One election's raft state and lease, on this node.
pub(super) struct Group<S: RaftStore> {
    /// 0 for the root election.
    pub(super) election: ElectionId,
    /// The election's name (`None`: the root).
    pub(super) name: Option<Arc<str>>,
    /// raft-rs's node, over the store and what this node staged for it but has not yet
    /// written (`Staged`: raft-rs's asynchronous Ready, `docs/design.md`, section 15).
    pub(super) raw: RawNode<Staged<S>>,
    /// The store itself: what is written.
    pub(super) store: S,
    /// The lease's arithmetic and rounds (no I/O; see `keeper.rs`).
    pub(super) keeper: LeaseKeeper,
    /// The tenure handed out to users, while valid.
    pub(super) lease: Option<Arc<LeaseShared>>,
    pub(super) lease_waiters: Vec<LeaseWaiter>,
    pub(super) transfer: Option<PendingTransfer>,
    /// The term this node recorded its tenure for (one record per tenure).
    pub(super) recorded_term: u64,
    /// The term a leadership transfer to this node (MsgTimeoutNow) would start.
    pub(super) handover_term: Option<u64>,
    /// The term in which this node, leading, last sent MsgTimeoutNow: it never holds a
    /// lease in that term again (docs/design.md, section 4).
    pub(super) timeout_now_sent: Option<u64>,
    /// A MsgTimeoutNow that arrived while this node was drained (see `on_inbound`).
    pub(super) held_timeout_now: Option<(Message, Instant)>,
    /// The election is suspended (its catalog or its own log says so): no lease is
    /// granted, renewed or held (docs/design.md, section 11, "Suspending an election").
    pub(super) suspended: bool,
    /// No lease in this term or an earlier one: the term in which a resume applied, so
    /// the first lease after it is in a new term, above every earlier token.
    pub(super) lease_after: u64,
    /// Seeded election timeouts in place of raft-rs's own draws (simulation only).
    pub(super) election_timeouts: Option<ElectionTimeouts>,
    /// Since when this node has known no leader of this election, as last published
    /// (for the failover histogram, and a drained node's last-resort campaign).
    pub(super) leaderless_since: Option<Instant>,
    pub(super) last_published: Leadership,
    pub(super) leadership: Arc<watch::Sender<Leadership>>,
    /// Whether the applied configuration is joint (kept here: raft-rs only tells by
    /// building a whole `ConfState`). Set where the configuration changes: start,
    /// snapshots, conf changes.
    pub(super) joint: bool,
    /// The index of the last entry applied.
    pub(super) applied: u64,
    /// Compact at the next chance even below the threshold (after a conf change, so a
    /// node that joins gets a snapshot whose membership includes it).
    pub(super) force_compact: bool,
    /// This leader proposed a conf change of the election that is not carried out yet:
    /// its rounds earn no lease (docs/design.md, section 11, "Leases across a
    /// configuration change").
    pub(super) conf_hold: bool,
    /// Only rounds sent at or after this earn a lease (set when a conf hold ends).
    pub(super) credit_from: Option<Instant>,
    /// Quiet or awake (named elections only; the root is always awake).
    pub(super) quiet: Quiet,
    /// When it last woke (or started): it is offered again only after an election
    /// timeout awake.
    pub(super) awake_since: Instant,
    /// Until then this node grants no (non-forced) vote in it and does not campaign: the
    /// promise it made on the support stream (section 12).
    pub(super) refuse_until: Option<Instant>,
    /// When this quiet follower last stepped a heartbeat of its leader (a round's, which
    /// raft-rs's in-lease refusal answers for: a wake by silence counts from it too).
    pub(super) leader_heard: Option<Instant>,
    /// A confirm of a quiet election waits for the support stream's next requests.
    pub(super) support_urgent: bool,
    /// A quiet leader sent something of its own in this turn (it wakes).
    pub(super) acted: bool,
    /// Something happened to it since the driver last looked (a message stepped, a
    /// proposal, a confirm): a quiet election is looked at only then.
    pub(super) touched: bool,
}

impl<S: RaftStore> Group<S> {
    /// A group over `raw` (whose storage is `store`), publishing to `leadership`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        election: ElectionId,
        name: Option<Arc<str>>,
        raw: RawNode<Staged<S>>,
        store: S,
        applied: u64,
        leadership: Arc<watch::Sender<Leadership>>,
        timing: &Timing,
        election_timeouts: Option<ElectionTimeouts>,
        now: Instant,
    ) -> Self {
        let joint = super::joint_config(&raw);
        let initial = leadership.borrow().clone();
        Group {
            election,
            name,
            raw,
            store,
            keeper: LeaseKeeper::new(timing.lease_duration()),
            lease: None,
            lease_waiters: Vec::new(),
            transfer: None,
            recorded_term: 0,
            handover_term: None,
            timeout_now_sent: None,
            held_timeout_now: None,
            suspended: false,
            lease_after: 0,
            election_timeouts,
            leaderless_since: Some(now),
            last_published: initial,
            leadership,
            joint,
            applied,
            force_compact: false,
            conf_hold: false,
            credit_from: None,
            quiet: Quiet::Awake,
            awake_since: now,
            refuse_until: None,
            support_urgent: false,
            leader_heard: None,
            acted: false,
            touched: true,
        }
    }

    /// raft-rs's `become_follower`, with a seeded election timeout in place of the one
    /// it drew: the driver's own calls may leave (term, role) as they were (a follower
    /// told its leader), which [`ElectionTimeouts::redraw`] could not tell from no draw.
    pub(super) fn become_follower(&mut self, term: u64, leader: u64) {
        self.raw.raft.become_follower(term, leader);
        if let Some(t) = &mut self.election_timeouts {
            t.redraw_now(&mut self.raw.raft);
        }
    }

    /// Something happened to this election: the driver looks at it in the next turn.
    pub(super) fn touch(&mut self, env: &Env) {
        self.touched = true;
        if self.election != 0 {
            env.hot.borrow_mut().insert(self.election);
            env.busy.borrow_mut().insert(self.election);
        }
    }

    /// Whether something of this election is due by time alone, without a message: a
    /// leader's lease renewal (every `every`), a transfer's deadline, confirms waiting.
    pub(super) fn timed_duty_due(&self, now: Instant, every: std::time::Duration) -> bool {
        self.transfer.is_some()
            || self.keeper.has_pending()
            || (self.raw.raft.state == raft::StateRole::Leader
                && self.keeper.renewal_due(now, every))
    }

    /// Whether the driver's per-turn work may pass this election by: quiet, and nothing
    /// happened to it since it last looked.
    pub(super) fn untouched_quiet(&self) -> bool {
        !self.touched && matches!(self.quiet, Quiet::Leading | Quiet::Following(_))
    }

    /// Ends a conf hold once the final (non-joint) configuration is applied: rounds sent
    /// from `now` on earn a lease again.
    pub(super) fn release_conf_hold(&mut self, now: Instant) {
        if self.conf_hold && !self.joint && !self.raw.raft.has_pending_conf() {
            self.conf_hold = false;
            self.credit_from = Some(now);
        }
    }
}
