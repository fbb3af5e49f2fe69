//! The support stream's bookkeeping, per peer and per direction, with no I/O and no
//! clock of its own (`docs/design.md`, section 12, "Support rounds"):
//!
//! * [`Outgoing`]: this node as a leader, towards one peer `B`: the elections it asks
//!   `B` to support (operations repeated until `B` acknowledged them), the requests in
//!   flight with their send times, and what `B` holds as far as its acks say.
//! * [`Incoming`]: this node as a follower, from one peer `A`: the elections it supports
//!   for `A` (`S_A`), when it last acknowledged one of `A`'s requests (`r_A`), and the
//!   elections it stopped supporting that `A` has not yet been told of.
//!
//! The rule both halves keep: `A` credits an election `X` with a request's send time only
//! if `B` held `X` when it acknowledged that request. `B` acknowledges requests in
//! sequence order (older ones are dropped), repeats in every ack each election it
//! refused or dropped until a request of `A` says `A` processed such an ack, and `A`
//! processes acks in order; so an ack that does not list `X` was made while `X` was held.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tokio::time::Instant;

use super::wire::{Ack, Op, Request};
use crate::clock::Stamp;
use crate::election::{ElectionId, MAX_ELECTIONS};
use crate::mutation;

/// How many requests' send times are kept per peer (acks of older ones are ignored).
const SENT_KEPT: usize = 64;

/// How many requests a peer has to confirm a report (a request whose `acked` reaches
/// the request whose ack first carried it), or lose its book (`docs/design.md`, section
/// 12, "A member cannot grow a book"). A correct leader confirms within a round trip;
/// it ignores acks older than its last [`SENT_KEPT`] requests, so twice that many leaves
/// room for a lossy path back.
pub(crate) const CONFIRM_WITHIN: u64 = 2 * SENT_KEPT as u64;

/// The most refusals and drops a peer's book reports at once (section 9): one per
/// election the catalog can hold. A correct leader offers only elections of its
/// catalog, and confirms each report within a round trip.
pub(crate) const BOOK_CAP: usize = MAX_ELECTIONS;

/// The most offers of elections this node does not run that one request may carry
/// (section 12): a correct leader offers an election once it settled under a quorum, so
/// this node runs it unless its root log lags behind the creation (or the leader's
/// behind a removal). Past this the peer's book is dropped, unanswered, so a frame of
/// made-up ids costs a turn this many refusals, not the frame's 130,000.
pub(crate) const NOT_RUNNING_PER_REQUEST: usize = 4096;

/// What this node asks of one peer, as the leader of some elections.
#[derive(Debug)]
pub(crate) struct Outgoing {
    /// This node's incarnation (carried by every request).
    me: u64,
    /// The peer's incarnation, from its acks.
    peer: Option<u64>,
    next_seq: u64,
    /// The highest ack processed.
    acked: u64,
    /// Recent requests: sequence number and send time.
    sent: VecDeque<(u64, Stamp)>,
    /// Operations not yet acknowledged, with the first request that carried each (0:
    /// none yet).
    ops: BTreeMap<ElectionId, (Op, u64)>,
    /// Elections the peer holds for this node, with the term offered.
    held: BTreeMap<ElectionId, u64>,
    /// The send time of the last request acknowledged, and when the ack arrived.
    last_ack: Option<(Stamp, Instant)>,
}

/// What one ack told the leader.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct AckOutcome {
    /// The acknowledged request's send time: what the peer's support of every held
    /// election is credited with. `None`: the ack was stale or not ours.
    pub(crate) credited: Option<Stamp>,
    /// Elections the peer started to hold with this ack.
    pub(crate) newly_held: Vec<ElectionId>,
    /// Elections the peer refused or stopped holding (it was holding them, or refused
    /// an offer this ack answered).
    pub(crate) unheld: Vec<ElectionId>,
    /// Of `unheld`, the offers this ack refused (the rest were held, and dropped).
    pub(crate) refused: Vec<ElectionId>,
    /// The peer is a new incarnation: everything it held is gone (offer again).
    pub(crate) restarted: bool,
}

