//! Leases at scale (`docs/design.md`, section 12): one support stream per peer renews
//! the leases of every named election that is *quiet*, so an idle election neither ticks
//! nor sends anything of its own.
//!
//! * A leader whose election is idle (lease held, nothing in flight, every live voter
//!   caught up) *offers* it to its voters over the stream; once every live voter holds
//!   it (and a quorum does), the election is quiet here: no ticks, no rounds.
//! * A follower holds an offered election only while its replica follows that leader in
//!   that term; holding it, it does not tick it, and it grants no vote in it before `W`
//!   after it last acknowledged the leader's request (the promise, kept even after it
//!   stops holding it).
//! * Each ack credits every held election with the request's send time; the lease of a
//!   quiet election runs from the latest time a quorum of its voters supports.
//! * Anything else that happens to a quiet election (a message that is not its
//!   leader's heartbeat, a proposal, a lapsed lease, silence of the leader's stream for
//!   an election timeout) wakes it: it ticks again and the stream drops it.
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | the stream in the driver: offering, holding, crediting, the silence check |
//! | `book.rs` | the bookkeeping per peer and direction, bounded whatever a peer sends (no I/O, no clock) |
//! | `wire.rs` | requests and acks on the wire, and their decoding limits |
//! | `slots.rs` | the credit path's dense view of the elections led here |
//! | `wake.rs` | what wakes a quiet election on either side, and the pre-votes it drops instead |
//! | `pace.rs` | the paced wake queue, the one owner of mass wakes: a few a tick, a fair share per peer |

mod book;
mod pace;
mod slots;
mod wake;
pub(crate) mod wire;

use std::collections::BTreeMap;

use raft::eraftpb::Message;
use raft::StateRole;
use slog::{debug, info, warn};
use tokio::time::Instant;

use super::group::Quiet;
use super::Driver;
use crate::clock::Stamp;
use crate::election::ElectionId;
use crate::election_rng::{draw, Draw};
use crate::mutation;
use crate::storage::RaftStore;
use crate::transport::NodeId;
use book::{Asked, BookDrop, BookFull, Incoming, Outgoing, NOT_RUNNING_PER_REQUEST};
use slots::{Slot, Slots};
pub(in crate::driver) use wake::Wake;
pub(crate) use wire::SUPPORT_STREAM;
use wire::{Decoded, Op};

/// The support stream's state on this node.
pub(super) struct Support {
    /// This driver's incarnation: peers tell a restart by it.
    incarnation: u64,
    /// As a leader, towards each peer.
    out: BTreeMap<NodeId, Outgoing>,
    /// As a follower, from each peer.
    inc: BTreeMap<NodeId, Incoming>,
    /// When requests last left.
    last_round: Option<Instant>,
    /// A `Safe` confirm of a quiet election waits: send requests at the end of the turn.
    pub(super) urgent: bool,
    /// Quiet elections are off (a test hook: every election renews by its own rounds).
    pub(super) disabled: bool,
    /// Reused by `credit` (it runs for every held election on every ack).
    scratch: Vec<Stamp>,
    /// Reused by `credit_held`: each class's key and its `σ`, for one ack.
    classes: Vec<(ClassKey, Option<Stamp>)>,
    /// The elections led here that the stream may renew, for the credit path.
    slots: Slots,
    /// Reused by `credit_held`: the elections whose `σ` moved with one ack.
    due: Vec<(ElectionId, u64, Stamp)>,
    /// Quiet elections led here whose lease lapsed, with when: they stay quiet for a
    /// grace ([`LAPSE_GRACE_TIMEOUTS`](wake::LAPSE_GRACE_TIMEOUTS)), in which the stream may bring the lease back.
    pub(super) lapsed: BTreeMap<ElectionId, Instant>,
    /// Quiet elections waiting to wake, a few a tick, each peer in turn: every mass
    /// wake of either side goes through it (`pace.rs`; the budget is
    /// [`SILENT_WAKE_WHILE_AWAKE_BELOW`](wake::SILENT_WAKE_WHILE_AWAKE_BELOW)).
    pace: pace::WakeQueue,
}

