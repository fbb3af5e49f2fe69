//! The history checker itself (harness/src/checker.rs) on small hand-made histories:
//! one that passes, and for each rule one that must fail, so the checker provably can.

use tenure_harness::checker;

use checker::*;

const MS: u64 = 1_000_000;

/// A healthy history: n1 leads term 2, is cut off, its lease runs out, n2 takes
/// term 3 after it; the resource sees tokens 2 then 3.
fn healthy() -> (Vec<Event>, Vec<Write>) {
    let ev = vec![
        Event::new(1, 0, Kind::Started),
        Event::new(2, 0, Kind::Started),
        Event::new(3, 0, Kind::Started),
        Event::term_changed(1, 100 * MS, 2, Some(1), "leader"),
        Event::term_changed(2, 100 * MS, 2, Some(1), "follower"),
        Event::term_changed(3, 100 * MS, 2, Some(1), "follower"),
        Event::acquired(1, 110 * MS, 2, 280 * MS),
        Event::confirmed(1, 150 * MS, 152 * MS, 2, 320 * MS),
        Event::new(0, 200 * MS, Kind::Fault).note("isolate n1"),
        Event::lost(1, 330 * MS, 2, 320 * MS, "expired"),
        Event::term_changed(2, 420 * MS, 3, None, "candidate"),
        Event::term_changed(3, 421 * MS, 3, Some(2), "follower"),
        Event::term_changed(2, 421 * MS, 3, Some(2), "leader"),
        Event::acquired(2, 430 * MS, 3, 600 * MS),
        Event::new(0, 500 * MS, Kind::Heal).note("heal all"),
        Event::term_changed(1, 505 * MS, 3, Some(2), "follower"),
        Event::confirmed(2, 540 * MS, 541 * MS, 3, 700 * MS),
        // Applied histories: n1 just back from the cut, n3 lagging behind, n2 and n1 at
        // the end.
        Event::history(1, 506 * MS, vec![(2, 1)]),
        Event::history(3, 450 * MS, vec![(2, 1)]),
        Event::history(2, 560 * MS, vec![(2, 1), (3, 2)]),
        Event::history(1, 560 * MS, vec![(2, 1), (3, 2)]),
    ];
    let w = vec![
        Write {
            seq: 1,
            token: 2,
            node: 1,
            at_ns: Some(153 * MS),
        },
        Write {
            seq: 2,
            token: 3,
            node: 2,
            at_ns: Some(542 * MS),
        },
    ];
    (ev, w)
}

fn opts() -> Options {
    Options::new(3).liveness(500 * MS, 200 * MS)
}

fn fails(ev: &[Event], w: &[Write], rule: Rule) -> Failure {
    let f = check(ev, w, &opts()).expect_err("the history must fail");
    assert!(f.broke(rule), "expected {rule}, got:\n{f}");
    let text = f.to_string();
    assert!(
        text.contains(">> "),
        "the timeline marks the violation:\n{text}"
    );
    f
}

#[test]
fn healthy_history_passes() {
    let (ev, w) = healthy();
    let s = check(&ev, &w, &opts()).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(s.terms_with_leases, 2);
    assert_eq!(s.confirms, 2);
    assert_eq!(s.recovery_ns, Some(41 * MS));
    assert_eq!(s.histories, 4);
}

#[test]
fn two_holders_in_one_term_fail_rule_a() {
    let (mut ev, w) = healthy();
    ev.push(Event::acquired(3, 431 * MS, 3, 600 * MS));
    fails(&ev, &w, Rule::OneHolderPerTerm);
}

#[test]
fn one_holder_reacquiring_in_its_term_is_fine() {
    let (mut ev, w) = healthy();
    ev.push(Event::lost(2, 610 * MS, 3, 600 * MS, "expired"));
    ev.push(Event::acquired(2, 620 * MS, 3, 800 * MS));
    check(&ev, &w, &opts()).unwrap_or_else(|f| panic!("{f}"));
}

#[test]
fn a_lower_token_after_a_higher_one_fails_rule_b() {
    let (ev, mut w) = healthy();
    w.push(Write {
        seq: 3,
        token: 2,
        node: 1,
        at_ns: Some(560 * MS),
    });
    let f = fails(&ev, &w, Rule::Fencing);
    assert!(f.to_string().contains("resource log"), "{f}");
}

