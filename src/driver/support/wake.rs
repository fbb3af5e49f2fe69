//! Waking quiet elections (`docs/design.md`, section 12, "Wake-up triggers"): what wakes
//! one on either side, the pre-votes a quiet election drops instead, and the paced wakes
//! that keep a mass wake-up from overloading the node: every path that can wake many at
//! once (a silent leader, a leader's new incarnation or withdrawal, a lost book,
//! refusals, drops, lapsed leases after their grace) queues them in `pace.rs`'s queue,
//! which wakes a few a tick, each peer in turn ("One queue for mass wakes").

use raft::eraftpb::{Message, MessageType};
use raft::StateRole;
use slog::debug;
use tokio::time::Instant;

use super::super::group::Quiet;
use super::super::Driver;
use super::book::Incoming;
use super::pace::{Pending, Side};
use crate::election::ElectionId;
use crate::mutation;
use crate::storage::RaftStore;
use crate::transport::NodeId;

/// At most this many queued elections wake in one tick (the rest on the next ticks).
/// It only binds when a leader of thousands goes silent: two thousand elections on four
/// followers wake within about two ticks more than their own deadlines.
const SILENT_WAKES_PER_TICK: usize = 256;

/// Queued elections (those of a silent leader first, for which this was measured) wake
/// only while fewer than this are awake on the node (its hot set), and otherwise
/// [`SILENT_WAKES_TRICKLE`] a tick.
/// An awake election costs ticks, heartbeats and renewal rounds; the two thousand
/// elections of a killed worker all awake at once on four followers made every driver
/// turn take 200 ms on two cores, longer than a lease, and every other lease of the
/// group lapsed with them (section 12, "A killed leader of thousands"). At 300, a kill
/// of the worker leading 2,000 of 10,000 still collapsed the group in 3 of 6 runs (the
/// awake ones' renewals, about 50,000 messages a second per worker, overflowed the
/// inbound queues); at 120 it passed 3 of 3, each within 8 s.
pub(super) const SILENT_WAKE_WHILE_AWAKE_BELOW: usize = 120;

/// Queued wakes per tick however many are awake, so failover never stops.
const SILENT_WAKES_TRICKLE: usize = 1;

/// A quiet election whose lease lapsed stays quiet this many election timeouts, in
/// which the stream's next quorum leases it again; then it wakes, and raft-rs's
/// check-quorum steps it down if no quorum answers (a leader that hears no acks while
/// its followers still hear it). Only that case waits longer for a new leader; a dead
/// or silent leader's followers wake on their own (`check_silence`).
pub(super) const LAPSE_GRACE_TIMEOUTS: u32 = 4;

/// Why a quiet election wakes (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::driver) enum Wake {
    Message,
    Activity,
    LeaseLapsed,
    Unheld,
    Refused,
    Withdrawn,
    LeaderSilent,
    LeaderRestarted,
    BookDropped,
    Closing,
}

impl<S: RaftStore> Driver<S> {
    /// Election `id`, led here, is not quiet any more: it ticks and renews by rounds
    /// again, and the stream withdraws it from every peer.
    pub(in crate::driver) fn wake_leader(&mut self, id: ElectionId, why: Wake) {
        self.support.lapsed.remove(&id);
        let now = self.env.clock.now();
        let Some(ng) = self.named.groups.get_mut(&id) else {
            return;
        };
        if !matches!(ng.g.quiet, Quiet::Offered | Quiet::Leading) {
            return;
        }
        debug!(self.env.logger, "election awake"; "election" => ng.g.name.as_deref(),
               "why" => ?why, "was" => ?ng.g.quiet);
        ng.g.quiet = Quiet::Awake;
        ng.g.awake_since = now;
        self.env.metrics.named_woken(matches!(why, Wake::Message));
        // Confirms waiting for the stream's next requests get a ReadIndex round instead.
        ng.g.keeper.requeue_stream_rounds();
        ng.g.touch(&self.env);
        self.support.slots.remove(id);
        for o in self.support.out.values_mut() {
            o.withdraw(id);
        }
    }

