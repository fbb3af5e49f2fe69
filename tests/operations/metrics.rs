//! The worker's `--metrics` endpoint serves valid Prometheus text: fetched over HTTP and
//! checked with a Prometheus text parser, not by eye, and still exports every metric,
//! type, HELP text and label set that dashboards and alert rules were written against
//! ([`EXPOSITION`]).

use tenure_harness::ledger;

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::time::Duration;

use tenure_harness::procs::Group;

fn fetch(addr: &str, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to metrics");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").expect("HTTP response");
    (head.to_string(), body.to_string())
}

fn samples(body: &str) -> HashMap<String, f64> {
    let lines = body.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid Prometheus text exposition");
    let mut out = HashMap::new();
    for s in scrape.samples {
        let (prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v)) = s.value
        else {
            continue;
        };
        out.insert(s.metric, v);
    }
    out
}

/// The exposition as dashboards and alert rules know it (format 0.0.4): every `# HELP`
/// and `# TYPE` line, and every series as its name and labels (values left out; the
/// worker's own id is `$node`). A scrape must hold every line; it may hold more (add,
/// do not change). The fence is the example ledger's.
const EXPOSITION: &str = r#"
# HELP tenure_cert_expiry_seconds Seconds until this node's own TLS certificate expires (negative: expired).
# TYPE tenure_cert_expiry_seconds gauge
tenure_cert_expiry_seconds{node=$node}
# HELP tenure_disk_stalled 1 while this node's disk is stalled: it leads nothing until its probe writes are fast.
# TYPE tenure_disk_stalled gauge
tenure_disk_stalled{node=$node}
# HELP tenure_disk_stalls_total Disk stalls: synced writes slower than the bound while the disk was healthy.
# TYPE tenure_disk_stalls_total counter
tenure_disk_stalls_total{node=$node}
# HELP tenure_elections_started_total Campaigns this node started.
# TYPE tenure_elections_started_total counter
tenure_elections_started_total{node=$node}
# HELP tenure_elections_won_total Times this node became leader.
# TYPE tenure_elections_won_total counter
tenure_elections_won_total{node=$node}
# HELP tenure_failover_seconds Time this node spent without a known leader, per episode.
# TYPE tenure_failover_seconds histogram
tenure_failover_seconds_bucket{le=+Inf}
tenure_failover_seconds_bucket{le=0.01}
tenure_failover_seconds_bucket{le=0.025}
tenure_failover_seconds_bucket{le=0.05}
tenure_failover_seconds_bucket{le=0.1}
tenure_failover_seconds_bucket{le=0.2}
tenure_failover_seconds_bucket{le=0.3}
tenure_failover_seconds_bucket{le=0.5}
tenure_failover_seconds_bucket{le=10}
tenure_failover_seconds_bucket{le=1}
tenure_failover_seconds_bucket{le=2}
tenure_failover_seconds_bucket{le=30}
tenure_failover_seconds_bucket{le=5}
tenure_failover_seconds_count
tenure_failover_seconds_sum
# HELP tenure_fence_accepted_total Writes a fence accepted.
# TYPE tenure_fence_accepted_total counter
tenure_fence_accepted_total{fence=settlement}
# HELP tenure_fence_rejections_total Writes a fence rejected (stale token).
# TYPE tenure_fence_rejections_total counter
tenure_fence_rejections_total{fence=settlement}
# HELP tenure_leader_id Leader known to this node (0: none).
# TYPE tenure_leader_id gauge
tenure_leader_id{node=$node}
# HELP tenure_lease_expiries_total Leases that ran out unrenewed.
# TYPE tenure_lease_expiries_total counter
tenure_lease_expiries_total{node=$node}
# HELP tenure_lease_held 1 while this node holds a confirmed lease.
# TYPE tenure_lease_held gauge
tenure_lease_held{node=$node}
# HELP tenure_lease_renew_seconds Round trip of quorum-acknowledged ReadIndex rounds.
# TYPE tenure_lease_renew_seconds histogram
tenure_lease_renew_seconds_bucket{le=+Inf}
tenure_lease_renew_seconds_bucket{le=0.0005}
tenure_lease_renew_seconds_bucket{le=0.001}
tenure_lease_renew_seconds_bucket{le=0.002}
tenure_lease_renew_seconds_bucket{le=0.005}
tenure_lease_renew_seconds_bucket{le=0.01}
tenure_lease_renew_seconds_bucket{le=0.02}
tenure_lease_renew_seconds_bucket{le=0.05}
tenure_lease_renew_seconds_bucket{le=0.1}
tenure_lease_renew_seconds_bucket{le=0.25}
tenure_lease_renew_seconds_bucket{le=0.5}
tenure_lease_renew_seconds_bucket{le=1}
tenure_lease_renew_seconds_count
tenure_lease_renew_seconds_sum
# HELP tenure_lease_revocations_total Leases revoked, by reason.
# TYPE tenure_lease_revocations_total counter
tenure_lease_revocations_total{node=$node,reason=expired}
tenure_lease_revocations_total{node=$node,reason=failed}
tenure_lease_revocations_total{node=$node,reason=handed_over}
tenure_lease_revocations_total{node=$node,reason=shutdown}
tenure_lease_revocations_total{node=$node,reason=stepped_down}
tenure_lease_revocations_total{node=$node,reason=term_changed}
# HELP tenure_leases_acquired_total Leases granted.
# TYPE tenure_leases_acquired_total counter
tenure_leases_acquired_total{node=$node}
# HELP tenure_members Voters in the group.
# TYPE tenure_members gauge
tenure_members{node=$node}
# HELP tenure_peer_messages_refused_total Peer messages dropped before raft-rs, by reason.
# TYPE tenure_peer_messages_refused_total counter
tenure_peer_messages_refused_total{node=$node,reason=bad_sender}
tenure_peer_messages_refused_total{node=$node,reason=bad_snapshot}
tenure_peer_messages_refused_total{node=$node,reason=beyond_log}
tenure_peer_messages_refused_total{node=$node,reason=malformed}
tenure_peer_messages_refused_total{node=$node,reason=not_a_peer_message}
tenure_peer_messages_refused_total{node=$node,reason=not_for_this_node}
tenure_peer_messages_refused_total{node=$node,reason=not_from_leader}
tenure_peer_messages_refused_total{node=$node,reason=term_out_of_range}
tenure_peer_messages_refused_total{node=$node,reason=timeout_now_not_from_leader}
tenure_peer_messages_refused_total{node=$node,reason=unknown_peer}
tenure_peer_messages_refused_total{node=$node,reason=vote_without_membership}
# HELP tenure_peers_reachable Voters heard from recently, this node included.
# TYPE tenure_peers_reachable gauge
tenure_peers_reachable{node=$node}
# HELP tenure_quorum_healthy Leader: holds its lease. Follower: hears from a leader.
# TYPE tenure_quorum_healthy gauge
tenure_quorum_healthy{node=$node}
# HELP tenure_role 0 follower, 1 pre-candidate, 2 candidate, 3 leader, 4 stopped, 5 learner, 6 removed, 7 joining.
# TYPE tenure_role gauge
tenure_role{node=$node}
# HELP tenure_takeovers_refused_total Handovers to this node it refused: it is drained or its disk is stalled.
# TYPE tenure_takeovers_refused_total counter
tenure_takeovers_refused_total{node=$node}
# HELP tenure_term Current Raft term at this node.
# TYPE tenure_term gauge
tenure_term{node=$node}
# HELP tenure_transport_connect_failures_total Outbound connection attempts that failed.
# TYPE tenure_transport_connect_failures_total counter
tenure_transport_connect_failures_total{node=$node}
# HELP tenure_transport_connections_over_limit_total Incoming connections refused: the peer had too many.
# TYPE tenure_transport_connections_over_limit_total counter
tenure_transport_connections_over_limit_total{node=$node}
# HELP tenure_transport_connections_refused_total Incoming connections refused.
# TYPE tenure_transport_connections_refused_total counter
tenure_transport_connections_refused_total{node=$node}
# HELP tenure_transport_dropped_inbound_full_total Inbound messages dropped: driver busy.
# TYPE tenure_transport_dropped_inbound_full_total counter
tenure_transport_dropped_inbound_full_total{node=$node}
# HELP tenure_transport_dropped_queue_full_total Messages dropped: peer queue full.
# TYPE tenure_transport_dropped_queue_full_total counter
tenure_transport_dropped_queue_full_total{node=$node}
# HELP tenure_transport_dropped_unknown_peer_total Messages dropped: unknown peer.
# TYPE tenure_transport_dropped_unknown_peer_total counter
tenure_transport_dropped_unknown_peer_total{node=$node}
# HELP tenure_transport_frames_malformed_total Frames that did not decode.
# TYPE tenure_transport_frames_malformed_total counter
tenure_transport_frames_malformed_total{node=$node}
# HELP tenure_transport_frames_oversized_total Frames over the size limit.
# TYPE tenure_transport_frames_oversized_total counter
tenure_transport_frames_oversized_total{node=$node}
# HELP tenure_transport_frames_timed_out_total Frames not received within the frame deadline.
# TYPE tenure_transport_frames_timed_out_total counter
tenure_transport_frames_timed_out_total{node=$node}
# HELP tenure_transport_frames_too_many_entries_total Frames with more entries than the limit.
# TYPE tenure_transport_frames_too_many_entries_total counter
tenure_transport_frames_too_many_entries_total{node=$node}
# HELP tenure_transport_frames_waited_for_budget_total Frames that waited for the inbound byte budget.
# TYPE tenure_transport_frames_waited_for_budget_total counter
tenure_transport_frames_waited_for_budget_total{node=$node}
# HELP tenure_transport_from_mismatch_total Messages dropped: sender differs from certificate.
# TYPE tenure_transport_from_mismatch_total counter
tenure_transport_from_mismatch_total{node=$node}
# HELP tenure_transport_received_total Messages delivered to the driver.
# TYPE tenure_transport_received_total counter
tenure_transport_received_total{node=$node}
# HELP tenure_transport_sent_total Messages handed to a connection.
# TYPE tenure_transport_sent_total counter
tenure_transport_sent_total{node=$node}
"#;

