//! The deployment files in `deploy/`, checked the way an operator would find out the hard
//! way:
//!
//! - `deploy/systemd/tenure-worker@.service`: `systemd-analyze verify` says nothing about
//!   it (it exits 0 on unknown keys and bad values, so any output fails the test), its
//!   `systemd-analyze security` exposure stays low, and the directives that matter are
//!   there (the hardening, the restart rules around exit code 3, the stop signal and its
//!   timeout, credentials without the CA key).
//! - `deploy/kubernetes/*.yaml`: every document parses; an odd number of replicas, a
//!   disruption budget that keeps a quorum, pods started together and reachable before
//!   they are ready, a volume claim under the data folder, the probes on the metrics port,
//!   no preStop hook and a worker that gets SIGTERM itself, a grace period longer than a
//!   handover, certificates mounted read-only, one node's per pod, never the CA key.
//! - The command lines: the unit's `ExecStart` (with the example `worker.env`) and the
//!   StatefulSet's start script (run with `/bin/sh` for every pod) give the worker flags
//!   it lists in its `--help`, and it accepts them (the same arguments with `--help`
//!   appended exit 0), so a renamed flag fails here, not on a machine.
//!
//! Each check also runs against broken copies of the files, which it must refuse.
//! `systemd-analyze` missing: the systemd tests print a skip message, unless
//! `TENURE_DEPLOY_REQUIRE` is set (as `.ci/run` does), which makes it a failure.

use tenure_harness::kit::binary;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_norway::Value;

const UNIT: &str = "deploy/systemd/tenure-worker@.service";
const ENV_FILE: &str = "deploy/systemd/worker.env";
const WORKERS: &str = "deploy/kubernetes/workers.yaml";
const CTL_POD: &str = "deploy/kubernetes/ctl.yaml";
/// Where the deployment files expect the worker binary.
const WORKER_PATH: &str = "/usr/local/bin/tenure-worker";
/// The most a handover takes (one election timeout of the slowest preset, wan: 2 s), and
/// then some: the least a stop may be given before SIGKILL.
const MIN_STOP_SECS: u64 = 10;
/// The highest `systemd-analyze security` exposure accepted (the unit scores 1.2).
const MAX_EXPOSURE: f64 = 2.0;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// Whether a missing tool fails the test (`TENURE_DEPLOY_REQUIRE`, set in CI).
fn required() -> bool {
    std::env::var_os("TENURE_DEPLOY_REQUIRE").is_some_and(|v| !v.is_empty())
}

/// `tool` on PATH, or `None` after printing why the test skips (a failure when required).
fn tool(tool: &str, why: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            !required(),
            "{tool} is not installed and TENURE_DEPLOY_REQUIRE is set ({why}); \
             apt-get install -y systemd"
        );
        eprintln!("SKIPPED: {tool} is not installed ({why}); apt-get install -y systemd");
    }
    found
}

/// Runs `cmd`: (exit code, stdout, stderr).
fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// ---------------------------------------------------------------------------------------
// The binaries and their flags
// ---------------------------------------------------------------------------------------

/// The worker, `<target>/<profile>/tenure-worker` (the kit's, built for this test): the
/// binary the deployment files run as `/usr/local/bin/tenure-worker`.
fn worker_binary() -> PathBuf {
    binary::worker()
}

/// The installed operator tool, `<target>/<profile>/tenure-ctl`: `cargo test` builds it
/// for this test (the package's binaries come with its integration tests); the kit builds
/// it when missing or stale.
fn ctl_binary() -> PathBuf {
    binary::ctl()
}

/// The long flags a program's help lists (`--name`), from `program args…`, which must
/// exit 0. Text in backticks (examples of other commands) is left out.
fn flags_in_help(program: &Path, args: &[&str]) -> BTreeSet<String> {
    let (code, out, err) = run(Command::new(program).args(args));
    assert_eq!(code, 0, "{} {args:?}: {err}", program.display());
    let text = format!("{out}\n{err}");
    let outside_backticks: String = text.split('`').step_by(2).collect::<Vec<_>>().join(" ");
    let mut flags = BTreeSet::new();
    for (i, _) in outside_backticks.match_indices("--") {
        let before = outside_backticks[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '-') {
            continue;
        }
        let name: String = outside_backticks[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            flags.insert(format!("--{name}"));
        }
    }
    flags
}

/// The worker's flags, from its `--help`.
fn worker_flags() -> BTreeSet<String> {
    static FLAGS: std::sync::OnceLock<BTreeSet<String>> = std::sync::OnceLock::new();
    FLAGS
        .get_or_init(|| {
            let flags = flags_in_help(&worker_binary(), &["--help"]);
            for must in [
                "--id",
                "--peers",
                "--data-dir",
                "--certs",
                "--found",
                "--join",
            ] {
                assert!(
                    flags.contains(must),
                    "worker --help lists no {must}: {flags:?}"
                );
            }
            flags
        })
        .clone()
}

/// What is wrong with a worker command line `argv` (after the program name): flags its
/// `--help` does not list, and whether the worker refuses the arguments (it parses them,
/// then shows its help, when `--help` comes last).
fn worker_argv_problems(what: &str, argv: &[String]) -> Vec<String> {
    let known = worker_flags();
    let mut problems: Vec<String> = argv
        .iter()
        .filter(|a| a.starts_with("--") && !known.contains(a.as_str()))
        .map(|a| format!("{what}: the worker has no flag {a} (see worker --help)"))
        .collect();
    let (code, _, err) = run(Command::new(worker_binary()).args(argv).arg("--help"));
    if code != 0 {
        let first = err.lines().next().unwrap_or_default();
        problems.push(format!(
            "{what}: the worker refuses {argv:?} (exit code {code}): {first}"
        ));
    }
    problems
}

/// Problems found, in words.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn need(&mut self, ok: bool, msg: impl std::fmt::Display) {
        if !ok {
            self.0.push(msg.to_string());
        }
    }
}

/// The value after `flag` in `argv`.
fn flag_value<'a>(argv: &'a [String], flag: &str) -> Option<&'a str> {
    let i = argv.iter().position(|a| a == flag)?;
    argv.get(i + 1).map(String::as_str)
}

fn port_of(addr: &str) -> Option<u64> {
    addr.rsplit_once(':')?.1.parse().ok()
}

