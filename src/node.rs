//! The public handle to a running election node.

use std::sync::Arc;

use raft::eraftpb::ConfState;
use raft::prelude::RawNode;
use raft::ReadOnlyOption;
use slog::{o, warn, Logger};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::config::{Config, ReadMode, TlsSource};
use crate::driver::{discard_logger, Command, Driver, DriverParts};
use crate::error::{ConfigError, NodeStopped, StartError, TransferError};
use crate::history::{History, TenureRecord};
use crate::lease::Lease;
use crate::metrics::Metrics;
use crate::storage::{RaftStore, RocksStore};
use crate::transport::quic::{QuicConfig, QuicTransport};
use crate::transport::tls::TlsIdentity;
use crate::transport::{Faults, Inbound, NodeId, Transport, TransportStatsSnapshot};

/// This node's part in the election, as raft-rs sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Follows a leader, or waits for one.
    Follower,
    /// Asking peers whether an election could succeed (pre-vote), without raising the term.
    PreCandidate,
    /// Campaigning in a new term.
    Candidate,
    /// Leads the group in the current term. Act only with a confirmed [`Lease`].
    Leader,
    /// The node has stopped.
    Stopped,
}

impl Role {
    /// A short lowercase name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Follower => "follower",
            Role::PreCandidate => "pre_candidate",
            Role::Candidate => "candidate",
            Role::Leader => "leader",
            Role::Stopped => "stopped",
        }
    }
}

/// A snapshot of who leads, as this node knows it.
///
/// Published through [`Node::watch`] on every change. A `watch` channel keeps the latest
/// value, not every change: a slow reader sees the newest state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    /// The current Raft term at this node.
    pub term: u64,
    /// The leader this node knows of in `term`, or `None` (no leader known).
    pub leader: Option<NodeId>,
    /// This node's role.
    pub role: Role,
    /// Whether this node holds a confirmed lease right now.
    pub leased: bool,
}

/// A running election node. Cheap to clone; every clone talks to the same node.
///
/// The node runs until [`shutdown`](Node::shutdown) (or [`kill`](Node::kill)), or
/// until every `Node` and [`Lease`] handle is dropped, which shuts it down gracefully.
#[derive(Clone)]
pub struct Node {
    id: NodeId,
    commands: mpsc::Sender<Command>,
    leadership: watch::Receiver<Leadership>,
    transport: Arc<dyn Transport>,
    read_mode: ReadMode,
    task: Arc<tokio::sync::Mutex<Option<DriverTask>>>,
    /// The QUIC transport when started by [`Node::start`]: stopping waits until its
    /// socket is released, so a restart in the same process can bind the port again.
    quic: Option<Arc<QuicTransport>>,
    metrics: Arc<Metrics>,
}

type DriverTask = JoinHandle<Result<(), NodeStopped>>;

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .field("leadership", &*self.leadership.borrow())
            .finish()
    }
}

impl Node {
    /// Starts a node with RocksDB storage in `config.data_dir` and the QUIC transport with
    /// the TLS identity in `config.tls`. Must be called inside a tokio runtime.
    ///
    /// On first start the data directory is created and the group's membership is taken
    /// from `config.peers`; afterwards the stored membership wins.
    pub async fn start(config: Config) -> Result<Node, StartError> {
        config.validate()?;
        let data_dir = config.data_dir.clone().ok_or(ConfigError::NoDataDir)?;
        let tls = config.tls.clone().ok_or(ConfigError::NoTls)?;
        let identity = match tls {
            TlsSource::Dir(dir) => TlsIdentity::from_dir(&dir, config.id)?,
            TlsSource::Files { ca, cert, key } => TlsIdentity::load(&ca, &cert, &key)?,
            TlsSource::Identity(id) => id,
        };
        if identity.id() != config.id {
            return Err(ConfigError::IdentityMismatch {
                id: config.id,
                cert_id: identity.id(),
            }
            .into());
        }
        let initial = ConfState {
            voters: config.member_ids(),
            ..Default::default()
        };
        let store = RocksStore::open_or_create(&data_dir, initial)?;
        let logger = config.logger.clone().unwrap_or_else(discard_logger);
        let listen = config.listen_addr().ok_or(ConfigError::SelfNotInPeers {
            id: config.id,
            peers: config.member_ids(),
        })?;
        let peers = config
            .peers
            .iter()
            .filter(|(id, _)| **id != config.id)
            .map(|(id, a)| (*id, *a))
            .collect();
        let mut qc = QuicConfig::new(config.id, listen, peers, identity);
        qc.logger = logger.new(o!("component" => "quic"));
        let (transport, inbound) = QuicTransport::start(qc)?;
        let quic = Arc::new(transport);
        let mut node = Node::start_with(config, store, quic.clone(), inbound).await?;
        node.quic = Some(quic);
        Ok(node)
    }

