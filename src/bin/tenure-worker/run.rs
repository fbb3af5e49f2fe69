//! Running a worker: its node, its events (one JSON object per line on stdout), the root
//! election's lease, and its stop with an exit code.

use std::io::Write;
use std::time::{Duration, Instant as StdInstant};

use serde_json::{json, Value};
use tenure::clock::{instant_to_monotonic_ns, monotonic_ns};
use tenure::error::StopCause;
use tenure::{Config, Lease, Node, Role};

use crate::cli::WorkerArgs;
use crate::ledger::{shard_name, Ledger};
use crate::named::{named_lease_events, spawn_named_views, ConfirmLoad};
use crate::settle::{confirm_bench, open_shards, spawn_settlement, spawn_shard_settlement};

/// Exit code: the data folder was refused, and starting again on it will not help.
pub(crate) const EXIT_STORE_REFUSED: i32 = 3;

/// Exit code: a write to the data folder failed (`StopCause::WriteFailed`): the node
/// stopped for good; restarting it recovers from what the disk holds.
pub(crate) const EXIT_WRITE_FAILED: i32 = 4;

/// Whether a start error is about the data folder (exit code 3) rather than the rest.
fn store_refused(e: &tenure::StartError) -> Option<&'static str> {
    use tenure::error::StorageError;
    use tenure::StartError as E;
    match e {
        E::NoStore { .. } => Some("no_store"),
        E::NotFounded { .. } => Some("not_founded"),
        E::WrongNode { .. } => Some("wrong_node"),
        E::WrongGroup { .. } => Some("wrong_group"),
        E::NotAMember { .. } => Some("not_a_member"),
        E::Storage(StorageError::Corrupt { .. }) => Some("corrupt"),
        E::Storage(StorageError::AlreadyInitialized { .. }) => Some("already_initialized"),
        _ => None,
    }
}