    /// Election `id`, followed here, is not quiet any more: it ticks again, refusing
    /// votes until `refuse_until` (the promise it made), and the stream tells its
    /// leader (unless the leader withdrew it).
    pub(super) fn wake_follower(&mut self, id: ElectionId, last_word: Option<Instant>, why: Wake) {
        let now = self.env.clock.now();
        let tick = self.env.timing.tick;
        self.freeze(id, last_word);
        let Some(ng) = self.named.groups.get_mut(&id) else {
            return;
        };
        if matches!(ng.g.quiet, Quiet::Following(_)) {
            // raft-rs counts the time since it heard from its leader in ticks, and a
            // quiet election did not tick: it catches up, as if the leader's heartbeats
            // had stopped at its last word (its last request, or a later heartbeat of
            // its rounds, which raft-rs's in-lease refusal must still honour), so that
            // a dead leader's elections neither refuse the first pre-votes for a stale
            // count nor campaign late.
            let last = match (last_word, ng.g.leader_heard) {
                (Some(r), Some(h)) => Some(r.max(h)),
                (r, h) => r.or(h),
            };
            if let Some(last) = last {
                let ticks = (now.saturating_duration_since(last).as_nanos()
                    / tick.as_nanos().max(1)) as usize;
                if ticks > ng.g.raw.raft.election_elapsed {
                    ng.g.raw.raft.election_elapsed = ticks;
                }
            }
            debug!(self.env.logger, "election awake"; "election" => ng.g.name.as_deref(),
                   "why" => ?why);
            ng.g.quiet = Quiet::Awake;
            ng.g.awake_since = now;
            self.env.metrics.named_woken(matches!(why, Wake::Message));
            ng.g.touch(&self.env);
        }
    }

    /// Election `id`, followed here, grants no vote before `last_word` (the leader's
    /// last request it acknowledged) plus the promise window: the promise it made,
    /// kept whether it wakes now or waits in the queue.
    fn freeze(&mut self, id: ElectionId, last_word: Option<Instant>) {
        let window = self.promise_window();
        let (Some(ng), Some(r)) = (self.named.groups.get_mut(&id), last_word) else {
            return;
        };
        let u = r + window;
        ng.g.refuse_until = Some(ng.g.refuse_until.map_or(u, |x| x.max(u)));
    }

    /// Election `id`, followed here for `leader`, is no longer held for it (a new
    /// incarnation of the leader, a lost book, a withdrawal, a refused re-offer): its
    /// promise is frozen now, and it wakes from the paced queue ("One queue for mass
    /// wakes"). Until then it does not tick, so it neither campaigns nor counts a
    /// timeout; a message of it that `admit` accepts wakes it at once.
    pub(super) fn queue_follower(
        &mut self,
        id: ElectionId,
        leader: NodeId,
        last_word: Option<Instant>,
        why: Wake,
    ) {
        self.freeze(id, last_word);
        let side = Side::Follows(last_word);
        self.enqueue(leader, id, Pending { side, why });
    }

    /// Election `id`, led here, wakes from the paced queue, in `peer`'s turn (the peer
    /// that refused or dropped it; this node for a lapse).
    pub(super) fn queue_leader(&mut self, id: ElectionId, peer: NodeId, why: Wake) {
        let side = Side::Leads;
        self.enqueue(peer, id, Pending { side, why });
    }

    /// Queues `p` for election `id` in `peer`'s turn, and wakes what this tick's budget
    /// still allows.
    fn enqueue(&mut self, peer: NodeId, id: ElectionId, p: Pending) {
        // Broken on purpose (mutation testing): the mass wakes bypass the queue, all at
        // once, as before it existed.
        if mutation::active("mass-wake-at-once") {
            if self.wake_entry(peer, id, p) {
                let burst = self.support.pace.bypassed();
                self.env.metrics.named_wake_burst(burst);
            }
            return;
        }
        self.support.pace.push(peer, id, p);
        self.drain_wakes();
    }

    /// Wakes election `id` for entry `p` of `peer`'s queue, if it still needs waking:
    /// led here and still quiet; followed here under `peer` and not held again; held
    /// for `peer` whose stream is still silent. Whether it woke.
    fn wake_entry(&mut self, peer: NodeId, id: ElectionId, p: Pending) -> bool {
        let Some(ng) = self.named.groups.get(&id) else {
            return false;
        };
        let quiet = ng.g.quiet;
        let inc = self.support.inc.get(&peer);
        let held = inc.and_then(|i| i.holds(id)).is_some();
        match p.side {
            Side::Leads if matches!(quiet, Quiet::Offered | Quiet::Leading) => {
                self.wake_leader(id, p.why);
                true
            }
            Side::Follows(last_word) if quiet == Quiet::Following(peer) && !held => {
                self.wake_follower(id, last_word, p.why);
                true
            }
            Side::Silent => {
                let timeout = self.env.timing.election_timeout();
                let now = self.env.clock.now();
                let silent = inc
                    .and_then(Incoming::last_at)
                    .is_some_and(|r| now.saturating_duration_since(r) >= timeout);
                if held && silent {
                    self.drop_followed(id, peer, p.why);
                }
                held && silent
            }
            _ => false,
        }
    }