#[test]
fn one_token_from_two_writers_fails_rule_b() {
    let (ev, mut w) = healthy();
    w.push(Write {
        seq: 3,
        token: 3,
        node: 3,
        at_ns: None,
    });
    fails(&ev, &w, Rule::Fencing);
}

#[test]
fn a_token_written_by_someone_else_than_its_holder_fails_rule_b() {
    let (ev, mut w) = healthy();
    w[1].node = 3;
    fails(&ev, &w, Rule::Fencing);
}

#[test]
fn a_confirm_begun_after_a_majority_moved_on_fails_rule_c() {
    let (mut ev, w) = healthy();
    // n1 was cut off, the majority moved to term 3 by 421 ms; a confirm of term 2
    // that began at 425 ms cannot have been acknowledged by a quorum.
    ev.push(Event::confirmed(1, 425 * MS, 426 * MS, 2, 500 * MS));
    fails(&ev, &w, Rule::StaleConfirm);
}

#[test]
fn a_confirm_begun_before_the_majority_moved_on_is_fine() {
    let (mut ev, w) = healthy();
    // Began before M(2) = 421 ms, returned after it: acknowledged in time.
    ev.push(Event::confirmed(1, 300 * MS, 425 * MS, 2, 320 * MS));
    check(&ev, &w, &opts()).unwrap_or_else(|f| panic!("{f}"));
}

/// n1 leads term 2 in a group whose voters are {n1, n2, n3}; n4 (a learner) and n5 (a
/// removed node) report term 3 early, n2 at 421 ms; n1 confirms term 2 at 425 ms.
fn membership_changed() -> Vec<Event> {
    vec![
        Event::term_changed(1, 100 * MS, 2, Some(1), "leader"),
        Event::acquired(1, 110 * MS, 2, 280 * MS),
        Event::term_changed(4, 300 * MS, 3, None, "learner"),
        Event::term_changed(5, 310 * MS, 3, None, "removed"),
        Event::term_changed(2, 421 * MS, 3, None, "candidate"),
        Event::confirmed(1, 425 * MS, 426 * MS, 2, 500 * MS),
    ]
}

#[test]
fn rule_c_counts_a_majority_of_the_voters_not_of_every_node_that_reports() {
    // Counted over every node (no membership reports), three of five nodes moved past
    // term 2 before the confirm began, and the group of three would need only two.
    let ev = membership_changed();
    let opts = Options::new(3);
    let f = check(&ev, &[], &opts).expect_err("without reports, every node counts");
    assert!(f.broke(Rule::StaleConfirm), "{f}");
    // With n1's configuration reported, only n2 of {n1, n2, n3} had: n1 and n3 can still
    // acknowledge term 2.
    let mut ev = membership_changed();
    ev.push(Event::members(1, 50 * MS, vec![1, 2, 3], vec![]));
    check(&ev, &[], &opts).unwrap_or_else(|f| panic!("{f}"));
}

#[test]
fn rule_c_judges_a_stale_confirm_in_the_new_configuration() {
    // n3 was replaced by n4: {n1, n2, n4}. n2 and n4 moved on; n3 (gone) never reports.
    let mut ev = membership_changed();
    ev.push(Event::members(1, 50 * MS, vec![1, 2, 4], vec![]));
    fails(&ev, &[], Rule::StaleConfirm);
    // Joint ({n1, n2, n4} with the outgoing {n1, n2, n3}): a round needs a majority of
    // both halves, and {n1, n2, n4} has lost its own.
    let mut ev = membership_changed();
    ev.push(Event::members(1, 50 * MS, vec![1, 2, 4], vec![1, 2, 3]));
    let f = fails(&ev, &[], Rule::StaleConfirm);
    assert!(f.to_string().contains("{n1,n2,n4}"), "{f}");
}

#[test]
fn rule_c_takes_every_configuration_a_late_report_may_hide() {
    // n1 reports {n1, n2, n4} before the confirm, and {n1, n2, n3, n4, n6} 20 ms after it
    // returned: it may have counted its round in the larger group already, where n2
    // and n4 are no majority. Not judged stale; 60 ms later it would be (the report is
    // beyond the lag).
    let mut ev = membership_changed();
    ev.push(Event::members(1, 50 * MS, vec![1, 2, 4], vec![]));
    ev.push(Event::members(1, 446 * MS, vec![1, 2, 3, 4, 6], vec![]));
    check(&ev, &[], &Options::new(3)).unwrap_or_else(|f| panic!("{f}"));
    let mut ev = membership_changed();
    ev.push(Event::members(1, 50 * MS, vec![1, 2, 4], vec![]));
    ev.push(Event::members(1, 486 * MS, vec![1, 2, 3, 4, 6], vec![]));
    fails(&ev, &[], Rule::StaleConfirm);
}

