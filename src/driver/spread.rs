//! Spreading the named elections' leaderships over the workers, and keeping each named
//! election's membership that of the root (`docs/design.md`, section 11, "Spread" and
//! "Membership follows the root").
//!
//! **Spread.** Every node sees every named election's leader (it is a voter of each), so
//! every node can compute the same placement and the same moves; each node carries out
//! only the moves of the elections it leads, by an ordinary handover (section 4). There
//! is no coordinator and no message of its own. The rule, from one node's view:
//!
//! * `H`: the root's voters heard from for at least [`HEALTHY_AFTER`] and within an
//!   election timeout (this node always, unless drained), minus the drained ones and
//!   those that said their disk is stalled (`disk.rs`);
//!   `k = |H|`, `N` the elections led by a node of `H`.
//! * targets: sorted by (leaderships now, descending; id), the first `N mod k` nodes of
//!   `H` should lead `⌈N/k⌉`, the others `⌊N/k⌋` (a balanced group moves nothing).
//! * elections without a known leader, or moving, count for nobody in this round;
//! * moves start only when some node of `H` is outside `[⌊N/k⌋, ⌈N/k⌉]` and
//!   [`COOLDOWN`] passed since this node's last moves; the
//!   surplus units of the nodes over target (in id order) are matched to the deficits
//!   (in id order), so nodes that agree on the placement agree on the moves.
//! * affinity: an election whose affinity list names a node of `H` (the first such one)
//!   that is not this node moves there while that node leads less than its target plus
//!   one; the balancer never moves it elsewhere.
//! * a move goes only to a voter whose log is at the election's last index and that was
//!   heard recently, so its gap is a handover's; lower priority, no affinity, lower id
//!   move first; one move in flight per election; an election moved waits [`COOLDOWN`]
//!   before it moves again, on the node it left and on the node it reached (which
//!   starts the wait when `MsgTimeoutNow` arrives, whoever asked for the handover).
//!
//! **Membership.** The leader of a named election proposes, with the election's own conf
//! changes (joint consensus when more than one voter changes), the difference between
//! its configuration and the root's applied one: new root members join as learners, are
//! promoted once caught up, members gone from the root are removed. A leader that is
//! itself no longer a root voter hands the election over instead. While such a change is
//! in flight, the election's rounds earn no lease (see [`Group::conf_hold`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use raft::eraftpb::{ConfChangeSingle, ConfChangeType, ConfChangeV2};
use raft::StateRole;
use slog::{debug, info};
use tokio::time::Instant;

use super::group::Group;
use super::{Driver, PendingTransfer};
use crate::election::ElectionId;
use crate::storage::RaftStore;
use crate::transport::NodeId;

/// A peer counts as healthy once heard from continuously for this long.
pub(super) const HEALTHY_AFTER: Duration = Duration::from_secs(1);
/// A node waits this long after its own moves before it moves again, and an election
/// moved waits this long before it moves again.
pub(super) const COOLDOWN: Duration = Duration::from_secs(2);
/// How often the balancer looks.
const EVERY: Duration = Duration::from_millis(200);

/// The balancer moves nothing while this many of this node's elections or more are awake
/// (not quiet, as the gauges last counted them): while thousands are being created,
/// or wake after a stall or a failover, a move is one more election to wake and elect,
/// and its handover fails more often than not (section 12, "Overload is metastable").
const BALANCE_WHILE_AWAKE_BELOW: usize = 512;

/// At most this many moves start in one look of one node (the rest wait for the next
/// look after the cool-down): each move wakes an election and runs a handover, and 164 at
/// once from one node, among 2,000 elections, was one of the bursts that tipped five
/// workers on two cores into overload (before a lapse stopped waking quiet elections).
/// At 64 a returning worker of 10,000 elections got its 2,000 back in about 17 s (four
/// peers, a look each per cool-down); at 128, in about 9 s, with no lease lost.
const MOVES_PER_LOOK: usize = 128;

/// With no leadership changed and the same healthy peers since a look that planned
/// nothing, the balancer looks again only this often (a look visits every election).
const QUIET_LOOK_EVERY: Duration = Duration::from_secs(5);

