//! Latency of `Lease::confirm()` on the leader of a group of five worker processes
//! (QUIC + mutual TLS on loopback, RocksDB with fsync), in `Safe` and `LeaseBased`
//! mode, and confirms per second from one leader.
//!
//! ```text
//! cargo bench --bench confirm                  # 20 000 samples per mode
//! cargo bench --bench confirm -- --samples 50000 --mode safe
//! cargo bench --bench confirm -- --quick       # 2 000 samples (CI)
//! ```
//!
//! The measurement runs inside the leader, a real worker process
//! (`worker --bench-confirms N`), because that is where a user's code calls `confirm()`:
//! the figure includes the hop from the caller's task to the driver task, the ReadIndex
//! round to the followers over QUIC, and the answer back, and nothing of the harness.
//! The worker waits 300 ms after it got its lease, confirms N/10 times to warm up,
//! then times N back-to-back confirms one by one (the latency sample and the
//! sequential rate), then N confirms from 64 concurrent tasks (the batched rate:
//! confirms that reach the driver in the same turn share one ReadIndex round).
//!
//! Results: `<target dir>/tenure-bench/confirm.txt` (table) and `confirm.csv` (every
//! sample).

mod support;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{summarize, table, Group};

const USAGE: &str = "\
usage: cargo bench --bench confirm -- [--samples N] [--mode safe|lease|all] [--quick]

  --samples N   timed confirms per mode (default 20000)
  --mode M      safe (a ReadIndex round per confirm), lease (answered locally), all
  --quick       2000 samples per mode (CI)";

struct Measured {
    mode: &'static str,
    latencies_us: Vec<f64>,
    seq_per_s: f64,
    concurrent: u64,
    concurrent_per_s: f64,
}

fn main() {
    let args = support::args();
    let mut samples = 20_000usize;
    let mut modes = vec!["safe", "lease"];
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match (a.as_str(), it.clone().next()) {
            ("--samples", Some(v)) => {
                samples = v
                    .parse()
                    .unwrap_or_else(|_| usage(&format!("--samples {v:?}")));
                it.next();
            }
            ("--mode", Some(v)) => {
                modes = match v.as_str() {
                    "safe" => vec!["safe"],
                    "lease" => vec!["lease"],
                    "all" => vec!["safe", "lease"],
                    other => usage(&format!("--mode {other:?}")),
                };
                it.next();
            }
            ("--quick", _) => samples = 2_000,
            ("-h" | "--help", _) => usage(""),
            (other, _) => usage(&format!("unknown argument {other:?}")),
        }
    }
    support::worker_binary();
    let started = Instant::now();
    let machine = support::machine();
    eprintln!("confirm: {machine}");
    let mut results = Vec::new();
    for mode in modes {
        eprintln!("confirm: {mode} mode, {samples} samples …");
        match measure(mode, samples) {
            Ok(m) => results.push(m),
            Err(e) => {
                eprintln!("confirm: {mode} mode failed: {e}");
                std::process::exit(1);
            }
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n# confirm: Lease::confirm() on the leader of 5 worker processes, µs"
    );
    let _ = writeln!(out, "machine: {machine}");
    let _ = writeln!(
        out,
        "run: {:.0} s, load at end {}\n",
        started.elapsed().as_secs_f64(),
        support::load()
    );
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|m| {
            let s = summarize(&m.latencies_us);
            vec![
                m.mode.to_string(),
                s.n.to_string(),
                format!("{:.1}", s.min),
                format!("{:.1}", s.p50),
                format!("{:.1}", s.p90),
                format!("{:.1}", s.p99),
                format!("{:.1}", s.p999),
                format!("{:.1}", s.max),
                format!("{:.1}", s.mean),
                format!("{:.0}", m.seq_per_s),
                format!("{:.0}", m.concurrent_per_s),
            ]
        })
        .collect();
    let conc = results.first().map_or(64, |m| m.concurrent);
    let conc_header = format!("{conc} tasks/s");
    out.push_str(&table(
        &[
            "mode",
            "N",
            "min",
            "p50",
            "p90",
            "p99",
            "p99.9",
            "max",
            "mean",
            "sequential/s",
            &conc_header,
        ],
        &rows,
    ));
    let _ = writeln!(
        out,
        "\nsafe: one ReadIndex round (a heartbeat to the 4 followers, a quorum of acks) per confirm.\n\
         lease: answered locally while tenure's lease holds (renewed by a round every heartbeat)."
    );
    print!("{out}");
    support::save("confirm.txt", &out);
    let mut csv = String::from("mode,sample,latency_us\n");
    for m in &results {
        for (i, l) in m.latencies_us.iter().enumerate() {
            let _ = writeln!(csv, "{},{},{:.3}", m.mode, i, l);
        }
    }
    let path = support::save("confirm.csv", &csv);
    eprintln!("confirm: wrote {}", path.display());
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("confirm: {msg}\n");
    }
    eprintln!("{USAGE}");
    std::process::exit(if msg.is_empty() { 0 } else { 2 })
}

/// Starts a group in `mode`, waits for the leader's `confirm_stats`.
fn measure(mode: &'static str, samples: usize) -> Result<Measured, String> {
    let extra: Vec<String> = [
        "--read-mode",
        mode,
        "--confirm-ms",
        "3600000",
        "--bench-confirms",
        &samples.to_string(),
    ]
    .iter()
    .map(std::string::ToString::to_string)
    .collect();
    let mut group = Group::start(5, |w| w.args(&extra));
    // Safe confirms take well under a millisecond each; allow for a slow, busy machine.
    let timeout = Duration::from_secs(30 + samples as u64 / 100);
    let ev = group.wait_event(0, timeout, |e| e.event == "confirm_stats");
    group.stop();
    let ev = ev.ok_or_else(|| {
        format!(
            "no confirm_stats within {timeout:?}; recent events:\n{}",
            group.recent_events(20)
        )
    })?;
    if let Some(err) = ev.str("error") {
        return Err(format!("the leader's confirm loop failed: {err}"));
    }
    let latencies_us =
        ev.v.get("latencies_ns")
            .and_then(Value::as_array)
            .ok_or("confirm_stats without latencies_ns")?
            .iter()
            .filter_map(Value::as_u64)
            .map(|ns| ns as f64 / 1e3)
            .collect();
    let f = |k: &str| ev.v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    Ok(Measured {
        mode,
        latencies_us,
        seq_per_s: f("sequential_per_s"),
        concurrent: ev.u64("concurrent_tasks").unwrap_or(0),
        concurrent_per_s: f("concurrent_per_s"),
    })
}
