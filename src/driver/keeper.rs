//! The lease keeper: tenure's lease arithmetic and ReadIndex round bookkeeping, with no
//! I/O and no clock of its own (every call takes `now`). The argument it implements is
//! `docs/design.md`, section 2: a round sent at `s` and acknowledged by a quorum in the
//! leader's term extends the lease to `s + lease_duration`, on both of the node's clocks.
//!
//! The driver owns one keeper; it tells it when rounds start (`start_round`), when raft-rs
//! reports one acknowledged (`acknowledged`), and what the node's role and term are
//! (`follow`); it asks it until when a lease may be valid (`valid_until`) and whether a
//! renewal is due.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::clock::Stamp;
use crate::error::LostReason;
use crate::token::FencingToken;

/// Who waits for a confirm: answered with the token, or why the lease is gone.
pub(crate) type Waiter = oneshot::Sender<Result<FencingToken, LostReason>>;

/// A ReadIndex round in flight.
#[derive(Debug)]
struct Round {
    /// When `read_index` was called, on both clocks: no acknowledgement can predate it.
    sent: Stamp,
    term: u64,
    waiters: Vec<Waiter>,
    /// Answered by the support stream only (a quiet election's round sends no raft-rs
    /// message): if the election wakes, nothing else will answer it.
    on_stream: bool,
}

/// What an acknowledged round did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Acked {
    /// Not a round of this keeper (or one already forgotten).
    Unknown,
    /// A round of the leader's current term: the validity now reaches `until`; `sent`
    /// is when the round left (for the round-trip metric).
    Renewed { sent: Stamp, until: Stamp },
    /// A round of an earlier term, or acknowledged after this node stopped leading: its
    /// waiters were told the term changed.
    Stale,
}

/// The lease arithmetic and rounds of one node (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct LeaseKeeper {
    /// How long one acknowledged round keeps the lease, from its send time.
    duration: Duration,
    /// The validity earned in `until_term` (on both clocks: it ends when either says so).
    until: Option<(u64, Stamp)>,
    /// By context id: a BTreeMap, so waiters are answered in the same order every run.
    rounds: BTreeMap<u64, Round>,
    next_ctx: u64,
    /// When the last round was started.
    last_round: Option<Instant>,
    /// Confirms that arrived since the last round: they share the next one.
    pending: Vec<Waiter>,
    /// When this node began leading in a term, just before the Ready carrying that
    /// term's first appends left: the commit of the term's first entry acknowledges an
    /// append sent at or after it.
    term_began: Option<(u64, Stamp)>,
    /// The term whose first entry's commit was credited (once per term).
    credited_term: Option<u64>,
    /// Mutation testing: count a round's period on the monotonic clock alone.
    ignore_boottime: bool,
}

impl LeaseKeeper {
    /// A keeper whose rounds each keep the lease for `duration`.
    pub(crate) fn new(duration: Duration) -> Self {
        LeaseKeeper {
            duration,
            until: None,
            rounds: BTreeMap::new(),
            next_ctx: 1,
            last_round: None,
            pending: Vec::new(),
            term_began: None,
            credited_term: None,
            ignore_boottime: crate::mutation::active("lease-ignores-boottime"),
        }
    }

    /// A confirm waits for the next round.
    pub(crate) fn queue_confirm(&mut self, waiter: Waiter) {
        self.pending.push(waiter);
    }