    /// Starts a node on a store and transport of your choice (memory store and in-process
    /// transport in tests; the same driver either way). `config.data_dir` and `config.tls`
    /// are not used.
    pub async fn start_with<S: RaftStore>(
        config: Config,
        store: S,
        transport: Arc<dyn Transport>,
        inbound: mpsc::Receiver<Inbound>,
    ) -> Result<Node, StartError> {
        let warnings = config.validate()?;
        let logger = config.logger.clone().unwrap_or_else(discard_logger);
        let logger = logger.new(o!("node" => config.id));
        for w in &warnings {
            warn!(logger, "configuration warning"; "warning" => %w);
        }
        let cs = store.conf_state();
        let mut members: Vec<NodeId> = cs
            .voters
            .iter()
            .chain(cs.learners.iter())
            .copied()
            .collect();
        members.sort_unstable();
        if !members.contains(&config.id) {
            return Err(StartError::NotAMember {
                path: config.data_dir.clone().unwrap_or_default(),
                id: config.id,
                members,
            });
        }
        // The replicated state (the leadership history) as of the last snapshot; the log
        // above it is replayed by raft-rs.
        let snap = raft::Storage::snapshot(&store, 0, 0).map_err(StartError::Raft)?;
        let applied = snap.get_metadata().index;
        let history = History::from_snapshot(&snap.data).map_err(|detail| {
            StartError::Storage(crate::storage::StorageError::Corrupt {
                path: config.data_dir.clone().unwrap_or_default(),
                detail,
            })
        })?;
        let t = config.timing;
        let raft_config = raft::Config {
            id: config.id,
            election_tick: t.election_ticks,
            heartbeat_tick: t.heartbeat_ticks,
            min_election_tick: t.election_ticks,
            max_election_tick: t.election_ticks_max,
            pre_vote: true,
            check_quorum: !crate::mutation::active("no-check-quorum"),
            read_only_option: ReadOnlyOption::Safe,
            max_inflight_msgs: 256,
            max_size_per_msg: 1 << 20,
            ..Default::default()
        };
        raft_config.validate()?;
        let raw = RawNode::new(
            &raft_config,
            store.clone(),
            &logger.new(o!("component" => "raft")),
        )?;
        let (cmd_tx, cmd_rx) = mpsc::channel(1024);
        let initial = Leadership {
            term: raw.raft.term,
            leader: None,
            role: Role::Follower,
            leased: false,
        };
        let (ltx, lrx) = watch::channel(initial);
        let metrics = Metrics::new(config.id);
        let driver = Driver::new(DriverParts {
            raw,
            store,
            transport: transport.clone(),
            inbound,
            commands: cmd_rx,
            command_tx: cmd_tx.downgrade(),
            leadership: ltx,
            timing: t,
            read_mode: config.read_mode,
            logger: logger.clone(),
            clock: crate::clock::LocalClock::with_rate(config.clock_rate),
            metrics: metrics.clone(),
            history,
            applied,
            history_retention: config.history_retention,
            compact_after: config.compact_after,
            election_seed: config.election_seed,
        });
        let task = tokio::spawn(driver.run());
        Ok(Node {
            id: config.id,
            commands: cmd_tx,
            leadership: lrx,
            transport,
            read_mode: config.read_mode,
            task: Arc::new(tokio::sync::Mutex::new(Some(task))),
            quic: None,
            metrics,
        })
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The read mode this node confirms leases with.
    pub fn read_mode(&self) -> ReadMode {
        self.read_mode
    }

    /// A receiver of every change of leadership as this node sees it (including "no
    /// leader known" and this node stopping).
    pub fn watch(&self) -> watch::Receiver<Leadership> {
        self.leadership.clone()
    }

    /// The current leadership snapshot.
    pub fn leadership(&self) -> Leadership {
        self.leadership.borrow().clone()
    }

    /// Waits until this node leads **and** has confirmed it with a ReadIndex round a
    /// quorum acknowledged, then returns the lease. Waits across elections: if another
    /// node leads, this resolves only if this node becomes leader later.
    ///
    /// Wrap it in `tokio::time::timeout` to bound the wait.
    pub async fn lease(&self) -> Result<Lease, NodeStopped> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Lease { reply: tx })
            .await
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())
    }

    /// Hands leadership to `to`, or to the most up-to-date follower when `None`. This
    /// node's leases are revoked first. Resolves with the new leader's id once it leads.
    pub async fn transfer_leadership(&self, to: Option<NodeId>) -> Result<NodeId, TransferError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Transfer { to, reply: tx })
            .await
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// Stops the node. If it leads, it first revokes its leases and hands leadership to
    /// the most up-to-date follower (waiting at most one election timeout), so the group
    /// elects a new leader at once instead of after a timeout.
    pub async fn shutdown(&self) -> Result<(), NodeStopped> {
        let (tx, rx) = oneshot::channel();
        if self
            .commands
            .send(Command::Shutdown { reply: tx })
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
        self.join().await
    }

    /// Stops the node at once without handing over, as if its process had died: for
    /// tests and fault drills. Its leases are revoked locally.
    pub async fn kill(&self) {
        let (tx, rx) = oneshot::channel();
        if self
            .commands
            .send(Command::Kill { reply: tx })
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
        let _ = self.join().await;
    }

    /// Waits until the driver has ended; its error if it stopped on a fatal error.
    pub async fn join(&self) -> Result<(), NodeStopped> {
        let task = self.task.lock().await.take();
        let result = self.join_driver(task).await;
        if let Some(q) = &self.quic {
            q.shutdown().await;
        }
        result
    }

    async fn join_driver(&self, task: Option<DriverTask>) -> Result<(), NodeStopped> {
        match task {
            Some(t) => match t.await {
                Ok(r) => r,
                Err(e) => Err(NodeStopped {
                    reason: format!("driver task failed: {e}"),
                }),
            },
            None => {
                // Another handle joined already; wait for the published stop.
                let mut rx = self.leadership.clone();
                let _ = rx.wait_for(|l| l.role == Role::Stopped).await;
                Ok(())
            }
        }
    }

    /// The leadership history this node has applied: one record per tenure, oldest
    /// first, bounded by [`Config::history_retention`]. Every node converges on the same
    /// history; a follower's may trail the leader's by the entries it has not applied.
    pub async fn history(&self) -> Result<Vec<TenureRecord>, NodeStopped> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::History { reply: tx })
            .await
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())
    }

    /// The first and last index of this node's Raft log (for tests of compaction).
    #[doc(hidden)]
    pub async fn log_span(&self) -> Result<(u64, u64), NodeStopped> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::LogSpan { reply: tx })
            .await
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())
    }

    /// This node's metrics (register fences on it with
    /// [`Metrics::register_fence`]).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// The Prometheus text exposition of this node's metrics, transport counters included.
    pub fn metrics_text(&self) -> String {
        self.metrics.set_transport(self.transport.stats());
        self.metrics.render()
    }

    /// Transport counters (messages sent, dropped, frames rejected, …).
    pub fn transport_stats(&self) -> TransportStatsSnapshot {
        self.transport.stats()
    }

    /// Fault-injection hooks of this node's transport, for tests: cut and heal links.
    pub fn faults(&self) -> &Faults {
        self.transport.faults()
    }
}

fn stopped() -> NodeStopped {
    NodeStopped {
        reason: "the node has stopped".into(),
    }
}

/// Builds the default terminal logger (`slog-term` through `slog-async`) at `level`.
pub fn terminal_logger(level: slog::Level) -> Logger {
    use slog::Drain;
    let decorator = slog_term::TermDecorator::new().stderr().build();
    let drain = slog_term::FullFormat::new(decorator).build().fuse();
    let drain = slog_async::Async::new(drain).chan_size(4096).build().fuse();
    let drain = drain.filter_level(level).fuse();
    Logger::root(drain, o!())
}
