//! The sample alert rules (`deploy/alerts.yml`) are valid Prometheus rules, fire on the
//! series they are meant for (`deploy/alerts.test.yml`, run with `promtool test rules`),
//! and name only metrics tenure exports; the exposition itself passes
//! `promtool check metrics` (parsed and linted as Prometheus parses text format 0.0.4).
//!
//! `promtool` comes with Prometheus (`apt-get install prometheus`; `.ci/run` installs it
//! through `scripts/bootstrap.sh --with-promtool`). Without it the promtool checks print
//! why they did not run and pass, unless `TENURE_PROMTOOL_REQUIRE=1` (set by `.ci/run`),
//! which makes a missing promtool a failure. The metric-name check always runs.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

fn deploy() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy"))
}

/// Runs `promtool ARGS` in `deploy/`; `None` when promtool is not installed (and not
/// required).
fn promtool(args: &[&str]) -> Option<std::process::Output> {
    promtool_with_input(args, "")
}

/// [`promtool`] with `input` on its standard input.
fn promtool_with_input(args: &[&str], input: &str) -> Option<std::process::Output> {
    let child = Command::new("promtool")
        .args(args)
        .current_dir(deploy())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    match child {
        Ok(mut child) => {
            let mut stdin = child.stdin.take().expect("promtool stdin");
            stdin
                .write_all(input.as_bytes())
                .expect("write to promtool");
            drop(stdin);
            Some(child.wait_with_output().expect("promtool output"))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::env::var("TENURE_PROMTOOL_REQUIRE").is_ok_and(|v| v == "1") {
                panic!("promtool is required (TENURE_PROMTOOL_REQUIRE=1) but not installed");
            }
            eprintln!(
                "skipping: promtool is not installed (apt-get install prometheus, or \
                 scripts/bootstrap.sh --with-promtool)"
            );
            None
        }
        Err(e) => panic!("cannot run promtool: {e}"),
    }
}