    /// Whether confirms wait for a round.
    /// Whether support from `sent` in `term` would add nothing: the term's lease end is
    /// already at least `sent + duration` on both clocks, and no round it would answer
    /// waits (one of this term sent at or before `sent`).
    pub(crate) fn covers(&self, sent: Stamp, term: u64) -> bool {
        let end = sent.add(self.duration);
        self.until
            .is_some_and(|(t, u)| t == term && u.mono >= end.mono && u.boot >= end.boot)
            && !self
                .rounds
                .values()
                .any(|r| r.term == term && r.sent.mono <= sent.mono)
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether a renewal round is due: none was sent yet, or the last one is `every` old.
    pub(crate) fn renewal_due(&self, now: Instant, every: Duration) -> bool {
        self.last_round
            .is_none_or(|t| now.saturating_duration_since(t) >= every)
    }

    /// A round of `term` leaves at `sent`, carrying the pending confirms; returns its
    /// context id (for `read_index`).
    pub(crate) fn start_round(&mut self, sent: Stamp, term: u64) -> u64 {
        self.start(sent, term, false)
    }

    /// A round of a quiet election (section 12): the support stream's next requests,
    /// not a ReadIndex, answer it (see [`LeaseKeeper::supported`]).
    pub(crate) fn start_stream_round(&mut self, sent: Stamp, term: u64) -> u64 {
        self.start(sent, term, true)
    }

    /// The election woke: the stream no longer supports it, so its stream rounds will
    /// never be answered. Their confirms wait for the next round (a ReadIndex now).
    pub(crate) fn requeue_stream_rounds(&mut self) {
        let stream: Vec<u64> = self
            .rounds
            .iter()
            .filter(|(_, r)| r.on_stream)
            .map(|(k, _)| *k)
            .collect();
        for k in stream {
            if let Some(r) = self.rounds.remove(&k) {
                self.pending.extend(r.waiters);
            }
        }
    }

    fn start(&mut self, sent: Stamp, term: u64, on_stream: bool) -> u64 {
        let ctx = self.next_ctx;
        self.next_ctx += 1;
        let sent_as_counted = if self.ignore_boottime {
            // Broken on purpose (mutation testing): the lease's period is counted on the
            // monotonic clock alone, so time suspended (or stalled but counted by
            // CLOCK_BOOTTIME) does not count against it.
            Stamp {
                boot: Duration::MAX,
                ..sent
            }
        } else {
            sent
        };
        self.rounds.insert(
            ctx,
            Round {
                sent: sent_as_counted,
                term,
                waiters: std::mem::take(&mut self.pending),
                on_stream,
            },
        );
        self.last_round = Some(sent.mono);
        ctx
    }

    /// raft-rs reports round `ctx` acknowledged by a quorum, while this node is
    /// `leading` in `term`. A round of this term extends the validity and answers its
    /// waiters with the token.
    pub(crate) fn acknowledged(&mut self, ctx: u64, leading: bool, term: u64) -> Acked {
        let Some(round) = self.rounds.remove(&ctx) else {
            return Acked::Unknown;
        };
        if !(leading && round.term == term) {
            for w in round.waiters {
                let _ = w.send(Err(LostReason::TermChanged));
            }
            return Acked::Stale;
        }
        let until = round.sent.add(self.duration);
        let until = match self.until {
            Some((t, u)) if t == term => u.max(until),
            _ => until,
        };
        self.until = Some((term, until));
        for w in round.waiters {
            let _ = w.send(Ok(FencingToken::new(term)));
        }
        Acked::Renewed {
            sent: round.sent,
            until,
        }
    }

    /// The support stream (section 12) shows a quorum supporting this leader in `term`
    /// from `sent` on: the validity reaches `sent + duration`, and every round of `term`
    /// started at or before `sent` is answered with the token (its confirms asked
    /// before requests that a quorum acknowledged left). Returns the validity.
    pub(crate) fn supported(&mut self, sent: Stamp, term: u64) -> Stamp {
        let until = sent.add(self.duration);
        let until = match self.until {
            Some((t, u)) if t == term => u.max(until),
            _ => until,
        };
        self.until = Some((term, until));
        if self.rounds.is_empty() {
            return until; // the common case: nothing waits
        }
        let answered: Vec<u64> = self
            .rounds
            .iter()
            .filter(|(_, r)| r.term == term && r.sent.mono <= sent.mono)
            .map(|(k, _)| *k)
            .collect();
        for k in answered {
            if let Some(r) = self.rounds.remove(&k) {
                for w in r.waiters {
                    let _ = w.send(Ok(FencingToken::new(term)));
                }
            }
        }
        until
    }

    /// This node leads in `term` from `at` on (before its first appends leave). Only the
    /// first call of a term counts.
    pub(crate) fn began_leading(&mut self, term: u64, at: Stamp) {
        if self.term_began.is_none_or(|(t, _)| t != term) {
            self.term_began = Some((term, at));
        }
    }

    /// The entry this leader appended first in `term` is committed: a quorum
    /// acknowledged an append that left at or after it began leading, as if a round had
    /// been sent then. Returns the validity it earns (once per term).
    pub(crate) fn first_entry_committed(&mut self, term: u64) -> Option<Stamp> {
        let (t, began) = self.term_began?;
        if t != term || self.credited_term == Some(term) {
            return None;
        }
        self.credited_term = Some(term);
        let until = began.add(self.duration);
        let until = match self.until {
            Some((t, u)) if t == term => u.max(until),
            _ => until,
        };
        self.until = Some((term, until));
        Some(until)
    }

    /// Whether a round left within `every` of `now` (its heartbeats stand in for
    /// raft-rs's own).
    pub(crate) fn round_within(&self, now: Instant, every: Duration) -> bool {
        self.last_round
            .is_some_and(|t| now.saturating_duration_since(t) < every)
    }

    /// The validity earned in `term`, if it has not run out at `at`.
    pub(crate) fn valid_until(&self, term: u64, at: Stamp) -> Option<Stamp> {
        self.until
            .filter(|(t, u)| *t == term && at.before(*u))
            .map(|(_, u)| u)
    }

    /// Whether the validity earned in the current leader term has run out at `at`
    /// (a lease earned once and not renewed since).
    pub(crate) fn lapsed(&self, at: Stamp) -> bool {
        self.until.is_some_and(|(_, u)| !at.before(u))
    }

    /// Mutation testing (`lease-before-read-index`): validity on the leader's word alone.
    pub(crate) fn grant_unconfirmed(&mut self, term: u64, at: Stamp) {
        self.until = Some((term, at.add(self.duration)));
    }

    /// The node's role and term now. Not leading: nothing earned counts any more, and
    /// every waiter learns it stepped down or the term changed. Leading: rounds and
    /// validity of other terms are dropped.
    pub(crate) fn follow(&mut self, leading: bool, term: u64) {
        if !leading {
            self.until = None;
            self.last_round = None;
            for w in self.pending.drain(..) {
                let _ = w.send(Err(LostReason::SteppedDown));
            }
        } else if self.until.is_some_and(|(t, _)| t != term) {
            self.until = None;
        }
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

    /// The lease was revoked for `reason`: every waiter learns it. Unless it merely
    /// expired, the validity earned is dropped too (a handover must not grant again).
    pub(crate) fn revoke(&mut self, reason: LostReason) {
        for w in self.pending.drain(..) {
            let _ = w.send(Err(reason));
        }
        for r in self.rounds.values_mut() {
            for w in r.waiters.drain(..) {
                let _ = w.send(Err(reason));
            }
        }
        if reason != LostReason::Expired {
            self.until = None;
        }
    }

    /// Confirms that cannot get a round (this leader is handing over) are told so.
    pub(crate) fn refuse_pending(&mut self, reason: LostReason) {
        for w in self.pending.drain(..) {
            let _ = w.send(Err(reason));
        }
    }

    /// Rounds older than `horizon` will not be answered (raft-rs drops some silently):
    /// their waiters go into the next round.
    pub(crate) fn forget_unanswered(&mut self, now: Instant, horizon: Duration) {
        let old: Vec<u64> = self
            .rounds
            .iter()
            .filter(|(_, r)| now.saturating_duration_since(r.sent.mono) > horizon)
            .map(|(k, _)| *k)
            .collect();
        for k in old {
            if let Some(r) = self.rounds.remove(&k) {
                self.pending.extend(r.waiters);
            }
        }
    }

    /// The node stops: every waiter learns why.
    pub(crate) fn finish(&mut self, reason: LostReason) {
        self.revoke(reason);
        self.rounds.clear();
    }
}

/// The context id `ctx` as raft-rs carries it (`read_index`'s request context).
pub(crate) fn encode_ctx(ctx: u64) -> Vec<u8> {
    ctx.to_be_bytes().to_vec()
}

/// A round's context id from raft-rs's read state; `None` for one that is not ours.
pub(crate) fn decode_ctx(ctx: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = ctx.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_millis(100);

    fn stamp(base: Instant, ms: u64) -> Stamp {
        Stamp {
            mono: base + Duration::from_millis(ms),
            boot: Duration::from_secs(1000) + Duration::from_millis(ms),
        }
    }

    fn waiter() -> (Waiter, oneshot::Receiver<Result<FencingToken, LostReason>>) {
        oneshot::channel()
    }

    #[test]
    fn an_acknowledged_round_extends_the_lease_from_its_send_time() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(D);
        let (w, mut rx) = waiter();
        k.queue_confirm(w);
        let ctx = k.start_round(stamp(t0, 10), 5);
        assert!(!k.has_pending(), "the round took the confirm");
        assert_eq!(
            k.valid_until(5, stamp(t0, 20)),
            None,
            "nothing before the ack"
        );
        let acked = k.acknowledged(ctx, true, 5);
        assert_eq!(
            acked,
            Acked::Renewed {
                sent: stamp(t0, 10),
                until: stamp(t0, 110)
            }
        );
        assert_eq!(rx.try_recv().unwrap(), Ok(FencingToken::new(5)));
        assert_eq!(k.valid_until(5, stamp(t0, 109)), Some(stamp(t0, 110)));
        assert_eq!(
            k.valid_until(5, stamp(t0, 110)),
            None,
            "ends at send + duration"
        );
        assert_eq!(
            k.valid_until(6, stamp(t0, 50)),
            None,
            "another term earns nothing"
        );
        assert_eq!(
            k.acknowledged(ctx, true, 5),
            Acked::Unknown,
            "answered once"
        );
    }

    #[test]
    fn support_that_extends_nothing_and_answers_nothing_is_covered() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(D);
        assert!(!k.covers(stamp(t0, 0), 4), "no lease end yet");
        k.supported(stamp(t0, 50), 4);
        assert!(k.covers(stamp(t0, 50), 4), "the same support again");
        assert!(k.covers(stamp(t0, 20), 4), "older support");
        assert!(!k.covers(stamp(t0, 51), 4), "newer support extends");
        assert!(!k.covers(stamp(t0, 10), 5), "another term");
        // A round of this term it would answer makes it count; one of another term, or
        // sent after the support, does not.
        let (w, mut rx) = waiter();
        k.queue_confirm(w);
        k.start_round(stamp(t0, 40), 4);
        assert!(!k.covers(stamp(t0, 50), 4));
        k.supported(stamp(t0, 50), 4);
        assert_eq!(rx.try_recv().unwrap(), Ok(FencingToken::new(4)));
        k.start_round(stamp(t0, 45), 3);
        k.start_round(stamp(t0, 60), 4);
        assert!(k.covers(stamp(t0, 50), 4), "{:?}", k.rounds.len());
    }