/// `body` as the lines of [`EXPOSITION`]: comments verbatim, samples as
/// `name{label=value,...}` with the labels sorted and the node's id as `$node`.
fn shape(body: &str, node: u64) -> BTreeSet<String> {
    let node = format!("\"{node}\"");
    body.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            if l.starts_with('#') {
                return l.to_string();
            }
            let series = l.rsplit_once(' ').expect("sample value").0;
            let Some((name, labels)) = series.split_once('{') else {
                return series.to_string();
            };
            let labels = labels.strip_suffix('}').expect("closing brace");
            let mut pairs: Vec<String> = labels
                .split(',')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("label=value");
                    let v = if k == "node" && v == node { "$node" } else { v };
                    format!("{k}={}", v.trim_matches('"'))
                })
                .collect();
            pairs.sort();
            format!("{name}{{{}}}", pairs.join(","))
        })
        .collect()
}

/// The grouping rules of the text format 0.0.4, which the parser in [`samples`] does
/// not check: one `# HELP` and one `# TYPE` line per family, and every sample under the
/// `# TYPE` line of its own family (a counter's family is named with its `_total`; a
/// histogram's samples are its name with `_bucket`, `_sum` and `_count`).
fn check_families(body: &str) {
    let (mut helps, mut types) = (BTreeSet::new(), BTreeSet::new());
    let mut current: Option<(&str, &str)> = None;
    for l in body.lines().filter(|l| !l.is_empty()) {
        let words: Vec<&str> = l.split(' ').collect();
        match words.as_slice() {
            ["#", "HELP", name, ..] => assert!(helps.insert(*name), "second HELP for {name}"),
            ["#", "TYPE", name, ty] => {
                assert!(types.insert(*name), "second TYPE for {name}");
                current = Some((name, ty));
            }
            ["#", ..] => {}
            _ => {
                let name = l.split(['{', ' ']).next().unwrap();
                let (family, ty) = current.unwrap_or_else(|| panic!("{name} before any TYPE"));
                let ok = match ty {
                    "histogram" => ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|s| name.strip_suffix(s) == Some(family)),
                    _ => name == family,
                };
                assert!(ok, "sample {name} under # TYPE {family} {ty}");
            }
        }
    }
    assert_eq!(helps, types, "a family without HELP or TYPE");
}