/// Writes one event line to stdout and flushes it (so a SIGKILL loses nothing printed).
pub(crate) fn emit(node: u64, event: &str, mut fields: Value) {
    let mut obj = json!({"event": event, "node": node, "mono_ns": monotonic_ns()});
    if let (Some(o), Some(f)) = (obj.as_object_mut(), fields.as_object_mut()) {
        o.append(f);
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{obj}");
    let _ = out.flush();
}

/// `leader_changed`: this node's view of an election's term and leader (`election` is
/// null for the root).
pub(crate) fn emit_leader_changed(
    node: u64,
    term: u64,
    leader: Option<u64>,
    role: Role,
    election: Option<&str>,
) {
    emit(
        node,
        "leader_changed",
        json!({"term": term, "leader": leader, "role": role.as_str(), "election": election}),
    );
}

/// A start that failed after the node started: says why (stderr and `start_failed`),
/// stops the node and gives the exit code.
async fn fail_start(node: &Node, error: String) -> i32 {
    let id = node.id();
    eprintln!("worker {id}: {error}");
    emit(id, "start_failed", json!({ "error": error }));
    let _ = node.shutdown().await;
    1
}

/// The terminal logger at `--log-level`, or one that discards.
fn logger(level: Option<slog::Level>) -> slog::Logger {
    match level {
        Some(level) => tenure::terminal_logger(level),
        None => slog::Logger::root(slog::Discard, slog::o!()),
    }
}

/// Runs a worker until SIGTERM/SIGINT; returns the process exit code.
pub(crate) async fn run(args: WorkerArgs) -> i32 {
    let id = args.id;
    let peers = match tenure::config::parse_peers(&args.peers) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("worker {id}: --peers: {e}");
            return 2;
        }
    };
    let mut b = Config::builder(id)
        .peers(peers)
        .data_dir(&args.data_dir)
        .tls_dir(&args.certs)
        .timing(args.timing)
        .read_mode(args.read_mode)
        .join(args.join);
    if let Some(bound) = args.disk_stall_bound {
        b = b.disk_stall_bound(bound);
    }
    if let Some(g) = args.found {
        b = b.found(g);
    }
    b = b.term_floor(args.term_floor);
    if let Some(path) = &args.restore {
        let plan = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| tenure::backup::RestorePlan::from_json(&text))
            .and_then(|plan| match args.found {
                // A unit file pins the group: it must be the plan's.
                Some(g) if g != plan.group => Err(format!(
                    "the plan founds group {}, but --found gives {g}: set the group to the \
                     plan's (ctl restore-plan printed it)",
                    plan.group
                )),
                _ => Ok(plan),
            });
        match plan {
            Ok(plan) => b = b.restore_from(plan),
            Err(e) => {
                eprintln!("worker {id}: --restore {}: {e}", path.display());
                return 2;
            }
        }
    }
    if let Some(g) = args.group {
        b = b.group(g);
    }
    if let Some(l) = args.listen {
        b = b.listen(l);
    }
    for i in 0..args.elections {
        b = b.election(&shard_name(i), tenure::ElectionOptions::new());
    }
    if let Some(level) = args.log_level {
        b = b.logger(tenure::terminal_logger(level));
    }
    let node = match Node::start(b.build()).await {
        Ok(n) => n,
        Err(e) => {
            eprintln!("worker {id}: cannot start: {e}");
            let kind = store_refused(&e);
            emit(
                id,
                "start_failed",
                json!({"error": e.to_string(), "store_refused": kind}),
            );
            return if kind.is_some() {
                EXIT_STORE_REFUSED
            } else {
                1
            };
        }
    };
    let metrics_addr = match args.metrics {
        Some(addr) => {
            let n = node.clone();
            let options = tenure::metrics::ServeOptions {
                logger: logger(args.log_level),
                // GET /ready and /live for process supervisors (deploy/kubernetes).
                health: Some(tenure::metrics::HealthCheck::node(node.clone())),
                ..Default::default()
            };
            match tenure::metrics::serve_with(addr, move || n.metrics_text(), options).await {
                Ok(server) => Some(server.local_addr().to_string()),
                Err(e) => return fail_start(&node, format!("--metrics {addr}: {e}")).await,
            }
        }
        None => None,
    };
    let admin = match args.admin {
        Some(addr) => {
            let served = tenure::transport::tls::TlsIdentity::from_dir(&args.certs, id)
                .map_err(|e| e.to_string())
                .and_then(|identity| {
                    tenure::admin::serve(node.clone(), addr, &identity, logger(args.log_level))
                        .map_err(|e| e.to_string())
                });
            match served {
                Ok(server) => Some(server),
                Err(e) => return fail_start(&node, format!("--admin {addr}: {e}")).await,
            }
        }
        None => None,
    };
    let t = args.timing;
    emit(
        id,
        "started",
        json!({
            "pid": std::process::id(),
            "tick_ms": t.tick.as_secs_f64() * 1e3,
            "election_ms": t.election_timeout().as_secs_f64() * 1e3,
            "heartbeat_ms": t.heartbeat_interval().as_secs_f64() * 1e3,
            "read_mode": format!("{:?}", args.read_mode),
            "metrics": metrics_addr,
            "admin": admin.as_ref().map(|a| a.local_addr().to_string()),
        }),
    );

    // leader_changed: this node's view of (term, leader).
    let mut watch = node.watch();
    tokio::spawn(async move {
        let mut last: Option<(u64, Option<u64>)> = None;
        let mut last_kind = None;
        loop {
            let l = watch.borrow_and_update().clone();
            // Whether this node is in the group, and how.
            let kind = match l.role {
                Role::Joining | Role::Learner | Role::Removed | Role::Founding => {
                    Some(l.role.as_str())
                }
                Role::Stopped => last_kind.flatten(),
                _ => Some("voter"),
            };
            if last_kind != Some(kind) && kind.is_some() {
                last_kind = Some(kind);
                emit(
                    id,
                    "membership",
                    json!({"term": l.term, "membership": kind}),
                );
            }
            if l.role != Role::Stopped && last != Some((l.term, l.leader)) {
                last = Some((l.term, l.leader));
                emit_leader_changed(id, l.term, l.leader, l.role, None);
            }
            if watch.changed().await.is_err() {
                break;
            }
        }
    });

    // history: the leadership history this node has applied, whenever it changed (the
    // fault suites check that no node's applied history loses a record another had).
    let n = node.clone();
    tokio::spawn(async move {
        let mut last = None;
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tick.tick().await;
            let Ok(h) = n.history().await else { break };
            let records: Vec<[u64; 2]> = h.iter().map(|r| [r.term, r.leader]).collect();
            if last.as_ref() != Some(&records) {
                emit(
                    id,
                    "history",
                    json!({ "records": records, "election": null }),
                );
                last = Some(records);
            }
        }
    });
    if args.elections > 0 {
        spawn_named_views(&node, args.elections);
    }

    if let Some(every) = args.stats_every {
        let n = node.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let s = n.transport_stats();
                emit(
                    id,
                    "transport_stats",
                    json!({"sent": s.sent, "received": s.received,
                    "bytes_sent": s.bytes_sent, "connects": s.connects}),
                );
            }
        });
    }

    // The lease loops: acquire, confirm periodically, report loss; the root's, and one
    // per named election.
    let lease_node = node.clone();
    let confirm_every = args.confirm_every;
    let mut bench_confirms = args.bench_confirms;
    let lease_task = tokio::spawn(async move {
        while let Ok(lease) = lease_node.lease().await {
            let bench = std::mem::take(&mut bench_confirms);
            tenure_events(id, None, &lease, confirm_every, bench).await;
        }
    });
    let mut named_lease_tasks = Vec::new();
    let load = ConfirmLoad::spawn(id, args.confirm_load.clone());
    let confirm_every = args.named_confirm_every;
    for i in 0..args.elections {
        let election = node.election(&shard_name(i));
        let load = load.clone();
        named_lease_tasks.push(tokio::spawn(async move {
            let name = election.name().to_string();
            loop {
                match election.lease().await {
                    Ok(lease) => {
                        named_lease_events(id, &name, &lease, confirm_every, &load).await;
                    }
                    // Removed (by an operator): a later incarnation may lead again.
                    Err(tenure::ElectionError::Removed(_)) => continue,
                    Err(_) => break,
                }
            }
        }));
    }

    let ledger = match args.ledger.as_ref().map(|l| {
        crate::ledger::LedgerAt::parse(&l.0)
            .and_then(|at| at.with_password(args.ledger_password_file.as_deref()))
            .map_err(|e| format!("--ledger: {e}"))
    }) {
        Some(Err(e)) => return fail_start(&node, e).await,
        Some(Ok(l)) => Some(l),
        None => None,
    };
    let settlement = match &ledger {
        Some(at) if args.elections > 0 => match open_shards(at, id, args.elections, &node) {
            Ok(shards) => Some(spawn_shard_settlement(
                node.clone(),
                shards,
                args.settle_every,
                args.row_delay,
            )),
            Err(e) => return fail_start(&node, e).await,
        },
        Some(at) => match Ledger::open_at(at, id) {
            Ok(ledger) => {
                node.metrics()
                    .register_fence(super::ledger::FENCE, ledger.fence_stats());
                Some(spawn_settlement(
                    node.clone(),
                    ledger,
                    args.settle_every,
                    args.row_delay,
                ))
            }
            Err(e) => return fail_start(&node, e).await,
        },
        None => None,
    };

    // Partition drills without root: SIGUSR1 isolates, SIGUSR2 heals.
    {
        use tokio::signal::unix::{signal, SignalKind};
        let peer_ids: Vec<u64> = tenure::config::parse_peers(&args.peers)
            .map(|p| p.keys().copied().filter(|p| *p != id).collect())
            .unwrap_or_default();
        if let (Ok(mut cut), Ok(mut heal)) = (
            signal(SignalKind::user_defined1()),
            signal(SignalKind::user_defined2()),
        ) {
            let n = node.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        Some(()) = cut.recv() => {
                            for p in &peer_ids {
                                n.faults().isolate_from(*p);
                            }
                            emit(id, "isolated", json!({}));
                        }
                        Some(()) = heal.recv() => {
                            n.faults().heal();
                            emit(id, "healed", json!({}));
                        }
                        else => break,
                    }
                }
            });
        }
    }

    // Disk stalls (docs/design.md, section 15): disk_stalled when the node steps aside,
    // disk_recovered when its probes are fast again. The watch keeps only the latest
    // value: a stall that began and ended between two looks is counted by the metrics,
    // and reported from them.
    {
        let mut disk = node.disk();
        let metrics = node.metrics();
        tokio::spawn(async move {
            let mut reported = 0;
            let mut stalled = false;
            while disk.changed().await.is_ok() {
                let health = disk.borrow_and_update().clone();
                let (stalls, _) = metrics.disk_stalls();
                if stalls > reported {
                    reported = stalls;
                    let detail = match &health {
                        tenure::DiskHealth::Stalled {
                            operation,
                            took,
                            bound,
                            ..
                        } => json!({"operation": operation, "took_ms": took.as_millis() as u64,
                                    "bound_ms": bound.as_millis() as u64}),
                        _ => json!({"operation": null}),
                    };
                    if !stalled {
                        emit(id, "disk_stalled", detail);
                    }
                    stalled = true;
                }
                if stalled && !health.is_stalled() {
                    stalled = false;
                    emit(id, "disk_recovered", json!({}));
                }
            }
        });
    }

    // SIGHUP: read the TLS files again now (README, "Rotating certificates").
    if let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        let n = node.clone();
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                match n.reload_tls() {
                    Ok(tenure::transport::tls::TlsReload::Reloaded { not_after }) => {
                        let left = not_after
                            .duration_since(std::time::SystemTime::now())
                            .map_or(0, |d| d.as_secs());
                        emit(id, "tls_reloaded", json!({"expires_in_seconds": left}));
                    }
                    Ok(_) => emit(id, "tls_unchanged", json!({})),
                    Err(e) => {
                        eprintln!("worker {id}: TLS files not reloaded: {e}");
                        emit(id, "tls_reload_failed", json!({"error": e.to_string()}));
                    }
                }
            }
        });
    }

    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("worker {id}: cannot install SIGTERM handler: {e}");
            return 1;
        }
    };
    // A fatal stop is reported by the first join only: keep it for the stopped event.
    let failure = tokio::select! {
        _ = term.recv() => None,
        _ = tokio::signal::ctrl_c() => None,
        r = node.join() => r.err(),
    };
    let code = match &failure {
        None => 0,
        Some(e) => {
            eprintln!("worker {id}: {e}");
            match e.cause {
                // This node lost its data: starting it again on this folder will not help.
                StopCause::LostData { .. } | StopCause::LostAcknowledgedData { .. } => {
                    EXIT_STORE_REFUSED
                }
                StopCause::WriteFailed { .. } => EXIT_WRITE_FAILED,
                _ => 1,
            }
        }
    };
    if let Some(s) = settlement {
        s.stop().await;
    }
    if let Some(a) = admin {
        a.close().await;
    }
    let result = node.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_secs(1), async move {
        let _ = lease_task.await;
        for t in named_lease_tasks {
            let _ = t.await;
        }
    })
    .await;
    let error = failure.or(result.err());
    emit(
        id,
        "stopped",
        json!({
            "error": error.as_ref().map(std::string::ToString::to_string),
            "cause": error.as_ref().map(|e| stop_cause_name(&e.cause)),
            // The write that failed, when a store write stopped the node (cause "storage").
            "operation": error.as_ref().and_then(|e| match &e.cause {
                StopCause::WriteFailed { operation, .. } => Some(operation.clone()),
                _ => None,
            }),
        }),
    );
    code
}

