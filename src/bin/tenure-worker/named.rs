//! The named elections' events (`--elections N`): their views, leases and the confirm
//! load.

use std::path::PathBuf;
use std::time::{Duration, Instant as StdInstant};

use serde_json::json;
use tenure::{Lease, Node, Role};

use crate::ledger::shard_name;
use crate::run::{acquired, confirm_loop, emit, emit_leader_changed, lost};

/// `leader_changed` and `history` of every named election (with `election` naming it):
/// the first from the node's view of all elections (one update per driver turn that
/// changed any), the second polled as the root's is.
pub(crate) fn spawn_named_views(node: &Node, elections: u64) {
    let id = node.id();
    let mut view = node.elections();
    tokio::spawn(async move {
        let mut last: std::collections::BTreeMap<String, (u64, Option<u64>)> = Default::default();
        loop {
            let v = view.borrow_and_update().clone();
            for (name, l) in v.iter() {
                if l.role == Role::Stopped || last.get(name) == Some(&(l.term, l.leader)) {
                    continue;
                }
                last.insert(name.clone(), (l.term, l.leader));
                emit_leader_changed(id, l.term, l.leader, l.role, Some(name));
            }
            if view.changed().await.is_err() {
                break;
            }
        }
    });
    let handles: Vec<tenure::Election> = (0..elections)
        .map(|i| node.election(&shard_name(i)))
        .collect();
    tokio::spawn(async move {
        let mut last: Vec<Option<Vec<[u64; 2]>>> = vec![None; handles.len()];
        // As often as the root's for a few elections; less often for many (a round asks
        // each election's history once).
        let every = Duration::from_millis(50.max(3 * handles.len() as u64));
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            // A chunk's questions at once: the driver answers them in one turn (one at a
            // time, 10,000 elections would cost 10,000 turns per round).
            for (k, (chunk, lasts)) in handles.chunks(512).zip(last.chunks_mut(512)).enumerate() {
                if k > 0 {
                    // Spread over the round: a round of 10,000 is about half a second of
                    // chunks, not one burst of commands every worker sends at once.
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                let mut asks = tokio::task::JoinSet::new();
                for (i, e) in chunk.iter().enumerate() {
                    let e = e.clone();
                    asks.spawn(async move { (i, e.history().await) });
                }
                while let Some(done) = asks.join_next().await {
                    let Ok((i, h)) = done else { continue };
                    let h = match h {
                        Ok(h) => h,
                        Err(tenure::ElectionError::Stopped(_)) => return,
                        // Not created yet (the root leader creates it) or removed.
                        Err(_) => continue,
                    };
                    let records: Vec<[u64; 2]> = h.iter().map(|r| [r.term, r.leader]).collect();
                    if lasts[i].as_ref() != Some(&records) {
                        emit(
                            id,
                            "history",
                            json!({ "records": records, "election": chunk[i].name() }),
                        );
                        lasts[i] = Some(records);
                    }
                }
            }
        }
    });
}

/// The confirm load of `--confirm-load-file` (a benchmark): while it runs, every named
/// election leased here confirms back to back, and the latencies are kept here, not
/// printed one by one.
#[derive(Clone)]
pub(crate) struct ConfirmLoad {
    on: tokio::sync::watch::Receiver<bool>,
    latencies_us: std::sync::Arc<std::sync::Mutex<Vec<f64>>>,
}

impl ConfirmLoad {
    /// Waits for the trigger file (if any), runs the load for its length, then prints
    /// `named_confirm_stats`.
    pub(crate) fn spawn(id: u64, trigger: Option<(PathBuf, Duration)>) -> ConfirmLoad {
        let (tx, on) = tokio::sync::watch::channel(false);
        let load = ConfirmLoad {
            on,
            latencies_us: Default::default(),
        };
        let Some((file, length)) = trigger else {
            return load;
        };
        let latencies = load.latencies_us.clone();
        tokio::spawn(async move {
            while !file.exists() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let t0 = StdInstant::now();
            let _ = tx.send(true);
            tokio::time::sleep(length).await;
            let _ = tx.send(false);
            let secs = t0.elapsed().as_secs_f64();
            let mut v = std::mem::take(
                &mut *latencies
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            v.sort_by(f64::total_cmp);
            let q = |p: f64| {
                if v.is_empty() {
                    0.0
                } else {
                    v[((v.len() - 1) as f64 * p).round() as usize]
                }
            };
            emit(
                id,
                "named_confirm_stats",
                json!({"count": v.len(), "secs": secs, "per_s": v.len() as f64 / secs,
                       "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99),
                       "max_us": v.last().copied().unwrap_or(0.0)}),
            );
        });
        load
    }
}

/// A named election's lease loop: as the root's (`run::tenure_events`), and while the
/// confirm load runs, confirms back to back, keeping the latencies.
pub(crate) async fn named_lease_events(
    id: u64,
    name: &str,
    lease: &Lease,
    confirm_every: Duration,
    load: &ConfirmLoad,
) {
    acquired(id, Some(name), lease);
    let mut on = load.on.clone();
    loop {
        if *on.borrow_and_update() {
            loop {
                let t0 = StdInstant::now();
                tokio::select! {
                    biased;
                    r = lease.confirm() => match r {
                        Ok(_) => load
                            .latencies_us
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push(t0.elapsed().as_secs_f64() * 1e6),
                        Err(e) => {
                            lost(id, Some(name), lease, e.reason);
                            return;
                        }
                    },
                    // A change, or the load's end (its sender gone).
                    _ = on.changed() => break,
                }
                if !*on.borrow() {
                    break;
                }
            }
            continue;
        }
        tokio::select! {
            biased;
            changed = on.changed() => {
                if changed.is_err() {
                    // No load any more (its sender is gone): only the confirm loop.
                    confirm_loop(id, Some(name), lease, confirm_every).await;
                    return;
                }
            }
            () = confirm_loop(id, Some(name), lease, confirm_every) => return,
        }
    }
}