impl Outgoing {
    /// The book towards a peer, for this node's incarnation `me`.
    pub(crate) fn new(me: u64) -> Self {
        Outgoing {
            me,
            peer: None,
            next_seq: 1,
            acked: 0,
            sent: VecDeque::new(),
            ops: BTreeMap::new(),
            held: BTreeMap::new(),
            last_ack: None,
        }
    }

    /// Asks the peer to support election `id`, led here in `term`, whose log ends at
    /// `last` with `commit` committed.
    pub(crate) fn offer(&mut self, id: ElectionId, term: u64, last: u64, commit: u64) {
        self.held.remove(&id);
        self.ops.insert(
            id,
            (
                Op::Add {
                    id,
                    term,
                    last,
                    commit,
                },
                0,
            ),
        );
    }

    /// Stops asking for `id`'s support (the peer drops it: it wakes the election).
    pub(crate) fn withdraw(&mut self, id: ElectionId) {
        let was_known = self.held.remove(&id).is_some() || self.ops.contains_key(&id);
        if was_known {
            self.ops.insert(id, (Op::Remove { id }, 0));
        }
    }

    /// Whether the peer holds `id` (as far as the acks so far say).
    pub(crate) fn holds(&self, id: ElectionId) -> bool {
        self.held.contains_key(&id)
    }

    /// The elections the peer holds, with the terms offered.
    pub(crate) fn held(&self) -> impl Iterator<Item = (ElectionId, u64)> + '_ {
        self.held.iter().map(|(k, v)| (*k, *v))
    }

    /// Whether anything is asked of the peer (requests are due).
    pub(crate) fn is_active(&self) -> bool {
        !self.held.is_empty() || !self.ops.is_empty()
    }

    /// The send time of the last acknowledged request and when its ack arrived.
    pub(crate) fn last_ack(&self) -> Option<(Stamp, Instant)> {
        self.last_ack
    }

    /// The next request, sent at `at` (recorded before the frame leaves).
    pub(crate) fn request(&mut self, at: Stamp) -> Request {
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut ops = Vec::with_capacity(self.ops.len());
        for (op, first) in self.ops.values_mut() {
            if *first == 0 {
                *first = seq;
            }
            ops.push(*op);
        }
        self.sent.push_back((seq, at));
        while self.sent.len() > SENT_KEPT {
            self.sent.pop_front();
        }
        Request {
            incarnation: self.me,
            seq,
            acked: self.acked,
            ops,
        }
    }

    /// Processes the peer's ack (received at `now`).
    pub(crate) fn on_ack(&mut self, ack: &Ack, now: Instant) -> AckOutcome {
        let mut out = AckOutcome::default();
        if ack.to_incarnation != self.me || ack.seq <= self.acked {
            return out;
        }
        let Some(&(_, sent)) = self.sent.iter().find(|(s, _)| *s == ack.seq) else {
            return out;
        };
        if self.peer != Some(ack.incarnation) {
            if self.peer.is_some() {
                out.restarted = true;
                out.unheld.extend(self.held.keys().copied());
                self.held.clear();
            }
            self.peer = Some(ack.incarnation);
        }
        self.acked = ack.seq;
        let unheld: BTreeSet<ElectionId> = ack.unheld.iter().copied().collect();
        let done: Vec<ElectionId> = self
            .ops
            .iter()
            .filter(|(_, (_, first))| *first != 0 && *first <= ack.seq)
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            let Some((op, _)) = self.ops.remove(&id) else {
                continue;
            };
            if let Op::Add { term, .. } = op {
                if unheld.contains(&id) {
                    out.unheld.push(id);
                    out.refused.push(id);
                } else {
                    self.held.insert(id, term);
                    out.newly_held.push(id);
                }
            }
        }
        for id in unheld {
            if self.held.remove(&id).is_some() {
                out.unheld.push(id);
            }
        }
        out.unheld.sort_unstable();
        out.unheld.dedup();
        out.refused.sort_unstable();
        self.last_ack = Some((sent, now));
        out.credited = Some(sent);
        out
    }
}