/// A support class, as one ack sees it: the peers among the election's voters and the
/// peers among those that hold it (bits by the peer's place in `Support::out`), whether
/// this node is a voter, and the number of voters.
type ClassKey = (u64, u64, bool, usize);

impl Support {
    /// This driver's incarnation (the notices carry it too).
    pub(super) fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// A stream of a fresh incarnation: drawn at random, or from `seed` (the test hook,
    /// so that a simulation replays).
    pub(super) fn new(disabled: bool, seed: Option<u64>) -> Self {
        Support {
            incarnation: draw::<u64>(seed, Draw::SupportIncarnation) | 1,
            out: BTreeMap::new(),
            inc: BTreeMap::new(),
            last_round: None,
            urgent: false,
            disabled,
            scratch: Vec::new(),
            classes: Vec::new(),
            slots: Slots::default(),
            due: Vec::new(),
            lapsed: BTreeMap::new(),
            pace: pace::WakeQueue::default(),
        }
    }
}

/// Why an offer was refused (counted per request, for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// A drop or refusal of it is still being reported.
    Reported = 0,
    /// This node does not run it (yet).
    NotRunning = 1,
    /// Retiring here, or not a voter.
    NotVoting = 2,
    /// The replica is in another term.
    Term = 3,
    /// The replica is not a follower of the leader (nor a leaderless follower).
    Role = 4,
    /// The replica's log or commit differs.
    Log = 5,
}

impl<S: RaftStore> Driver<S> {
    /// `W`: how long a follower's promise lasts after it acknowledged a request, on its
    /// own clock (section 12; `(E − 1)` ticks, the refusal window of section 2).
    fn promise_window(&self) -> std::time::Duration {
        self.env.timing.tick * self.env.timing.election_ticks.saturating_sub(1) as u32
    }

    /// A message on the support stream from a peer.
    pub(super) fn on_support(&mut self, m: Message) {
        let from = m.from;
        if from == self.env.id || !self.root.raw.raft.prs().iter().any(|(id, _)| *id == from) {
            // Not a member: nothing to support or be supported by (the transport already
            // authenticated it).
            self.env.metrics.support_malformed();
            return;
        }
        // The stream is also each peer's heartbeat (the balancer's health looks at it).
        self.last_heard.insert(from, self.env.clock.now());
        match wire::decode(&m) {
            Ok(Decoded::Request(req)) => self.on_support_request(from, req),
            Ok(Decoded::Ack(ack)) => self.on_support_ack(from, ack),
            Ok(Decoded::Notice(notice)) => self.on_notice(from, notice),
            Err(e) => {
                self.env.metrics.support_malformed();
                debug!(self.env.logger, "malformed support message dropped"; "from" => from,
                       "why" => e.0);
            }
        }
    }