/// What is wrong with the worker's command line for node `id`, whatever runs it.
fn node_argv_problems(what: &str, argv: &[String], id: u64, founding: bool) -> Vec<String> {
    let mut p = worker_argv_problems(what, argv);
    let mut need = |ok: bool, msg: String| {
        if !ok {
            p.push(format!("{what}: {msg}"));
        }
    };
    need(
        flag_value(argv, "--id") == Some(&id.to_string()),
        format!("--id is not {id}: {argv:?}"),
    );
    for flag in ["--peers", "--data-dir", "--certs", "--metrics", "--admin"] {
        need(flag_value(argv, flag).is_some(), format!("no {flag}"));
    }
    if let Some(peers) = flag_value(argv, "--peers") {
        match tenure::config::parse_peers(peers) {
            Ok(map) => need(map.contains_key(&id), format!("--peers has no node {id}")),
            Err(e) => need(false, format!("--peers {peers:?}: {e}")),
        }
    }
    if founding {
        need(
            flag_value(argv, "--found").is_some() && !argv.iter().any(|a| a == "--join"),
            format!("a first member must start with --found GROUP: {argv:?}"),
        );
    } else {
        need(
            argv.iter().any(|a| a == "--join") && flag_value(argv, "--group").is_some(),
            format!("a later member must start with --join --group GROUP: {argv:?}"),
        );
    }
    p
}

#[test]
fn the_flag_check_refuses_a_renamed_or_misused_flag() {
    let good: Vec<String> = [
        "--id",
        "1",
        "--peers",
        "1=127.0.0.1:7001",
        "--data-dir",
        "/d",
        "--certs",
        "/c",
        "--metrics",
        "127.0.0.1:9100",
        "--admin",
        "127.0.0.1:7101",
        "--found",
        "5b0d4c5e9a3f4e6c8d2b1a0f9e8d7c6b",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        node_argv_problems("good", &good, 1, true),
        Vec::<String>::new()
    );
    let renamed: Vec<String> = good
        .iter()
        .map(|a| a.replace("--data-dir", "--data-folder"))
        .collect();
    let p = node_argv_problems("renamed", &renamed, 1, true);
    assert!(
        p.iter().any(|p| p.contains("no flag --data-folder")),
        "{p:?}"
    );
    assert!(p.iter().any(|p| p.contains("refuses")), "{p:?}");
    // A known flag with a value it does not take.
    let mut bad_value = good.clone();
    bad_value[9] = "localhost:9100".into();
    let p = node_argv_problems("bad value", &bad_value, 1, true);
    assert!(p.iter().any(|p| p.contains("--metrics")), "{p:?}");
    let p = node_argv_problems("wrong id", &good, 2, true);
    assert!(p.iter().any(|p| p.contains("--id is not 2")), "{p:?}");
    let p = node_argv_problems("founder as joiner", &good, 1, false);
    assert!(p.iter().any(|p| p.contains("--join --group")), "{p:?}");
}

// ---------------------------------------------------------------------------------------
// systemd
// ---------------------------------------------------------------------------------------

/// A unit file's directives in order: (section, key, value).
fn unit_directives(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with(';'))
        {
            continue;
        }
        if let Some(cont) = line.strip_suffix('\\') {
            pending.push_str(cont);
            pending.push(' ');
            continue;
        }
        let line = std::mem::take(&mut pending) + line;
        if line.starts_with('[') && line.ends_with(']') {
            section = line[1..line.len() - 1].to_string();
        } else if let Some((k, v)) = line.split_once('=') {
            out.push((section.clone(), k.trim().to_string(), v.trim().to_string()));
        }
    }
    out
}

/// The example environment file: its assignments, and the commented-out alternatives
/// (`#NAME=value`) of each.
fn env_file(text: &str) -> (BTreeMap<String, String>, Vec<(String, String)>) {
    let mut set = BTreeMap::new();
    let mut alternatives = Vec::new();
    for line in text.lines() {
        let (commented, rest) = match line.strip_prefix('#') {
            Some(r) => (true, r),
            None => (false, line),
        };
        let Some((k, v)) = rest.split_once('=') else {
            continue;
        };
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
            continue;
        }
        if commented {
            alternatives.push((k.to_string(), v.trim().to_string()));
        } else {
            set.insert(k.to_string(), v.trim().to_string());
        }
    }
    (set, alternatives)
}

/// `ExecStart` of instance `instance` as systemd runs it with `env`: specifiers %i, %S,
/// %d, `${NAME}` as one word, `$NAME` split into words.
fn expand_exec(exec: &str, instance: u64, env: &BTreeMap<String, String>) -> Vec<String> {
    assert!(
        !exec.contains(['"', '\'']),
        "the test does not expand quotes in ExecStart: {exec}"
    );
    let spec = |word: &str| -> String {
        let mut out = String::new();
        let mut chars = word.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('i') => out.push_str(&instance.to_string()),
                Some('S') => out.push_str("/var/lib"),
                Some('d') => out.push_str(&format!(
                    "/run/credentials/tenure-worker@{instance}.service"
                )),
                Some('%') => out.push('%'),
                other => panic!("the test does not know the specifier %{other:?} in {exec}"),
            }
        }
        out
    };
    let mut argv = Vec::new();
    for word in exec.split_whitespace() {
        let word = spec(word);
        if let Some(name) = word.strip_prefix('$').filter(|n| !n.starts_with('{')) {
            let value = env.get(name).map_or("", String::as_str);
            argv.extend(value.split_whitespace().map(String::from));
            continue;
        }
        let mut out = String::new();
        let mut rest = word.as_str();
        while let Some(i) = rest.find("${") {
            out.push_str(&rest[..i]);
            let end = rest[i..].find('}').expect("closing brace") + i;
            out.push_str(env.get(&rest[i + 2..end]).map_or("", String::as_str));
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        argv.push(out);
    }
    argv
}