/// What this node promised one peer, as a follower in some of its elections.
#[derive(Debug)]
pub(crate) struct Incoming {
    /// The peer's incarnation its requests carry.
    incarnation: u64,
    /// The last request processed.
    last_seq: u64,
    /// When the last request was acknowledged (`r_A`), on the monotonic clock.
    last_at: Option<Instant>,
    /// Elections supported for the peer (`S_A`), with the term accepted.
    held: BTreeMap<ElectionId, u64>,
    /// Elections refused or dropped, reported in every ack until the peer says it
    /// processed an ack (the value: the first request whose ack reports it). At most
    /// [`BOOK_CAP`].
    unheld: BTreeMap<ElectionId, u64>,
    /// How many times this peer's book was dropped ([`Incoming::forget`]). Acks carry
    /// this node's incarnation plus twice this, so the peer takes each drop for a
    /// restart of this node (its incarnations are odd: they stay odd, never 0).
    drops: u64,
    /// How many times a request of another incarnation replaced a known one, counted
    /// into the acks' incarnation as `drops` is. A correct peer's incarnations replace
    /// one another only forward, but two can interleave: a request of an old one
    /// delayed past its successor's first, or a member forging requests of its own
    /// stream. Each switch empties the book, so the incarnation switched back to must
    /// take this node for restarted and credit nothing it held here before
    /// (`docs/design.md`, section 12, "A member cannot grow a book").
    resets: u64,
}

/// Why a peer's book was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BookDrop {
    /// A report went unconfirmed for [`CONFIRM_WITHIN`] requests.
    Unconfirmed,
    /// The peer's offers would have grown the reports past [`BOOK_CAP`].
    Full,
    /// One request offered more than [`NOT_RUNNING_PER_REQUEST`] elections this node
    /// does not run.
    NotRunning,
}

/// The book was full: the refusal could not be recorded (drop the book, answer
/// nothing).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BookFull;

/// What a request asks of the follower, for the driver to judge and carry out.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// The peer is a new incarnation: every election listed was dropped (the driver
    /// wakes them; their promise is frozen until `frozen_until`).
    Restarted {
        dropped: Vec<ElectionId>,
        frozen_until: Option<Instant>,
    },
    /// The peer did not confirm what this node reported ([`BookDrop::Unconfirmed`]):
    /// its book was dropped as if it had restarted, and every election listed with it.
    Forgotten {
        dropped: Vec<ElectionId>,
        frozen_until: Option<Instant>,
    },
}

impl Incoming {
    /// The book of a peer not heard from yet.
    pub(crate) fn new() -> Self {
        Incoming {
            incarnation: 0,
            last_seq: 0,
            last_at: None,
            held: BTreeMap::new(),
            unheld: BTreeMap::new(),
            drops: 0,
            resets: 0,
        }
    }

    /// How many entries the book keeps (held and reported elections).
    pub(crate) fn len(&self) -> usize {
        self.held.len() + self.unheld.len()
    }

    /// How many times the book was dropped.
    pub(crate) fn drops(&self) -> u64 {
        self.drops
    }

    /// Drops the book: nothing is held or reported any more, and the acks from now on
    /// carry a new incarnation, so the peer forgets what it held here (as after a
    /// restart of this node) and offers again. Returns the elections it held, and the
    /// end of the promise already made for them (`r_A`).
    pub(crate) fn forget(&mut self) -> (Vec<ElectionId>, Option<Instant>) {
        let dropped = std::mem::take(&mut self.held).into_keys().collect();
        self.unheld.clear();
        self.drops += 1;
        (dropped, self.last_at)
    }

    /// When the last request was acknowledged (`r_A`).
    pub(crate) fn last_at(&self) -> Option<Instant> {
        self.last_at
    }

    /// Whether `id` is supported for this peer, and in which term.
    pub(crate) fn holds(&self, id: ElectionId) -> Option<u64> {
        self.held.get(&id).copied()
    }