#[test]
fn json_latency_defines_when_a_confirm_began() {
    let (mut ev, w) = healthy();
    let line = r#"{"event":"lease_confirmed","node":1,"mono_ns":430000000,"term":2,"token":2,"latency_us":2000.0,"valid_until_ns":500000000}"#;
    let e = Event::from_json_line(line).expect("parses");
    assert_eq!(e.began(), 428 * MS);
    ev.push(e);
    fails(&ev, &w, Rule::StaleConfirm);
}

#[test]
fn a_lease_acquired_before_the_old_one_ended_fails_rule_d() {
    let (mut ev, w) = healthy();
    // n1's lease actually ran until 450 ms, after n2 acquired at 430 ms.
    for e in &mut ev {
        if e.kind == Kind::LeaseLost {
            e.ended_ns = Some(450 * MS);
        }
    }
    fails(&ev, &w, Rule::Overlap);
}

/// n2's `lease_acquired` of term 3 (announced at 430 ms, as in [`healthy`]) as the worker
/// prints it, granted at `granted_ms`.
fn acquired_json(granted_ms: u64) -> Event {
    let line = format!(
        r#"{{"event":"lease_acquired","node":2,"mono_ns":430000000,"term":3,"token":3,"granted_ns":{},"valid_until_ns":600000000,"election":null}}"#,
        granted_ms * MS
    );
    Event::from_json_line(&line).expect("parses")
}

#[test]
fn a_lease_granted_before_the_old_one_ended_fails_rule_d_however_late_it_was_announced() {
    let (mut ev, w) = healthy();
    // n2's process was paused between the grant (300 ms, while n1's lease held until
    // 320 ms) and its event (430 ms): judged by the event's time, nothing overlaps.
    let at = ev
        .iter()
        .position(|e| e.kind == Kind::LeaseAcquired && e.node == 2)
        .expect("n2's acquisition");
    ev[at] = acquired_json(300);
    let f = check(&ev, &w, &opts()).expect_err("an early grant overlaps");
    assert!(f.broke(Rule::Overlap), "{f}");
    assert!(
        f.to_string().contains("(announced at"),
        "the violation names both times: {f}"
    );
    // Granted after n1's lease ended, announced just as late: no overlap.
    ev[at] = acquired_json(325);
    check(&ev, &w, &opts()).unwrap_or_else(|f| panic!("{f}"));
}

#[test]
fn a_crashed_holder_lease_ends_at_its_last_validity() {
    let (mut ev, w) = healthy();
    ev.retain(|e| e.kind != Kind::LeaseLost);
    ev.push(Event::new(1, 250 * MS, Kind::Crashed));
    check(&ev, &w, &opts()).unwrap_or_else(|f| panic!("{f}"));
    // …but a confirm reporting validity past n2's acquisition makes it overlap.
    ev.retain(|e| e.kind != Kind::Crashed);
    ev.push(Event::confirmed(1, 200 * MS, 201 * MS, 2, 440 * MS));
    fails(&ev, &w, Rule::Overlap);
}

#[test]
fn no_lease_after_the_heal_fails_rule_e() {
    let (mut ev, w) = healthy();
    ev.retain(|e| !(e.at_ns >= 500 * MS && e.kind == Kind::LeaseConfirmed));
    ev.push(Event::new(3, 900 * MS, Kind::Other("tick".into())));
    let f = fails(&ev, &w, Rule::Liveness);
    assert!(f.to_string().contains("none came"), "{f}");
    // A late lease is reported with its delay.
    ev.push(Event::confirmed(2, 800 * MS, 801 * MS, 3, 900 * MS));
    let f = fails(&ev, &w, Rule::Liveness);
    assert!(f.to_string().contains("301.000 ms after"), "{f}");
}

