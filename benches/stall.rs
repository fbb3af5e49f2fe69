//! A leader's disk stalls: how late its leases' ends are announced, and how soon other
//! nodes hold its elections (`docs/design.md`, sections 2 and 15).
//!
//! ```text
//! cargo bench --bench stall                         # 20 trials, 2 s stalls
//! cargo bench --bench stall -- --trials 50 --stall-ms 4000
//! cargo bench --bench stall -- --quick              # 3 trials (CI)
//! cargo bench --bench stall -- --slow-ms 60         # every write 60 ms instead
//! # a driver that waits for its Ready batch (before the asynchronous Ready):
//! TENURE_MUTATION=driver-waits-for-the-disk cargo bench --features mutations --bench stall
//! # and without the lease clock too (what the driver alone did before both):
//! TENURE_MUTATION=driver-waits-for-the-disk,lease-ends-with-the-driver cargo bench --features mutations --bench stall
//! # a stall noticed but nothing handed over (before the stall bound):
//! TENURE_MUTATION=stalled-disk-keeps-leading cargo bench --features mutations --bench stall -- --slow-ms 60
//! ```
//!
//! Each **trial** starts three nodes in this process over the in-process network, on real
//! RocksDB stores in a temporary folder whose writes a gate can hold
//! (`harness/src/stall_store.rs`); 10 ms ticks, election timeouts 150–250 ms. The
//! root's leader leads 16 named elections' share (their affinity names it). A task per
//! lease it holds waits on `Lease::lost()`. Then the leader's writes are held for the
//! stall, and a proposal makes its driver write (a Ready batch, which it hands to the
//! writer and does not wait for). Per lease: **late**,
//! the time from the lease's end (`Lease::ended_at`) to the moment its waiting task woke
//! with the loss; per election it led (the root's included): **elsewhere**, from the
//! stall's start to the first moment another node holds its lease (polled every
//! millisecond). Then the gate opens and the trial ends.
//!
//! With `--slow-ms MS` the leader's disk turns slow instead of stopping: every write and
//! probe takes MS longer (60 ms: over the group's 50 ms stall bound, and twice it under
//! the 150 ms election timeout, so its followers keep hearing it). Then **reported** is
//! the time from the slowdown to `Node::disk` saying stalled, and **elsewhere** as above,
//! for at most 5 s (an election still the slow node's then counts as not moved).
//!
//! Results: `<target dir>/tenure-bench/stall.txt` (`stall-slow.txt` with `--slow-ms`).

use tenure_harness::stall_group;
mod support;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use stall_group::Group;
use support::{summarize, table};
use tenure::{ElectionOptions, Lease};
use tokio::time::Instant;

const USAGE: &str = "\
usage: cargo bench --bench stall -- [--trials N] [--stall-ms MS] [--quick]

  --trials N     stalls to measure (default 20)
  --stall-ms MS  how long the leader's writes are held (default 2000)
  --slow-ms MS   slow every write of the leader by MS instead of holding them
  --quick        3 trials (CI)";

const NAMED: usize = 16;
const WAIT: Duration = Duration::from_secs(30);

fn main() {
    let mut trials = 20usize;
    let mut stall = Duration::from_millis(2000);
    let mut slow: Option<Duration> = None;
    let mut args = support::args().into_iter();
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage(&format!("{what} needs a number")))
        };
        match a.as_str() {
            "--trials" => trials = num("--trials").max(1) as usize,
            "--stall-ms" => stall = Duration::from_millis(num("--stall-ms").max(100)),
            "--slow-ms" => slow = Some(Duration::from_millis(num("--slow-ms").max(1))),
            "--quick" => trials = 3,
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mutation = std::env::var("TENURE_MUTATION").unwrap_or_default();
    if let Some(per_write) = slow {
        return slow_disk(&rt, trials, per_write, &mutation);
    }
    let mut late_ms = Vec::new();
    let mut elsewhere_ms = Vec::new();
    let mut leases = 0;
    let mut progress = support::Progress::new(1);
    for t in 0..trials {
        progress.update(t, trials, "stall the leader's disk");
        let (late, elsewhere) = rt.block_on(trial(stall));
        leases += late.len();
        late_ms.extend(late);
        elsewhere_ms.extend(elsewhere);
    }
    progress.finish();
    report(
        "stall.txt",
        format!(
            "stall: {trials} trials, the leader's writes held {} ms each, {leases} leases",
            stall.as_millis()
        ),
        &mutation,
        &[
            row("lease end → lost() woke (late)", &late_ms, 2),
            row("stall start → leased elsewhere", &elsewhere_ms, 2),
        ],
    );
}