    /// The elections supported for this peer.
    pub(crate) fn held_ids(&self) -> Vec<ElectionId> {
        self.held.keys().copied().collect()
    }

    /// Whether any election is supported for this peer.
    pub(crate) fn holds_any(&self) -> bool {
        !self.held.is_empty()
    }

    /// Starts processing `req`. Returns `None` for a request older than one processed
    /// (it is dropped: requests are judged in order), otherwise what a new incarnation
    /// of the peer ended. The caller then judges each op ([`Incoming::accept`],
    /// [`Incoming::drop_held`]) and finishes with [`Incoming::ack`].
    pub(crate) fn begin(&mut self, req: &Request) -> Option<Option<Asked>> {
        let mut asked = None;
        if req.incarnation != self.incarnation {
            let dropped: Vec<ElectionId> = self.held.keys().copied().collect();
            asked = Some(Asked::Restarted {
                dropped,
                frozen_until: self.last_at,
            });
            if self.incarnation != 0 && !mutation::active("incarnation-switch-keeps-acks") {
                self.resets += 1;
            }
            self.incarnation = req.incarnation;
            self.last_seq = 0;
            self.held.clear();
            self.unheld.clear();
        }
        if req.seq <= self.last_seq {
            return None;
        }
        self.last_seq = req.seq;
        // Reports the peer has seen need not be repeated; one it leaves unconfirmed too
        // long costs it its book (and this request is judged on a fresh one).
        self.unheld.retain(|_, first| *first > req.acked);
        let stale = |first: &u64| first.saturating_add(CONFIRM_WITHIN) < req.seq;
        let unbounded = mutation::active("support-book-unbounded");
        if asked.is_none() && !unbounded && self.unheld.values().any(stale) {
            let (dropped, frozen_until) = self.forget();
            asked = Some(Asked::Forgotten {
                dropped,
                frozen_until,
            });
        }
        Some(asked)
    }

    /// Whether an offer of `id` may be accepted at all (not while a refusal or drop of
    /// it is still being reported: that offer predates the peer's knowing of it).
    pub(crate) fn may_accept(&self, id: ElectionId) -> bool {
        !self.unheld.contains_key(&id)
    }

    /// Accepts an offer of `id` in `term`.
    pub(crate) fn accept(&mut self, id: ElectionId, term: u64) {
        self.held.insert(id, term);
    }

    /// Refuses an offer of `id` (reported until the peer saw it). Returns the end of the
    /// promise already made (`r_A`) if `id` was held (its replica must wake, frozen until
    /// then), or [`BookFull`] if the report would pass [`BOOK_CAP`]: then nothing
    /// changed, and the caller drops the book without answering the request.
    pub(crate) fn refuse(&mut self, id: ElectionId) -> Result<Option<Instant>, BookFull> {
        if !self.unheld.contains_key(&id)
            && self.unheld.len() >= BOOK_CAP
            && !mutation::active("support-book-unbounded")
        {
            return Err(BookFull);
        }
        let was = self.held.remove(&id).is_some();
        let next = self.last_seq.max(1);
        self.unheld.entry(id).or_insert(next);
        Ok(if was { self.last_at } else { None })
    }

    /// Stops supporting `id` (woken here, or withdrawn by the peer: `report` says
    /// whether the peer must be told). Returns the end of the promise already made
    /// (`r_A`), if `id` was held.
    pub(crate) fn drop_held(&mut self, id: ElectionId, report: bool) -> Option<Instant> {
        let was = self.held.remove(&id).is_some();
        if report && was {
            let next = self.last_seq.saturating_add(1);
            self.unheld.entry(id).or_insert(next);
        }
        if was {
            self.last_at
        } else {
            None
        }
    }