/// Everything wrong with a unit file (and its example environment file) that the test can
/// see without systemd.
fn unit_problems(unit: &str, env_text: &str) -> Vec<String> {
    let d = unit_directives(unit);
    let mut p = Problems::default();
    let values = |section: &str, key: &str| -> Vec<&str> {
        d.iter()
            .filter(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.as_str())
            .collect()
    };
    let last = |key: &str| values("Service", key).last().copied();
    let yes = |key: &str| last(key) == Some("yes") || last(key) == Some("true");

    // Who it runs as, and what it may touch.
    p.need(
        yes("DynamicUser") || last("User").is_some_and(|u| u != "root" && u != "0"),
        "DynamicUser=yes or a dedicated User= (not root)",
    );
    p.need(
        last("StateDirectory") == Some("tenure"),
        "StateDirectory=tenure",
    );
    p.need(
        last("ProtectSystem") == Some("strict"),
        "ProtectSystem=strict",
    );
    p.need(
        matches!(
            last("ProtectHome"),
            Some("yes" | "true" | "read-only" | "tmpfs")
        ),
        "ProtectHome=",
    );
    for key in [
        "PrivateTmp",
        "PrivateDevices",
        "NoNewPrivileges",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectControlGroups",
        "RestrictNamespaces",
        "RestrictSUIDSGID",
        "LockPersonality",
        "MemoryDenyWriteExecute",
    ] {
        p.need(yes(key), format!("{key}=yes"));
    }
    p.need(
        values("Service", "CapabilityBoundingSet") == [""],
        "CapabilityBoundingSet= (empty, once)",
    );
    let families: BTreeSet<&str> = last("RestrictAddressFamilies")
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    p.need(
        families == BTreeSet::from(["AF_INET", "AF_INET6", "AF_UNIX"]),
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
    );
    p.need(
        values("Service", "SystemCallFilter")
            .iter()
            .any(|v| v.split_whitespace().any(|g| g == "@system-service")),
        "SystemCallFilter=@system-service",
    );
    // Restarts, and how it stops.
    p.need(last("Restart") == Some("on-failure"), "Restart=on-failure");
    let prevent: BTreeSet<&str> = values("Service", "RestartPreventExitStatus")
        .iter()
        .flat_map(|v| v.split_whitespace())
        .collect();
    p.need(
        prevent.contains("3"),
        "RestartPreventExitStatus= with 3 (the data folder was refused)",
    );
    p.need(
        prevent.contains("2"),
        "RestartPreventExitStatus= with 2 (bad arguments)",
    );
    p.need(
        matches!(last("KillSignal"), None | Some("SIGTERM" | "TERM" | "15")),
        "KillSignal=SIGTERM (the worker hands over on SIGTERM)",
    );
    p.need(
        last("TimeoutStopSec")
            .and_then(seconds)
            .is_some_and(|s| s >= MIN_STOP_SECS),
        "TimeoutStopSec= of 10 s or more (a handover takes up to an election timeout)",
    );
    p.need(
        !values("Service", "EnvironmentFile").is_empty(),
        "an EnvironmentFile= with the node's peers and group",
    );
    // Credentials: this node's three files, never the CA key.
    let creds: Vec<(&str, &str)> = values("Service", "LoadCredential")
        .iter()
        .filter_map(|v| v.split_once(':'))
        .collect();
    let names: BTreeSet<&str> = creds.iter().map(|(n, _)| *n).collect();
    p.need(
        names == BTreeSet::from(["ca.pem", "node-%i.pem", "node-%i-key.pem"]),
        "LoadCredential= of ca.pem, node-%i.pem and node-%i-key.pem, and nothing else",
    );
    p.need(
        !unit
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .any(|l| l.contains("ca-key") || l.contains("operator")),
        "no CA key and no operator certificate in the unit",
    );
    p.need(
        values("Service", "ExecStart").len() == 1,
        "one ExecStart= (the worker)",
    );
    let Some(exec) = last("ExecStart") else {
        return p.0;
    };
    let exec = exec.trim_start_matches(['-', '@', ':', '+', '!']);
    p.need(
        exec.starts_with(&format!("{WORKER_PATH} ")),
        "ExecStart= runs /usr/local/bin/tenure-worker",
    );

    // The command line, with the example environment file and each of its alternatives.
    let (env, alternatives) = env_file(env_text);
    let instance = 3;
    let mut cases = vec![(String::from("worker.env"), env.clone())];
    for (k, v) in alternatives {
        let mut e = env.clone();
        e.insert(k.clone(), v.clone());
        cases.push((format!("worker.env with {k}={v}"), e));
    }
    for (i, _) in exec.match_indices('$') {
        let var: String = exec[i + 1..]
            .trim_start_matches('{')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // TENURE_OPTIONS is optional; the others are needed.
        p.need(
            var == "TENURE_OPTIONS" || env.contains_key(&var),
            format!("worker.env sets no {var}, which ExecStart= uses"),
        );
    }
    for (what, env) in cases {
        let argv = expand_exec(exec, instance, &env);
        let args = &argv[1..];
        let founding = !args.iter().any(|a| a == "--join");
        p.0.extend(node_argv_problems(&what, args, instance, founding));
        if flag_value(args, "--certs") != Some("/run/credentials/tenure-worker@3.service") {
            p.0.push(format!("{what}: --certs is not the credentials folder %d"));
        }
        if flag_value(args, "--data-dir") != Some("/var/lib/tenure") {
            p.0.push(format!(
                "{what}: --data-dir is not the StateDirectory, %S/tenure"
            ));
        }
        let listen = flag_value(args, "--listen").unwrap_or_default();
        let own = flag_value(args, "--peers")
            .and_then(|s| tenure::config::parse_peers(s).ok())
            .and_then(|m| m.get(&instance).map(ToString::to_string));
        if !listen.starts_with("0.0.0.0:")
            && !listen.starts_with("[::]:")
            && Some(listen.to_string()) != own
        {
            p.0.push(format!(
                "{what}: --listen {listen} is neither node {instance}'s entry in --peers nor 0.0.0.0"
            ));
        }
    }
    p.0
}

/// `30`, `30s`, `1min`, `1min 30s`: seconds.
fn seconds(v: &str) -> Option<u64> {
    let mut total = 0;
    for part in v.split_whitespace() {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        let n: u64 = digits.parse().ok()?;
        total += n * match &part[digits.len()..] {
            "" | "s" | "sec" => 1,
            "m" | "min" => 60,
            "h" | "hr" => 3600,
            _ => return None,
        };
    }
    Some(total)
}

#[test]
fn the_unit_file_runs_the_worker_hardened_and_stops_it_gently() {
    let p = unit_problems(&read(UNIT), &read(ENV_FILE));
    assert!(p.is_empty(), "{UNIT}:\n  {}", p.join("\n  "));
}