#[test]
fn a_committed_record_lost_by_a_later_leader_fails_rule_f() {
    let (mut ev, w) = healthy();
    // n2 applied term 3's record; later n3 leads term 4 with a history that never had
    // it (a follower acknowledged the entry before writing it, and died).
    ev.push(Event::history(3, 700 * MS, vec![(2, 1), (4, 3)]));
    let f = fails(&ev, &w, Rule::AppliedHistory);
    let text = f.to_string();
    assert!(text.contains("record of term 3"), "{text}");
    assert!(text.contains("a committed entry was lost"), "{text}");
    assert!(text.contains("records=[2:n1 4:n3]"), "{text}");
}

#[test]
fn two_leaders_recorded_for_one_term_fail_rule_f() {
    let (mut ev, w) = healthy();
    ev.push(Event::history(3, 700 * MS, vec![(2, 1), (3, 3)]));
    let f = fails(&ev, &w, Rule::AppliedHistory);
    assert!(f.to_string().contains("term 3: "), "{f}");
}

#[test]
fn a_history_whose_terms_do_not_rise_fails_rule_f() {
    let (mut ev, w) = healthy();
    ev.push(Event::history(3, 700 * MS, vec![(3, 2), (2, 1)]));
    fails(&ev, &w, Rule::AppliedHistory);
}

#[test]
fn lagging_and_retention_trimmed_histories_are_windows_of_one_sequence() {
    let (mut ev, w) = healthy();
    // n3 has not applied term 3 yet; later the oldest record is dropped (retention 1);
    // a third tenure follows. Every snapshot is a window of [2, 3, 5].
    ev.push(Event::history(3, 600 * MS, vec![(2, 1)]));
    ev.push(Event::history(3, 800 * MS, vec![(3, 2)]));
    ev.push(Event::history(2, 900 * MS, vec![(3, 2), (5, 1)]));
    ev.push(Event::history(1, 900 * MS, vec![(5, 1)]));
    let s = check(&ev, &w, &opts()).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(s.histories, 8);
    // An empty history (a node that applied nothing yet) overlaps nothing.
    ev.push(Event::history(3, 10 * MS, vec![]));
    check(&ev, &w, &opts()).unwrap_or_else(|f| panic!("{f}"));
    // But a window with a hole is not one.
    ev.push(Event::history(2, 950 * MS, vec![(2, 1), (5, 1)]));
    fails(&ev, &w, Rule::AppliedHistory);
}

#[test]
fn worker_json_lines_parse() {
    let text = r#"
{"event":"started","node":1,"mono_ns":5,"pid":1}
not json
{"event":"leader_changed","node":1,"mono_ns":7,"term":2,"leader":1,"role":"leader"}
{"event":"lease_lost","node":1,"mono_ns":9,"term":2,"token":2,"reason":"expired","ended_ns":8}
{"event":"fence_rejected","node":1,"mono_ns":10,"term":2,"token":2,"highest":3}
{"event":"history","node":2,"mono_ns":11,"records":[[2,1],[3,2]]}
"#;
    let ev = events_from_json(text);
    assert_eq!(ev.len(), 5);
    assert_eq!(ev[4], Event::history(2, 11, vec![(2, 1), (3, 2)]));
    assert_eq!(ev[1].kind, Kind::LeaderChanged);
    assert_eq!(ev[1].leader, Some(1));
    assert_eq!(ev[2].ended_ns, Some(8));
    assert_eq!(ev[3].highest, Some(3));
}

#[test]
fn timeline_is_relative_to_the_first_event_one_line_each() {
    let (mut ev, w) = healthy();
    ev.push(Event::acquired(3, 431 * MS, 3, 600 * MS));
    let f = check(&ev, &w, &opts()).unwrap_err();
    let text = f.to_string();
    assert!(text.contains("+431.000ms  n3  lease_acquired"), "{text}");
    assert!(text.contains("+0.000ms"), "{text}");
}

#[test]
#[should_panic(expected = "violation")]
fn a_failure_prints_its_timeline() {
    let (mut ev, w) = healthy();
    ev.push(Event::confirmed(1, 425 * MS, 426 * MS, 2, 500 * MS));
    if let Err(f) = check(&ev, &w, &opts()) {
        panic!("{f}");
    }
}

/// The healthy history with n1's lease of term 2 running until 450 ms, past n2's
/// acquisition at 430 ms (rule (d)), and a `LeaseBased`-style confirm of term 2 that
/// began after the majority moved on (rule (c)).
fn overlapping() -> (Vec<Event>, Vec<Write>) {
    let (mut ev, w) = healthy();
    for e in &mut ev {
        if e.kind == Kind::LeaseLost {
            e.ended_ns = Some(450 * MS);
        }
    }
    ev.push(Event::confirmed(1, 425 * MS, 426 * MS, 2, 450 * MS));
    (ev, w)
}