    /// Finishes processing the request at `now`: the promise for every held election
    /// runs from `now`; the ack lists every unheld election not yet seen by the peer.
    pub(crate) fn ack(&mut self, me: u64, now: Instant) -> Ack {
        self.last_at = Some(now);
        Ack {
            incarnation: me.wrapping_add(self.drops.wrapping_add(self.resets).wrapping_mul(2)),
            to_incarnation: self.incarnation,
            seq: self.last_seq,
            unheld: self.unheld.keys().copied().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn stamp(base: Instant, ms: u64) -> Stamp {
        Stamp {
            mono: base + Duration::from_millis(ms),
            boot: Duration::from_millis(ms),
        }
    }

    /// Runs one request through a follower that accepts every offer it may accept.
    fn follow(b: &mut Incoming, req: &Request, now: Instant, accept: bool) -> Option<Ack> {
        b.begin(req)?;
        for op in &req.ops {
            match *op {
                Op::Add { id, term, .. } => {
                    if accept && b.may_accept(id) {
                        b.accept(id, term);
                    } else {
                        b.refuse(id).unwrap();
                    }
                }
                Op::Remove { id } => {
                    b.drop_held(id, false);
                }
            }
        }
        Some(b.ack(2, now))
    }

    #[test]
    fn an_accepted_offer_is_held_and_credited_with_the_send_time() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Outgoing::new(1), Incoming::new());
        a.offer(7, 3, 10, 10);
        let req = a.request(stamp(t0, 0));
        let ack = follow(&mut b, &req, t0, true).unwrap();
        let out = a.on_ack(&ack, t0);
        assert_eq!(out.credited, Some(stamp(t0, 0)));
        assert_eq!(out.newly_held, vec![7]);
        assert!(a.holds(7));
        assert_eq!(b.holds(7), Some(3));
    }

