//! Judges a group's worker events (the kit's [`Event`]s) with the tests' history
//! checker (the harness's [`checker`]): one checker for the tests and `local_group`.
//!
//! The checker keeps one interval per lease (a node that leases twice in one term has
//! two), so a node's second lease of a term that overlaps another node's lease is
//! caught; its rules (a) to (d) and (f) are listed in that file. Writes are not judged
//! here (the ledger verifies its own), nor liveness.
//!
//! Failovers are measured from a chaos event (`chaos_kill`, `chaos_pause`) to the first
//! `lease_acquired` by another node in a higher term.
//!
//! With named elections (`--elections N`) every election is judged by itself: its own
//! events (`"election": "shard-3"`) and the events of no election (starts, stops, chaos),
//! each election by its own checker run, the root's (`"election": null`, or none) as
//! before. Tokens of one election are never compared with another's. Each named
//! election's tokens must also lie in one id's range (`token >> 40`, one id per
//! incarnation; `local_group` creates each once), a different id from every other
//! election's; a named election's failover is measured from a chaos event against the
//! node that held its lease then.

use std::collections::{BTreeMap, BTreeSet};

use super::checker;
use super::event::Event;

/// A measured failover.
#[derive(Debug, Clone)]
pub struct Failover {
    /// The chaos event it started from (`chaos_kill`, `chaos_pause`).
    pub cause: String,
    /// The node that held the lease.
    pub from_node: u64,
    /// The node that leased next.
    pub to_node: u64,
    /// The new lease's term.
    pub term: u64,
    /// From the chaos event to the new lease, in milliseconds.
    pub millis: f64,
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    /// The root election's failovers.
    pub failovers: Vec<Failover>,
    /// Each broken rule: what is wrong, then the timeline around it (every election's;
    /// a named election's name their election).
    pub violations: Vec<String>,
    /// The root election's terms with a lease.
    pub terms_with_leases: usize,
    /// Each named election, by name.
    pub elections: BTreeMap<String, ElectionReport>,
}

/// What the checker found of one named election.
#[derive(Debug, Default, Clone)]
pub struct ElectionReport {
    /// Its terms with a lease.
    pub terms_with_leases: usize,
    /// The ids its tokens name (`token >> 40`): one, unless it was created again.
    pub ids: BTreeSet<u64>,
    /// Its failovers.
    pub failovers: Vec<Failover>,
    /// How many rules it broke (the messages are in the [`Report`]'s).
    pub violations: usize,
}

/// Runs the history checker over one election's events.
fn judge(events: &[&Event], nodes: usize) -> Result<usize, (usize, Vec<String>)> {
    let judged: Vec<checker::Event> = events.iter().filter_map(|e| e.judged()).collect();
    let opts = checker::Options::new(nodes.max(1));
    match checker::check(&judged, &[], &opts) {
        Ok(summary) => Ok(summary.terms_with_leases),
        Err(failure) => Err((
            failure.summary.terms_with_leases,
            failure
                .violations
                .iter()
                .map(|v| format!("{}: {}\n{}", v.rule, v.message, v.timeline))
                .collect(),
        )),
    }
}

/// The events of an election (the root's when they name none, as a worker older than
/// the `election` field prints them).
const ELECTION_EVENTS: [&str; 8] = [
    "leader_changed",
    "lease_acquired",
    "lease_confirmed",
    "lease_lost",
    "history",
    "batch_started",
    "settled",
    "fence_rejected",
];

/// Whether `e` belongs to named election `name`'s history: its own events, and those of
/// no election at all (starts, stops, chaos).
fn of_election(e: &Event, name: &str) -> bool {
    match e.election() {
        Some(n) => n == name,
        None => !ELECTION_EVENTS.contains(&e.event.as_str()),
    }
}