/// `--slow-ms`: the leader's writes turn slow; how soon it says so and hands over.
fn slow_disk(rt: &tokio::runtime::Runtime, trials: usize, per_write: Duration, mutation: &str) {
    let mut reported_ms = Vec::new();
    let mut elsewhere_ms = Vec::new();
    let mut elections = 0;
    let mut progress = support::Progress::new(1);
    for t in 0..trials {
        progress.update(t, trials, "slow the leader's disk");
        let (reported, elsewhere, led) = rt.block_on(slow_trial(per_write));
        elections += led;
        reported_ms.extend(reported);
        elsewhere_ms.extend(elsewhere);
    }
    progress.finish();
    report(
        "stall-slow.txt",
        format!(
            "stall: {trials} trials, the leader's writes {} ms slower, stall bound {} ms, \
             {elections} elections it led, {} moved within {} s",
            per_write.as_millis(),
            stall_group::STALL_BOUND.as_millis(),
            elsewhere_ms.len(),
            SLOW_WAIT.as_secs(),
        ),
        mutation,
        &[
            row("slowdown → stall reported", &reported_ms, 1),
            row("slowdown → leased elsewhere", &elsewhere_ms, 1),
        ],
    );
}

/// Prints `header` (naming the mutation, if one is on) over the table of `rows`, and
/// keeps both in `file` in the benches' output folder.
fn report(file: &str, header: String, mutation: &str, rows: &[Vec<String>]) {
    let mut out = header;
    if !mutation.is_empty() {
        let _ = write!(out, ", TENURE_MUTATION={mutation}");
    }
    out.push('\n');
    out.push_str(&table(&["ms", "n", "p50", "p99", "max"], rows));
    print!("{out}");
    let path = support::out_dir().join(file);
    if let Err(e) = std::fs::write(&path, &out) {
        eprintln!("stall: cannot write {}: {e}", path.display());
    }
}

/// How long a slow-disk trial waits for the elections to move.
const SLOW_WAIT: Duration = Duration::from_secs(5);