    #[test]
    fn a_refused_offer_is_not_held() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Outgoing::new(1), Incoming::new());
        a.offer(7, 3, 10, 10);
        let req = a.request(stamp(t0, 0));
        let ack = follow(&mut b, &req, t0, false).unwrap();
        let out = a.on_ack(&ack, t0);
        assert_eq!(out.unheld, vec![7]);
        assert_eq!(out.refused, vec![7]);
        assert!(!a.holds(7));
    }

    /// The case the repetition exists for: the follower drops an election, the ack
    /// that says so is lost, and a later ack must still say so.
    #[test]
    fn a_drop_is_reported_until_the_leader_saw_it_even_when_acks_are_lost() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Outgoing::new(1), Incoming::new());
        a.offer(7, 3, 10, 10);
        let r1 = a.request(stamp(t0, 0));
        let k1 = follow(&mut b, &r1, t0, true).unwrap();
        a.on_ack(&k1, t0);
        // The follower wakes 7 (a vote request arrived, say).
        b.drop_held(7, true);
        let r2 = a.request(stamp(t0, 50));
        let _lost = follow(&mut b, &r2, t0, true).unwrap();
        let r3 = a.request(stamp(t0, 100));
        let k3 = follow(&mut b, &r3, t0, true).unwrap();
        let out = a.on_ack(&k3, t0);
        assert_eq!(out.unheld, vec![7], "the drop is repeated in the later ack");
        assert!(out.refused.is_empty(), "held, then dropped: not a refusal");
        assert!(!a.holds(7));
        // Once the leader's requests say it processed that ack, the report ends.
        let r4 = a.request(stamp(t0, 150));
        let k4 = follow(&mut b, &r4, t0, true).unwrap();
        assert!(k4.unheld.is_empty());
    }

    /// An offer repeated (its ack lost) after the follower dropped the election is
    /// refused: the leader would otherwise credit a support the follower no longer gives.
    #[test]
    fn a_repeated_offer_after_a_drop_is_refused() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Outgoing::new(1), Incoming::new());
        a.offer(7, 3, 10, 10);
        let r1 = a.request(stamp(t0, 0));
        let _lost = follow(&mut b, &r1, t0, true).unwrap();
        b.drop_held(7, true);
        let r2 = a.request(stamp(t0, 50)); // repeats the add
        let k2 = follow(&mut b, &r2, t0, true).unwrap();
        let out = a.on_ack(&k2, t0);
        assert_eq!(out.unheld, vec![7]);
        assert!(!a.holds(7));
    }

    #[test]
    fn old_and_reordered_requests_and_acks_are_ignored() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Outgoing::new(1), Incoming::new());
        a.offer(7, 3, 10, 10);
        let r1 = a.request(stamp(t0, 0));
        let r2 = a.request(stamp(t0, 50));
        let k2 = follow(&mut b, &r2, t0, true).unwrap();
        assert!(
            follow(&mut b, &r1, t0, true).is_none(),
            "r1 is older than r2"
        );
        assert_eq!(a.on_ack(&k2, t0).credited, Some(stamp(t0, 50)));
        let stale = Ack {
            seq: 1,
            ..k2.clone()
        };
        assert_eq!(a.on_ack(&stale, t0).credited, None);
        let other = Ack {
            to_incarnation: 99,
            seq: 9,
            ..k2
        };
        assert_eq!(a.on_ack(&other, t0).credited, None);
    }

    #[test]
    fn a_new_incarnation_of_either_side_ends_what_was_held() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Outgoing::new(1), Incoming::new());
        a.offer(7, 3, 10, 10);
        let r1 = a.request(stamp(t0, 0));
        let k1 = follow(&mut b, &r1, t0, true).unwrap();
        a.on_ack(&k1, t0);
        // The leader restarts: its first request drops everything.
        let mut a2 = Outgoing::new(5);
        let r = a2.request(stamp(t0, 10));
        assert_eq!(
            b.begin(&r),
            Some(Some(Asked::Restarted {
                dropped: vec![7],
                frozen_until: Some(t0)
            }))
        );
        assert_eq!(b.holds(7), None);
        // The follower restarts: the leader learns it from the ack.
        let r2 = a.request(stamp(t0, 50));
        let mut b2 = Incoming::new();
        let k = follow(&mut b2, &r2, t0, true).unwrap();
        let k = Ack {
            incarnation: 3,
            ..k
        };
        let out = a.on_ack(&k, t0);
        assert!(out.restarted);
        assert_eq!(out.unheld, vec![7]);
        assert!(!a.holds(7));
    }

    #[test]
    fn a_withdrawn_election_is_dropped_by_the_follower() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Outgoing::new(1), Incoming::new());
        a.offer(7, 3, 10, 10);
        let r1 = a.request(stamp(t0, 0));
        let k1 = follow(&mut b, &r1, t0, true).unwrap();
        a.on_ack(&k1, t0);
        a.withdraw(7);
        assert!(!a.holds(7));
        let r2 = a.request(stamp(t0, 50));
        let k2 = follow(&mut b, &r2, t0, true).unwrap();
        assert_eq!(b.holds(7), None);
        let out = a.on_ack(&k2, t0);
        assert!(out.unheld.is_empty() && !a.holds(7) && !a.is_active());
    }

    /// A leader whose acks stop arriving leaves this node's reports unconfirmed: after
    /// [`CONFIRM_WITHIN`] requests its book is dropped (the held election with it, its
    /// promise frozen), and the next ack tells the leader of a restart, so it holds
    /// nothing here either. The request that found it is judged on the fresh book.
    #[test]
    fn a_leader_that_never_confirms_loses_its_book_and_hears_of_a_restart() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Outgoing::new(1), Incoming::new());
        a.offer(7, 3, 10, 10);
        let ack = follow(&mut b, &a.request(stamp(t0, 0)), t0, true).unwrap();
        a.on_ack(&ack, t0);
        assert!(a.holds(7));
        a.offer(9, 3, 10, 10);
        // Request 2 and every one after it carry the refused offer of 9; their acks are
        // lost on the way back.
        let mut forgotten = None;
        let mut last = None;
        for n in 0..=CONFIRM_WITHIN + 1 {
            let at = t0 + Duration::from_millis(1 + n);
            let req = a.request(stamp(t0, 1 + n));
            let asked = b.begin(&req).expect("in order");
            if let Some(Asked::Forgotten {
                dropped,
                frozen_until,
            }) = asked
            {
                forgotten = Some((req.seq, dropped, frozen_until));
            }
            b.refuse(9).unwrap();
            last = Some(b.ack(2, at));
        }
        let (seq, dropped, frozen_until) = forgotten.expect("the book was dropped");
        assert_eq!(
            seq,
            2 + CONFIRM_WITHIN + 1,
            "dropped at the first late request"
        );
        // Frozen until the promise of the last ack before the drop.
        let promised = t0 + Duration::from_millis(1 + CONFIRM_WITHIN);
        assert_eq!((dropped, frozen_until), (vec![7], Some(promised)));
        assert_eq!(b.drops(), 1);
        let last = last.unwrap();
        assert_ne!(
            last.incarnation, 2,
            "an ack after the drop names a new incarnation"
        );
        // The leader processes that one: a restart, nothing held, 9 refused.
        let out = a.on_ack(&last, t0 + Duration::from_secs(1));
        assert!(out.restarted);
        assert_eq!(out.unheld, vec![7, 9]);
        assert!(!a.holds(7) && !a.holds(9));
    }

    /// Refusals stop at the cap: the one past it changes nothing and says so.
    #[test]
    fn a_book_stops_at_its_cap() {
        let mut b = Incoming::new();
        let req = Request {
            incarnation: 1,
            seq: 1,
            acked: 0,
            ops: vec![],
        };
        b.begin(&req).unwrap();
        for id in 0..BOOK_CAP as ElectionId {
            assert_eq!(b.refuse(id), Ok(None));
        }
        assert_eq!(b.refuse(BOOK_CAP as ElectionId), Err(BookFull));
        assert_eq!(b.refuse(5), Ok(None), "a repeated report is no new entry");
        assert_eq!(b.len(), BOOK_CAP);
        let (dropped, _) = b.forget();
        assert!(dropped.is_empty());
        assert_eq!((b.len(), b.drops()), (0, 1));
    }

    /// A refused re-offer of a held election returns the promise already made, so the
    /// caller wakes the replica frozen until then.
    #[test]
    fn a_refused_reoffer_of_a_held_election_returns_its_promise() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Outgoing::new(1), Incoming::new());
        a.offer(7, 3, 10, 10);
        follow(&mut b, &a.request(stamp(t0, 0)), t0, true).unwrap();
        a.offer(7, 4, 11, 11);
        b.begin(&a.request(stamp(t0, 5))).unwrap();
        assert_eq!(b.refuse(7), Ok(Some(t0)));
        assert_eq!(b.refuse(7), Ok(None), "no longer held");
    }

    /// Two incarnations of one peer interleave (a request of the old one delayed past
    /// its successor's first, or a member forging requests of its own stream): each
    /// switch empties the book, so the incarnation switched back to must hear of it from
    /// its next ack, as of a restart of this node, instead of crediting support for
    /// elections no longer held.
    #[test]
    fn an_incarnation_switched_back_to_credits_nothing_held_before() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Outgoing::new(1), Incoming::new());
        a.offer(7, 3, 10, 10);
        let k1 = follow(&mut b, &a.request(stamp(t0, 0)), t0, true).unwrap();
        a.on_ack(&k1, t0);
        assert!(a.holds(7));
        let mut other = Outgoing::new(5);
        follow(&mut b, &other.request(stamp(t0, 10)), t0, true).unwrap();
        assert_eq!(b.holds(7), None, "the other incarnation's request ended it");
        let k2 = follow(&mut b, &a.request(stamp(t0, 50)), t0, true).unwrap();
        assert_eq!(
            b.holds(7),
            None,
            "a request that offers nothing adds nothing"
        );
        let out = a.on_ack(&k2, t0);
        assert!(
            out.restarted,
            "the switch back reads as a restart of the follower"
        );
        assert_eq!(out.unheld, vec![7]);
        assert!(
            !a.holds(7),
            "the leader credits no support for 7 from this ack"
        );
    }
}
