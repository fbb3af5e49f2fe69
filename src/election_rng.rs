//! Seeded election timeouts and draws, for simulations that must replay a run exactly.
//!
//! raft-rs draws a node's randomized election timeout from `rand::thread_rng()`, seeded
//! by the OS, in `Raft::reset`: whenever the node becomes follower, candidate or leader
//! (pre-candidate keeps its timeout). Every such reset changes the node's term or role,
//! and nothing else changes them, so "(term, role) differs from the last look" says
//! exactly that raft-rs drew a timeout since then. [`ElectionTimeouts::redraw`] then
//! replaces the draw with one from a seeded RNG. The driver calls it after every event,
//! before the next tick can read the timeout, so every timeout in force is the seeded
//! one.

use raft::{Raft, StateRole, Storage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What a node draws at random besides its election timeouts (each purpose its own
/// stream, so that adding a draw of one kind leaves the others as they were).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Draw {
    /// The support stream's incarnation (`driver::support`).
    SupportIncarnation = 1,
    /// The first proposal nonce of the named elections' driver.
    ProposalNonce = 2,
    /// The founding hello's incarnation nonce.
    FoundingNonce = 3,
}

/// A draw for `purpose`: from the OS-seeded thread RNG, or, with the `testing` hook's
/// seed (`TestHooks::election_seed`, one per node incarnation in the simulation), from
/// an RNG seeded with it and the purpose, so that a simulation replays it.
pub(crate) fn draw<T>(seed: Option<u64>, purpose: Draw) -> T
where
    rand::distributions::Standard: rand::distributions::Distribution<T>,
{
    match seed {
        Some(seed) => {
            StdRng::seed_from_u64(seed ^ (purpose as u64).wrapping_mul(0xd1b5_4a32_d192_ed03)).gen()
        }
        None => rand::random(),
    }
}

/// A seeded source of election timeouts for one node.
pub(crate) struct ElectionTimeouts {
    rng: StdRng,
    /// The draw range in ticks: `[min, max)`, as raft-rs draws.
    min: usize,
    max: usize,
    /// (term, role) when last looked at; `None` before the first look.
    seen: Option<(u64, StateRole)>,
}

impl ElectionTimeouts {
    /// Timeouts in `[min_ticks, max_ticks)` from `seed` (mixed with the node id, so
    /// nodes given the same seed still draw differently).
    pub(crate) fn new(seed: u64, id: u64, min_ticks: usize, max_ticks: usize) -> Self {
        ElectionTimeouts {
            rng: StdRng::seed_from_u64(seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            min: min_ticks,
            max: max_ticks,
            seen: None,
        }
    }

    /// If raft-rs has reset since the last call (or this is the first), sets a seeded
    /// timeout in place of its draw.
    pub(crate) fn redraw<S: Storage>(&mut self, raft: &mut Raft<S>) {
        if self.seen == Some((raft.term, raft.state)) {
            return;
        }
        self.redraw_now(raft);
    }

    /// Sets a seeded timeout in place of raft-rs's draw now: after a reset the caller
    /// made, which may have left (term, role) as they were.
    pub(crate) fn redraw_now<S: Storage>(&mut self, raft: &mut Raft<S>) {
        self.seen = Some((raft.term, raft.state));
        if self.max <= self.min + 1 {
            // One possible draw (a fixed timeout, or the boundary tests' minimum).
            raft.set_randomized_election_timeout(self.min);
        } else {
            raft.set_randomized_election_timeout(self.rng.gen_range(self.min..self.max));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::storage::MemStorage;
    use raft::RawNode;

    /// Node 1 of a group of three, election timeouts drawn from 10..20 ticks.
    fn node_one_of_three() -> RawNode<MemStorage> {
        let config = raft::Config {
            id: 1,
            election_tick: 10,
            heartbeat_tick: 2,
            min_election_tick: 10,
            max_election_tick: 20,
            ..Default::default()
        };
        let storage = MemStorage::new_with_conf_state((vec![1, 2, 3], vec![]));
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        RawNode::new(&config, storage, &logger).expect("raft node")
    }

    /// The timeouts node 1 of a group of three has in force through ten elections.
    fn timeouts_in_force(seed: u64) -> Vec<usize> {
        let mut raw = node_one_of_three();
        let mut t = ElectionTimeouts::new(seed, 1, 10, 20);
        let mut seen = Vec::new();
        t.redraw(&mut raw.raft);
        seen.push(raw.raft.randomized_election_timeout());
        for _ in 0..10 {
            raw.raft.become_pre_candidate();
            raw.raft.become_candidate();
            t.redraw(&mut raw.raft);
            seen.push(raw.raft.randomized_election_timeout());
            let term = raw.raft.term;
            raw.raft.become_follower(term, 2);
            t.redraw(&mut raw.raft);
            seen.push(raw.raft.randomized_election_timeout());
            // No reset since: the timeout in force stays.
            t.redraw(&mut raw.raft);
            assert_eq!(
                raw.raft.randomized_election_timeout(),
                *seen.last().unwrap()
            );
        }
        seen
    }

    /// The timeouts a follower has in force after being told its leader twenty times in
    /// one term (raft-rs draws at each, and neither term nor role changes).
    fn follower_told_its_leader(seed: u64) -> Vec<usize> {
        let mut raw = node_one_of_three();
        let mut t = ElectionTimeouts::new(seed, 1, 10, 20);
        t.redraw(&mut raw.raft);
        (0..20)
            .map(|k| {
                raw.raft.become_follower(raw.raft.term, 2 + k % 2);
                t.redraw_now(&mut raw.raft);
                raw.raft.randomized_election_timeout()
            })
            .collect()
    }

    #[test]
    fn a_reset_that_keeps_term_and_role_is_redrawn_from_the_seed() {
        // `redraw` alone would leave raft-rs's OS-seeded draws in force here: twenty of
        // them agreeing between two nodes by chance is a 1-in-10^20 event.
        assert_eq!(follower_told_its_leader(5), follower_told_its_leader(5));
    }

    #[test]
    fn a_seed_fixes_every_timeout_raft_draws() {
        let a = timeouts_in_force(7);
        assert_eq!(a, timeouts_in_force(7), "same seed, same timeouts");
        assert!(a.iter().all(|t| (10..20).contains(t)), "{a:?}");
        assert_ne!(a, timeouts_in_force(8), "another seed, other timeouts");
    }
}
