//! The founding rules as operators meet them: real worker processes
//! (`tenure-worker`), started with the very command line they always run with.
//! Exit code 3 means "the data folder was refused; restarting on it will not help"
//! (`docs/design.md`, section 6; README, "Founding a group").

use std::time::Duration;

use tenure_harness::procs::Group;

const LONG: Duration = Duration::from_secs(30);

/// A supervisor restarts a worker whose folder was lost, with its unit file's command
/// line (`--found` included). It must not come back as a voter: it exits with code 3
/// and says it lost its data, every time.
#[test]
fn a_worker_that_lost_its_folder_exits_3_with_its_usual_command_line() {
    let mut g = Group::start(3, None, &[]);
    let (leader, term) = g.leaseholder(LONG);
    let victim = *g.ids.iter().find(|id| **id != leader).unwrap();
    // Let the victim acknowledge something (the leader's first entry).
    g.wait_event("the victim follows the leader", LONG, |e| {
        e.node == victim && e.event == "leader_changed" && e.v["leader"] == leader
    });
    g.kill(victim);
    std::fs::remove_dir_all(g.dir.path().join(format!("data-{victim}"))).unwrap();
    for attempt in 1..=2 {
        g.spawn(victim);
        let code = g.wait_exit(victim, LONG);
        assert_eq!(code, Some(3), "attempt {attempt}: exit code");
        let stopped = g.wait_event("the worker says why it stopped", LONG, |e| {
            e.node == victim
                && e.event == "stopped"
                && e.v["error"]
                    .as_str()
                    .is_some_and(|s| s.contains("lost its data folder"))
        });
        assert!(
            stopped.v["error"].as_str().unwrap().contains("replace"),
            "the error says what to do: {}",
            stopped.v
        );
    }
    // The group was not disturbed: still the same leader and term.
    let (l2, t2) = g.leaseholder(LONG);
    assert_eq!((l2, t2), (leader, term));
    g.stop();
}

#[test]
fn a_worker_on_a_folder_without_current_exits_3_and_writes_nothing() {
    let mut g = Group::start(3, None, &[]);
    let (leader, _) = g.leaseholder(LONG);
    let victim = *g.ids.iter().find(|id| **id != leader).unwrap();
    g.kill(victim);
    let data = g.dir.path().join(format!("data-{victim}"));
    std::fs::remove_file(data.join("CURRENT")).unwrap();
    for _ in 0..2 {
        g.spawn(victim);
        assert_eq!(g.wait_exit(victim, LONG), Some(3));
        assert!(
            !data.join("CURRENT").exists(),
            "the failed start wrote CURRENT"
        );
    }
    let failed = g.wait_event("start_failed naming the folder", LONG, |e| {
        e.node == victim && e.event == "start_failed"
    });
    assert_eq!(failed.v["store_refused"], "corrupt", "{}", failed.v);
    assert!(
        failed.v["error"].as_str().unwrap().contains("CURRENT"),
        "{}",
        failed.v
    );
    g.stop();
}
