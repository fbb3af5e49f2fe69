//! `local_group`'s summary (harness/src/kit/judge.rs) judges worker events with the
//! tests' history checker: one interval per lease, so a node's second lease in one term
//! is judged on its own. Keyed by (node, term), as the summary once was, that lease was
//! merged with the node's first lease of the term and cut short by its `lease_lost`: the
//! overlap below read "leases: OK".
//!
//! With named elections (`--elections N`) each election is judged by itself: leases of
//! different elections overlap all the time and must not be compared, while an overlap
//! inside one named election is caught and named.

use tenure_harness::kit;
use tenure_harness::kit::judge;

const MS: u64 = 1_000_000;

fn events(lines: &[String]) -> Vec<kit::event::Event> {
    lines
        .iter()
        .filter_map(|l| kit::event::Event::parse(l))
        .collect()
}

fn acquired(node: u64, at_ms: u64, term: u64, until_ms: u64) -> String {
    format!(
        r#"{{"event":"lease_acquired","node":{node},"mono_ns":{},"term":{term},"valid_until_ns":{}}}"#,
        at_ms * MS,
        until_ms * MS
    )
}

fn lost(node: u64, at_ms: u64, term: u64, reason: &str) -> String {
    format!(
        r#"{{"event":"lease_lost","node":{node},"mono_ns":{},"term":{term},"reason":"{reason}","ended_ns":{}}}"#,
        at_ms * MS,
        at_ms * MS
    )
}

/// `line` (an event) with `"election": election` added (`None`: `null`, the root).
fn of(election: Option<&str>, line: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["election"] = election.map_or(serde_json::Value::Null, Into::into);
    v.to_string()
}

/// Election `id`'s term `t` (its tokens lie in `[id << 40, (id + 1) << 40)`).
fn term(id: u64, t: u64) -> u64 {
    (id << tenure::election::TERM_BITS) + t
}

/// n1 leases in term 2, hands over (the transfer fails), leases again in term 2; n2
/// leases in term 3 at `n2_at_ms`, while n1's second lease runs until 340 ms.
fn history(n2_at_ms: u64) -> Vec<String> {
    vec![
        acquired(1, 1, 2, 150),
        lost(1, 50, 2, "handed_over"),
        acquired(1, 200, 2, 340),
        acquired(2, n2_at_ms, 3, n2_at_ms + 140),
        lost(1, 340, 2, "expired"),
    ]
}

#[test]
fn the_summary_catches_a_second_lease_in_one_term_overlapping_another_nodes_lease() {
    let report = judge::check(&events(&history(210)));
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("leases do not overlap") && v.contains("n2 acquired term 3")),
        "the overlap of n1's second lease of term 2 with n2's lease went unnoticed: {:?}",
        report.violations
    );
    eprintln!("{}", report.violations.join("\n"));
}

#[test]
fn the_summary_passes_the_same_history_without_the_overlap() {
    let report = judge::check(&events(&history(345)));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.terms_with_leases, 2);
}

#[test]
fn the_root_events_with_election_null_are_judged_as_before() {
    let with_null: Vec<String> = history(210).iter().map(|l| of(None, l)).collect();
    let report = judge::check(&events(&with_null));
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("leases do not overlap")),
        "{:?}",
        report.violations
    );
    let with_null: Vec<String> = history(345).iter().map(|l| of(None, l)).collect();
    let report = judge::check(&events(&with_null));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.terms_with_leases, 2);
    assert!(report.elections.is_empty());
}

/// Two named elections and the root, all leased at once by different nodes: fine, each
/// election by itself; the same overlap inside one named election is caught, naming it.
#[test]
fn each_named_election_is_judged_by_itself() {
    let concurrent = vec![
        acquired(1, 1, 2, 500),
        of(Some("shard-0"), &acquired(2, 2, term(1, 1), 500)),
        of(Some("shard-1"), &acquired(3, 3, term(2, 1), 500)),
        of(Some("shard-1"), &lost(3, 100, term(2, 1), "handed_over")),
        of(Some("shard-1"), &acquired(1, 120, term(2, 2), 500)),
    ];
    let report = judge::check(&events(&concurrent));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.terms_with_leases, 1);
    assert_eq!(report.elections.len(), 2);
    assert_eq!(report.elections["shard-1"].terms_with_leases, 2);
    assert_eq!(
        report.elections["shard-1"]
            .ids
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![2]
    );

    // shard-1's second leader leases while the first one's lease still runs.
    let mut overlap = concurrent.clone();
    overlap[3] = of(Some("shard-1"), &lost(3, 400, term(2, 1), "expired"));
    let report = judge::check(&events(&overlap));
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.starts_with("election shard-1:") && v.contains("leases do not overlap")),
        "{:?}",
        report.violations
    );
    assert!(
        !report.violations.iter().any(|v| v.contains("shard-0")),
        "{:?}",
        report.violations
    );
}

#[test]
fn a_named_elections_tokens_must_lie_in_its_own_id_range() {
    // shard-0 hands out a root-range token; shard-1 and shard-2 share id 5.
    let bad = vec![
        of(Some("shard-0"), &acquired(1, 1, 7, 100)),
        of(Some("shard-1"), &acquired(2, 1, term(5, 1), 100)),
        of(Some("shard-2"), &acquired(3, 1, term(5, 2), 100)),
    ];
    let report = judge::check(&events(&bad));
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("shard-0") && v.contains("root's range")),
        "{:?}",
        report.violations
    );
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("shard-1 and shard-2") && v.contains("id, 5")),
        "{:?}",
        report.violations
    );
}

/// A chaos kill moves each named election its victim led, measured per name.
#[test]
fn named_failovers_are_measured_from_the_kill_of_their_holder() {
    let chaos = r#"{"event":"chaos_kill","node":2,"mono_ns":200000000,"term":2}"#.to_string();
    let evs = vec![
        acquired(2, 1, 2, 150),
        of(Some("shard-0"), &acquired(2, 2, term(1, 1), 150)),
        of(Some("shard-1"), &acquired(3, 3, term(2, 1), 900)),
        chaos,
        of(Some("shard-0"), &acquired(1, 450, term(1, 2), 600)),
        acquired(3, 470, 3, 600),
    ];
    let report = judge::check(&events(&evs));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.failovers.len(), 1);
    let f = &report.elections["shard-0"].failovers;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].from_node, f[0].to_node), (2, 1));
    assert!((f[0].millis - 250.0).abs() < 1e-6, "{f:?}");
    // shard-1's holder was not killed: no failover.
    assert!(report.elections["shard-1"].failovers.is_empty());
}