/// A stable name of a stop cause, for the `stopped` event.
fn stop_cause_name(cause: &StopCause) -> &'static str {
    match cause {
        StopCause::Shutdown => "shutdown",
        StopCause::Storage(_) | StopCause::WriteFailed { .. } => "storage",
        StopCause::TransportClosed => "transport_closed",
        StopCause::LostData { .. } => "lost_data",
        StopCause::LostAcknowledgedData { .. } => "lost_acknowledged_data",
        StopCause::RaftPanicked { .. } => "raft_panicked",
        StopCause::DriverTask(_) => "driver_task",
        _ => "other",
    }
}

/// One tenure's events, until its lease is lost: `lease_acquired`, a `lease_confirmed`
/// every `confirm_every`, `lease_lost`; `election` is `None` for the root election.
async fn tenure_events(
    id: u64,
    election: Option<&str>,
    lease: &Lease,
    confirm_every: Duration,
    bench_confirms: usize,
) {
    acquired(id, election, lease);
    if bench_confirms > 0 {
        confirm_bench(id, lease, bench_confirms).await;
    }
    confirm_loop(id, election, lease, confirm_every).await;
}

/// The `lease_acquired` event of `lease`, with `granted_ns`: when the driver granted it
/// (on the clock of `mono_ns`), which is earlier than the event's `mono_ns` by the time
/// this task took to wake, longer if the process was paused in between.
pub(crate) fn acquired(id: u64, election: Option<&str>, lease: &Lease) {
    let token = lease.token().term();
    emit(
        id,
        "lease_acquired",
        json!({"term": token, "token": token,
               "granted_ns": instant_to_monotonic_ns(lease.granted_at()),
               "valid_until_ns": instant_to_monotonic_ns(lease.valid_until()),
               "election": election}),
    );
}

