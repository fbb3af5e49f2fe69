//! The command lines of the example binaries other tools script against (`worker`,
//! `local_group` and its `__worker` mode, `certs`): `--help` on stdout with exit code 0,
//! a usage error on stderr naming the flag with exit code 2.

mod support;

use std::process::Stdio;

use support::procs::nested_cargo;

/// Example `name`, built by cargo next to the worker binary (a no-op when fresh).
fn build_example(name: &str) -> std::path::PathBuf {
    let worker = support::procs::worker_binary();
    let dir = worker.parent().expect("examples dir").to_path_buf();
    let mut args = vec!["build", "--example", name];
    if dir
        .parent()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == "release")
    {
        args.push("--release");
    }
    let status = nested_cargo()
        .args(&args)
        .stdout(Stdio::null())
        .status()
        .expect("run cargo build --example");
    assert!(status.success(), "cargo build --example {name} failed");
    dir.join(name)
}

/// Runs `bin` with `args`; (exit code, stdout, stderr).
fn run(bin: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the example");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Each of `cases` exits 2 with nothing on stdout and a message naming its flag.
fn assert_usage_errors(bin: &std::path::Path, cases: &[(&[&str], &str)]) {
    for (args, names) in cases {
        let (code, out, err) = run(bin, args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(names), "{args:?} should name {names}: {err}");
    }
}

/// A worker command line that is whole but for what a case changes.
const W: [&str; 8] = [
    "--id",
    "1",
    "--peers",
    "1=127.0.0.1:9",
    "--data-dir",
    "/nonexistent",
    "--certs",
    "/nonexistent",
];

fn with<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(more).copied().collect()
}

#[test]
fn the_worker_explains_itself_and_names_the_flag_it_refuses() {
    let worker = support::procs::worker_binary();
    let (code, out, _) = run(&worker, &["--help"]);
    assert_eq!(code, 0);
    for needle in [
        "Usage: worker --id N",
        "worker --new-group-id",
        "--found <GROUP>",
        "--election-max-ms <N>",
        "--row-jitter-ms <N>",
        "Founding, restarting, replacing",
        "Exit codes: 0 stopped on request",
        "Prints one JSON object per line",
        "SIGUSR1",
    ] {
        assert!(out.contains(needle), "--help lacks {needle:?}:\n{out}");
    }
    let (code, out, _) = run(&worker, &["-h"]);
    assert_eq!(code, 0);
    assert!(out.contains("Exit codes"), "{out}");

    let (code, out, err) = run(&worker, &["--new-group-id"]);
    assert_eq!(code, 0, "{err}");
    let id = out.trim();
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{out}"
    );

    assert_usage_errors(
        &worker,
        &[
            (&with(&W, &["--frobnicate"]), "'--frobnicate'"),
            (&["--id", "one"], "'--id <N>'"),
            (&W[2..], "--id <N>"),
            (&W[..6], "--certs <DIR>"),
            (&with(&W, &["--listen", "nowhere"]), "'--listen <ADDR>'"),
            (
                &with(&W, &["--peers", "1:2"]),
                "'--peers <1=ADDR,2=ADDR,...>'",
            ),
            (&with(&W, &["--found", "abc"]), "'--found <GROUP>'"),
            (&with(&W, &["--timing", "moon"]), "'--timing <PRESET>'"),
            (&with(&W, &["--tick-ms", "soon"]), "'--tick-ms <N>'"),
            (&with(&W, &["--read-mode", "fast"]), "'--read-mode <MODE>'"),
            (&with(&W, &["--log-level", "loud"]), "'--log-level <LEVEL>'"),
            (&with(&W, &["--metrics", "9100"]), "'--metrics <ADDR>'"),
            (&with(&W, &["--admin", "x:y"]), "'--admin <ADDR>'"),
            (&with(&W, &["--confirm-ms"]), "'--confirm-ms <N>'"),
            (&["--new-group-id", "--id", "1"], "'--new-group-id'"),
        ],
    );
}

#[test]
fn local_group_explains_itself_and_names_the_flag_it_refuses() {
    let local_group = build_example("local_group");
    let (code, out, _) = run(&local_group, &["--help"]);
    assert_eq!(code, 0);
    for needle in [
        "Usage: local_group",
        "--nodes <N>",
        "--spares <N>",
        "--chaos <MODE>",
        "--ledger <FILE>",
        "--base-port <P>",
        "[default: 5]",
        "Exit codes",
    ] {
        assert!(out.contains(needle), "--help lacks {needle:?}:\n{out}");
    }
    assert_usage_errors(
        &local_group,
        &[
            (&["--frobnicate"], "'--frobnicate'"),
            (&["--nodes", "12"], "'--nodes <N>'"),
            (&["--spares", "5"], "'--spares <N>'"),
            (&["--nodes", "7", "--spares", "3"], "at most 9 workers"),
            (&["--duration", "0"], "'--duration <SECS>'"),
            (&["--chaos", "flood"], "'--chaos <MODE>'"),
            (&["--timing", "moon"], "'--timing <PRESET>'"),
            (&["--base-port", "70000"], "'--base-port <P>'"),
        ],
    );
    // Worker mode: the worker's own command line.
    let (code, out, _) = run(&local_group, &["__worker", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("Usage: worker --id N"), "{out}");
    assert_usage_errors(
        &local_group,
        &[
            (
                &with(&["__worker"], &with(&W, &["--frobnicate"])),
                "'--frobnicate'",
            ),
            (&["__worker", "--id", "x"], "'--id <N>'"),
        ],
    );
}

#[test]
fn certs_explains_itself_and_names_the_flag_it_refuses() {
    let certs = build_example("certs");
    let (code, out, _) = run(&certs, &["--help"]);
    assert_eq!(code, 0);
    for needle in [
        "Usage: certs",
        "--nodes <N>",
        "--out <DIR>",
        "--per-node",
        "DIR/ca/",
    ] {
        assert!(out.contains(needle), "--help lacks {needle:?}:\n{out}");
    }
    assert_usage_errors(
        &certs,
        &[
            (
                &["--nodes", "3", "--out", "/x", "--frobnicate"],
                "'--frobnicate'",
            ),
            (&["--nodes", "0", "--out", "/x"], "'--nodes <N>'"),
            (&["--nodes", "1001", "--out", "/x"], "'--nodes <N>'"),
            (&["--nodes", "three", "--out", "/x"], "'--nodes <N>'"),
            (&["--nodes", "3"], "--out <DIR>"),
            (&["--out", "/x"], "--nodes <N>"),
            (&["--nodes", "3", "--out", ""], "'--out <DIR>'"),
            (
                &["--nodes", "3", "--nodes", "4", "--out", "/x"],
                "'--nodes <N>'",
            ),
            (
                &["--nodes", "3", "--out", "/x", "--per-node=yes"],
                "'--per-node'",
            ),
        ],
    );
    // And it still writes what it always wrote.
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("c");
    let out_dir = out_dir.to_str().unwrap();
    let (code, out, err) = run(&certs, &["--nodes", "2", "--out", out_dir, "--per-node"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("one folder per holder"), "{out}");
    for f in [
        "ca/ca-key.pem",
        "node-2/node-2-key.pem",
        "operator/operator.pem",
    ] {
        assert!(dir.path().join("c").join(f).exists(), "{f} missing");
    }
}