fn step(node: u64, at: u64) -> ClockFault {
    ClockFault {
        node,
        from_ns: at * MS,
        to_ns: at * MS,
        kind: ClockFaultKind::Jump,
    }
}

fn stall(node: u64, from: u64, to: u64, counted_by_boottime: bool) -> ClockFault {
    ClockFault {
        node,
        from_ns: from * MS,
        to_ns: to * MS,
        kind: ClockFaultKind::Stall {
            counted_by_boottime,
        },
    }
}

/// A step of the lease holder's clock, a suspend of anyone, and a pause no clock counts
/// of a node without a lease keep what the lease assumes: rules (c) and (d) are still
/// judged, and still fail this history.
#[test]
fn clock_faults_the_lease_allows_leave_every_rule_judged() {
    let (ev, w) = overlapping();
    let faults = vec![
        step(1, 200),
        stall(1, 200, 300, true),
        stall(3, 200, 300, false),
        // A step that ends the holder's lease: it held the lease until then.
        step(2, 700),
    ];
    let f = check(&ev, &w, &opts().clock_faults(faults, true)).expect_err("must fail");
    assert!(f.broke(Rule::Overlap) && f.broke(Rule::StaleConfirm), "{f}");
    assert_eq!(f.summary.clock_rules_skipped, None);
}

/// A step of a voter's clock (n3 holds no lease) or a pause no clock counts of a lease
/// holder (n1) is outside what the lease assumes: rule (d), and rule (c) for
/// `LeaseBased` confirms, are not judged, and the summary says why. `Safe` confirms
/// are judged whatever the clocks did.
#[test]
fn clock_faults_outside_what_the_lease_assumes_leave_the_clock_rules_unjudged() {
    let (ev, w) = overlapping();
    for (fault, why) in [
        (step(3, 200), "n3's clock stepped forward"),
        (stall(1, 200, 300, false), "n1's clocks stood still"),
    ] {
        let lease_based = opts().clock_faults(vec![fault.clone()], true);
        let s = check(&ev, &w, &lease_based).unwrap_or_else(|f| panic!("{f}"));
        let skipped = s.clock_rules_skipped.expect("skipped");
        assert!(skipped.contains(why), "{skipped}");
        let safe = opts().clock_faults(vec![fault], false);
        let f = check(&ev, &w, &safe).expect_err("a Safe confirm is judged");
        assert!(
            f.broke(Rule::StaleConfirm) && !f.broke(Rule::Overlap),
            "{f}"
        );
    }
    // The same pause after n1's lease ended (healthy history: at 320 ms) is harmless.
    let (ev, w) = healthy();
    let s = check(
        &ev,
        &w,
        &opts().clock_faults(vec![stall(1, 330, 400, false)], true),
    )
    .unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(s.clock_rules_skipped, None);
}

// Named elections (docs/design.md, section 11): rules (a)–(f) per election, (g)–(i)
// across them.

/// The first token of election `id`'s term `k` (its founding term is `id << 40`).
fn tok(id: u32, k: u64) -> u64 {
    (u64::from(id) << 40) + k
}

fn named(ev: Event, name: &str, id: u32) -> Event {
    ev.in_election(name, id)
}

fn fence_write(seq: u64, token: u64, node: u64, at: u64) -> Write {
    Write {
        seq,
        token,
        node,
        at_ns: Some(at),
    }
}