    fn on_support_request(&mut self, from: NodeId, req: wire::Request) {
        let now = self.env.clock.now();
        let inc = self.support.inc.entry(from).or_insert_with(Incoming::new);
        let Some(asked) = inc.begin(&req) else {
            return;
        };
        let mut woken = Vec::new();
        let mut refused = [0usize; 6];
        let mut full = None;
        // Elections held for the peer that a new incarnation of it, or the book's loss,
        // ended: each frozen until the promise already made, and woken.
        let ended = match asked {
            Some(Asked::Restarted {
                dropped,
                frozen_until,
            }) => Some((dropped, frozen_until, Wake::LeaderRestarted)),
            Some(Asked::Forgotten {
                dropped,
                frozen_until,
            }) => {
                self.book_dropped(from, BookDrop::Unconfirmed);
                Some((dropped, frozen_until, Wake::BookDropped))
            }
            None => None,
        };
        if let Some((dropped, frozen_until, why)) = ended {
            woken.extend(dropped.into_iter().map(|id| (id, frozen_until, why)));
        }
        let unbounded = mutation::active("support-book-unbounded");
        let inc = self.support.inc.entry(from).or_insert_with(Incoming::new);
        for op in &req.ops {
            match *op {
                Op::Remove { id } => {
                    if let Some(r) = inc.drop_held(id, false) {
                        woken.push((id, Some(r), Wake::Withdrawn));
                    }
                }
                Op::Add {
                    id,
                    term,
                    last,
                    commit,
                } => {
                    // A replica that knows no leader in `term` (this node restarted, or
                    // its pre-vote campaign found none) learns it from the offer: only
                    // the leader of `term` offers an election in `term`.
                    let why = if !inc.may_accept(id) {
                        Some(Refused::Reported)
                    } else {
                        match self.named.groups.get(&id) {
                            None => Some(Refused::NotRunning),
                            Some(ng) => {
                                let r = &ng.g.raw.raft;
                                let follows = match r.state {
                                    StateRole::Follower => {
                                        r.leader_id == from || r.leader_id == raft::INVALID_ID
                                    }
                                    StateRole::PreCandidate => r.leader_id == raft::INVALID_ID,
                                    _ => false,
                                };
                                if ng.retiring || !r.promotable() {
                                    Some(Refused::NotVoting)
                                } else if r.term != term {
                                    Some(Refused::Term)
                                } else if !follows {
                                    Some(Refused::Role)
                                } else if r.raft_log.last_index() != last
                                    || r.raft_log.committed != commit
                                {
                                    Some(Refused::Log)
                                } else {
                                    None
                                }
                            }
                        }
                    };
                    if let Some(why) = why {
                        refused[why as usize] += 1;
                        if why == Refused::NotRunning
                            && refused[why as usize] > NOT_RUNNING_PER_REQUEST
                            && !unbounded
                        {
                            full = Some(BookDrop::NotRunning);
                            break;
                        }
                    }
                    if why.is_none() {
                        inc.accept(id, term);
                        if let Some(ng) = self.named.groups.get_mut(&id) {
                            let r = &ng.g.raw.raft;
                            if r.leader_id != from || r.state != StateRole::Follower {
                                ng.g.become_follower(term, from);
                                ng.g.touch(&self.env);
                            }
                            ng.g.quiet = Quiet::Following(from);
                        }
                    } else {
                        match inc.refuse(id) {
                            Ok(Some(r)) => woken.push((id, Some(r), Wake::Refused)),
                            Ok(None) => {}
                            Err(BookFull) => {
                                full = Some(BookDrop::Full);
                                break;
                            }
                        }
                    }
                }
            }
        }
        let ack = match full {
            Some(why) => {
                // No ack: what this request was told is forgotten with the book.
                let (dropped, frozen_until) = inc.forget();
                let wake = Wake::BookDropped;
                woken.extend(dropped.into_iter().map(|id| (id, frozen_until, wake)));
                self.book_dropped(from, why);
                None
            }
            None => {
                let ack = inc.ack(self.support.incarnation, now);
                self.env.metrics.support_book(inc.len());
                Some(ack)
            }
        };
        if refused.iter().any(|n| *n > 0) {
            debug!(self.env.logger, "support offers refused"; "leader" => from,
                   "already_reported" => refused[0], "not_running" => refused[1],
                   "not_voting" => refused[2], "other_term" => refused[3],
                   "other_role_or_leader" => refused[4], "other_log" => refused[5]);
        }
        for (id, promised, why) in woken {
            self.queue_follower(id, from, promised, why);
        }
        if let Some(ack) = ack {
            self.env.metrics.support_sent(false);
            self.env
                .transport
                .send_election(SUPPORT_STREAM, ack.to_message(self.env.id, from));
        }
    }

