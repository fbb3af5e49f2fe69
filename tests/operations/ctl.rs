//! The operator tool driving real worker processes started with `--admin`: what an
//! operator types, what comes back, and the exit codes. It runs `tenure-ctl`, the crate's
//! binary (`src/bin/tenure-ctl`), beside the worker.

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tenure_harness::kit::binary::{self, output};
use tenure_harness::procs::Group;

const LONG: Duration = Duration::from_secs(20);

/// `tenure-ctl`, next to the worker binary (built by cargo when stale).
fn ctl_binary() -> PathBuf {
    binary::ctl()
}

struct Ctl {
    certs: PathBuf,
    addrs: String,
}

impl Ctl {
    fn run(&self, addrs: &str, args: &[&str]) -> Output {
        std::process::Command::new(ctl_binary())
            .arg("--certs")
            .arg(&self.certs)
            .args(["--addr", addrs])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run ctl")
    }

    /// Runs ctl against every node; returns (exit code, stdout, stderr).
    fn all(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.run(&self.addrs, args);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `status --json`: each node's (id, role, leader) that answered.
    fn statuses(&self) -> Vec<(u64, String, Option<u64>)> {
        let (code, out, err) = self.all(&["--json", "status"]);
        assert_eq!(code, 0, "status failed: {err}");
        let v: Value = serde_json::from_str(out.trim()).expect("status --json is JSON");
        v["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .filter_map(|n| {
                let s = n.get("status")?;
                Some((
                    s["id"].as_u64()?,
                    s["role"].as_str()?.to_string(),
                    s["leader"].as_u64(),
                ))
            })
            .collect()
    }

