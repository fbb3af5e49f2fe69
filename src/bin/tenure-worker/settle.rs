//! Settlement under the fence (`--ledger`): the leader settles the ledger's batches, one
//! shard per named election, and `--bench-confirms`.

use std::time::{Duration, Instant as StdInstant};

use serde_json::json;
use tenure::fence::FenceError;
use tenure::runner::{LeaderTask, LeaderTaskHandle};
use tenure::{FencingToken, Lease, Node};

use crate::cli::RowDelay;
use crate::ledger::Ledger;
use crate::run::emit;

type Shards = std::collections::BTreeMap<String, std::sync::Arc<std::sync::Mutex<Ledger>>>;

/// Opens shard `i` of the ledger for each election `shard-<i>`: its own connection and
/// its own fence, keyed by the election's name, registered in the metrics by that name.
pub(crate) fn open_shards(
    at: &crate::ledger::LedgerAt,
    id: u64,
    n: u64,
    node: &Node,
) -> Result<Shards, String> {
    (0..n)
        .map(|i| {
            let l = Ledger::open_shard(at, id, i, n)?;
            node.metrics()
                .register_fence(l.fence_name(), l.fence_stats());
            Ok((
                l.fence_name().to_string(),
                std::sync::Arc::new(std::sync::Mutex::new(l)),
            ))
        })
        .collect()
}

/// Settles each shard while this node leads its election: one task per led election
/// ([`LeaderTask::for_elections`]), each under that election's lease and fence.
pub(crate) fn spawn_shard_settlement(
    node: Node,
    shards: Shards,
    every: Duration,
    row_delay: RowDelay,
) -> LeaderTaskHandle {
    let id = node.id();
    let shards = std::sync::Arc::new(shards);
    LeaderTask::for_elections(node).spawn(move |name, lease| {
        let ledger = shards.get(&*name).cloned();
        async move {
            // An election this worker was not told of (created with ctl): not a shard.
            let Some(ledger) = ledger else { return };
            settle(id, Some(name), lease, ledger, every, row_delay).await;
        }
    })
}

/// Settles the ledger while this node holds a lease: batch by batch, every write fenced
/// with the lease's token. The task is cancelled the moment the lease is lost, but a
/// write already under way (a stalled process that wakes up) still reaches the ledger,
/// where the fence rejects it.
pub(crate) fn spawn_settlement(
    node: Node,
    ledger: Ledger,
    every: Duration,
    row_delay: RowDelay,
) -> LeaderTaskHandle {
    let id = node.id();
    let ledger = std::sync::Arc::new(std::sync::Mutex::new(ledger));
    LeaderTask::new(node).spawn(move |lease| {
        let ledger = ledger.clone();
        async move { settle(id, None, lease, ledger, every, row_delay).await }
    })
}

fn rejected(id: u64, election: Option<&str>, err: &FenceError) -> bool {
    match err {
        FenceError::Stale { presented, highest } => {
            emit(
                id,
                "fence_rejected",
                json!({"term": presented.term(), "token": presented.term(), "highest": highest.term(),
                       "election": election}),
            );
            true
        }
        other => {
            emit(id, "ledger_error", json!({"error": other.to_string()}));
            false
        }
    }
}

async fn settle(
    id: u64,
    election: Option<std::sync::Arc<str>>,
    lease: Lease,
    ledger: std::sync::Arc<std::sync::Mutex<Ledger>>,
    every: Duration,
    row_delay: RowDelay,
) {
    loop {
        let Ok(token): Result<FencingToken, _> = lease.confirm().await else {
            return;
        };
        // A batch runs on a blocking thread, the way a worker thread calls a bank API row
        // by row with the token it started with. Cancelling this task does not stop it:
        // a worker that stalls mid-batch and wakes up keeps writing with its old token,
        // and only the fence stops it. (SQLite calls block, too: a stalled writer holds
        // the file lock, and the election must never wait for the database.)
        let l = ledger.clone();
        let e = election.clone();
        let batch = tokio::task::spawn_blocking(move || {
            settle_batch(id, e.as_deref(), token, &l, row_delay)
        });
        match batch.await {
            Ok(true) => {}
            Ok(false) | Err(_) => return,
        }
        tokio::time::sleep(every).await;
    }
}

/// Settles the oldest open batch with `token`; false when the fence rejected the token.
fn settle_batch(
    id: u64,
    election: Option<&str>,
    token: FencingToken,
    ledger: &std::sync::Mutex<Ledger>,
    row_delay: RowDelay,
) -> bool {
    let lock = || {
        ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let next = lock().next_batch();
    let (batch, payments) = match next {
        Ok(Some(b)) => b,
        Ok(None) => return true,
        Err(e) => {
            emit(id, "ledger_error", json!({"error": e}));
            return true;
        }
    };
    emit(
        id,
        "batch_started",
        json!({"term": token.term(), "token": token.term(), "batch": batch, "rows": payments.len(),
               "election": election}),
    );
    for p in payments {
        std::thread::sleep(row_delay.sample()); // the external call
        let r = lock().settle_payment(token, batch, p);
        if let Err(e) = r {
            return !rejected(id, election, &e);
        }
    }
    let r = lock().close_batch(token, batch);
    match r {
        Ok(Some(rows)) => emit(
            id,
            "settled",
            json!({"term": token.term(), "token": token.term(), "batch": batch, "rows": rows,
                   "election": election}),
        ),
        Ok(None) => {}
        Err(e) => return !rejected(id, election, &e),
    }
    true
}

/// `--bench-confirms N`: times N confirms one after another (after a warm-up), then N
/// from 64 concurrent tasks, and prints `confirm_stats` with every sequential latency.
pub(crate) async fn confirm_bench(id: u64, lease: &Lease, n: usize) {
    const TASKS: usize = 64;
    let run = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        for _ in 0..n / 10 {
            lease.confirm().await.map_err(|e| e.to_string())?;
        }
        let mut latencies = Vec::with_capacity(n);
        let t0 = StdInstant::now();
        for _ in 0..n {
            let t = StdInstant::now();
            lease.confirm().await.map_err(|e| e.to_string())?;
            latencies.push(t.elapsed().as_nanos() as u64);
        }
        let sequential = n as f64 / t0.elapsed().as_secs_f64();
        let per_task = n.div_ceil(TASKS);
        let t1 = StdInstant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let l = lease.clone();
                tokio::spawn(async move {
                    for _ in 0..per_task {
                        l.confirm().await?;
                    }
                    Ok::<_, tenure::LeaseLost>(())
                })
            })
            .collect();
        for t in tasks {
            t.await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
        }
        let concurrent = (per_task * TASKS) as f64 / t1.elapsed().as_secs_f64();
        Ok::<_, String>(json!({"n": n,
            "latencies_ns": latencies, "sequential_per_s": sequential,
            "concurrent_tasks": TASKS, "concurrent_per_s": concurrent}))
    };
    match run.await {
        Ok(v) => emit(id, "confirm_stats", v),
        Err(e) => emit(id, "confirm_stats", json!({"error": e})),
    }
}