    /// Wakes queued elections while this tick's budget lasts, each peer in turn; an
    /// entry that needs no wake any more (held again, awake already, its silent leader
    /// spoke) is dropped without charge.
    pub(super) fn drain_wakes(&mut self) {
        while let Some((peer, id, p)) = self.support.pace.next() {
            if self.wake_entry(peer, id, p) {
                let burst = self.support.pace.charge();
                self.env.metrics.named_wake_burst(burst);
            }
        }
        self.env
            .metrics
            .set_named_wake_queue(self.support.pace.len());
    }

    /// A tick begins for the paced wakes: while fewer than
    /// [`SILENT_WAKE_WHILE_AWAKE_BELOW`] are awake, it may wake up to that many, at
    /// most [`SILENT_WAKES_PER_TICK`], and at least [`SILENT_WAKES_TRICKLE`].
    pub(super) fn begin_wake_tick(&mut self) {
        let awake = self.env.hot.borrow().len();
        let room = SILENT_WAKE_WHILE_AWAKE_BELOW
            .saturating_sub(awake)
            .clamp(SILENT_WAKES_TRICKLE, SILENT_WAKES_PER_TICK);
        self.support.pace.begin_tick(room);
    }

    /// Whether a message of election `id` is a pre-vote that a quiet election drops
    /// unanswered, without waking: at a follower that holds it for a leader whose stream
    /// spoke within an election timeout, one from anyone else; at a leader holding its
    /// lease, any. raft-rs's check-quorum ignores such pre-votes in its lease too; not
    /// answering one votes for nobody. A quiet leader in its lapse grace (below) ignores
    /// them too: a stall that lapsed its lease also made followers campaign, and their
    /// pre-votes would wake what the grace keeps quiet. A replica that campaigns because it lost track of
    /// the leader (a restart, a partition) learns it from the leader's next offer, and
    /// one left behind from the leader's heartbeats once that offer is refused. Waking
    /// instead let a restarted node's thousands of campaigns wake every election of the
    /// group (section 12, "A returning follower of thousands").
    pub(in crate::driver) fn quiet_ignores(&self, id: ElectionId, m: &Message) -> bool {
        if m.get_msg_type() != MessageType::MsgRequestPreVote {
            return false;
        }
        let Some(ng) = self.named.groups.get(&id) else {
            return false;
        };
        match ng.g.quiet {
            Quiet::Following(leader) => {
                // Held, and the leader's stream spoke within an election timeout (a held
                // election of a silent leader may wait its turn to wake: see
                // `check_silence`; its pre-votes must be answered meanwhile).
                // Not held any more (it waits in the wake queue), it answers: its
                // promise is frozen, and its voters may need it.
                let now = self.env.clock.now();
                let live = self.support.inc.get(&leader).is_some_and(|inc| {
                    inc.holds(id).is_some()
                        && inc.last_at().is_some_and(|r| {
                            now.saturating_duration_since(r) < self.env.timing.election_timeout()
                        })
                });
                m.from != leader && live
            }
            Quiet::Leading => ng.g.lease.is_some() || self.support.lapsed.contains_key(&id),
            Quiet::Awake | Quiet::Offered => false,
        }
    }

    /// Before a message of election `id` is stepped: a quiet election wakes unless it is
    /// its leader's heartbeat (at a follower) or an answer in the leader's term (at the
    /// leader).
    pub(in crate::driver) fn wake_for_message(&mut self, id: ElectionId, m: &Message) {
        let Some(ng) = self.named.groups.get(&id) else {
            return;
        };
        let t = m.get_msg_type();
        match ng.g.quiet {
            Quiet::Awake => {}
            Quiet::Following(leader) => {
                let benign = m.from == leader
                    && m.term == ng.g.raw.raft.term
                    && t == MessageType::MsgHeartbeat;
                if benign {
                    let now = self.env.clock.now();
                    if let Some(ng) = self.named.groups.get_mut(&id) {
                        ng.g.leader_heard = Some(now);
                    }
                } else {
                    self.drop_followed(id, leader, Wake::Message);
                }
            }
            Quiet::Offered | Quiet::Leading => {
                let benign = m.term == ng.g.raw.raft.term
                    && matches!(
                        t,
                        MessageType::MsgHeartbeatResponse | MessageType::MsgAppendResponse
                    )
                    && !m.reject;
                if !benign {
                    self.wake_leader(id, Wake::Message);
                }
            }
        }
    }