#[test]
fn worker_metrics_endpoint_serves_valid_prometheus_text() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.db");
    ledger::Ledger::open(&ledger, 0).expect("ledger");
    let g = Group::start(3, Some(ledger), &["--metrics", "127.0.0.1:0"]);
    let (leader, term) = g.leaseholder(Duration::from_secs(20));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let started: Vec<(u64, String)> = loop {
        let started: Vec<(u64, String)> = g
            .events()
            .iter()
            .filter(|e| e.event == "started")
            .map(|e| {
                (
                    e.node,
                    e.v["metrics"]
                        .as_str()
                        .expect("metrics address")
                        .to_string(),
                )
            })
            .collect();
        if started.len() >= 3 {
            break started;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "workers did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Give the leader a few renewal rounds.
    std::thread::sleep(Duration::from_millis(500));
    let mut roles = HashMap::new();
    for (node, addr) in &started {
        let (head, body) = fetch(addr, "/metrics");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("text/plain; version=0.0.4"), "{head}");
        let m = samples(&body);
        check_families(&body);
        let have = shape(&body, *node);
        let want: BTreeSet<String> = EXPOSITION
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect();
        let missing: Vec<&String> = want.difference(&have).collect();
        assert!(
            missing.is_empty(),
            "node {node}: the exposition lost {missing:#?}\nit has:\n{}",
            have.iter().cloned().collect::<Vec<_>>().join("\n")
        );
        for name in [
            "tenure_term",
            "tenure_role",
            "tenure_leader_id",
            "tenure_lease_held",
            "tenure_peers_reachable",
            "tenure_quorum_healthy",
            "tenure_elections_started_total",
            "tenure_elections_won_total",
            "tenure_lease_expiries_total",
            "tenure_lease_revocations_total",
            "tenure_transport_sent_total",
            "tenure_transport_frames_malformed_total",
        ] {
            assert!(m.contains_key(name), "node {node}: {name} missing");
        }
        assert!(m["tenure_term"] >= term as f64);
        assert_eq!(
            m["tenure_leader_id"], leader as f64,
            "node {node} knows the leader"
        );
        roles.insert(*node, m["tenure_role"]);
        if *node == leader {
            assert_eq!(m["tenure_lease_held"], 1.0);
            assert_eq!(m["tenure_quorum_healthy"], 1.0);
            assert!(m["tenure_elections_won_total"] >= 1.0);
            assert!(
                body.contains("tenure_lease_renew_seconds_count"),
                "renew histogram"
            );
        }
        let (head, _) = fetch(addr, "/nope");
        assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    }
    assert_eq!(
        roles.values().filter(|r| **r == 3.0).count(),
        1,
        "exactly one leader: {roles:?}"
    );
}

/// What [`check_families`] is for: an OpenMetrics-style counter (`# TYPE foo counter`
/// with samples `foo_total`) is not valid 0.0.4 text, though [`samples`] parses it.
#[test]
#[should_panic(expected = "sample foo_total under # TYPE foo counter")]
fn families_check_refuses_a_counter_typed_without_its_total() {
    let body = "# HELP foo Foos.\n# TYPE foo counter\nfoo_total 1\n";
    assert!(samples(body).contains_key("foo_total"));
    check_families(body);
}