    /// Waits until every node answers and all name the same leader, which leads.
    fn agreed_leader(&self) -> u64 {
        let deadline = Instant::now() + LONG;
        loop {
            let s = self.statuses();
            if s.len() == 3 {
                if let Some(l) = s[0].2 {
                    if s.iter().all(|(id, role, leader)| {
                        *leader == Some(l) && ((*id == l) == (role == "leader"))
                    }) {
                        return l;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no agreed leader: {s:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Runs ctl with exactly `args` (no certificates, no addresses); (exit code, stdout,
/// stderr).
fn ctl_bare(args: &[&str]) -> (i32, String, String) {
    output(&ctl_binary(), args)
}

#[test]
fn ctl_usage_errors_name_the_flag_and_exit_2() {
    // Help: on stdout, exit code 0, every command listed.
    let (code, out, _) = ctl_bare(&["--help"]);
    assert_eq!(code, 0);
    for command in [
        "status",
        "history",
        "transfer",
        "drain",
        "undrain",
        "members",
        "elections",
        "completions",
    ] {
        assert!(out.contains(&format!("\n  {command} ")), "{command}: {out}");
    }
    assert!(
        out.contains("--timeout <SECS>") && out.contains("Exit codes"),
        "{out}"
    );
    let (code, out, _) = ctl_bare(&["members", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("replace") && out.contains("promote"), "{out}");
    let (code, out, _) = ctl_bare(&["elections", "--help"]);
    assert_eq!(code, 0);
    for command in ["list", "create", "remove", "suspend", "resume", "transfer"] {
        assert!(out.contains(&format!("\n  {command} ")), "{command}: {out}");
    }
    let (code, out, _) = ctl_bare(&["status", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--names"), "{out}");

    let d = "--certs=/nonexistent";
    let a = "--addr=127.0.0.1:9";
    for (args, names) in [
        (
            &[d, a, "--timeout", "0", "status"][..],
            "'--timeout <SECS>'",
        ),
        (&[d, a, "--timeout", "soon", "status"], "'--timeout <SECS>'"),
        (
            &[d, "--addr", "localhost", "status"],
            "'--addr <ADDR[,ADDR...]>'",
        ),
        (&[d, a, "--frobnicate", "status"], "'--frobnicate'"),
        (&[d, a, "transfer", "--to", "0"], "'--to <ID>'"),
        (&[d, a, "drain", "x"], "'<ID>'"),
        (&[d, a, "members", "add", "4", "nowhere"], "'<ADDR>'"),
        (&[d, a, "elect"], "'elect'"),
        (&[d, a, "elections", "create"], "<NAME>"),
        (
            &[d, a, "elections", "create", "x", "--priority", "300"],
            "'--priority <P>'",
        ),
        (
            &[d, a, "elections", "create", "x", "--affinity", "1,0"],
            "'--affinity <ID[,ID...]>'",
        ),
        (&[d, a, "elections", "transfer"], "<NAME>"),
        (
            &[d, a, "elections", "transfer", "x", "--to", "y"],
            "'--to <ID>'",
        ),
        (&[d, a, "elections", "rename"], "'rename'"),
        (&[a, "status"], "--certs DIR is required"),
        (&[d, "status"], "--addr is required"),
        (&[d, a], "Usage: tenure-ctl"),
    ] {
        let (code, out, err) = ctl_bare(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(names), "{args:?} should name {names}: {err}");
    }
}

#[test]
fn ctl_prints_shell_completions_without_a_group() {
    for (shell, marker) in [
        ("bash", "complete -F _tenure__ctl"),
        ("zsh", "#compdef tenure-ctl"),
        ("fish", "complete -c tenure-ctl"),
    ] {
        let (code, out, err) = ctl_bare(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(out.contains(marker), "{shell}: {out}");
        // The script completes the commands and their flags (fish spells `-l timeout`).
        for word in ["transfer", "members", "replace", "timeout", "certs"] {
            assert!(out.contains(word), "{shell} script lacks {word}");
        }
    }
    let (code, _, err) = ctl_bare(&["completions", "tcsh"]);
    assert_eq!(code, 2);
    assert!(err.contains("'tcsh'") && err.contains("bash"), "{err}");
}

/// `restore-plan` makes the plan of a backup file without asking any node; a worker given
/// the backup where the plan belongs, or a plan of another group than its `--found`, says
/// so and exits 2 before it starts.
#[test]
fn ctl_makes_a_restore_plan_that_workers_found_from_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let origin = tenure::GroupId::random();
    let backup = tenure_harness::backup_taken_now(origin, 41, vec![1]);
    let backup_file = dir.path().join("backup.json");
    std::fs::write(&backup_file, backup.to_json()).unwrap();
    let plan_file = dir.path().join("plan.json");
    let path = |p: &PathBuf| p.to_str().unwrap().to_string();
    let (code, out, err) = ctl_bare(&[
        "--json",
        "restore-plan",
        "--backup",
        &path(&backup_file),
        "--out",
        &path(&plan_file),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).expect("restore-plan --json is JSON");
    let plan =
        tenure::backup::RestorePlan::from_json(&std::fs::read_to_string(&plan_file).unwrap())
            .expect("the plan reads back");
    assert_eq!(v["group"], plan.group.to_string());
    assert_eq!(plan.origin, origin);
    assert!(plan.root_floor() > 41 + tenure::backup::RESTORE_MARGIN - 1);
    // Text: the new group and how to start from it.
    let (code, out, err) = ctl_bare(&[
        "restore-plan",
        "--backup",
        &path(&backup_file),
        "--out",
        &path(&dir.path().join("plan2.json")),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("new group") && out.contains("--restore"),
        "{out}"
    );
    // A plan is not a backup; a missing file is named.
    let (code, _, err) = ctl_bare(&["restore-plan", "--backup", &path(&plan_file), "--out", "x"]);
    assert_eq!(code, 1);
    assert!(err.contains("not a tenure backup"), "{err}");
    let (code, _, err) = ctl_bare(&["restore-plan", "--backup", "/nonexistent", "--out", "x"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent"), "{err}");

    // The worker: a backup where the plan belongs, a plan of another group.
    let worker = tenure_harness::kit::binary::worker();
    let base = tenure_harness::kit::command::WHOLE_ARGS;
    let (backup_arg, plan_arg) = (path(&backup_file), path(&plan_file));
    let (code, _, err) = output(&worker, &[&base[..], &["--restore", &backup_arg]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("not a restore plan") && err.contains("restore-plan"),
        "{err}"
    );
    let other = tenure::GroupId::random().to_string();
    let args = [&base[..], &["--restore", &plan_arg, "--found", &other]].concat();
    let (code, _, err) = output(&worker, &args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&plan.group.to_string()), "{err}");
}

#[test]
fn ctl_drives_worker_processes_through_their_admin_endpoints() {
    let mut g = Group::start(3, None, &["--admin", "127.0.0.1:0"]);
    let mut admin = Vec::new();
    for id in 1..=3u64 {
        let e = g.wait_event(&format!("node {id} started"), LONG, |e| {
            e.node == id && e.event == "started"
        });
        admin.push(
            e.v["admin"]
                .as_str()
                .expect("admin address in started")
                .to_string(),
        );
    }
    let ctl = Ctl {
        certs: g.dir.path().join("certs"),
        addrs: admin.join(","),
    };

    let leader = ctl.agreed_leader();
    let (code, out, err) = ctl.all(&["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("node {leader} (")) && out.contains("leader itself"),
        "{out}"
    );
    assert!(out.contains("members (as node"), "{out}");

    // Transfer, found the leader among the addresses.
    let target = (1..=3).find(|id| *id != leader).unwrap();
    let (code, out, err) = ctl.all(&["transfer", "--to", &target.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("leadership moved to node {target}")),
        "{out}"
    );
    assert_eq!(ctl.agreed_leader(), target);

    // The history shows the handover.
    let (code, out, err) = ctl.all(&["history"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("handover"), "{out}");

    // Refusals: a clear message on stderr and exit code 1.
    let (code, _, err) = ctl.all(&["members", "remove", "9"]);
    assert_eq!(code, 1);
    assert!(err.contains("node 9 is not a member"), "{err}");
    let follower_admin = &admin[(leader as usize) - 1];
    let follower = leader; // the old leader follows now
    let out = ctl.run(follower_admin, &["drain", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "node {follower} is not the leader; node {target} leads"
        )),
        "{err}"
    );
    let (code, out, _) = ctl.all(&["--json", "members", "promote", "9"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(out.trim()).expect("refusal as JSON");
    assert!(v["error"]["kind"].is_string(), "{v}");

    // The raft port is not the admin port, and says so.
    let out = ctl.run(&g.addrs[&1], &["status"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout.contains("raft port"), "{stdout}");

    // Bad arguments: exit code 2 with the usage, naming what is missing.
    let (code, _, err) = ctl.all(&["members", "add", "4"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("Usage: tenure-ctl members add <ID> <ADDR>"),
        "{err}"
    );
    assert!(
        err.contains("required arguments were not provided"),
        "{err}"
    );

    // Grow the group: node 4 starts joining, ctl adds it as a learner and promotes it
    // once it has caught up (until then: "behind", exit code 1).
    let certs = g.dir.path().join("certs");
    tenure::transport::tls::write_node_cert(&certs, 4).unwrap();
    let a4 = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    g.addrs.insert(4, a4.clone());
    g.extra.push("--join".into());
    g.spawn(4);
    let (code, out, err) = ctl.all(&["members", "add", "4", &a4]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("node 4 added as a learner"), "{out}");
    assert!(out.contains("learners 4"), "{out}");
    let deadline = Instant::now() + LONG;
    let out = loop {
        let (code, out, err) = ctl.all(&["members", "promote", "4"]);
        if code == 0 {
            break out;
        }
        assert!(
            err.contains("behind"),
            "promote refused for another reason: {err}"
        );
        assert!(
            Instant::now() < deadline,
            "learner 4 never caught up: {err}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(out.contains("node 4 is a voter now"), "{out}");
    assert!(out.contains("voters 1 2 3 4"), "{out}");
    g.stop();
}

/// One stopped node, its admin address still listed: a leader-only command goes to the
/// leader as soon as it answers, instead of waiting for the stopped node's handshake
/// (`CONNECT_TIMEOUT`, 10 s). Then the leader itself is stopped: ctl keeps asking the
/// others until one of them has been elected, and acts there.
#[test]
fn leader_only_commands_answer_while_a_node_is_stopped() {
    let mut g = Group::start(3, None, &["--admin", "127.0.0.1:0"]);
    let mut admin = Vec::new();
    for id in 1..=3u64 {
        let e = g.wait_event(&format!("node {id} started"), LONG, |e| {
            e.node == id && e.event == "started"
        });
        admin.push(e.v["admin"].as_str().expect("admin address").to_string());
    }
    let ctl = Ctl {
        certs: g.dir.path().join("certs"),
        addrs: admin.join(","),
    };
    let leader = ctl.agreed_leader();
    // --addr adds up over repeats and skips empty parts, as before clap.
    let split = format!("{},,{},", admin[0], admin[1]);
    let out = ctl.run(&split, &["--addr", &admin[2], "--json", "status"]);
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).expect("status --json is JSON");
    assert_eq!(v["nodes"].as_array().map(Vec::len), Some(3), "{v}");

    let mut followers = (1..=3).filter(|id| *id != leader);
    let (stopped, target) = (followers.next().unwrap(), followers.next().unwrap());

    // A stopped follower: the leader answers at once, the transfer goes through.
    g.signal(stopped, libc::SIGSTOP);
    let timeout = Duration::from_secs(10);
    let secs = timeout.as_secs().to_string();
    let began = Instant::now();
    let (code, out, err) = ctl.all(&["--timeout", &secs, "transfer", "--to", &target.to_string()]);
    let took = began.elapsed();
    eprintln!("transfer with node {stopped} stopped took {took:?}");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("leadership moved to node {target}")),
        "{out}"
    );
    assert!(
        took < timeout,
        "transfer took {took:?}: it waited for the stopped node instead of acting when the leader answered"
    );

    // The history, too, comes from the leader without waiting for the stopped node.
    let began = Instant::now();
    let (code, out, err) = ctl.all(&["--timeout", &secs, "history"]);
    let took = began.elapsed();
    eprintln!("history with node {stopped} stopped took {took:?}");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("as node {target} has applied it")),
        "{out}"
    );
    assert!(out.contains("handover"), "{out}");
    assert!(took < timeout, "history took {took:?}");

    // Now the leader stops. The others still name it for an election timeout, then elect
    // one of themselves; ctl finds that one and drains the stopped node there.
    g.signal(stopped, libc::SIGCONT);
    assert_eq!(ctl.agreed_leader(), target);
    g.signal(target, libc::SIGSTOP);
    let began = Instant::now();
    let (code, out, err) = ctl.all(&["--timeout", &secs, "--json", "drain", &target.to_string()]);
    let took = began.elapsed();
    eprintln!("drain with the leader (node {target}) stopped took {took:?}");
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).expect("drain --json is JSON");
    let by = v["node"].as_u64().expect("node");
    assert!(by == leader || by == stopped, "drained by node {by}: {v}");
    assert_eq!(
        v["ok"]["membership"]["drained"],
        serde_json::json!([target]),
        "{v}"
    );
    assert!(took < timeout, "drain took {took:?}");

    // Two of three stopped: no leader can answer, so ctl gives up at its timeout and says
    // who did not answer.
    g.signal(by, libc::SIGSTOP);
    let (code, _, err) = ctl.all(&["--timeout", "2", "undrain", &target.to_string()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no node among 3 reported itself leader within 2 s")
            && err.contains("no answer yet from"),
        "{err}"
    );
    g.stop();
}

/// One row of `elections list --json`: (name, id, leader, term).
type Listed = (String, u64, Option<u64>, u64);

impl Ctl {
    /// `elections list --json`: (name, id, leader, term) of each election.
    fn elections(&self) -> Vec<Listed> {
        let (code, out, err) = self.all(&["--json", "elections", "list"]);
        assert_eq!(code, 0, "elections list failed: {err}");
        let v: Value = serde_json::from_str(out.trim()).expect("elections list --json is JSON");
        v["elections"]
            .as_array()
            .unwrap_or_else(|| panic!("no elections in {v}"))
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().expect("name").to_string(),
                    e["id"].as_u64().expect("id"),
                    e["leader"].as_u64(),
                    e["term"].as_u64().expect("term"),
                )
            })
            .collect()
    }

    /// Waits until the balancer is done: every election led by a different node, and
    /// `elections list` unchanged over more than the balancer's cooldown (2 s). Then the
    /// placement stays put while the nodes stay up (a balanced group moves nothing).
    fn settled(&self) -> Vec<Listed> {
        let deadline = Instant::now() + LONG;
        let mut since: Option<(Instant, Vec<Listed>)> = None;
        loop {
            let now = self.elections();
            let leaders: std::collections::BTreeSet<_> = now.iter().map(|e| e.2).collect();
            let spread = now.iter().all(|e| e.2.is_some()) && leaders.len() == now.len();
            match &since {
                Some((t, seen)) if spread && *seen == now => {
                    if t.elapsed() > Duration::from_millis(2500) {
                        return now;
                    }
                }
                _ => since = spread.then(|| (Instant::now(), now.clone())),
            }
            assert!(
                Instant::now() < deadline,
                "the elections did not settle on distinct leaders: {now:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `elections list` shows election `name` led, by a node `ok` accepts,
    /// and that node's `status` says it leads it with a lease; (leader, term).
    fn named_leader(&self, name: &str, ok: impl Fn(u64) -> bool) -> (u64, u64) {
        let deadline = Instant::now() + LONG;
        let mut last_status = String::new();
        loop {
            let listed = self.elections();
            let led = listed
                .iter()
                .find(|(n, ..)| n == name)
                .and_then(|(_, _, l, t)| Some(((*l)?, *t)))
                .filter(|(l, _)| ok(*l));
            if let Some((leader, term)) = led {
                let (code, out, err) = self.all(&["--json", "status"]);
                assert_eq!(code, 0, "{err}");
                let v: Value = serde_json::from_str(out.trim()).expect("status --json");
                let holds = v["nodes"].as_array().expect("nodes").iter().any(|n| {
                    n["status"]["id"].as_u64() == Some(leader)
                        && n["leaderships"]["led"].as_array().is_some_and(|led| {
                            led.iter().any(|e| {
                                e["name"] == name
                                    && e["term"].as_u64() == Some(term)
                                    && e["leased"] == true
                            })
                        })
                });
                if holds {
                    return (leader, term);
                }
                last_status = out;
            }
            assert!(
                Instant::now() < deadline,
                "no leased leader of {name}: {listed:?}; the nodes' status: {last_status}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Named elections through ctl against worker processes: create, list, status, transfer
/// and remove, where each command goes, what it prints and its exit code.
#[test]
fn ctl_creates_lists_transfers_and_removes_named_elections() {
    let mut g = Group::start(3, None, &["--admin", "127.0.0.1:0"]);
    let mut admin = Vec::new();
    for id in 1..=3u64 {
        let e = g.wait_event(&format!("node {id} started"), LONG, |e| {
            e.node == id && e.event == "started"
        });
        admin.push(e.v["admin"].as_str().expect("admin address").to_string());
    }
    let ctl = Ctl {
        certs: g.dir.path().join("certs"),
        addrs: admin.join(","),
    };
    let leader = ctl.agreed_leader();
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let follower_admin = &admin[(follower as usize) - 1];

    // An empty catalog, and status as before: no line about named elections yet.
    let (code, out, err) = ctl.all(&["elections", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "named elections (catalog as node {leader} has applied it): 0"
        )) && out.contains("(none)"),
        "{out}"
    );
    let (code, out, err) = ctl.all(&["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("named elections"), "{out}");

    // Create goes to the group's leader, found among the addresses.
    let (code, out, err) = ctl.all(&[
        "elections",
        "create",
        "jobs",
        "--affinity",
        "2,1",
        "--priority",
        "7",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "election jobs created: id 1, priority 7, affinity 2 1 (by leader node {leader})"
        )),
        "{out}"
    );
    let (code, out, err) = ctl.all(&["--json", "elections", "create", "mail"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).expect("create --json is JSON");
    assert_eq!(v["node"].as_u64(), Some(leader), "{v}");
    assert_eq!(v["ok"]["election_created"]["id"].as_u64(), Some(2), "{v}");
    assert_eq!(
        v["ok"]["election_created"]["options"]["priority"].as_u64(),
        Some(128),
        "{v}"
    );

    // Refusals: exit code 1 and a sentence saying why.
    let (code, _, err) = ctl.all(&["elections", "create", "jobs"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("an election named \"jobs\" exists already"),
        "{err}"
    );
    let (code, _, err) = ctl.all(&["elections", "create", "no/slash"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("invalid election name \"no/slash\""), "{err}");
    // Given only a follower, the refusal names the leader and says to give its address.
    let out = ctl.run(follower_admin, &["elections", "create", "other"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "create election \"other\": refused by node {follower}: node {follower} is not the leader; node {leader} leads"
        )) && err.contains(&format!("give node {leader}'s admin address")),
        "{err}"
    );

    // List: a table with each election's leader and term. The balancer first takes jobs
    // to node 2 (its affinity) and spreads the two: the figures are read once it is done.
    // Two distinct leaders can hold still for a while before it takes jobs over (one
    // run of two here: jobs stayed on node 1 through the 2.5 s `settled` waits), so wait
    // for jobs on node 2 first, then for the spread to settle.
    ctl.named_leader("jobs", |l| l == 2);
    let placed = ctl.settled();
    let (jl, jt) = ctl.named_leader("jobs", |_| true);
    let (ml, mt) = ctl.named_leader("mail", |_| true);
    assert_eq!(jl, 2, "jobs follows its affinity: {placed:?}");
    assert_eq!(tenure::election::election_of_term(jt), 1, "term {jt}");
    let (code, out, err) = ctl.all(&["elections", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("): 2\n"), "{out}");
    assert!(
        out.lines().any(|l| l.contains("name")
            && l.contains("leader")
            && l.contains("term")
            && l.contains("affinity")),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("jobs "))
        .unwrap_or_else(|| panic!("no row of jobs: {out}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cols[..5],
        ["jobs", "1", &jl.to_string(), &jt.to_string(), "7"],
        "{row}"
    );
    assert_eq!(cols[5..], ["2", "1"], "{row}");

    // Status keeps its lines and adds each node's leaderships.
    let (code, out, err) = ctl.all(&["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("leader itself") && out.contains("members (as node"),
        "{out}"
    );
    assert_eq!(out.matches("  named elections: leads ").count(), 3, "{out}");
    assert!(out.contains("jobs (term "), "{out}");
    let jobs_line = format!("jobs (term {jt})");
    let block = out
        .split("\nnode ")
        .find(|b| b.contains(&jobs_line))
        .unwrap_or_else(|| panic!("nobody shows {jobs_line}: {out}"));
    assert!(
        block.starts_with(&format!("{jl} (")) || block.starts_with(&format!("node {jl} (")),
        "{block}"
    );

    // Transfer goes to the election's leader, found from the nodes' leaderships. Mail
    // (no affinity) moves to the node that leads nothing, so the group stays balanced
    // and the balancer leaves it there.
    let target = (1..=3).find(|id| *id != jl && *id != ml).unwrap();
    let (code, out, err) = ctl.all(&["elections", "transfer", "mail", "--to", &target.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "leadership of election mail moved to node {target}"
        )),
        "{out}"
    );
    let (now, term) = ctl.named_leader("mail", |l| l == target);
    assert_eq!(now, target);
    assert!(term > mt, "term {term} after {mt}");
    // Given only a node that does not lead it, the refusal names the one that does.
    let other = (1..=3).find(|id| *id != target).unwrap();
    let out = ctl.run(
        &admin[(other as usize) - 1],
        &["elections", "transfer", "mail"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "node {other} does not lead election \"mail\"; node {target} leads it"
        )) && err.contains(&format!("give node {target}'s admin address")),
        "{err}"
    );
    // An unknown election says so, and where to look.
    let (code, out, err) = ctl.all(&["elections", "transfer", "nope"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("no election named \"nope\"") && err.contains("`elections list`"),
        "{err}"
    );
    let (code, out, _) = ctl.all(&["--json", "elections", "transfer", "nope"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(out.trim()).expect("refusal as JSON");
    assert_eq!(v["error"]["kind"], "unknown_election", "{v}");

    // A stopped node that does not lead it does not hold the transfer up: ctl asks the
    // nodes that answered instead of waiting out the connect timeout for the stopped one
    // (it waited 5 s, and with a shorter --timeout than that ran out of time).
    let stopped = (1..=3).find(|id| *id != target).unwrap();
    let to = (1..=3).find(|id| *id != target && *id != stopped).unwrap();
    g.signal(stopped, libc::SIGSTOP);
    let timeout = Duration::from_secs(4);
    let secs = timeout.as_secs().to_string();
    let began = Instant::now();
    let (code, out, err) = ctl.all(&[
        "--timeout",
        &secs,
        "elections",
        "transfer",
        "mail",
        "--to",
        &to.to_string(),
    ]);
    let took = began.elapsed();
    eprintln!("elections transfer with node {stopped} stopped took {took:?}");
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("leadership of election mail moved to node {to}")),
        "{out}"
    );
    assert!(
        took < timeout,
        "elections transfer took {took:?}: it waited for the stopped node"
    );
    g.signal(stopped, libc::SIGCONT);

    // Suspend and resume, at the group's leader: the catalog and each node's status say
    // so meanwhile.
    let (code, out, err) = ctl.all(&["elections", "suspend", "jobs"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("election jobs suspended: no lease"), "{out}");
    let (code, out, err) = ctl.all(&["elections", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1 suspended") && out.contains("SUSPENDED"),
        "{out}"
    );
    let (code, out, err) = ctl.all(&["--json", "elections", "list"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let jobs = v["elections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "jobs");
    assert_eq!(
        jobs.map(|e| e["suspended"].clone()),
        Some(Value::Bool(true)),
        "{v}"
    );
    let deadline = Instant::now() + LONG;
    loop {
        let (_, out, _) = ctl.all(&["status"]);
        if out.matches(", 1 suspended").count() == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "status does not show the suspension: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, out, err) = ctl.all(&["elections", "resume", "jobs"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("election jobs resumed: its next lease is in a new term"),
        "{out}"
    );
    let (code, _, err) = ctl.all(&["elections", "suspend", "nothing-here"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no election named \"nothing-here\""), "{err}");

    // Remove, at the group's leader; then it is gone, and removing it again is refused.
    let (code, out, err) = ctl.all(&["elections", "remove", "jobs"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("election jobs removed (id 1;"), "{out}");
    let deadline = Instant::now() + LONG;
    while ctl.elections().iter().any(|(n, ..)| n == "jobs") {
        assert!(Instant::now() < deadline, "jobs still listed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, _, err) = ctl.all(&["elections", "remove", "jobs"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no election named \"jobs\""), "{err}");
    g.stop();
}