/// Failovers measured from each chaos event against the node that held `election`'s
/// lease then (`None`: the root; the chaos event's own term for it).
fn failovers(evs: &[&Event], election: Option<&str>) -> Vec<Failover> {
    let mut out = Vec::new();
    // The holder of the election's lease as of each event: (node, term).
    let mut holder: Option<(u64, u64)> = None;
    for (i, e) in evs.iter().enumerate() {
        let mine = e.election() == election;
        match e.event.as_str() {
            "lease_acquired" if mine => holder = Some((e.node, e.term().unwrap_or(0))),
            "lease_lost"
                if mine && holder.is_some_and(|(n, t)| n == e.node && Some(t) == e.term()) =>
            {
                holder = None;
            }
            "chaos_kill" | "chaos_pause" => {
                let victim_term = match election {
                    None => e.term().unwrap_or(0),
                    Some(_) => match holder {
                        Some((n, t)) if n == e.node => t,
                        // The victim did not hold this election's lease.
                        _ => continue,
                    },
                };
                if let Some(next) = evs[i + 1..].iter().find(|n| {
                    n.event == "lease_acquired"
                        && n.election() == election
                        && n.node != e.node
                        && n.term().unwrap_or(0) > victim_term
                }) {
                    out.push(Failover {
                        cause: e.event.trim_start_matches("chaos_").to_string(),
                        from_node: e.node,
                        to_node: next.node,
                        term: next.term().unwrap_or(0),
                        millis: (next.mono_ns.saturating_sub(e.mono_ns)) as f64 / 1e6,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// Checks a whole history (any order): the root election, then each named one by itself.
/// The group's size, for the checker's majority rule (c), is the number of nodes that
/// reported anything.
pub fn check(events: &[Event]) -> Report {
    let nodes: BTreeSet<u64> = events.iter().map(|e| e.node).filter(|n| *n != 0).collect();
    let mut evs: Vec<&Event> = events.iter().collect();
    evs.sort_by_key(|e| e.mono_ns);
    let mut report = Report::default();

    let root: Vec<&Event> = evs.iter().copied().filter(|e| e.is_root()).collect();
    match judge(&root, nodes.len()) {
        Ok(terms) => report.terms_with_leases = terms,
        Err((terms, violations)) => {
            report.terms_with_leases = terms;
            report.violations = violations;
        }
    }
    report.failovers = failovers(&root, None);

    let names: BTreeSet<&str> = evs.iter().filter_map(|e| e.election()).collect();
    let mut owner: BTreeMap<u64, &str> = BTreeMap::new();
    for name in names {
        let mine: Vec<&Event> = evs
            .iter()
            .copied()
            .filter(|e| of_election(e, name))
            .collect();
        let mut r = ElectionReport::default();
        match judge(&mine, nodes.len()) {
            Ok(terms) => r.terms_with_leases = terms,
            Err((terms, violations)) => {
                r.terms_with_leases = terms;
                r.violations = violations.len();
                report.violations.extend(
                    violations
                        .into_iter()
                        .map(|v| format!("election {name}: {v}")),
                );
            }
        }
        for e in mine.iter().filter(|e| e.election() == Some(name)) {
            for key in ["token", "term"] {
                if let Some(t) = e.u64(key).filter(|t| *t > 0) {
                    r.ids.insert(t >> tenure::election::TERM_BITS);
                }
            }
        }
        // Tokens of a named election lie above the root's range, in ids no other
        // election's tokens name.
        if r.ids.contains(&0) {
            report.violations.push(format!(
                "election {name}: a token in the root's range (id 0): {:?}",
                r.ids
            ));
        }
        for id in &r.ids {
            if let Some(other) = owner.insert(*id, name) {
                report.violations.push(format!(
                    "elections {other} and {name} hand out tokens of one id, {id}"
                ));
            }
        }
        r.failovers = failovers(&mine, Some(name));
        report.elections.insert(name.to_string(), r);
    }
    report
}

/// min / median / max of a sample, in the sample's unit.
pub fn summary(xs: &[f64]) -> Option<(f64, f64, f64)> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let med = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    Some((v[0], med, v[v.len() - 1]))
}