/// One slowdown: (ms to the stall's report, if it came; per election the slow node led
/// that moved, ms to a lease elsewhere; how many it led).
async fn slow_trial(per_write: Duration) -> (Option<f64>, Vec<f64>, usize) {
    let g = Group::start().await;
    let (s, led_names) = g.leader_with_share(&names()).await;
    let mut led: Vec<Option<String>> = vec![None];
    led.extend(led_names.into_iter().map(Some));
    let disk = g.node(s).disk();
    let gate = Arc::clone(&g.gates[s as usize - 1]);
    gate.slow(per_write);
    let t0 = Instant::now();
    let proposer = g.node(s).clone();
    tokio::spawn(async move {
        let _ = proposer
            .create_election("written-slowly", ElectionOptions::new())
            .await;
    });
    let mut reported = None;
    let mut moved: Vec<Option<Duration>> = vec![None; led.len()];
    while (reported.is_none() || moved.iter().any(Option::is_none)) && t0.elapsed() < SLOW_WAIT {
        if reported.is_none() && disk.borrow().is_stalled() {
            reported = Some(t0.elapsed());
        }
        note_moved(&g, s, led.iter().map(Option::as_deref), &mut moved, t0);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    gate.slow(Duration::ZERO);
    for n in g.up() {
        let _ = tokio::time::timeout(WAIT, n.shutdown()).await;
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (
        reported.map(ms),
        moved.into_iter().flatten().map(ms).collect(),
        led.len(),
    )
}

fn usage(problem: &str) -> ! {
    eprintln!("stall: {problem}\n{USAGE}");
    std::process::exit(2);
}

/// One stall: (per lease, ms from its end to its loss being heard; per election the
/// stalled node led, ms from the stall's start to a lease elsewhere).
async fn trial(stall: Duration) -> (Vec<f64>, Vec<f64>) {
    let g = Group::start().await;
    let (s, led) = g.leader_with_share(&names()).await;
    let mut held: Vec<(Option<String>, Lease)> = vec![(None, g.node(s).lease().await.unwrap())];
    for name in led {
        let lease = g.node(s).election(&name).lease().await.unwrap();
        held.push((Some(name), lease));
    }
    // A task per lease notes when it hears of the loss, as the worker's would.
    let heard: Vec<_> = held
        .iter()
        .map(|(_, l)| {
            let l = l.clone();
            tokio::spawn(async move {
                l.lost().await;
                Instant::now()
            })
        })
        .collect();
    let gate = Arc::clone(&g.gates[s as usize - 1]);
    gate.shut();
    let t0 = Instant::now();
    let proposer = g.node(s).clone();
    tokio::spawn(async move {
        let _ = proposer
            .create_election("written-during-the-stall", ElectionOptions::new())
            .await;
    });
    // Elsewhere: polled every millisecond until every election has moved.
    let mut moved: Vec<Option<Duration>> = vec![None; held.len()];
    while moved.iter().any(Option::is_none) && t0.elapsed() < WAIT {
        let names = held.iter().map(|(name, _)| name.as_deref());
        note_moved(&g, s, names, &mut moved, t0);
        if t0.elapsed() >= stall && gate.waiting() > 0 {
            gate.open();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(stall.saturating_sub(t0.elapsed())).await;
    gate.open();
    let mut late = Vec::new();
    for ((_, lease), task) in held.iter().zip(heard) {
        let Ok(Ok(at)) = tokio::time::timeout(WAIT, task).await else {
            continue;
        };
        if let Some(ended) = lease.ended_at() {
            late.push(at.saturating_duration_since(ended).as_secs_f64() * 1e3);
        }
    }
    for n in g.up() {
        let _ = tokio::time::timeout(WAIT, n.shutdown()).await;
    }
    let elsewhere = moved
        .into_iter()
        .flatten()
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    (late, elsewhere)
}

/// The named elections of a trial.
fn names() -> Vec<String> {
    (0..NAMED).map(|i| format!("shard-{i}")).collect()
}

/// Notes, for each election of `names` (`None`: the root) not moved yet, whether a node
/// other than `s` holds its lease now: then it moved `t0.elapsed()` after the start.
fn note_moved<'a>(
    g: &Group,
    s: tenure::NodeId,
    names: impl Iterator<Item = Option<&'a str>>,
    moved: &mut [Option<Duration>],
    t0: Instant,
) {
    for (name, moved) in names.zip(moved.iter_mut()) {
        if moved.is_none() {
            let other = match name {
                None => g.root_holder_besides(s),
                Some(n) => g.holder_besides(n, s),
            };
            if other.is_some() {
                *moved = Some(t0.elapsed());
            }
        }
    }
}

/// A table row: `what`, the count, p50, p99 and max with `decimals` (dashes if empty).
fn row(what: &str, v: &[f64], decimals: usize) -> Vec<String> {
    if v.is_empty() {
        return vec![
            what.to_string(),
            "0".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ];
    }
    let s = summarize(v);
    vec![
        what.to_string(),
        s.n.to_string(),
        format!("{:.*}", decimals, s.p50),
        format!("{:.*}", decimals, s.p99),
        format!("{:.*}", decimals, s.max),
    ]
}
