//! Reads worker JSON events and checks the lease history.
//!
//! Rules checked:
//! * **one holder per term**: no two nodes report `lease_acquired` in the same term;
//! * **no overlap**: a lease acquired at time `a` in term `t` starts after every lease of
//!   an earlier term held by another node ended. A lease ends at the earliest of: its
//!   last reported `valid_until_ns`, its `lease_lost` `ended_ns`. A killed holder's lease
//!   ends at its last reported `valid_until_ns` (it printed nothing after).
//!
//! Failovers are measured from a chaos event (`chaos_kill`, `chaos_pause`) to the first
//! `lease_acquired` by another node in a higher term.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// One event line, parsed.
#[derive(Debug, Clone)]
pub struct Event {
    pub event: String,
    pub node: u64,
    pub mono_ns: u64,
    pub term: Option<u64>,
    pub valid_until_ns: Option<u64>,
    pub ended_ns: Option<u64>,
    pub raw: Value,
}

impl Event {
    /// Parses one JSON line; `None` if it is not an event.
    pub fn parse(line: &str) -> Option<Event> {
        let v: Value = serde_json::from_str(line.trim()).ok()?;
        Some(Event {
            event: v.get("event")?.as_str()?.to_string(),
            node: v.get("node")?.as_u64()?,
            mono_ns: v.get("mono_ns")?.as_u64()?,
            term: v.get("term").and_then(Value::as_u64),
            valid_until_ns: v.get("valid_until_ns").and_then(Value::as_u64),
            ended_ns: v.get("ended_ns").and_then(Value::as_u64),
            raw: v,
        })
    }
}

/// A measured failover.
#[derive(Debug, Clone)]
pub struct Failover {
    pub cause: String,
    pub from_node: u64,
    pub to_node: u64,
    pub term: u64,
    pub millis: f64,
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    pub failovers: Vec<Failover>,
    pub violations: Vec<String>,
    pub terms_with_leases: usize,
}

#[derive(Debug)]
struct Tenure {
    node: u64,
    term: u64,
    acquired_ns: u64,
    end_ns: u64,
}

/// Checks a whole history (any order; it is sorted by `mono_ns`).
pub fn check(events: &[Event]) -> Report {
    let mut evs: Vec<&Event> = events.iter().collect();
    evs.sort_by_key(|e| e.mono_ns);
    let mut report = Report::default();

    // Tenures: (node, term) → acquired time and end.
    let mut tenures: BTreeMap<(u64, u64), Tenure> = BTreeMap::new();
    let mut holders: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for e in &evs {
        let Some(term) = e.term else { continue };
        match e.event.as_str() {
            "lease_acquired" => {
                holders.entry(term).or_default().insert(e.node);
                let t = tenures.entry((e.node, term)).or_insert(Tenure {
                    node: e.node,
                    term,
                    acquired_ns: e.mono_ns,
                    end_ns: 0,
                });
                t.end_ns = t.end_ns.max(e.valid_until_ns.unwrap_or(e.mono_ns));
            }
            "lease_confirmed" => {
                if let Some(t) = tenures.get_mut(&(e.node, term)) {
                    t.end_ns = t.end_ns.max(e.valid_until_ns.unwrap_or(e.mono_ns));
                }
            }
            _ => {}
        }
    }
    // A revocation cuts a lease short; apply after the maxima above.
    for e in &evs {
        if e.event == "lease_lost" {
            if let (Some(term), Some(ended)) = (e.term, e.ended_ns) {
                if let Some(t) = tenures.get_mut(&(e.node, term)) {
                    t.end_ns = t.end_ns.min(ended.max(t.acquired_ns));
                }
            }
        }
    }
    report.terms_with_leases = holders.len();
    for (term, nodes) in &holders {
        if nodes.len() > 1 {
            report.violations.push(format!(
                "term {term}: leases acquired by several nodes {nodes:?}"
            ));
        }
    }
    let list: Vec<&Tenure> = tenures.values().collect();
    for b in &list {
        for a in &list {
            if a.term < b.term && a.node != b.node && a.end_ns > b.acquired_ns {
                report.violations.push(format!(
                    "node {} acquired term {} at {} ns, {:.3} ms before node {}'s lease of term {} ended",
                    b.node,
                    b.term,
                    b.acquired_ns,
                    (a.end_ns - b.acquired_ns) as f64 / 1e6,
                    a.node,
                    a.term
                ));
            }
        }
    }

    // Failovers.
    for (i, e) in evs.iter().enumerate() {
        if e.event != "chaos_kill" && e.event != "chaos_pause" {
            continue;
        }
        let victim_term = e.term.unwrap_or(0);
        if let Some(next) = evs[i + 1..].iter().find(|n| {
            n.event == "lease_acquired" && n.node != e.node && n.term.unwrap_or(0) > victim_term
        }) {
            report.failovers.push(Failover {
                cause: e.event.trim_start_matches("chaos_").to_string(),
                from_node: e.node,
                to_node: next.node,
                term: next.term.unwrap_or(0),
                millis: (next.mono_ns.saturating_sub(e.mono_ns)) as f64 / 1e6,
            });
        }
    }
    report
}

/// min / median / max of a sample, in the sample's unit.
pub fn summary(xs: &[f64]) -> Option<(f64, f64, f64)> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let med = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    Some((v[0], med, v[v.len() - 1]))
}