#[test]
fn the_unit_check_refuses_broken_unit_files() {
    let (unit, env) = (read(UNIT), read(ENV_FILE));
    let broken = |from: &str, to: &str| {
        assert!(unit.contains(from), "{from:?} is not in the unit");
        unit.replacen(from, to, 1)
    };
    let cases = [
        (broken("RestartPreventExitStatus=2 3", "RestartPreventExitStatus=2"), "with 3"),
        (broken("ProtectSystem=strict", "ProtectSystem=full"), "ProtectSystem=strict"),
        (broken("DynamicUser=yes", "DynamicUser=no"), "DynamicUser"),
        (broken("TimeoutStopSec=30s", "TimeoutStopSec=2s"), "TimeoutStopSec"),
        (broken("KillSignal=SIGTERM", "KillSignal=SIGKILL"), "KillSignal"),
        (
            broken("AF_INET AF_INET6 AF_UNIX", "AF_INET AF_INET6 AF_UNIX AF_NETLINK"),
            "RestrictAddressFamilies",
        ),
        (broken("CapabilityBoundingSet=\n", "CapabilityBoundingSet=CAP_NET_ADMIN\n"), "Capability"),
        (
            broken(
                "LoadCredential=ca.pem:/etc/tenure/certs/ca.pem",
                "LoadCredential=ca.pem:/etc/tenure/certs/ca.pem\nLoadCredential=ca-key.pem:/etc/tenure/certs/ca-key.pem",
            ),
            "CA key",
        ),
        (broken("--data-dir %S/tenure", "--data-folder %S/tenure"), "no flag --data-folder"),
        (broken("--certs %d", "--certs /etc/tenure/certs"), "credentials folder"),
        (broken("--id %i", "--id 1"), "--id is not 3"),
        // (The ExecStart's end: the comment above it names $TENURE_START first.)
        (
            broken(" $TENURE_START $TENURE_OPTIONS", " ${TENURE_START} $TENURE_OPTIONS"),
            "refuses",
        ),
    ];
    for (unit, expect) in cases {
        let p = unit_problems(&unit, &env);
        assert!(
            p.iter().any(|p| p.contains(expect)),
            "a broken unit should fail with {expect:?}; got {p:?}"
        );
    }
    // The environment file, too.
    let p = unit_problems(&unit, &env.replace("TENURE_PEERS=", "TENURE_PEER="));
    assert!(
        p.iter().any(|p| p.contains("sets no TENURE_PEERS")),
        "{p:?}"
    );
    let p = unit_problems(
        &unit,
        &env.replace("#TENURE_START=--join --group", "#TENURE_START=--join --grp"),
    );
    assert!(p.iter().any(|p| p.contains("no flag --grp")), "{p:?}");
}

/// `systemd-analyze verify` and `security --offline` of instance 3 of the unit, with the
/// worker binary in place of `/usr/local/bin/tenure-worker` (verify checks that the
/// program exists): the problems found.
fn systemd_analyze_problems(sa: &Path, unit: &str) -> Vec<String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let worker = worker_binary();
    let text = unit.replacen(
        &format!("ExecStart={WORKER_PATH} "),
        &format!("ExecStart={} ", worker.display()),
        1,
    );
    let path = dir.path().join("tenure-worker@3.service");
    std::fs::write(&path, text).expect("write the unit");
    let mut p = Vec::new();
    let (code, out, err) = run(Command::new(sa).args(["verify", "--man=no"]).arg(&path));
    // verify exits 0 on unknown keys and values it cannot parse (it ignores them): any
    // word from it is a problem.
    let said = format!("{out}{err}");
    if code != 0 || !said.trim().is_empty() {
        p.push(format!(
            "systemd-analyze verify (exit code {code}):\n{said}"
        ));
    }
    let (code, out, err) = run(Command::new(sa)
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&path));
    let exposure = out
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .and_then(|l| l.rsplit_once(": "))
        .and_then(|(_, v)| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok());
    match exposure {
        Some(e) if e <= MAX_EXPOSURE => {}
        Some(e) => p.push(format!(
            "systemd-analyze security: exposure {e} is above {MAX_EXPOSURE}:\n{out}"
        )),
        None => p.push(format!(
            "systemd-analyze security --offline=yes gave no exposure (exit code {code}): {err}"
        )),
    }
    p
}

#[test]
fn systemd_analyze_verify_and_security_pass_the_unit() {
    let Some(sa) = tool("systemd-analyze", "the unit file is not verified") else {
        return;
    };
    let p = systemd_analyze_problems(&sa, &read(UNIT));
    assert!(p.is_empty(), "{UNIT}:\n{}", p.join("\n"));
}

#[test]
fn systemd_analyze_refuses_broken_unit_files() {
    let Some(sa) = tool("systemd-analyze", "the unit file is not verified") else {
        return;
    };
    let unit = read(UNIT);
    for (from, to, expect) in [
        // Misspelled keys and bad values are warnings, with exit code 0.
        ("ProtectSystem=strict", "ProtectSytem=strict", "Unknown key"),
        (
            "RestartPreventExitStatus=2 3",
            "RestartPreventExitStatus=2 x3",
            "x3",
        ),
        ("@system-service", "@system-servic", "system-servic"),
        ("[Install]", "[Instal]", "Instal"),
        // Less hardening shows in the exposure score.
        ("ProtectSystem=strict\n", "", "exposure"),
    ] {
        assert!(unit.contains(from), "{from:?} is not in the unit");
        let hardened = [
            "PrivateDevices=yes\n",
            "PrivateIPC=yes\n",
            "RestrictNamespaces=yes\n",
            "SystemCallFilter=@system-service\n",
            "PrivateTmp=yes\n",
            "ProtectHome=yes\n",
        ];
        let mut broken = unit.replacen(from, to, 1);
        if expect == "exposure" {
            for h in hardened {
                broken = broken.replacen(h, "", 1);
            }
        }
        let p = systemd_analyze_problems(&sa, &broken);
        assert!(
            p.iter().any(|p| p.contains(expect)),
            "{from:?} -> {to:?} should fail with {expect:?}: {p:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Kubernetes
// ---------------------------------------------------------------------------------------

/// Every YAML document in `text` (empty ones left out).
fn documents(what: &str, text: &str) -> Result<Vec<Value>, String> {
    use serde::Deserialize;
    let mut docs = Vec::new();
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let v = Value::deserialize(doc).map_err(|e| format!("{what}: document {i}: {e}"))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn seq(v: &Value) -> &[Value] {
    v.as_sequence().map(Vec::as_slice).unwrap_or_default()
}

fn kind_named<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| s(&d["kind"]) == kind).collect()
}

/// Whether `selector` (a map of labels) selects the labels `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    match selector.as_mapping() {
        Some(m) if !m.is_empty() => m.iter().all(|(k, v)| labels.get(k) == Some(v)),
        _ => false,
    }
}