/// The balancer's memory (nothing of it is replicated).
#[derive(Debug, Default)]
pub(super) struct Spread {
    /// Since when each peer has been heard from without a gap of an election timeout.
    healthy_since: BTreeMap<NodeId, Instant>,
    last_look: Option<Instant>,
    /// What the last look that planned no move saw: the elections' change count and the
    /// healthy voters, and when it looked.
    idle_look: Option<(u64, BTreeSet<NodeId>, Instant)>,
    last_moves: Option<Instant>,
    /// When each election moved lately: handed over from here, or to here (forgotten
    /// once the cooldown is over).
    moved_at: HashMap<ElectionId, Instant>,
    /// The root's voters, learners and drained nodes at the last membership pass.
    membership_seen: Option<(BTreeSet<NodeId>, BTreeSet<NodeId>, BTreeSet<NodeId>)>,
    /// The catalog's size when declared elections were last looked up, and whether some
    /// were missing (looked up again only when the size changes).
    declared_seen: Option<(usize, bool)>,
}

impl Spread {
    /// Election `e` was just handed over to this node: it waits out the cooldown here
    /// before the balancer moves it again (whoever moved it, a balancer or an operator).
    pub(super) fn handed_here(&mut self, e: ElectionId, now: Instant) {
        self.moved_at.insert(e, now);
    }
}

/// One move: election `election`, led here, to node `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Move {
    pub(super) election: ElectionId,
    pub(super) to: NodeId,
}

/// What the placement rule needs of one election.
#[derive(Debug, Clone)]
pub(super) struct Placed {
    pub(super) election: ElectionId,
    pub(super) leader: NodeId,
    pub(super) priority: u8,
    pub(super) affinity: Vec<NodeId>,
}

/// The targets of every node of `healthy` for `n` elections: the first `n mod k` by
/// (count descending, id) get the ceiling, the others the floor.
pub(super) fn targets(
    healthy: &BTreeSet<NodeId>,
    counts: &BTreeMap<NodeId, usize>,
    n: usize,
) -> BTreeMap<NodeId, usize> {
    let k = healthy.len();
    if k == 0 {
        return BTreeMap::new();
    }
    let mut order: Vec<NodeId> = healthy.iter().copied().collect();
    order.sort_by_key(|id| (std::cmp::Reverse(counts.get(id).copied().unwrap_or(0)), *id));
    let (floor, extra) = (n / k, n % k);
    order
        .into_iter()
        .enumerate()
        .map(|(i, id)| (id, floor + usize::from(i < extra)))
        .collect()
}

/// The moves of the elections `me` leads, from a placement every node can compute.
/// `movable(e, to)`: whether election `e` may go to `to` now (cool-down, target's log).
pub(super) fn plan(
    me: NodeId,
    healthy: &BTreeSet<NodeId>,
    placed: &[Placed],
    mut movable: impl FnMut(ElectionId, NodeId) -> bool,
) -> Vec<Move> {
    let mut counts: BTreeMap<NodeId, usize> = healthy.iter().map(|id| (*id, 0)).collect();
    let in_h: Vec<&Placed> = placed
        .iter()
        .filter(|p| healthy.contains(&p.leader))
        .collect();
    for p in &in_h {
        *counts.entry(p.leader).or_default() += 1;
    }
    let n = in_h.len();
    let target = targets(healthy, &counts, n);
    let mut moves = Vec::new();
    // Affinity first: an election belongs on the first healthy node of its list, while
    // that node is below its target plus one. Only this node's own such moves count:
    // another leader's may not happen (it cannot move the election yet, and only it
    // knows), and counting it would make this node give away, or take, an election
    // for a move that never comes, again every round.
    let preferred = |p: &Placed| p.affinity.iter().copied().find(|a| healthy.contains(a));
    let mut moving_in: BTreeSet<ElectionId> = BTreeSet::new();
    for p in &in_h {
        let Some(pref) = preferred(p) else { continue };
        if p.leader != me || pref == me || counts[&pref] > target[&pref] {
            continue;
        }
        if !movable(p.election, pref) {
            continue;
        }
        *counts.get_mut(&p.leader).expect("leader in H") -= 1;
        *counts.get_mut(&pref).expect("pref in H") += 1;
        moving_in.insert(p.election);
        moves.push(Move {
            election: p.election,
            to: pref,
        });
    }
    let (floor, ceil) = (n / healthy.len(), n.div_ceil(healthy.len()));
    if !counts.values().any(|c| *c < floor || *c > ceil) {
        return moves;
    }
    // Surplus units in id order, matched to deficit slots in id order.
    let mut deficits: Vec<NodeId> = Vec::new();
    for (id, c) in &counts {
        for _ in *c..target[id] {
            deficits.push(*id);
        }
    }
    let mut slot = 0;
    for (id, c) in &counts {
        let surplus = c.saturating_sub(target[id]);
        if *id != me {
            slot += surplus;
            continue;
        }
        // Mine: the lowest priority, no affinity, lowest id first; never one whose
        // affinity prefers this node.
        let mut mine: Vec<&&Placed> = in_h
            .iter()
            .filter(|p| p.leader == me && !moving_in.contains(&p.election))
            .filter(|p| preferred(p) != Some(me))
            .collect();
        mine.sort_by_key(|p| (p.priority, !p.affinity.is_empty(), p.election));
        let mut candidates = mine.into_iter();
        for to in deficits.iter().skip(slot).take(surplus) {
            if let Some(p) = candidates.by_ref().find(|p| movable(p.election, *to)) {
                moves.push(Move {
                    election: p.election,
                    to: *to,
                });
            }
        }
        break;
    }
    moves
}