    /// A followed quiet election wakes here: the stream reports it to `leader`.
    pub(super) fn drop_followed(&mut self, id: ElectionId, leader: NodeId, why: Wake) {
        // Broken on purpose (mutation testing): the follower keeps acknowledging the
        // election to its leader after it woke (and may vote in it once the window it
        // knows of closed), so the leader keeps crediting a support no longer given.
        let report = !mutation::active("support-after-vote");
        let promised = self.support.inc.get_mut(&leader).and_then(|inc| {
            if report {
                inc.drop_held(id, true)
            } else {
                inc.last_at()
            }
        });
        self.wake_follower(id, promised, why);
    }

    /// Followers wake the elections of a leader whose stream was silent, each at its own
    /// deadline: its last request's arrival plus the election's randomized election
    /// timeout (section 12, "A quiet election still detects a dead leader"), as if its
    /// heartbeats had stopped then. So thousands of elections held for one leader do not
    /// all wake on one tick when it stalls: they come due spread over `[E, E_max)` ticks
    /// and wait in the paced queue, still held, and those still held when the leader's
    /// stream speaks again stay quiet.
    pub(super) fn check_silence(&mut self, now: Instant) {
        let timeout = self.env.timing.election_timeout();
        let tick = self.env.timing.tick;
        if mutation::active("quiet-misses-dead-leader") {
            return;
        }
        let mut due = Vec::new();
        for (peer, inc) in &self.support.inc {
            if !inc.holds_any() {
                continue;
            }
            let Some(r) = inc.last_at() else { continue };
            let silent = now.saturating_duration_since(r);
            if silent < timeout {
                continue;
            }
            for id in inc.held_ids() {
                let Some(ng) = self.named.groups.get(&id) else {
                    continue;
                };
                let own = tick * ng.g.raw.raft.randomized_election_timeout() as u32;
                if silent >= own {
                    due.push((*peer, id));
                }
            }
        }
        // Queued by id within the peer, not by how overdue: every follower then wakes
        // the same elections first, so each has voters awake together.
        for (peer, id) in due {
            let p = Pending {
                side: Side::Silent,
                why: Wake::LeaderSilent,
            };
            self.support.pace.push(peer, id, p);
        }
    }

    /// Quiet elections led here whose lease lapsed: those leased again, or not quiet
    /// leaders any more, leave the list; those whose grace ([`LAPSE_GRACE_TIMEOUTS`]
    /// election timeouts) ran out wake (through the paced queue), so raft-rs's
    /// check-quorum runs again.
    ///
    /// A stall of this node or of a quorum of its supporters longer than the slack of a
    /// lease (about 120 ms with the default timing) lapses every lease it renews at once.
    /// Waking them all made the next turns long enough to lapse the rest, on every node:
    /// so a lapse alone does not wake a quiet election; the stream's next quorum leases
    /// it again (section 12, "A lapse is not a wake-up").
    pub(super) fn check_lapsed(&mut self, now: Instant) {
        if self.support.lapsed.is_empty() {
            return;
        }
        let grace = self.env.timing.election_timeout() * LAPSE_GRACE_TIMEOUTS;
        let me = &self.env;
        let groups = &self.named.groups;
        let mut wake = Vec::new();
        self.support.lapsed.retain(|id, at| {
            let Some(ng) = groups.get(id) else {
                return false;
            };
            let g = &ng.g;
            if g.quiet != Quiet::Leading || !g.leads_as_voter(me) || g.lease.is_some() {
                if g.lease.is_none() && matches!(g.quiet, Quiet::Leading | Quiet::Offered) {
                    wake.push(*id);
                }
                return false;
            }
            if now.saturating_duration_since(*at) >= grace {
                wake.push(*id);
                return false;
            }
            true
        });
        let me = self.env.id;
        for id in wake {
            self.queue_leader(id, me, Wake::LeaseLapsed);
        }
    }

    /// After a Ready of a quiet election: a leader that sent something of its own wakes,
    /// and so does a follower whose replica no longer follows the leader it holds it for.
    pub(in crate::driver) fn wake_active(&mut self, quiet: Vec<ElectionId>) {
        for id in quiet {
            let Some(ng) = self.named.groups.get_mut(&id) else {
                continue;
            };
            let acted = std::mem::take(&mut ng.g.acted);
            match ng.g.quiet {
                Quiet::Offered | Quiet::Leading if acted => self.wake_leader(id, Wake::Activity),
                Quiet::Following(leader) => {
                    let r = &ng.g.raw.raft;
                    if r.leader_id != leader || r.state != StateRole::Follower {
                        self.drop_followed(id, leader, Wake::Activity);
                    }
                }
                _ => {}
            }
        }
    }

    /// Quiet elections whose lease ran out wake (raft-rs's check-quorum then decides).
    pub(in crate::driver) fn wake_lapsed(&mut self, ids: Vec<ElectionId>) {
        for id in ids {
            self.wake_leader(id, Wake::LeaseLapsed);
        }
    }
}