/// The worker's command lines, one per pod, from the StatefulSet's container: its
/// start script run with /bin/sh and the pod's environment (`group` as GROUP_ID), the
/// worker replaced by a program that prints its arguments. Err: why it could not be run.
fn pod_argvs(
    container: &Value,
    config: &BTreeMap<String, String>,
    replicas: u64,
    group: &str,
) -> Result<Vec<Vec<String>>, String> {
    let command: Vec<&str> = seq(&container["command"]).iter().map(s).collect();
    let args: Vec<&str> = seq(&container["args"]).iter().map(s).collect();
    if command != ["/bin/sh", "-c"] || args.len() != 1 {
        return Err(format!(
            "the container runs {command:?} {args:?}; the test expects /bin/sh -c SCRIPT"
        ));
    }
    let script = args[0];
    let exec = format!("exec {WORKER_PATH} ");
    if script.matches(&exec).count() != 1 {
        return Err(format!(
            "the start script must end in `{exec}...` exactly once, so that the worker is \
             PID 1 and gets SIGTERM itself:\n{script}"
        ));
    }
    let printing = script.replace(&exec, "exec printf '%s\\n' ");
    let mut out = Vec::new();
    for ordinal in 0..replicas {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(&printing)
            .env_clear()
            .env("PATH", "/usr/bin:/bin");
        for e in seq(&container["env"]) {
            let name = s(&e["name"]);
            let value = if let Some(key) = e["valueFrom"]["configMapKeyRef"]["key"].as_str() {
                config
                    .get(key)
                    .cloned()
                    .ok_or(format!("env {name}: the ConfigMap has no {key}"))?
            } else if s(&e["valueFrom"]["fieldRef"]["fieldPath"]) == "metadata.name" {
                format!("worker-{ordinal}")
            } else {
                s(&e["value"]).to_string()
            };
            cmd.env(name, if name == "GROUP_ID" { group } else { &value });
        }
        let (code, stdout, err) = run(&mut cmd);
        if code != 0 {
            return Err(format!(
                "the start script of worker-{ordinal} exits with {code}: {err}"
            ));
        }
        out.push(stdout.lines().map(String::from).collect());
    }
    Ok(out)
}