/// The healthy root history, and beside it: election "a" (id 1) led by n2, then removed
/// (n2's lease lost with reason `removed`) and created again as id 3, led by n3 with
/// higher tokens; election "b" (id 2) led by n1 in a lease that overlaps "a"'s and the
/// root's in time. One fence per name.
fn healthy_named() -> (Vec<Event>, Vec<Write>, Options) {
    let (mut ev, w) = healthy();
    let (a1, b2, a3) = (tok(1, 1), tok(2, 1), tok(3, 1));
    ev.extend([
        named(Event::new(0, 101 * MS, Kind::ElectionCreated), "a", 1),
        named(Event::new(0, 102 * MS, Kind::ElectionCreated), "b", 2),
        named(
            Event::term_changed(2, 120 * MS, a1, Some(2), "leader"),
            "a",
            1,
        ),
        named(
            Event::term_changed(1, 120 * MS, a1, Some(2), "follower"),
            "a",
            1,
        ),
        named(Event::acquired(2, 130 * MS, a1, 300 * MS), "a", 1),
        named(
            Event::confirmed(2, 140 * MS, 141 * MS, a1, 310 * MS),
            "a",
            1,
        ),
        named(
            Event::term_changed(1, 125 * MS, b2, Some(1), "leader"),
            "b",
            2,
        ),
        named(Event::acquired(1, 135 * MS, b2, 300 * MS), "b", 2),
        named(
            Event::confirmed(1, 520 * MS, 521 * MS, b2, 700 * MS),
            "b",
            2,
        ),
        named(Event::history(1, 522 * MS, vec![(b2, 1)]), "b", 2),
        named(Event::lost(2, 200 * MS, a1, 200 * MS, "removed"), "a", 1),
        named(Event::new(0, 201 * MS, Kind::ElectionRemoved), "a", 1),
        named(Event::new(0, 300 * MS, Kind::ElectionCreated), "a", 3),
        named(
            Event::term_changed(3, 320 * MS, a3, Some(3), "leader"),
            "a",
            3,
        ),
        named(Event::acquired(3, 330 * MS, a3, 600 * MS), "a", 3),
        named(
            Event::confirmed(3, 540 * MS, 542 * MS, a3, 700 * MS),
            "a",
            3,
        ),
    ]);
    let fences = [
        (
            "a".to_string(),
            vec![
                fence_write(1, a1, 2, 142 * MS),
                fence_write(2, a3, 3, 543 * MS),
            ],
        ),
        ("b".to_string(), vec![fence_write(1, b2, 1, 522 * MS)]),
    ];
    let o = opts()
        .fences(fences.into_iter().collect())
        .election_liveness(2, 500 * MS, 200 * MS)
        .election_liveness(3, 500 * MS, 200 * MS);
    (ev, w, o)
}

fn fails_with(ev: &[Event], w: &[Write], o: &Options, rule: Rule, names: &str) -> String {
    let f = check(ev, w, o).expect_err("the history must fail");
    assert!(f.broke(rule), "expected {rule}, got:\n{f}");
    let text = f.to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with(&rule.to_string()))
        .unwrap_or_else(|| panic!("no line of {rule}:\n{text}"))
        .to_string();
    assert!(line.contains(names), "{rule} names {names}: {line}");
    assert!(text.contains(">> "), "the timeline marks it:\n{text}");
    line
}

#[test]
fn named_elections_are_judged_each_by_itself_and_pass() {
    let (ev, w, o) = healthy_named();
    let s = check(&ev, &w, &o).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(s.elections, 3, "a (1), b (2), a again (3)");
    assert_eq!(s.elections_live, 2);
    assert_eq!(s.removals, 1);
    assert_eq!(s.writes, 2 + 3);
    assert_eq!(s.recovery_ns, Some(41 * MS), "the root's own lease");
}

#[test]
fn leases_of_different_elections_never_conflict_in_rules_a_to_d() {
    let (mut ev, w, o) = healthy_named();
    // n3 leads election "b" in a later term while n1 still holds b's lease: (d) in "b".
    let mut bad = ev.clone();
    bad.push(named(
        Event::acquired(3, 150 * MS, tok(2, 2), 300 * MS),
        "b",
        2,
    ));
    fails_with(&bad, &w, &o, Rule::Overlap, "election \"b\" (id 2)");
    // The same lease in election "c" (its own id, its own range) overlaps nothing: a
    // lease of one election and one of another never conflict, whatever their terms.
    ev.push(named(
        Event::acquired(3, 150 * MS, tok(4, 1), 300 * MS),
        "c",
        4,
    ));
    // n2 confirms "a" after a majority reported terms above a's in other elections: no (c).
    ev.push(named(
        Event::confirmed(2, 180 * MS, 181 * MS, tok(1, 1), 300 * MS),
        "a",
        1,
    ));
    check(&ev, &w, &o).unwrap_or_else(|f| panic!("{f}"));
}