impl<S: RaftStore> Driver<S> {
    /// Notes which peers are healthy (heard from within an election timeout, for at
    /// least [`HEALTHY_AFTER`]).
    fn healthy_voters(&mut self, now: Instant) -> BTreeSet<NodeId> {
        let et = self.env.timing.election_timeout();
        let voters: Vec<NodeId> = self
            .root
            .raw
            .raft
            .prs()
            .conf()
            .voters()
            .ids()
            .iter()
            .collect();
        let mut healthy = BTreeSet::new();
        for id in voters {
            // A drained node leads nothing, nor does one whose disk is stalled.
            if self.state.is_drained(id) || self.env.peer_stalled(id, now) {
                continue;
            }
            if id == self.env.id {
                healthy.insert(id);
                continue;
            }
            let heard = self
                .last_heard
                .get(&id)
                .is_some_and(|t| now.saturating_duration_since(*t) < et);
            if heard {
                let since = *self.spread.healthy_since.entry(id).or_insert(now);
                if now.saturating_duration_since(since) >= HEALTHY_AFTER {
                    healthy.insert(id);
                }
            } else {
                self.spread.healthy_since.remove(&id);
            }
        }
        healthy
    }

    /// The balancer's look, every [`EVERY`]: moves of the elections this node leads.
    pub(super) fn balance(&mut self, now: Instant) {
        if self
            .spread
            .last_look
            .is_some_and(|t| now.saturating_duration_since(t) < EVERY)
        {
            return;
        }
        self.spread.last_look = Some(now);
        self.spread
            .moved_at
            .retain(|_, t| now.saturating_duration_since(*t) < COOLDOWN);
        let healthy = self.healthy_voters(now);
        if self.named.groups.is_empty()
            || self.shutdown.is_some()
            || !healthy.contains(&self.env.id)
            || self.root.joint
            || self.named.awake >= BALANCE_WHILE_AWAKE_BELOW
            || self.declared_missing()
            || self
                .spread
                .last_moves
                .is_some_and(|t| now.saturating_duration_since(t) < COOLDOWN)
        {
            return;
        }
        let changes = self.named.changes;
        if self.spread.idle_look.as_ref().is_some_and(|(c, h, at)| {
            *c == changes && *h == healthy && now.saturating_duration_since(*at) < QUIET_LOOK_EVERY
        }) {
            return; // nothing moved since a look that found nothing to do
        }
        let mut placed = Vec::with_capacity(self.named.groups.len());
        // Retiring and suspended elections are left where they are (a suspended one holds
        // no lease to place; it counts in nobody's share).
        let movable = |ng: &&super::named::NamedGroup<S>| !ng.retiring && !ng.g.suspended;
        for ng in self.named.groups.values().filter(movable) {
            let raft = &ng.g.raw.raft;
            let leader = if raft.state == StateRole::Leader {
                self.env.id
            } else {
                raft.leader_id
            };
            if leader == 0 || raft.lead_transferee.is_some() || ng.g.transfer.is_some() {
                // Not settled: placed by the others alone this round (with thousands of
                // elections one is nearly always moving; waiting for none would stall
                // the balancer). Its leader counts again once it has one.
                continue;
            }
            let options = self.named.options_of(ng.g.election);
            placed.push(Placed {
                election: ng.g.election,
                leader,
                priority: options.map_or(128, |o| o.priority),
                affinity: options.map(|o| o.affinity.clone()).unwrap_or_default(),
            });
        }
        let me = self.env.id;
        let moved_at = &self.spread.moved_at;
        let groups = &self.named.groups;
        let mut moves = plan(me, &healthy, &placed, |e, to| {
            let cooled = moved_at
                .get(&e)
                .is_none_or(|t| now.saturating_duration_since(*t) >= COOLDOWN);
            // Only a leased election moves: one still without its lease serves nobody
            // yet, and a handover of it (under load, when leases are slow to come) fails
            // more often than not and starts its election over.
            cooled
                && groups
                    .get(&e)
                    .is_some_and(|ng| ng.g.lease.is_some() && caught_up(&ng.g, to))
        });
        if moves.is_empty() {
            self.spread.idle_look = Some((changes, healthy.clone(), now));
            return;
        }
        self.spread.idle_look = None;
        moves.truncate(MOVES_PER_LOOK);
        info!(self.env.logger, "balancer: handing elections over"; "moves" => moves.len(),
              "healthy" => ?healthy);
        self.spread.last_moves = Some(now);
        let drained = self.state.drained.clone();
        for m in moves {
            let Some(ng) = self.named.groups.get_mut(&m.election) else {
                continue;
            };
            match ng.g.start_transfer(&self.env, Some(m.to), &drained) {
                Ok(to) => {
                    self.spread.moved_at.insert(m.election, now);
                    ng.g.transfer = Some(PendingTransfer {
                        to,
                        deadline: now + self.env.timing.election_timeout() * 2,
                        reply: None,
                    });
                }
                Err(e) => debug!(self.env.logger, "balancer: move not started";
                                 "election" => ng.g.name.as_deref(), "error" => %e),
            }
        }
    }