/// Everything wrong with the worker manifests (`workers`) and the operator pod (`ctl`).
fn manifest_problems(workers: &str, ctl: &str) -> Vec<String> {
    let mut p = Problems::default();
    let (docs, ctl_docs) = match (documents(WORKERS, workers), documents(CTL_POD, ctl)) {
        (Ok(w), Ok(c)) => (w, c),
        (w, c) => return [w.err(), c.err()].into_iter().flatten().collect(),
    };
    for d in docs.iter().chain(&ctl_docs) {
        if s(&d["apiVersion"]).is_empty()
            || s(&d["kind"]).is_empty()
            || s(&d["metadata"]["name"]).is_empty()
        {
            p.0.push(format!(
                "a document without apiVersion, kind or metadata.name: {d:?}"
            ));
        }
    }
    let sets = kind_named(&docs, "StatefulSet");
    if sets.len() != 1 {
        p.need(
            false,
            format!("{WORKERS}: one StatefulSet, not {}", sets.len()),
        );
        return p.0;
    }
    let set = sets[0];
    let spec = &set["spec"];
    let pod = &spec["template"]["spec"];
    let labels = &spec["template"]["metadata"]["labels"];
    let replicas = spec["replicas"].as_u64().unwrap_or(0);
    let quorum = replicas / 2 + 1;
    p.need(
        replicas >= 3 && replicas % 2 == 1,
        format!("replicas must be odd and at least 3 (a quorum of voters), not {replicas}"),
    );
    p.need(
        selects(&spec["selector"]["matchLabels"], labels),
        "the StatefulSet's selector must select its pods",
    );
    p.need(
        s(&spec["podManagementPolicy"]) == "Parallel",
        "podManagementPolicy: Parallel (founding needs every first member at once; none is \
         ready before the group has a leader)",
    );

    // Services: the governing one is headless; every one that selects the workers
    // publishes pods that are not ready.
    let services = kind_named(&docs, "Service");
    let governing = services
        .iter()
        .find(|svc| s(&svc["metadata"]["name"]) == s(&spec["serviceName"]));
    p.need(
        governing.is_some_and(|g| s(&g["spec"]["clusterIP"]) == "None"),
        format!(
            "serviceName {:?} must be a headless Service",
            s(&spec["serviceName"])
        ),
    );
    for svc in &services {
        let sel = &svc["spec"]["selector"];
        let picks = selects(sel, labels)
            || s(&sel["statefulset.kubernetes.io/pod-name"])
                .starts_with(&format!("{}-", s(&set["metadata"]["name"])));
        if picks {
            p.need(
                svc["spec"]["publishNotReadyAddresses"].as_bool() == Some(true),
                format!(
                    "Service {}: publishNotReadyAddresses: true (peers must reach pods before \
                     they are ready)",
                    s(&svc["metadata"]["name"])
                ),
            );
        }
    }

    // The disruption budget keeps a quorum.
    let budgets: Vec<_> = kind_named(&docs, "PodDisruptionBudget")
        .into_iter()
        .filter(|b| selects(&b["spec"]["selector"]["matchLabels"], labels))
        .collect();
    p.need(
        budgets.len() == 1,
        "one PodDisruptionBudget selecting the workers",
    );
    for b in budgets {
        let (min, max) = (&b["spec"]["minAvailable"], &b["spec"]["maxUnavailable"]);
        let available = match (min.as_u64(), max.as_u64()) {
            (Some(m), None) if max.is_null() => Some(m),
            (None, Some(u)) if min.is_null() => Some(replicas.saturating_sub(u)),
            _ => None,
        };
        p.need(
            available.is_some_and(|a| a >= quorum),
            format!(
                "the PodDisruptionBudget must keep a quorum ({quorum} of {replicas}) available, \
                 as a number: minAvailable {min:?}, maxUnavailable {max:?}"
            ),
        );
    }

    // The pod.
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);
    p.need(
        grace >= MIN_STOP_SECS,
        format!("terminationGracePeriodSeconds {grace}: at least {MIN_STOP_SECS} (a handover)"),
    );
    p.need(
        pod["automountServiceAccountToken"].as_bool() == Some(false),
        "automountServiceAccountToken: false (the worker needs no API access)",
    );
    p.need(
        pod["securityContext"]["runAsNonRoot"].as_bool() == Some(true),
        "runAsNonRoot: true",
    );
    p.need(
        seq(&pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"])
            .iter()
            .chain(seq(&pod["affinity"]["podAntiAffinity"]
                ["preferredDuringSchedulingIgnoredDuringExecution"]))
            .any(|t| {
                s(&t["topologyKey"]) == "kubernetes.io/hostname"
                    || s(&t["podAffinityTerm"]["topologyKey"]) == "kubernetes.io/hostname"
            }),
        "a podAntiAffinity on kubernetes.io/hostname (one worker per machine)",
    );
    let containers = seq(&pod["containers"]);
    let Some(c) = containers.iter().find(|c| s(&c["name"]) == "worker") else {
        p.need(false, "no container named worker");
        return p.0;
    };
    let sc = &c["securityContext"];
    p.need(
        sc["allowPrivilegeEscalation"].as_bool() == Some(false)
            && sc["readOnlyRootFilesystem"].as_bool() == Some(true)
            && seq(&sc["capabilities"]["drop"])
                .iter()
                .any(|d| s(d) == "ALL"),
        "the worker container: allowPrivilegeEscalation false, readOnlyRootFilesystem true, \
         capabilities drop ALL",
    );
    p.need(
        c["lifecycle"]["preStop"].is_null(),
        "no preStop hook: SIGTERM is the handover (the worker hands over and exits; a hook \
         would delay it and hold an operator certificate)",
    );
    let ports: BTreeMap<&str, u64> = seq(&c["ports"])
        .iter()
        .map(|p| (s(&p["name"]), p["containerPort"].as_u64().unwrap_or(0)))
        .collect();
    let port = |v: &Value| v.as_u64().or_else(|| ports.get(s(v)).copied());

    // The ConfigMap the container's environment reads.
    let maps = kind_named(&docs, "ConfigMap");
    let mut config = BTreeMap::new();
    for e in seq(&c["env"]) {
        let r = &e["valueFrom"]["configMapKeyRef"];
        if let Some(key) = r["key"].as_str() {
            let data = maps
                .iter()
                .find(|m| s(&m["metadata"]["name"]) == s(&r["name"]))
                .map(|m| &m["data"][key]);
            match data.and_then(Value::as_str) {
                Some(v) => {
                    config.insert(key.to_string(), v.to_string());
                }
                None => p.need(
                    false,
                    format!(
                        "env {}: no ConfigMap {:?} with {key}",
                        s(&e["name"]),
                        s(&r["name"])
                    ),
                ),
            }
        }
    }
    let node_ids: Vec<u64> = config
        .get("NODE_IDS")
        .map(|v| {
            v.split_whitespace()
                .filter_map(|i| i.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let founders: BTreeSet<u64> = config
        .get("FOUNDERS")
        .map(|v| {
            v.split_whitespace()
                .filter_map(|i| i.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    p.need(
        node_ids.len() as u64 == replicas,
        format!("NODE_IDS {node_ids:?} must give an id to each of the {replicas} pods"),
    );

    // The command lines.
    let group = "5b0d4c5e9a3f4e6c8d2b1a0f9e8d7c6b";
    let argvs = match pod_argvs(c, &config, replicas.min(node_ids.len() as u64), group) {
        Ok(a) => a,
        Err(e) => {
            p.need(false, e);
            Vec::new()
        }
    };
    for (ordinal, argv) in argvs.iter().enumerate() {
        let id = node_ids[ordinal];
        let what = format!("worker-{ordinal}");
        for problem in node_argv_problems(&what, argv, id, founders.contains(&id)) {
            p.need(false, problem);
        }
        let group_flag = if founders.contains(&id) {
            "--found"
        } else {
            "--group"
        };
        p.need(
            flag_value(argv, group_flag) == Some(group),
            format!("{what}: {group_flag} is not the ConfigMap's GROUP_ID"),
        );
    }
    // The ConfigMap's group id is a placeholder the worker refuses (exit code 2): a copy
    // that forgot to set it does not start, and no two groups founded from this file
    // share an id.
    if let (Some(id), Some(argv)) = (config.get("GROUP_ID"), argvs.first()) {
        let mut with = argv.clone();
        if let Some(i) = with.iter().position(|a| a == group) {
            with[i].clone_from(id);
        }
        let (code, _, _) = run(Command::new(worker_binary()).args(&with).arg("--help"));
        p.need(
            code == 2,
            format!(
                "the placeholder GROUP_ID {id:?} must be refused by the worker (exit code 2), \
                 not {code}"
            ),
        );
    }
    // With an id that is not a founder, the same pod joins.
    if let Some(&first) = node_ids.first() {
        let mut later = config.clone();
        let others: Vec<String> = founders
            .iter()
            .filter(|f| **f != first)
            .map(u64::to_string)
            .collect();
        later.insert("FOUNDERS".to_string(), others.join(" "));
        match pod_argvs(c, &later, 1, group) {
            Ok(a) => {
                for problem in node_argv_problems("worker-0 as a later member", &a[0], first, false)
                {
                    p.need(false, problem);
                }
            }
            Err(e) => p.need(false, e),
        }
    }
    let argv = argvs.first().cloned().unwrap_or_default();

    // Peers: an address per node id, each a Service of the pod that is that node, on the
    // raft port (or, once names work, the pods' DNS names).
    let raft_port = ports.get("raft").copied();
    if let Some(peers) = config.get("PEERS") {
        match tenure::config::parse_peers(peers) {
            Err(e) => p.need(false, format!("PEERS {peers:?}: {e}")),
            Ok(map) => {
                for (ordinal, id) in node_ids.iter().enumerate() {
                    let Some(addr) = map.get(id) else {
                        p.need(false, format!("PEERS has no node {id} (worker-{ordinal})"));
                        continue;
                    };
                    let pod_name = format!("{}-{ordinal}", s(&set["metadata"]["name"]));
                    let svc = services.iter().find(|svc| {
                        addr.ip()
                            .is_some_and(|a| s(&svc["spec"]["clusterIP"]) == a.ip().to_string())
                            && s(&svc["spec"]["selector"]["statefulset.kubernetes.io/pod-name"])
                                == pod_name
                    });
                    p.need(
                        svc.is_some_and(|svc| {
                            seq(&svc["spec"]["ports"]).iter().any(|sp| {
                                sp["port"].as_u64() == Some(u64::from(addr.port()))
                                    && port(&sp["targetPort"]) == raft_port
                                    && s(&sp["protocol"]) == "UDP"
                            })
                        }),
                        format!(
                            "PEERS gives node {id} {addr}: no Service with that cluster IP selecting \
                             {pod_name} and forwarding UDP {} to its raft port",
                            addr.port()
                        ),
                    );
                }
            }
        }
    }
    p.need(
        flag_value(&argv, "--listen").and_then(port_of) == raft_port,
        "--listen must bind the container's raft port",
    );
    p.need(
        flag_value(&argv, "--admin").and_then(port_of) == ports.get("admin").copied(),
        "--admin must bind the container's admin port",
    );

    // Probes on the port --metrics serves.
    let metrics_port = flag_value(&argv, "--metrics").and_then(port_of);
    for (probe, path) in [("readinessProbe", "/ready"), ("livenessProbe", "/live")] {
        let get = &c[probe]["httpGet"];
        p.need(
            s(&get["path"]) == path && metrics_port.is_some() && port(&get["port"]) == metrics_port,
            format!("{probe}: httpGet {path} on the --metrics port ({metrics_port:?})"),
        );
    }

    // The data folder is on a claim of its own per pod.
    let mounts = seq(&c["volumeMounts"]);
    let data_dir = flag_value(&argv, "--data-dir").unwrap_or("?");
    let claims: BTreeSet<&str> = seq(&spec["volumeClaimTemplates"])
        .iter()
        .map(|t| s(&t["metadata"]["name"]))
        .collect();
    p.need(
        mounts.iter().any(|m| {
            let at = s(&m["mountPath"]).trim_end_matches('/');
            claims.contains(s(&m["name"]))
                && m["subPath"].is_null()
                && (data_dir == at || data_dir.starts_with(&format!("{at}/")))
        }),
        format!("--data-dir {data_dir} must be on a volumeClaimTemplates volume"),
    );

    // Certificates: read-only, this pod's node only, never the CA key.
    let certs_dir = flag_value(&argv, "--certs").unwrap_or("?");
    let volumes = seq(&pod["volumes"]);
    let certs_mount = mounts.iter().find(|m| s(&m["mountPath"]) == certs_dir);
    match certs_mount {
        None => p.need(false, format!("--certs {certs_dir} is no volume mount")),
        Some(m) => {
            let v = volumes.iter().find(|v| s(&v["name"]) == s(&m["name"]));
            let projected = v.map(|v| &v["projected"]).filter(|p| !p.is_null());
            p.need(
                s(&m["subPathExpr"]) == "$(POD_NAME)"
                    && seq(&c["env"]).iter().any(|e| {
                        s(&e["name"]) == "POD_NAME"
                            && s(&e["valueFrom"]["fieldRef"]["fieldPath"]) == "metadata.name"
                    }),
                "the certificates mount is the pod's own folder: subPathExpr $(POD_NAME)",
            );
            // Folder worker-N/ holds ca.pem, node-<id>.pem, node-<id>-key.pem of NODE_IDS[N],
            // from that node's Secret.
            let mut folders: BTreeMap<String, BTreeSet<(String, String, String)>> = BTreeMap::new();
            for src in projected.map(|p| seq(&p["sources"])).unwrap_or_default() {
                let secret = s(&src["secret"]["name"]);
                for item in seq(&src["secret"]["items"]) {
                    if let Some((folder, file)) = s(&item["path"]).split_once('/') {
                        folders.entry(folder.into()).or_default().insert((
                            secret.into(),
                            s(&item["key"]).into(),
                            file.into(),
                        ));
                    }
                }
            }
            for (ordinal, id) in node_ids.iter().enumerate() {
                let want: BTreeSet<(String, String, String)> = [
                    "ca.pem".to_string(),
                    format!("node-{id}.pem"),
                    format!("node-{id}-key.pem"),
                ]
                .into_iter()
                .map(|f| (format!("tenure-node-{id}"), f.clone(), f))
                .collect();
                let pod_name = format!("{}-{ordinal}", s(&set["metadata"]["name"]));
                p.need(
                    folders.get(&pod_name) == Some(&want),
                    format!(
                        "{pod_name} (node {id}) must get exactly ca.pem, node-{id}.pem and \
                         node-{id}-key.pem from Secret tenure-node-{id}: {:?}",
                        folders.get(&pod_name)
                    ),
                );
            }
            p.need(
                folders.len() == node_ids.len(),
                format!(
                    "a certificates folder per pod, no more: {:?}",
                    folders.keys()
                ),
            );
        }
    }
    for (what, d) in docs
        .iter()
        .chain(&ctl_docs)
        .map(|d| (s(&d["metadata"]["name"]), d))
    {
        let pod = if s(&d["kind"]) == "Pod" {
            &d["spec"]
        } else {
            &d["spec"]["template"]["spec"]
        };
        let secret_volumes: BTreeSet<&str> = seq(&pod["volumes"])
            .iter()
            .filter(|v| !v["secret"].is_null() || !v["projected"].is_null())
            .map(|v| s(&v["name"]))
            .collect();
        for c in seq(&pod["containers"])
            .iter()
            .chain(seq(&pod["initContainers"]))
        {
            for m in seq(&c["volumeMounts"]) {
                if secret_volumes.contains(s(&m["name"])) {
                    p.need(
                        m["readOnly"].as_bool() == Some(true),
                        format!(
                            "{what}: the Secret mount {} must be readOnly",
                            s(&m["mountPath"])
                        ),
                    );
                }
            }
        }
        for v in seq(&pod["volumes"]) {
            let mut sources: Vec<&Value> = vec![&v["secret"]];
            sources.extend(seq(&v["projected"]["sources"]).iter().map(|s| &s["secret"]));
            for src in sources.into_iter().filter(|s| !s.is_null()) {
                let items = seq(&src["items"]);
                p.need(
                    !items.is_empty(),
                    format!(
                        "{what}: volume {} mounts a whole Secret; list its items, so that no key \
                         comes along unseen",
                        s(&v["name"])
                    ),
                );
                for item in items {
                    p.need(
                        !s(&item["key"]).contains("ca-key") && !s(&item["path"]).contains("ca-key"),
                        format!("{what}: volume {} mounts the CA key", s(&v["name"])),
                    );
                }
            }
        }
    }
    p.0
}

#[test]
fn the_kubernetes_manifests_keep_a_quorum_and_mount_what_they_must() {
    let p = manifest_problems(&read(WORKERS), &read(CTL_POD));
    assert!(p.is_empty(), "{WORKERS}, {CTL_POD}:\n  {}", p.join("\n  "));
}

#[test]
fn the_manifest_check_refuses_broken_manifests() {
    let (workers, ctl) = (read(WORKERS), read(CTL_POD));
    let broken = |from: &str, to: &str| {
        assert!(workers.contains(from), "{from:?} is not in {WORKERS}");
        workers.replacen(from, to, 1)
    };
    let cases = [
        (broken("  replicas: 5", "  replicas: 4"), "replicas must be odd"),
        (broken("maxUnavailable: 1", "maxUnavailable: 3"), "keep a quorum"),
        (broken("maxUnavailable: 1", "minAvailable: 2"), "keep a quorum"),
        (broken("maxUnavailable: 1", "maxUnavailable: 20%"), "keep a quorum"),
        (broken("podManagementPolicy: Parallel", "podManagementPolicy: OrderedReady"), "Parallel"),
        (broken("  publishNotReadyAddresses: true", "  publishNotReadyAddresses: false"), "publishNotReadyAddresses"),
        (broken("path: /ready", "path: /healthz"), "readinessProbe"),
        (broken("path: /live\n              port: metrics\n            periodSeconds: 10", "path: /live\n              port: raft\n            periodSeconds: 10"), "livenessProbe"),
        (broken("terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: 2"), "terminationGracePeriodSeconds"),
        (broken("              readOnly: true", "              readOnly: false"), "must be readOnly"),
        (broken("- {key: node-2-key.pem, path: worker-1/node-2-key.pem}", "- {key: node-2-key.pem, path: worker-1/node-2-key.pem}\n                    - {key: ca-key.pem, path: worker-1/ca-key.pem}"), "CA key"),
        (broken("path: worker-2/node-3.pem", "path: worker-3/node-3.pem"), "worker-2 (node 3)"),
        (broken("subPathExpr: $(POD_NAME)", "subPath: worker-0"), "subPathExpr"),
        (broken("--data-dir /var/lib/tenure/data", "--data-dir /tmp/data"), "volumeClaimTemplates"),
        (broken("--data-dir /var/lib/tenure/data", "--data-folder /var/lib/tenure/data"), "no flag --data-folder"),
        (broken("--metrics 0.0.0.0:9100", "--metrics 0.0.0.0:9200"), "readinessProbe"),
        (broken("exec /usr/local/bin/tenure-worker", "/usr/local/bin/tenure-worker"), "PID 1"),
        // (Not ordinal + 1: NODE_IDS is 1 2 3 4 5, so that would give the same ids.)
        (broken("id=$1", "id=$ordinal"), "--id is not"),
        (broken("*) set -- --join --group \"$GROUP_ID\" ;;", "*) set -- --join ;;"), "--join --group"),
        (broken("clusterIP: 10.96.100.3", "clusterIP: 10.96.100.30"), "node 3"),
        (broken("  PEERS: \"1=", "  PEERS: \"1=worker-0.workers.tenure.svc:7001,9="), "PEERS"),
        (broken("GROUP_ID: \"set-me-to-the-output-of-worker--new-group-id\"", "GROUP_ID: \"5b0d4c5e9a3f4e6c8d2b1a0f9e8d7c6b\""), "placeholder"),
        (broken("      automountServiceAccountToken: false", "      automountServiceAccountToken: true"), "automountServiceAccountToken"),
        (broken("            readOnlyRootFilesystem: true", "            readOnlyRootFilesystem: false"), "readOnlyRootFilesystem"),
        (broken("      containers:\n        - name: worker\n", "      containers:\n        - name: worker\n          lifecycle:\n            preStop:\n              exec:\n                command: [\"sleep\", \"5\"]\n"), "preStop"),
        (broken("  replicas: 5", "  replicas: 5\n  replicas: 3"), "duplicate"),
    ];
    for (workers, expect) in cases {
        let p = manifest_problems(&workers, &ctl);
        assert!(
            p.iter().any(|p| p.contains(expect)),
            "a broken manifest should fail with {expect:?}; got {p:?}"
        );
    }
    let p = manifest_problems(
        &workers,
        &ctl.replace("          readOnly: true", "          readOnly: false"),
    );
    assert!(
        p.iter().any(|p| p.contains("tenure-ctl: the Secret mount")),
        "{p:?}"
    );
    let p = manifest_problems(
        &workers,
        &ctl.replace(
            "- {key: operator-key.pem, path: operator-key.pem}",
            "- {key: ca-key.pem, path: ca-key.pem}",
        ),
    );
    assert!(p.iter().any(|p| p.contains("CA key")), "{p:?}");
}

// ---------------------------------------------------------------------------------------
// tenure-ctl, as installed
// ---------------------------------------------------------------------------------------

/// The installed binary names itself `tenure-ctl` in its help, its usage errors, its
/// messages and the completion scripts it writes, and has every flag the deployment's
/// instructions give it.
#[test]
fn tenure_ctl_names_itself_and_takes_the_deployments_flags() {
    let ctl = ctl_binary();
    let (code, out, _) = run(Command::new(&ctl).arg("--help"));
    assert_eq!(code, 0);
    assert!(
        out.contains("Usage: tenure-ctl --certs DIR --addr ADDR[,ADDR...]"),
        "{out}"
    );
    for sub in [
        "status",
        "history",
        "transfer",
        "drain",
        "undrain",
        "members",
        "completions",
    ] {
        assert!(
            out.contains(&format!("  {sub} ")),
            "no {sub} in --help: {out}"
        );
    }
    let (code, _, err) = run(Command::new(&ctl).args(["members", "add", "4"]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("Usage: tenure-ctl members add <ID> <ADDR>"),
        "{err}"
    );
    let (code, out, _) = run(Command::new(&ctl).args(["completions", "bash"]));
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("complete -F")
                && l.trim_end().ends_with(" tenure-ctl")),
        "the bash script must complete tenure-ctl"
    );
    let (code, _, err) = run(Command::new(&ctl).args([
        "--certs",
        "/nonexistent",
        "--addr",
        "127.0.0.1:1",
        "status",
    ]));
    assert_eq!(code, 1);
    assert!(
        err.starts_with("tenure-ctl: cannot load the operator certificate"),
        "{err}"
    );
    // Every flag the deployment's instructions give tenure-ctl exists.
    let flags = flags_in_help(&ctl, &["--help"]);
    for flag in ["--certs", "--addr", "--json", "--timeout"] {
        assert!(
            flags.contains(flag),
            "tenure-ctl --help lists no {flag}: {flags:?}"
        );
    }
    let transfer = flags_in_help(&ctl, &["transfer", "--help"]);
    assert!(transfer.contains("--to"), "{transfer:?}");
}
