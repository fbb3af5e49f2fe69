//! `local_group`'s summary (examples/support/history.rs) judges worker events with the
//! tests' history checker: one interval per lease, so a node's second lease in one term
//! is judged on its own. Keyed by (node, term), as the summary once was, that lease was
//! merged with the node's first lease of the term and cut short by its `lease_lost`: the
//! overlap below read "leases: OK".

#[path = "../examples/support/history.rs"]
mod history;
#[path = "support/kit/mod.rs"]
mod kit;

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
    let report = history::check(&events(&history(210)));
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
    let report = history::check(&events(&history(345)));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.terms_with_leases, 2);
}