    /// Peer `from`'s book was dropped: counted, and logged the first time for this peer
    /// (a correct peer never costs its book; one that does, does again).
    fn book_dropped(&mut self, from: NodeId, why: BookDrop) {
        self.env.metrics.support_book_dropped();
        let drops = self.support.inc.get(&from).map_or(0, Incoming::drops);
        let what = match why {
            BookDrop::Unconfirmed => "the peer did not confirm this node's reports in time",
            BookDrop::Full => "the peer's offers would pass the book's cap",
            BookDrop::NotRunning => {
                "one request offered more elections this node does not run than a request may"
            }
        };
        if drops == 1 {
            warn!(self.env.logger,
                "support book of a peer dropped; it is told this node restarted (logged once per peer, counted in tenure_support_books_dropped_total)";
                "peer" => from, "why" => what, "cap" => book::BOOK_CAP,
                "confirm_within_requests" => book::CONFIRM_WITHIN,
                "not_running_per_request" => NOT_RUNNING_PER_REQUEST);
        } else {
            debug!(self.env.logger, "support book of a peer dropped"; "peer" => from,
                   "why" => what, "drops" => drops);
        }
    }

    fn on_support_ack(&mut self, from: NodeId, ack: wire::Ack) {
        let now = self.env.clock.now();
        let Some(out) = self.support.out.get_mut(&from) else {
            return;
        };
        let o = out.on_ack(&ack, now);
        if o.credited.is_none() {
            return;
        }
        if let Some(place) = self.support.slots.place(from) {
            for id in &o.newly_held {
                self.support.slots.set_holder(*id, place, true);
            }
            for id in &o.unheld {
                self.support.slots.set_holder(*id, place, false);
            }
        }
        let (refused, dropped): (Vec<ElectionId>, Vec<ElectionId>) = o
            .unheld
            .into_iter()
            .partition(|id| o.refused.binary_search(id).is_ok());
        // Those refused while the other holders are a quorum wake to replicate to the
        // peer; the rest because their support fell short.
        let mut wake = Vec::new();
        for id in refused {
            let why = match self.still_supported(id) {
                Some(_) => Wake::Refused,
                None => Wake::Unheld,
            };
            wake.push((id, why));
        }
        let unheld = self.offer_again(from, dropped, o.restarted);
        wake.extend(unheld.into_iter().map(|id| (id, Wake::Unheld)));
        for (id, why) in wake {
            self.queue_leader(id, from, why);
        }
        self.credit_held(from);
        for id in o.newly_held {
            self.settle_offer(id);
        }
    }

    /// The peer `from` stopped holding these elections (it woke them, or it came back
    /// as a new incarnation that holds nothing): each quiet one whose other holders are
    /// still a quorum stays quiet here (its lease runs on their support) and is offered
    /// to the peer once more; the rest are returned, to wake. An offer the peer refuses
    /// wakes the election (`on_support_ack`), so an election is offered again once per
    /// drop, never round after round.
    ///
    /// Waking them all instead woke every election a restarted or healed peer held, at
    /// once: with thousands per leader every driver turn took longer than a lease, and
    /// every lease of the group lapsed (section 12, "A returning follower of
    /// thousands").
    fn offer_again(
        &mut self,
        from: NodeId,
        dropped: Vec<ElectionId>,
        restarted: bool,
    ) -> Vec<ElectionId> {
        if dropped.is_empty() {
            return dropped;
        }
        let mut wake = Vec::new();
        let mut offered = 0usize;
        for id in dropped {
            let again = self.still_supported(id);
            match (again, self.support.out.get_mut(&from)) {
                (Some((term, last, commit)), Some(o)) => {
                    o.offer(id, term, last, commit);
                    offered += 1;
                }
                _ => wake.push(id),
            }
        }
        if restarted {
            info!(self.env.logger, "peer restarted: its quiet elections offered to it again";
                  "peer" => from, "offered" => offered, "woken" => wake.len());
        } else {
            debug!(self.env.logger, "peer dropped quiet elections: offered to it again";
                   "peer" => from, "offered" => offered, "woken" => wake.len());
        }
        wake
    }