    /// Whether elections this node's configuration declares are still missing from the
    /// catalog (the root leader is creating them): the balancer waits, since moves
    /// during creation only add churn (it spreads them once they are all there).
    pub(super) fn declared_missing(&mut self) -> bool {
        let size = self.state.elections.len();
        if let Some((seen, missing)) = self.spread.declared_seen {
            if seen == size {
                return missing;
            }
        }
        let declared = &self.named.declared;
        let missing = declared
            .iter()
            .any(|(n, _)| !self.state.elections.contains_key(n));
        self.spread.declared_seen = Some((size, missing));
        missing
    }

    /// For each named election this node leads: propose the difference between its
    /// configuration and the root's (one change in flight per election), or hand it
    /// over if this node is no longer a root voter. Looks at every election when the
    /// root's membership changed, else only at those the turn `visited`.
    pub(super) fn follow_root_membership(&mut self, now: Instant, visited: &[ElectionId]) {
        if self.root.joint {
            return;
        }
        let conf = self.root.raw.raft.prs().conf();
        let root_voters: BTreeSet<NodeId> = conf.voters().ids().iter().collect();
        let root_learners: BTreeSet<NodeId> = conf.learners().iter().copied().collect();
        if root_voters.is_empty() {
            return;
        }
        let me = self.env.id;
        let drained = self.state.drained.clone();
        // Quiet elections nothing happened to need a look only when the root's
        // membership changed (it cannot have changed under them otherwise).
        let seen = (
            root_voters.clone(),
            root_learners.clone(),
            self.state.drained.clone(),
        );
        let changed = self.spread.membership_seen.as_ref() != Some(&seen);
        self.spread.membership_seen = Some(seen);
        let ids: Vec<ElectionId> = if changed {
            self.named.groups.keys().copied().collect()
        } else {
            visited.to_vec()
        };
        for id in ids {
            let Some(ng) = self.named.groups.get_mut(&id).filter(|ng| !ng.retiring) else {
                continue;
            };
            let g = &mut ng.g;
            if g.raw.raft.state != StateRole::Leader || (!changed && g.untouched_quiet()) {
                continue;
            }
            g.release_conf_hold(now);
            if g.joint || g.raw.raft.has_pending_conf() || g.transfer.is_some() {
                continue;
            }
            if !root_voters.contains(&me) {
                if g.raw.raft.lead_transferee.is_none() {
                    if let Ok(to) = g.start_transfer(&self.env, None, &drained) {
                        g.transfer = Some(PendingTransfer {
                            to,
                            deadline: now + self.env.timing.election_timeout() * 2,
                            reply: None,
                        });
                    }
                }
                continue;
            }
            let changes = membership_changes(g, &root_voters, &root_learners);
            if changes.is_empty() {
                continue;
            }
            let mut cc = ConfChangeV2::default();
            cc.set_changes(changes.clone().into());
            g.touch(&self.env);
            match g.raw.propose_conf_change(vec![], cc) {
                Ok(()) => {
                    info!(self.env.logger, "election follows the group's membership";
                          "election" => g.name.as_deref(), "changes" => ?changes);
                    g.conf_hold = true;
                }
                Err(e) => debug!(self.env.logger, "election membership change not proposed";
                                 "election" => g.name.as_deref(), "error" => %e),
            }
        }
    }
}