fn assert_ok(what: &str, out: std::process::Output) {
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn alert_rules_are_valid() {
    if let Some(out) = promtool(&["check", "rules", "alerts.yml"]) {
        assert_ok("promtool check rules deploy/alerts.yml", out);
    }
}

#[test]
fn alerts_fire_on_the_series_they_are_meant_for() {
    if let Some(out) = promtool(&["test", "rules", "alerts.test.yml"]) {
        assert_ok("promtool test rules deploy/alerts.test.yml", out);
    }
}

#[test]
fn exposition_passes_promtool_check_metrics() {
    let metrics = tenure::metrics::Metrics::new(1);
    metrics.register_fence("ledger", Arc::new(tenure::fence::FenceStats::default()));
    metrics.set_cert_not_after(std::time::SystemTime::now() + Duration::from_secs(86_400));
    let text = metrics.render();
    assert!(
        text.contains("tenure_cert_expiry_seconds{node=\"1\"} 86"),
        "{text}"
    );
    if let Some(out) = promtool_with_input(&["check", "metrics"], &text) {
        assert_ok(&format!("promtool check metrics of\n{text}\n"), out);
    }
}

#[test]
fn alerts_name_only_metrics_tenure_exports() {
    let rules = std::fs::read_to_string(deploy().join("alerts.yml")).expect("read alerts.yml");
    let metrics = tenure::metrics::Metrics::new(1);
    let fence = tenure::fence::FenceStats::default();
    metrics.register_fence("ledger", Arc::new(fence));
    // Exported once the node knows its certificate (a node started with files does).
    metrics.set_cert_not_after(std::time::SystemTime::now());
    let text = metrics.render();
    let exported: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let mut named = Vec::new();
    for (i, _) in rules.match_indices("tenure_") {
        let name: String = rules[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // Histograms export name_bucket / _sum / _count.
        named.push(name);
    }
    assert!(!named.is_empty(), "no tenure metric in alerts.yml");
    for name in named {
        assert!(
            exported.iter().any(|e| *e == name),
            "alerts.yml uses {name}, which tenure does not export"
        );
    }
}

/// `promtool test rules` of TenureNamedElectionWithoutLease, on series of three workers
/// a, b, c running four named elections. (The other alerts' unit tests are in
/// `deploy/alerts.test.yml`; these go to a temporary file that names `deploy/alerts.yml`
/// by its absolute path, so they run against the rules themselves.)
const NAMED_ELECTION_TESTS: &str = r#"
evaluation_interval: 5s

tests:
  # Healthy: every election leased somewhere (a holds 2, b and c 1 each).
  - interval: 5s
    input_series:
      - {series: 'tenure_named_elections{job="tenure",instance="a"}', values: '4x24'}
      - {series: 'tenure_named_elections{job="tenure",instance="b"}', values: '4x24'}
      - {series: 'tenure_named_elections{job="tenure",instance="c"}', values: '4x24'}
      - {series: 'tenure_named_elections_leased{job="tenure",instance="a"}', values: '2x24'}
      - {series: 'tenure_named_elections_leased{job="tenure",instance="b"}', values: '1x24'}
      - {series: 'tenure_named_elections_leased{job="tenure",instance="c"}', values: '1x24'}
    alert_rule_test:
      - {eval_time: 1m, alertname: TenureNamedElectionWithoutLease, exp_alerts: []}
      - {eval_time: 2m, alertname: TenureNamedElectionWithoutLease, exp_alerts: []}

  # Worker c dies at 20 s (its series vanish) and a takes over c's election 5 s later:
  # a gap shorter than 10 s, so no alert, and the count of elections lives on in a and b.
  - interval: 5s
    input_series:
      - {series: 'tenure_named_elections{job="tenure",instance="a"}', values: '4x24'}
      - {series: 'tenure_named_elections{job="tenure",instance="b"}', values: '4x24'}
      - {series: 'tenure_named_elections{job="tenure",instance="c"}', values: '4 4 4 4 stale'}
      - {series: 'tenure_named_elections_leased{job="tenure",instance="a"}', values: '2 2 2 2 2 3x19'}
      - {series: 'tenure_named_elections_leased{job="tenure",instance="b"}', values: '1x24'}
      - {series: 'tenure_named_elections_leased{job="tenure",instance="c"}', values: '1 1 1 1 stale'}
    alert_rule_test:
      - {eval_time: 25s, alertname: TenureNamedElectionWithoutLease, exp_alerts: []}
      - {eval_time: 40s, alertname: TenureNamedElectionWithoutLease, exp_alerts: []}
      - {eval_time: 2m, alertname: TenureNamedElectionWithoutLease, exp_alerts: []}

  # Worker c dies and nobody takes its election over: fires after 10 s, not before.
  - interval: 5s
    input_series:
      - {series: 'tenure_named_elections{job="tenure",instance="a"}', values: '4x24'}
      - {series: 'tenure_named_elections{job="tenure",instance="b"}', values: '4x24'}
      - {series: 'tenure_named_elections{job="tenure",instance="c"}', values: '4 4 4 4 stale'}
      - {series: 'tenure_named_elections_leased{job="tenure",instance="a"}', values: '2x24'}
      - {series: 'tenure_named_elections_leased{job="tenure",instance="b"}', values: '1x24'}
      - {series: 'tenure_named_elections_leased{job="tenure",instance="c"}', values: '1 1 1 1 stale'}
    alert_rule_test:
      - {eval_time: 25s, alertname: TenureNamedElectionWithoutLease, exp_alerts: []}
      - eval_time: 40s
        alertname: TenureNamedElectionWithoutLease
        exp_alerts:
          - exp_labels: {severity: page}
            exp_annotations:
              summary: "1 named elections have no lease"
              description: "For 10 s fewer named elections held a lease than exist. Check `tenure-ctl status` (leaderships per worker) and quorum health."

  # Every worker up, but two elections lost their leases (no quorum for them): fires.
  - interval: 5s
    input_series:
      - {series: 'tenure_named_elections{job="tenure",instance="a"}', values: '4x24'}
      - {series: 'tenure_named_elections{job="tenure",instance="b"}', values: '4x24'}
      - {series: 'tenure_named_elections_leased{job="tenure",instance="a"}', values: '2x24'}
      - {series: 'tenure_named_elections_leased{job="tenure",instance="b"}', values: '2 2 0x22'}
    alert_rule_test:
      - {eval_time: 15s, alertname: TenureNamedElectionWithoutLease, exp_alerts: []}
      - eval_time: 30s
        alertname: TenureNamedElectionWithoutLease
        exp_alerts:
          - exp_labels: {severity: page}
            exp_annotations:
              summary: "2 named elections have no lease"
              description: "For 10 s fewer named elections held a lease than exist. Check `tenure-ctl status` (leaderships per worker) and quorum health."

  # A new election: the worker that applied the create counts it first, its lease
  # follows within a few seconds. No alert; and a group without named elections is quiet.
  - interval: 5s
    input_series:
      - {series: 'tenure_named_elections{job="tenure",instance="a"}', values: '0 0 1x22'}
      - {series: 'tenure_named_elections{job="tenure",instance="b"}', values: '0 0 0 1x21'}
      - {series: 'tenure_named_elections_leased{job="tenure",instance="a"}', values: '0x24'}
      - {series: 'tenure_named_elections_leased{job="tenure",instance="b"}', values: '0 0 0 0 1x20'}
    alert_rule_test:
      - {eval_time: 5s, alertname: TenureNamedElectionWithoutLease, exp_alerts: []}
      - {eval_time: 20s, alertname: TenureNamedElectionWithoutLease, exp_alerts: []}
      - {eval_time: 1m, alertname: TenureNamedElectionWithoutLease, exp_alerts: []}
"#;

#[test]
fn named_election_without_lease_fires_only_when_one_stays_unleased() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rules = deploy().join("alerts.yml");
    let test = dir.path().join("named.test.yml");
    let text = format!(
        "rule_files:\n  - {}\n{NAMED_ELECTION_TESTS}",
        rules.display()
    );
    std::fs::write(&test, text).expect("write the rule test");
    let test = test.to_str().expect("a UTF-8 temp path");
    if let Some(out) = promtool(&["test", "rules", test]) {
        assert_ok(
            "promtool test rules of TenureNamedElectionWithoutLease",
            out,
        );
    }
}
