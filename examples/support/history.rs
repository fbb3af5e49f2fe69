//! Judges a local group's worker events (the kit's [`Event`]s) with the tests' history
//! checker (`tests/support/checker.rs`, the kit's `checker`): one checker for the tests
//! and the examples.
//!
//! The checker keeps one interval per lease (a node that leases twice in one term has
//! two), so a node's second lease of a term that overlaps another node's lease is
//! caught; its rules (a) to (d) and (f) are listed in that file. Writes are not judged
//! here (the ledger verifies its own), nor liveness.
//!
//! Failovers are measured from a chaos event (`chaos_kill`, `chaos_pause`) to the first
//! `lease_acquired` by another node in a higher term.

#![allow(dead_code)]

use std::collections::BTreeSet;

use super::kit::checker;
use super::kit::event::Event;

/// A measured failover.
#[derive(Debug, Clone)]
pub(crate) struct Failover {
    pub cause: String,
    pub from_node: u64,
    pub to_node: u64,
    pub term: u64,
    pub millis: f64,
}

/// What the checker found.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub failovers: Vec<Failover>,
    /// Each broken rule: what is wrong, then the timeline around it.
    pub violations: Vec<String>,
    pub terms_with_leases: usize,
}

/// Checks a whole history (any order). The group's size, for the checker's majority
/// rule (c), is the number of nodes that reported anything.
pub(crate) fn check(events: &[Event]) -> Report {
    let nodes: BTreeSet<u64> = events.iter().map(|e| e.node).filter(|n| *n != 0).collect();
    let judged: Vec<checker::Event> = events.iter().filter_map(Event::judged).collect();
    let opts = checker::Options::new(nodes.len().max(1));
    let mut report = Report::default();
    match checker::check(&judged, &[], &opts) {
        Ok(summary) => report.terms_with_leases = summary.terms_with_leases,
        Err(failure) => {
            report.terms_with_leases = failure.summary.terms_with_leases;
            report.violations = failure
                .violations
                .iter()
                .map(|v| format!("{}: {}\n{}", v.rule, v.message, v.timeline))
                .collect();
        }
    }

    // Failovers.
    let mut evs: Vec<&Event> = events.iter().collect();
    evs.sort_by_key(|e| e.mono_ns);
    for (i, e) in evs.iter().enumerate() {
        if e.event != "chaos_kill" && e.event != "chaos_pause" {
            continue;
        }
        let victim_term = e.term().unwrap_or(0);
        if let Some(next) = evs[i + 1..].iter().find(|n| {
            n.event == "lease_acquired" && n.node != e.node && n.term().unwrap_or(0) > victim_term
        }) {
            report.failovers.push(Failover {
                cause: e.event.trim_start_matches("chaos_").to_string(),
                from_node: e.node,
                to_node: next.node,
                term: next.term().unwrap_or(0),
                millis: (next.mono_ns.saturating_sub(e.mono_ns)) as f64 / 1e6,
            });
        }
    }
    report
}

/// min / median / max of a sample, in the sample's unit.
pub(crate) fn summary(xs: &[f64]) -> Option<(f64, f64, f64)> {
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