/// Whether voter `to`'s log in `g` is at the leader's last index. That `to` was heard
/// recently the healthy set says (every target is in it): raft-rs's `recent_active`
/// cannot, since a quiet election's followers send it nothing, and its leader, which
/// does not tick, keeps whatever its last quorum check left (often `false`), so a
/// quiet election would never move.
fn caught_up<S: RaftStore>(g: &Group<S>, to: NodeId) -> bool {
    let raft = &g.raw.raft;
    let last = raft.raft_log.last_index();
    raft.prs().conf().voters().contains(to)
        && raft.prs().get(to).is_some_and(|pr| pr.matched >= last)
}

/// The changes that make `g`'s configuration the root's: add new members as learners,
/// promote caught-up learners the root has as voters, demote voters the root has as
/// learners, remove members the root no longer has.
fn membership_changes<S: RaftStore>(
    g: &Group<S>,
    root_voters: &BTreeSet<NodeId>,
    root_learners: &BTreeSet<NodeId>,
) -> Vec<ConfChangeSingle> {
    let raft = &g.raw.raft;
    let conf = raft.prs().conf();
    let voters: BTreeSet<NodeId> = conf.voters().ids().iter().collect();
    let learners: BTreeSet<NodeId> = conf.learners().iter().copied().collect();
    let me = raft.id;
    let last = raft.raft_log.last_index();
    let mut out = Vec::new();
    let mut change = |t: ConfChangeType, id: NodeId| {
        let mut c = ConfChangeSingle::default();
        c.set_change_type(t);
        c.node_id = id;
        out.push(c);
    };
    for id in root_voters.union(root_learners) {
        if !voters.contains(id) && !learners.contains(id) {
            change(ConfChangeType::AddLearnerNode, *id);
        }
    }
    for id in root_voters.intersection(&learners) {
        if raft.prs().get(*id).is_some_and(|pr| pr.matched >= last) {
            change(ConfChangeType::AddNode, *id);
        }
    }
    for id in root_learners.intersection(&voters) {
        if *id != me {
            change(ConfChangeType::AddLearnerNode, *id);
        }
    }
    for id in voters.union(&learners) {
        if *id != me && !root_voters.contains(id) && !root_learners.contains(id) {
            change(ConfChangeType::RemoveNode, *id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(leaders: &[NodeId]) -> Vec<Placed> {
        leaders
            .iter()
            .enumerate()
            .map(|(i, l)| Placed {
                election: i as ElectionId + 1,
                leader: *l,
                priority: 128,
                affinity: Vec::new(),
            })
            .collect()
    }

    fn all_moves(h: &BTreeSet<NodeId>, p: &[Placed]) -> Vec<Move> {
        h.iter()
            .flat_map(|me| plan(*me, h, p, |_, _| true))
            .collect()
    }

    fn after(p: &[Placed], moves: &[Move]) -> BTreeMap<NodeId, usize> {
        let mut counts = BTreeMap::new();
        for e in p {
            let leader = moves
                .iter()
                .find(|m| m.election == e.election)
                .map_or(e.leader, |m| m.to);
            *counts.entry(leader).or_insert(0) += 1;
        }
        counts
    }

    #[test]
    fn sixteen_on_one_node_spread_in_one_round_to_three_or_four_each() {
        let h: BTreeSet<NodeId> = (1..=5).collect();
        let p = placed(&[1; 16]);
        let moves = all_moves(&h, &p);
        assert_eq!(moves.len(), 12, "{moves:?}");
        let counts = after(&p, &moves);
        assert_eq!(counts.len(), 5);
        assert!(counts.values().all(|c| (3..=4).contains(c)), "{counts:?}");
        // No election moves twice, and every move is the leader's own.
        let mut seen = BTreeSet::new();
        assert!(moves.iter().all(|m| seen.insert(m.election)));
    }

    #[test]
    fn a_balanced_or_off_by_one_group_moves_nothing() {
        let h: BTreeSet<NodeId> = (1..=5).collect();
        let p = placed(&[1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5]);
        assert!(all_moves(&h, &p).is_empty());
        let p = placed(&[1, 2, 3]);
        assert!(all_moves(&h, &p).is_empty());
    }

    #[test]
    fn a_returning_node_gets_its_share_from_the_others() {
        // Node 5 came back leading nothing: 16 over 4 nodes, 4 each.
        let h: BTreeSet<NodeId> = (1..=5).collect();
        let p = placed(&[1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4]);
        let moves = all_moves(&h, &p);
        let counts = after(&p, &moves);
        assert!(counts.values().all(|c| (3..=4).contains(c)), "{counts:?}");
        assert_eq!(counts[&5], 3, "{moves:?}");
    }

    #[test]
    fn elections_led_outside_the_healthy_set_are_not_counted_or_moved() {
        let h: BTreeSet<NodeId> = [1, 2].into();
        let p = placed(&[3, 3, 3, 1, 1, 1, 1]);
        let moves = all_moves(&h, &p);
        assert!(moves.iter().all(|m| m.election >= 4));
        let counts = after(&p, &moves);
        assert_eq!((counts[&1], counts[&2]), (2, 2), "{moves:?}");
    }

    #[test]
    fn affinity_wins_and_is_never_undone_by_the_counts() {
        let h: BTreeSet<NodeId> = (1..=3).collect();
        let mut p = placed(&[1, 1, 1, 2, 2, 3]);
        p[5].affinity = vec![9, 1]; // 9 is not healthy: node 1 is preferred
                                    // Rounds until nothing moves: node 1 is full at first, so election 6 gets there
                                    // once node 1 gave one of its others away.
        for _ in 0..4 {
            let moves = all_moves(&h, &p);
            for m in &moves {
                p[m.election as usize - 1].leader = m.to;
            }
        }
        assert_eq!(p[5].leader, 1, "{p:?}");
        assert!(all_moves(&h, &p).is_empty(), "{p:?}");
        let counts = after(&p, &[]);
        assert!(counts.values().all(|c| *c == 2), "{counts:?}");
    }

    #[test]
    fn an_affinity_move_its_leader_cannot_make_moves_nothing_else() {
        // Election 1 prefers node 2, but its leader (node 1) cannot move it yet (not
        // leased, cooling down, node 2 behind). The others must not count it as moving:
        // node 2 would see itself over target and give election 2 away, node 1 would
        // take it and give it back, every round (the ctl test's mail, once per 2 s).
        let h: BTreeSet<NodeId> = (1..=3).collect();
        let mut p = placed(&[1, 2]);
        p[0].affinity = vec![2, 1];
        for round in 0..6 {
            let moves: Vec<Move> = h
                .iter()
                .flat_map(|me| plan(*me, &h, &p, |e, _| e != 1))
                .collect();
            assert!(moves.is_empty(), "round {round}: {moves:?} from {p:?}");
        }
        // Once its leader can, it moves, and what follows settles.
        for _ in 0..4 {
            for m in all_moves(&h, &p) {
                p[m.election as usize - 1].leader = m.to;
            }
        }
        assert_eq!(p[0].leader, 2, "{p:?}");
        assert!(all_moves(&h, &p).is_empty(), "{p:?}");
    }

    #[test]
    fn lower_priority_moves_first_and_a_refused_target_is_skipped() {
        let h: BTreeSet<NodeId> = (1..=2).collect();
        let mut p = placed(&[1, 1, 1, 1]);
        p[2].priority = 10;
        let moves = plan(1, &h, &p, |_, _| true);
        assert_eq!(moves[0].election, 3, "{moves:?}");
        assert!(plan(1, &h, &p, |_, _| false).is_empty());
    }
}
