//! The command lines other tools script against (`tenure-worker`, and the examples
//! `local_group` and `certs`): `--help` on stdout with exit code 0, a usage error on
//! stderr naming the flag with exit code 2. That the kit's worker command is the command
//! line the worker parses is checked by the worker's own unit tests
//! (`src/bin/tenure-worker/cli.rs`).

use tenure_harness::kit::binary::{example, output};

/// Each of `cases` exits 2 with nothing on stdout and a message naming its flag.
fn assert_usage_errors(bin: &std::path::Path, cases: &[(&[&str], &str)]) {
    for (args, names) in cases {
        let (code, out, err) = output(bin, args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(names), "{args:?} should name {names}: {err}");
    }
}

/// A worker command line that is whole but for what a case changes.
const W: [&str; 8] = tenure_harness::kit::command::WHOLE_ARGS;

fn with<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(more).copied().collect()
}

#[test]
fn the_worker_explains_itself_and_names_the_flag_it_refuses() {
    let worker = tenure_harness::kit::binary::worker();
    let (code, out, _) = output(&worker, &["--help"]);
    assert_eq!(code, 0);
    for needle in [
        "Usage: tenure-worker --id N",
        "tenure-worker --new-group-id",
        "--found <GROUP>",
        "--election-max-ms <N>",
        "--disk-stall-ms <N>",
        "disk_stalled",
        "--row-jitter-ms <N>",
        "--elections <N>",
        "\"election\": null",
        "Founding, restarting, replacing",
        "Exit codes: 0 stopped on request",
        "Prints one JSON object per line",
        "SIGUSR1",
    ] {
        assert!(out.contains(needle), "--help lacks {needle:?}:\n{out}");
    }
    let (code, out, _) = output(&worker, &["-h"]);
    assert_eq!(code, 0);
    assert!(out.contains("Exit codes"), "{out}");

    let (code, out, err) = output(&worker, &["--new-group-id"]);
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
            (&with(&W, &["--elections", "many"]), "'--elections <N>'"),
            (&with(&W, &["--elections", "70000"]), "'--elections <N>'"),
            (&["--new-group-id", "--id", "1"], "'--new-group-id'"),
        ],
    );
}

#[test]
fn local_group_explains_itself_and_names_the_flag_it_refuses() {
    let local_group = example("local_group");
    let (code, out, _) = output(&local_group, &["--help"]);
    assert_eq!(code, 0);
    for needle in [
        "Usage: local_group",
        "--nodes <N>",
        "--spares <N>",
        "--chaos <MODE>",
        "--ledger <FILE|URL>",
        "--base-port <P>",
        "--elections <N>",
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
            (&["--elections", "lots"], "'--elections <N>'"),
        ],
    );
}

#[test]
fn certs_explains_itself_and_names_the_flag_it_refuses() {
    let certs = example("certs");
    let (code, out, _) = output(&certs, &["--help"]);
    assert_eq!(code, 0);
    for needle in [
        "Usage: certs",
        "--nodes <N>",
        "--out <DIR>",
        "--per-node",
        "DIR/ca/",
        "--days <N>",
        "[default: 90]",
        "renew",
        "new-ca",
        "bundle",
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
            (
                &["--nodes", "3", "--out", "/x", "--days", "0"],
                "'--days <N>'",
            ),
            (&["renew", "--node", "3"], "--ca <DIR>"),
            (&["renew", "--ca", "/x"], "--node <ID>"),
            (&["renew", "--node", "0", "--ca", "/x"], "'--node <ID>'"),
            (&["bundle", "--out", "/x"], "--ca <FILE>"),
            (&["new-ca"], "--out <DIR>"),
        ],
    );
    // The rotation steps of README "Rotating certificates", in order.
    let dir2 = tempfile::tempdir().unwrap();
    let p = |s: &str| dir2.path().join(s).to_str().unwrap().to_string();
    let steps: [Vec<String>; 5] = [
        vec![
            "--nodes".into(),
            "2".into(),
            "--out".into(),
            p(""),
            "--per-node".into(),
        ],
        vec![
            "renew".into(),
            "--node".into(),
            "2".into(),
            "--ca".into(),
            p("ca"),
            "--out".into(),
            p("node-2"),
            "--days".into(),
            "30".into(),
        ],
        vec!["new-ca".into(), "--out".into(), p("ca-2")],
        vec![
            "bundle".into(),
            "--ca".into(),
            p("ca/ca.pem"),
            "--ca".into(),
            p("ca-2/ca.pem"),
            "--out".into(),
            p("node-2/ca.pem"),
        ],
        vec![
            "renew".into(),
            "--node".into(),
            "2".into(),
            "--ca".into(),
            p("ca-2"),
            "--out".into(),
            p("node-2"),
        ],
    ];
    for args in &steps {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, err) = output(&certs, &args);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
    let id = tenure::transport::tls::TlsIdentity::from_dir(p("node-2"), 2).unwrap();
    assert_eq!(id.ca_certs().len(), 2);
    // Node 1's folder does not trust the new CA yet: nothing is replaced, exit code 1.
    let (code, _, err) = output(
        &certs,
        &[
            "renew",
            "--node",
            "1",
            "--ca",
            &p("ca-2"),
            "--out",
            &p("node-1"),
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("UnknownIssuer"), "{err}");
    // And it still writes what it always wrote.
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("c");
    let out_dir = out_dir.to_str().unwrap();
    let (code, out, err) = output(&certs, &["--nodes", "2", "--out", out_dir, "--per-node"]);
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