/// Confirms `lease` every `confirm_every` (a `lease_confirmed` event each) until it is
/// lost (a `lease_lost` event).
pub(crate) async fn confirm_loop(
    id: u64,
    election: Option<&str>,
    lease: &Lease,
    confirm_every: Duration,
) {
    loop {
        tokio::select! {
            reason = lease.lost() => {
                lost(id, election, lease, reason);
                break;
            }
            _ = tokio::time::sleep(confirm_every) => {
                let t0 = StdInstant::now();
                // When the call began, exactly: a process stopped between the
                // confirm's return and this event must not look like it began late.
                let began_ns = monotonic_ns();
                match lease.confirm().await {
                    Ok(tok) => emit(id, "lease_confirmed", json!({
                        "term": tok.term(), "token": tok.term(),
                        "began_ns": began_ns,
                        "latency_us": t0.elapsed().as_secs_f64() * 1e6,
                        "valid_until_ns": instant_to_monotonic_ns(lease.valid_until()),
                        "election": election,
                    })),
                    Err(e) => {
                        lost(id, election, lease, e.reason);
                        break;
                    }
                }
            }
        }
    }
}

/// `lease_lost`, with `ended_ns`: when the lease really ended (its revocation or the end of
/// its validity, whichever came first), which can be earlier than the event's `mono_ns`.
pub(crate) fn lost(
    id: u64,
    election: Option<&str>,
    lease: &tenure::Lease,
    reason: tenure::LostReason,
) {
    let token = lease.token().term();
    let ended = lease.ended_at().map(instant_to_monotonic_ns);
    emit(
        id,
        "lease_lost",
        json!({"term": token, "token": token, "reason": reason.as_str(), "ended_ns": ended,
               "election": election}),
    );
}