#[test]
fn a_stale_confirm_is_judged_by_its_own_elections_terms() {
    let (mut ev, w, o) = healthy_named();
    // In "b", n2 and n3 move to b's next term; n1's confirm of b's first term begun after
    // that is stale (c), and named as b's.
    ev.extend([
        named(
            Event::term_changed(2, 530 * MS, tok(2, 2), None, "candidate"),
            "b",
            2,
        ),
        named(
            Event::term_changed(3, 530 * MS, tok(2, 2), None, "follower"),
            "b",
            2,
        ),
        named(
            Event::confirmed(1, 560 * MS, 561 * MS, tok(2, 1), 700 * MS),
            "b",
            2,
        ),
    ]);
    fails_with(&ev, &w, &o, Rule::StaleConfirm, "election \"b\" (id 2)");
}

#[test]
fn liveness_and_histories_are_per_election() {
    // A live election with no lease after the heal fails (e) by name, although the root
    // and the others have leases.
    let (ev, w, o) = healthy_named();
    let o2 = o.clone().election_liveness(1, 500 * MS, 200 * MS);
    fails_with(&ev, &w, &o2, Rule::Liveness, "election \"a\" (id 1)");
    // The root's liveness is not met by a named election's lease.
    let (root, _) = healthy();
    let mut only_named: Vec<Event> = root
        .into_iter()
        .filter(|e| !(e.at_ns >= 500 * MS && e.kind == Kind::LeaseConfirmed))
        .collect();
    only_named.push(named(
        Event::confirmed(3, 540 * MS, 542 * MS, tok(3, 1), 700 * MS),
        "a",
        3,
    ));
    only_named.push(named(
        Event::acquired(3, 330 * MS, tok(3, 1), 600 * MS),
        "a",
        3,
    ));
    let f = check(&only_named, &w, &opts()).expect_err("the root has no lease after the heal");
    assert!(f.broke(Rule::Liveness), "{f}");
    // Two elections' histories never have to agree with each other.
    let (mut ev, w, o) = healthy_named();
    ev.push(named(
        Event::history(2, 560 * MS, vec![(tok(3, 1), 3)]),
        "a",
        3,
    ));
    check(&ev, &w, &o).unwrap_or_else(|f| panic!("{f}"));
    // But one's do: "b"'s term recorded with two leaders.
    ev.push(named(
        Event::history(2, 570 * MS, vec![(tok(2, 1), 2)]),
        "b",
        2,
    ));
    fails_with(&ev, &w, &o, Rule::AppliedHistory, "election \"b\" (id 2)");
}

#[test]
fn a_token_outside_its_elections_range_fails_rule_g() {
    let (mut ev, w, o) = healthy_named();
    // n1's lease of "b" (id 2) carries a token of id 1's range.
    ev.push(named(
        Event::acquired(1, 600 * MS, tok(1, 7), 800 * MS),
        "b",
        2,
    ));
    fails_with(&ev, &w, &o, Rule::TokenOfElection, "election \"b\" (id 2)");
}

#[test]
fn a_fence_that_sees_another_elections_token_fails_rule_g() {
    let (ev, w, mut o) = healthy_named();
    // "b"'s token reaches "a"'s fence.
    o.fences
        .get_mut("a")
        .unwrap()
        .push(fence_write(3, tok(3, 5), 1, 600 * MS));
    let (ev2, w2, o2) = (ev.clone(), w.clone(), o.clone());
    check(&ev2, &w2, &o2).unwrap_or_else(|f| panic!("a's own later token is fine: {f}"));
    o.fences
        .get_mut("a")
        .unwrap()
        .push(fence_write(4, tok(4, 1), 1, 610 * MS));
    let line = fails_with(&ev, &w, &o, Rule::TokenOfElection, "the fence of \"a\"");
    assert!(line.contains("election id 4"), "{line}");
    // A named token at the root's fence, too.
    let (ev, mut w, o) = healthy_named();
    w.push(fence_write(3, tok(2, 1), 1, 600 * MS));
    fails_with(&ev, &w, &o, Rule::TokenOfElection, "the root fence");
}

#[test]
fn a_lease_used_after_its_removal_returned_fails_rule_h() {
    // A confirm.
    let (mut ev, w, o) = healthy_named();
    ev.push(named(
        Event::confirmed(2, 195 * MS, 202 * MS, tok(1, 1), 300 * MS),
        "a",
        1,
    ));
    fails_with(&ev, &w, &o, Rule::UsedAfterRemoval, "election \"a\" (id 1)");
    // A write its fence accepted.
    let (ev, w, mut o) = healthy_named();
    o.fences
        .get_mut("a")
        .unwrap()
        .insert(1, fence_write(2, tok(1, 1), 2, 250 * MS));
    o.fences.get_mut("a").unwrap()[2].seq = 3;
    let line = fails_with(&ev, &w, &o, Rule::UsedAfterRemoval, "election \"a\" (id 1)");
    assert!(line.contains("fence accepted"), "{line}");
    // A confirm that returned before the removal did is fine (healthy_named has one at
    // 141 ms, and the lease lost with reason "removed" at 200 ms).
}