    /// Whether election `id` is quiet here and its holders (by the acks so far) are
    /// still a quorum with this node, and its log is all committed: then its term, last
    /// index and commit (what an offer of it carries).
    fn still_supported(&self, id: ElectionId) -> Option<(u64, u64, u64)> {
        let ng = self.named.groups.get(&id)?;
        let r = &ng.g.raw.raft;
        let quiet = matches!(ng.g.quiet, Quiet::Offered | Quiet::Leading);
        let slot = self.support.slots.get(id)?;
        let supported = slot.member && (slot.holders.count_ones() as usize) + 1 > slot.count / 2;
        (quiet
            && supported
            && !ng.retiring
            && r.state == StateRole::Leader
            && r.term == slot.term
            && r.raft_log.last_index() == r.raft_log.committed)
            .then(|| (r.term, r.raft_log.last_index(), r.raft_log.committed))
    }

    /// After an ack from `from`: extends the lease of every election led here whose `σ`
    /// (the latest send time a quorum of its voters supports) moved.
    ///
    /// `σ` depends only on which voters the election has and which of them hold it, its
    /// *class*: with thousands of elections on one membership there are a handful of
    /// classes, so `σ` is computed once per class, not per election. The elections are
    /// the dense slots (`slots.rs`), so an ack is one pass over a `Vec`; an election's
    /// group is looked at only when its `σ` moved past what it was last credited with,
    /// once per round (one of the four acks of a round, with four peers), and its lease
    /// is extended there under every condition of `Group::credit_support`.
    fn credit_held(&mut self, from: NodeId) {
        if self.support.out.len() > 64 {
            // More peers than a class's bit set holds: one election at a time.
            let Some(b) = self.support.out.get(&from) else {
                return;
            };
            let held: Vec<(ElectionId, u64)> = b.held().collect();
            for (id, term) in held {
                self.credit(id, term);
            }
            return;
        }
        self.sync_slot_peers();
        #[cfg(debug_assertions)]
        self.check_slots(from);
        let Support {
            out,
            scratch,
            classes,
            slots,
            due,
            ..
        } = &mut self.support;
        // Every peer's last acknowledged request's send time, by place.
        let acked: Vec<Option<Stamp>> =
            out.values().map(|o| o.last_ack().map(|(s, _)| s)).collect();
        classes.clear();
        due.clear();
        for slot in slots.iter_mut() {
            let key = (slot.voters, slot.holders, slot.member, slot.count);
            let sigma = match classes.iter().find(|(k, _)| *k == key) {
                Some((_, sigma)) => *sigma,
                None => {
                    scratch.clear();
                    scratch.extend(
                        acked
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| slot.holders & (1 << i) != 0)
                            .filter_map(|(_, s)| *s),
                    );
                    let sigma = quorum_sigma(scratch, slot.member, slot.count);
                    classes.push((key, sigma));
                    sigma
                }
            };
            let Some(sigma) = sigma else { continue };
            if slot
                .credited
                .is_some_and(|c| c.mono >= sigma.mono && c.boot >= sigma.boot)
            {
                continue; // nothing newer than what it has
            }
            slot.credited = Some(sigma);
            due.push((slot.id, slot.term, sigma));
        }
        for &(id, term, sigma) in due.iter() {
            let Some(ng) = self.named.groups.get_mut(&id) else {
                continue;
            };
            #[cfg(debug_assertions)]
            {
                // The class's σ is the election's own (every test and simulation seed
                // checks it).
                let mut own = Vec::new();
                let voters = ng.g.raw.raft.prs().conf().voters().ids();
                let one = sigma_of(out, &mut own, self.env.id, voters.iter(), id);
                debug_assert_eq!(Some(sigma), one, "σ of election {id}");
            }
            if ng.g.keeper.covers(sigma, term) {
                continue;
            }
            let retiring = ng.retiring;
            ng.g.credit_support(&self.env, sigma, term, retiring);
        }
    }

    /// The slots' bits are by the peers' places in `out`: when the peers change,
    /// computed again for every slot from the groups and the books.
    fn sync_slot_peers(&mut self) {
        let peers: Vec<NodeId> = self.support.out.keys().copied().collect();
        if self.support.slots.same_peers(&peers) {
            return;
        }
        let me = self.env.id;
        let Support { out, slots, .. } = &mut self.support;
        let groups = &self.named.groups;
        slots.rebuild(&peers, |id| {
            let ng = groups.get(&id)?;
            let mut b = voter_bits(&peers, me, ng.g.raw.raft.prs().conf().voters().ids().iter());
            b.1 = peers
                .iter()
                .enumerate()
                .filter(|(i, p)| b.0 & (1 << i) != 0 && out.get(p).is_some_and(|o| o.holds(id)))
                .fold(0, |h, (i, _)| h | 1 << i);
            Some(b)
        });
    }

    /// Debug builds: the slots say what the books and the groups say. Every election
    /// the peer `from` holds has a slot that says so, in the term it holds it in, and
    /// every slot's holders and voters are right.
    #[cfg(debug_assertions)]
    fn check_slots(&self, from: NodeId) {
        let me = self.env.id;
        let peers: Vec<NodeId> = self.support.out.keys().copied().collect();
        let Some(b) = self.support.out.get(&from) else {
            return;
        };
        for (id, term) in b.held() {
            let Some(ng) = self.named.groups.get(&id) else {
                continue;
            };
            let slot = self.support.slots.get(id);
            debug_assert!(
                slot.is_some_and(|s| s.term == term),
                "election {id} held by {from} in term {term} has no slot of that term: {slot:?}"
            );
            let Some(slot) = slot else { continue };
            let (voters, _, member, count) =
                voter_bits(&peers, me, ng.g.raw.raft.prs().conf().voters().ids().iter());
            let holders = peers
                .iter()
                .enumerate()
                .filter(|(i, p)| {
                    voters & (1 << i) != 0 && self.support.out.get(p).is_some_and(|o| o.holds(id))
                })
                .fold(0, |h, (i, _)| h | 1 << i);
            debug_assert_eq!(
                (slot.voters, slot.holders, slot.member, slot.count),
                (voters, holders, member, count),
                "election {id}'s slot"
            );
        }
    }

    /// Extends election `id`'s lease (led here in `term`) to the latest send time a
    /// quorum of its voters supports (one election; `credit_held` does it by class).
    fn credit(&mut self, id: ElectionId, term: u64) {
        let me = self.env.id;
        let Some(ng) = self.named.groups.get_mut(&id) else {
            return;
        };
        let Support { out, scratch, .. } = &mut self.support;
        let voters = ng.g.raw.raft.prs().conf().voters().ids();
        let Some(sigma) = sigma_of(out, scratch, me, voters.iter(), id) else {
            return;
        };
        let retiring = ng.retiring;
        ng.g.credit_support(&self.env, sigma, term, retiring);
    }

    /// An offered election becomes quiet here once every live voter holds it.
    fn settle_offer(&mut self, id: ElectionId) {
        let me = self.env.id;
        let now = self.env.clock.now();
        let down_after = self.env.timing.election_timeout();
        let Some(ng) = self.named.groups.get(&id) else {
            return;
        };
        if ng.g.quiet != Quiet::Offered {
            return;
        }
        let voters: Vec<NodeId> = ng.g.raw.raft.prs().conf().voters().ids().iter().collect();
        let mut holding = 1;
        for v in voters.iter().filter(|v| **v != me) {
            let holds = self.support.out.get(v).is_some_and(|o| o.holds(id));
            let live = self
                .last_heard
                .get(v)
                .is_some_and(|t| now.saturating_duration_since(*t) < down_after);
            if holds {
                holding += 1;
            } else if live {
                return;
            }
        }
        if holding < voters.len() / 2 + 1 {
            return;
        }
        if let Some(ng) = self.named.groups.get_mut(&id) {
            ng.g.quiet = Quiet::Leading;
            debug!(self.env.logger, "election quiet"; "election" => ng.g.name.as_deref());
        }
    }

    /// Every tick: followers whose leader's stream went silent wake. Every heartbeat
    /// interval: idle elections are offered, offers settle, and requests leave.
    pub(super) fn support_tick(&mut self, at: Stamp) {
        if self.support.disabled {
            return;
        }
        let now = at.mono;
        self.begin_wake_tick();
        self.check_silence(now);
        self.check_lapsed(now);
        self.drain_wakes();
        let due = self.support.last_round.is_none_or(|t| {
            now.saturating_duration_since(t) >= self.env.timing.heartbeat_interval()
        });
        if !due {
            return;
        }
        // Offers and their settling walk the awake elections: once per heartbeat, with
        // the requests that carry them.
        self.offer_idle(now);
        let offered: Vec<ElectionId> = self
            .env
            .hot
            .borrow()
            .iter()
            .copied()
            .filter(|id| {
                self.named
                    .groups
                    .get(id)
                    .is_some_and(|ng| ng.g.quiet == Quiet::Offered)
            })
            .collect();
        for id in offered {
            self.settle_offer(id);
        }
        self.send_support(at);
    }

    /// Requests to every peer something is asked of.
    pub(super) fn send_support(&mut self, at: Stamp) {
        self.support.urgent = false;
        self.support.last_round = Some(at.mono);
        let me = self.env.id;
        if self.named.groups.is_empty() && self.support.out.values().all(|o| !o.is_active()) {
            return;
        }
        // Every member hears from this node every heartbeat while elections run, even with
        // nothing to ask: the stream is the peers' heartbeat too.
        let incarnation = self.support.incarnation;
        for (id, _) in self.root.raw.raft.prs().iter() {
            if *id != me {
                self.support
                    .out
                    .entry(*id)
                    .or_insert_with(|| Outgoing::new(incarnation));
            }
        }
        // One send time for the round, read before the first request leaves (so at or
        // before every one of them): the peers' acks then move `σ` once per round, not
        // once per ack.
        let sent = self.env.clock.stamp();
        for (peer, o) in &mut self.support.out {
            let req = o.request(sent);
            self.env.metrics.support_sent(true);
            self.env
                .transport
                .send_election(SUPPORT_STREAM, req.to_message(me, *peer));
        }
    }

    /// Offers every idle election this node leads to its voters.
    fn offer_idle(&mut self, now: Instant) {
        let me = self.env.id;
        let settle = self.env.timing.election_timeout();
        if self.stands_down() || self.shutdown.is_some() {
            return;
        }
        let down_after = self.env.timing.election_timeout();
        let last_heard = &self.last_heard;
        let mut offers = Vec::new();
        let hot = self.env.hot.borrow();
        for id in hot.iter() {
            let Some(ng) = self.named.groups.get(id) else {
                continue;
            };
            let g = &ng.g;
            if g.quiet != Quiet::Awake
                || ng.retiring
                || now.saturating_duration_since(g.awake_since) < settle
            {
                continue;
            }
            let r = &g.raw.raft;
            if r.state != StateRole::Leader {
                continue; // the common case with thousands of elections: not ours
            }
            let voters: Vec<NodeId> = r.prs().conf().voters().ids().iter().collect();
            let idle = voters.contains(&me)
                && voters.len() >= 2
                && r.prs().iter().count() == voters.len()
                && !g.joint
                && !r.has_pending_conf()
                && !g.conf_hold
                && g.transfer.is_none()
                && r.lead_transferee.is_none()
                && g.timeout_now_sent != Some(r.term)
                && g.recorded_term == r.term
                && g.lease.is_some()
                && !g.keeper.has_pending()
                && r.raft_log.last_index() == r.raft_log.committed
                && g.applied == r.raft_log.committed
                && r.raft_log.unstable.entries.is_empty()
                && voters.iter().filter(|v| **v != me).all(|v| {
                    let caught_up = r
                        .prs()
                        .get(*v)
                        .is_some_and(|p| p.matched == r.raft_log.last_index());
                    let live = last_heard
                        .get(v)
                        .is_some_and(|t| now.saturating_duration_since(*t) < down_after);
                    caught_up || !live
                });
            if idle {
                offers.push((
                    *id,
                    r.term,
                    r.raft_log.last_index(),
                    r.raft_log.committed,
                    voters,
                ));
            }
        }
        drop(hot);
        let incarnation = self.support.incarnation;
        for (id, term, last, commit, voters) in &offers {
            for v in voters.iter().filter(|v| **v != me) {
                self.support
                    .out
                    .entry(*v)
                    .or_insert_with(|| Outgoing::new(incarnation))
                    .offer(*id, *term, *last, *commit);
            }
            if let Some(ng) = self.named.groups.get_mut(id) {
                ng.g.quiet = Quiet::Offered;
            }
        }
        // The credit path's slots (after the books: an offer may add a peer).
        self.sync_slot_peers();
        let peers: Vec<NodeId> = self.support.out.keys().copied().collect();
        for (id, term, _, _, voters) in offers {
            let (voters, _, member, count) = voter_bits(&peers, me, voters.into_iter());
            self.support.slots.insert(Slot {
                id,
                term,
                voters,
                member,
                count,
                holders: 0,
                credited: None,
            });
        }
    }

    /// Election `id` closes here: the stream forgets it.
    pub(super) fn support_forget(&mut self, id: ElectionId) {
        self.support.lapsed.remove(&id);
        self.support.pace.remove(id);
        self.wake_leader(id, Wake::Closing);
        let leaders: Vec<NodeId> = self.support.inc.keys().copied().collect();
        for l in leaders {
            if let Some(inc) = self.support.inc.get_mut(&l) {
                inc.drop_held(id, true);
            }
        }
    }
}