    #[test]
    fn an_earlier_round_acknowledged_late_never_shortens_the_lease() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(D);
        let a = k.start_round(stamp(t0, 0), 3);
        let b = k.start_round(stamp(t0, 50), 3);
        k.acknowledged(b, true, 3);
        k.acknowledged(a, true, 3);
        assert_eq!(k.valid_until(3, stamp(t0, 120)), Some(stamp(t0, 150)));
    }

    #[test]
    fn either_clock_ends_the_lease() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(D);
        let ctx = k.start_round(stamp(t0, 0), 2);
        k.acknowledged(ctx, true, 2);
        // A suspend: the monotonic clock says 10 ms passed, the boot-time clock 500 ms.
        let woken = Stamp {
            mono: t0 + Duration::from_millis(10),
            boot: Duration::from_secs(1000) + Duration::from_millis(500),
        };
        assert_eq!(k.valid_until(2, woken), None);
        assert!(k.lapsed(woken));
    }

    #[test]
    fn rounds_of_another_term_or_after_stepping_down_answer_term_changed() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(D);
        let (w, mut rx) = waiter();
        k.queue_confirm(w);
        let ctx = k.start_round(stamp(t0, 0), 4);
        assert_eq!(k.acknowledged(ctx, true, 5), Acked::Stale);
        assert_eq!(rx.try_recv().unwrap(), Err(LostReason::TermChanged));
        assert_eq!(k.valid_until(5, stamp(t0, 1)), None);

        let (w, mut rx) = waiter();
        k.queue_confirm(w);
        let ctx = k.start_round(stamp(t0, 0), 5);
        k.acknowledged(ctx, true, 5);
        let (w2, mut rx2) = waiter();
        k.queue_confirm(w2);
        k.follow(false, 5);
        assert_eq!(rx.try_recv().unwrap(), Ok(FencingToken::new(5)));
        assert_eq!(rx2.try_recv().unwrap(), Err(LostReason::SteppedDown));
        assert_eq!(
            k.valid_until(5, stamp(t0, 1)),
            None,
            "stepping down ends it"
        );
        assert!(k.renewal_due(t0, D), "a new leader term renews at once");
    }

    #[test]
    fn a_new_term_drops_what_an_earlier_term_earned() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(D);
        let ctx = k.start_round(stamp(t0, 0), 7);
        k.acknowledged(ctx, true, 7);
        let (w, mut rx) = waiter();
        k.queue_confirm(w);
        let old = k.start_round(stamp(t0, 1), 7);
        // Leading again, in a later term, without a turn of the loop in between.
        k.follow(true, 9);
        assert_eq!(rx.try_recv().unwrap(), Err(LostReason::TermChanged));
        assert_eq!(k.acknowledged(old, true, 9), Acked::Unknown);
        assert_eq!(k.valid_until(9, stamp(t0, 2)), None);
        assert!(!k.lapsed(stamp(t0, 2)));
    }

    #[test]
    fn a_revocation_answers_everyone_and_only_expiry_keeps_what_was_earned() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(D);
        let ctx = k.start_round(stamp(t0, 0), 1);
        k.acknowledged(ctx, true, 1);
        let (w, mut rx) = waiter();
        k.queue_confirm(w);
        let (w2, mut rx2) = waiter();
        k.queue_confirm(w2);
        k.start_round(stamp(t0, 5), 1);
        k.revoke(LostReason::Expired);
        assert_eq!(rx.try_recv().unwrap(), Err(LostReason::Expired));
        assert_eq!(rx2.try_recv().unwrap(), Err(LostReason::Expired));
        assert!(k.valid_until(1, stamp(t0, 50)).is_some());
        k.revoke(LostReason::HandedOver);
        assert_eq!(k.valid_until(1, stamp(t0, 50)), None);
    }

    #[test]
    fn unanswered_rounds_are_forgotten_and_their_confirms_retried() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(D);
        let (w, mut rx) = waiter();
        k.queue_confirm(w);
        let ctx = k.start_round(stamp(t0, 0), 2);
        k.forget_unanswered(t0 + Duration::from_millis(150), Duration::from_millis(200));
        assert!(!k.has_pending(), "not old enough yet");
        k.forget_unanswered(t0 + Duration::from_millis(250), Duration::from_millis(200));
        assert!(k.has_pending());
        assert_eq!(k.acknowledged(ctx, true, 2), Acked::Unknown);
        let again = k.start_round(stamp(t0, 260), 2);
        k.acknowledged(again, true, 2);
        assert_eq!(rx.try_recv().unwrap(), Ok(FencingToken::new(2)));
    }

    #[test]
    fn a_woken_elections_stream_rounds_wait_for_the_next_round() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(D);
        let (w1, mut rx1) = waiter();
        k.queue_confirm(w1);
        k.start_stream_round(stamp(t0, 10), 5);
        let (w2, mut rx2) = waiter();
        k.queue_confirm(w2);
        let read = k.start_round(stamp(t0, 11), 5);
        k.requeue_stream_rounds();
        assert!(k.has_pending(), "the stream round's confirm waits again");
        assert!(rx1.try_recv().is_err(), "and is not answered yet");
        let again = k.start_round(stamp(t0, 12), 5);
        assert!(matches!(
            k.acknowledged(again, true, 5),
            Acked::Renewed { .. }
        ));
        assert_eq!(rx1.try_recv().unwrap(), Ok(FencingToken::new(5)));
        assert!(
            rx2.try_recv().is_err(),
            "the ReadIndex round stays in flight"
        );
        assert!(matches!(
            k.acknowledged(read, true, 5),
            Acked::Renewed { .. }
        ));
        assert_eq!(rx2.try_recv().unwrap(), Ok(FencingToken::new(5)));
    }

    #[test]
    fn renewal_is_due_every_interval() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(D);
        assert!(k.renewal_due(t0, Duration::from_millis(30)));
        k.start_round(stamp(t0, 0), 1);
        assert!(!k.renewal_due(t0 + Duration::from_millis(29), Duration::from_millis(30)));
        assert!(k.renewal_due(t0 + Duration::from_millis(30), Duration::from_millis(30)));
    }

    #[test]
    fn the_terms_first_entry_committed_counts_as_a_round_sent_when_leading_began() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(D);
        k.began_leading(4, stamp(t0, 10));
        k.began_leading(4, stamp(t0, 30)); // later turns of the same term change nothing
        assert_eq!(
            k.valid_until(4, stamp(t0, 11)),
            None,
            "nothing before the commit"
        );
        assert_eq!(k.first_entry_committed(4), Some(stamp(t0, 110)));
        assert_eq!(k.valid_until(4, stamp(t0, 109)), Some(stamp(t0, 110)));
        assert_eq!(k.first_entry_committed(4), None, "once per term");
        k.began_leading(4, stamp(t0, 500)); // a later turn of the loop, still term 4
        assert_eq!(k.first_entry_committed(4), None, "still once per term");
        assert_eq!(k.valid_until(4, stamp(t0, 120)), None, "and not extended");
        // A commit seen in another term than the one leading began in earns nothing.
        k.began_leading(5, stamp(t0, 200));
        assert_eq!(k.first_entry_committed(6), None);
    }

    #[test]
    fn a_recent_round_stands_in_for_a_heartbeat() {
        let t0 = Instant::now();
        let mut k = LeaseKeeper::new(D);
        assert!(!k.round_within(t0, Duration::from_millis(30)));
        k.start_round(stamp(t0, 0), 1);
        assert!(k.round_within(t0 + Duration::from_millis(29), Duration::from_millis(30)));
        assert!(!k.round_within(t0 + Duration::from_millis(30), Duration::from_millis(30)));
    }

    #[test]
    fn contexts_round_trip() {
        assert_eq!(decode_ctx(&encode_ctx(42)), Some(42));
        assert_eq!(decode_ctx(b"short"), None);
    }
}