#[test]
fn a_name_whose_new_incarnation_repeats_old_tokens_fails_rule_i() {
    // Elections founded at term 1 whatever their id (no term floor): the new "a" hands out
    // the old one's token 2 again.
    let (mut ev, w, o) = healthy_named();
    ev.retain(|e| e.election.as_deref() != Some("a") || e.kind == Kind::ElectionCreated);
    ev.extend([
        named(Event::acquired(2, 130 * MS, 2, 300 * MS), "a", 1),
        named(Event::new(0, 201 * MS, Kind::ElectionRemoved), "a", 1),
        named(Event::acquired(3, 330 * MS, 2, 600 * MS), "a", 3),
    ]);
    let mut o = o;
    o.fences.remove("a");
    o.election_liveness.remove(&3);
    let line = fails_with(&ev, &w, &o, Rule::Incarnations, "election \"a\"");
    assert!(line.contains("not above"), "{line}");
    // And ids that do not rise in creation order.
    let (mut ev, w, o) = healthy_named();
    for e in &mut ev {
        if e.election.as_deref() == Some("a") && e.election_id == 1 {
            e.at_ns += 400 * MS;
            if let Some(v) = e.valid_until_ns.as_mut() {
                *v += 400 * MS;
            }
        }
    }
    let mut o = o;
    o.fences.remove("a");
    let f = check(&ev, &w, &o).expect_err("ids fall");
    assert!(f.broke(Rule::Incarnations), "{f}");
    assert!(f.to_string().contains("ids must rise"), "{f}");
}

#[test]
fn a_named_event_that_names_no_incarnation_is_not_one_for_rule_i() {
    // A history read of "a" before it recorded anything carries no term, token or record:
    // its id is unknown (0). Later than the real incarnation, it is not a new one.
    let (mut ev, w, o) = healthy_named();
    ev.push(named(Event::new(2, 250 * MS, Kind::History), "a", 0));
    if let Err(f) = check(&ev, &w, &o) {
        assert!(!f.broke(Rule::Incarnations), "{f}");
    }
}

#[test]
fn a_lease_used_while_suspended_or_its_token_repeated_after_the_resume_fails_rule_j() {
    // "b" (id 2): n1 leased token b2 from 135 ms and confirms it at 520 ms.
    let b2 = tok(2, 1);
    let suspended = named(Event::new(0, 200 * MS, Kind::ElectionSuspended), "b", 2);
    let resumed = named(Event::new(0, 500 * MS, Kind::ElectionResumed), "b", 2);
    // Suspended at 200 ms and never resumed: the confirm at 520 ms used the lease.
    let (mut ev, w, o) = healthy_named();
    ev.push(suspended.clone());
    let line = fails_with(&ev, &w, &o, Rule::Suspension, "election \"b\" (id 2)");
    assert!(line.contains("before it was resumed"), "{line}");
    // Resumed at 500 ms: the confirm after it carries the token of before the suspension.
    let (mut ev, w, o) = healthy_named();
    ev.extend([suspended.clone(), resumed.clone()]);
    let line = fails_with(&ev, &w, &o, Rule::Suspension, "election \"b\" (id 2)");
    assert!(line.contains(&format!("token {b2}")), "{line}");
    assert!(line.contains("not above"), "{line}");
    // A new term after the resume passes, and the suspension is counted.
    let (mut ev, w, o) = healthy_named();
    ev.retain(|e| !(e.election.as_deref() == Some("b") && e.at_ns >= 500 * MS));
    let b3 = b2 + 1;
    ev.extend([
        suspended,
        resumed,
        named(Event::acquired(1, 510 * MS, b3, 700 * MS), "b", 2),
        named(Event::history(1, 522 * MS, vec![(b2, 1), (b3, 1)]), "b", 2),
    ]);
    let mut o = o;
    o.fences.get_mut("b").unwrap().clear();
    let s = check(&ev, &w, &o).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(s.suspensions, 1);
}
