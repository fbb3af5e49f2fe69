//! The worker's `--metrics` endpoint serves valid Prometheus text: fetched over HTTP and
//! checked with a Prometheus text parser, not by eye.

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::Duration;

use support::procs::Group;

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
        let v = match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => continue,
        };
        out.insert(s.metric, v);
    }
    out
}

#[test]
fn worker_metrics_endpoint_serves_valid_prometheus_text() {
    let g = Group::start(3, None, &["--metrics", "127.0.0.1:0"]);
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