/// An election's voters as bits of `peers` (by place), whether `me` is one of them, and
/// how many there are (the first of the pair is the voters; the second, holders, is 0).
fn voter_bits(
    peers: &[NodeId],
    me: NodeId,
    voters: impl Iterator<Item = NodeId>,
) -> (u64, u64, bool, usize) {
    let (mut bits, mut member, mut count) = (0u64, false, 0usize);
    for v in voters {
        count += 1;
        if v == me {
            member = true;
        } else if let Some(i) = peers.iter().position(|p| *p == v).filter(|i| *i < 64) {
            bits |= 1 << i;
        }
    }
    (bits, 0, member, count)
}

/// Election `id`'s `σ`, one election at a time: the `(quorum − 1)`-th latest send time
/// acknowledged by a voter (of `voters`) that holds it; `None` without such a quorum.
fn sigma_of(
    out: &BTreeMap<NodeId, Outgoing>,
    scratch: &mut Vec<Stamp>,
    me: NodeId,
    voters: impl Iterator<Item = NodeId>,
    id: ElectionId,
) -> Option<Stamp> {
    scratch.clear();
    let mut count = 0;
    let mut member = false;
    for v in voters {
        count += 1;
        if v == me {
            member = true;
            continue;
        }
        if let Some((sent, _)) = out
            .get(&v)
            .filter(|o| o.holds(id))
            .and_then(Outgoing::last_ack)
        {
            scratch.push(sent);
        }
    }
    quorum_sigma(scratch, member, count)
}

/// `σ` from the send times `acked` by the voters that hold an election, of `count`
/// voters (this node one of them if `member`); `None` without a quorum.
fn quorum_sigma(acked: &mut [Stamp], member: bool, count: usize) -> Option<Stamp> {
    let quorum = count / 2 + 1;
    // This node's own support counts at any time: it needs quorum − 1 others.
    if !member || count < 2 || acked.len() + 1 < quorum {
        return None;
    }
    Some(latest_supported_by(acked, quorum - 1))
}

/// The latest time that `need` of the `acked` send times are at or after, on both
/// clocks: of the `need` latest (by the monotonic clock, then the boot-time one), the
/// earliest monotonic reading and the earliest boot-time reading. Send times of one node
/// grow on both clocks together, so this is the `need`-th latest; the minimum keeps it
/// exact when two requests share a monotonic reading but not a boot-time one.
fn latest_supported_by(acked: &mut [Stamp], need: usize) -> Stamp {
    acked.sort_unstable_by_key(|s| std::cmp::Reverse((s.mono, s.boot)));
    let top = &acked[..need];
    Stamp {
        mono: top[need - 1].mono,
        boot: top
            .iter()
            .map(|s| s.boot)
            .min()
            .unwrap_or(top[need - 1].boot),
    }
}
