//! The public handle to a running election node.
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | [`Node`]: starting (the store, founding, the transport), watching, leases, transfers, stopping |
//! | `members.rs` | the membership calls: adding, promoting, removing, replacing, draining |

mod members;

use std::sync::Arc;

use raft::eraftpb::ConfState;
use raft::prelude::RawNode;
use raft::ReadOnlyOption;
use slog::{o, warn, Logger};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::config::{Config, ReadMode, TlsSource};
use crate::driver::{
    discard_logger, watch_of, Command, Driver, DriverParts, ElectionsView, MemberChange,
    NamedParts, Watches,
};
use crate::election::{ElectionError, ElectionInfo, ElectionOptions, Removed};
use crate::election_handle::Election;
use crate::error::{
    ConfigError, MembershipError, NodeStopped, StartError, StopCause, StorageError, TransferError,
};
use crate::founding;
use crate::history::TenureRecord;
use crate::lease::{ConfirmRequest, Lease};
use crate::metrics::Metrics;
use crate::state::GroupState;
use crate::status::{Leadership, Membership, Role, Status};
use crate::storage::ReadyWrite;
use crate::storage::{RaftStore, RocksStore};
use crate::tls::{TlsError, TlsFiles, TlsIdentity, TlsReload};
use crate::transport::quic::{QuicConfig, QuicTransport};
use crate::transport::{Faults, Inbox, NodeId, PeerAddr, Transport, TransportStatsSnapshot};

/// A running election node. Cheap to clone; every clone talks to the same node.
///
/// The node runs until [`shutdown`](Node::shutdown) (or [`kill`](Node::kill)), or
/// until every `Node` and [`Lease`] handle is dropped, which shuts it down gracefully.
#[derive(Clone)]
pub struct Node {
    id: NodeId,
    commands: mpsc::Sender<Command>,
    /// The driver runs while any `Node` or `Lease` handle holds this channel's sender.
    _keep_confirms: mpsc::Sender<ConfirmRequest>,
    leadership: watch::Receiver<Leadership>,
    transport: Arc<dyn Transport>,
    read_mode: ReadMode,
    task: Arc<tokio::sync::Mutex<Option<DriverTask>>>,
    /// The QUIC transport when started by [`Node::start`]: stopping waits until its
    /// socket is released, so a restart in the same process can bind the port again.
    quic: Option<Arc<QuicTransport>>,
    metrics: Arc<Metrics>,
    /// The named elections' leadership watches, shared with the driver.
    watches: Watches,
    elections: watch::Receiver<ElectionsView>,
    disk: watch::Receiver<crate::status::DiskHealth>,
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
    /// The data directory must hold this node's store, unless the node founds a group
    /// ([`Config::found`]) or joins one ([`Config::join`]): only then is a store created,
    /// and only in an empty directory. A directory of another node or group, or one that
    /// holds something other than a whole store, is refused with an error that says so
    /// (see `docs/design.md`, section 6).
    pub async fn start(config: Config) -> Result<Node, StartError> {
        config.validate()?;
        let data_dir = config.data_dir.clone().ok_or(ConfigError::NoDataDir)?;
        let tls = config.tls.clone().ok_or(ConfigError::NoTls)?;
        let (identity, tls_files) = match tls {
            TlsSource::Dir(dir) => {
                let files = TlsFiles::in_dir(&dir, config.id);
                (TlsIdentity::from_dir(&dir, config.id)?, Some(files))
            }
            TlsSource::Files { ca, cert, key } => {
                let identity = TlsIdentity::load(&ca, &cert, &key)?;
                let files = TlsFiles {
                    ca,
                    cert,
                    key,
                    id: config.id,
                };
                (identity, Some(files))
            }
            TlsSource::Identity(id) => (id, None),
        };
        if identity.id() != config.id {
            return Err(ConfigError::IdentityMismatch {
                id: config.id,
                cert_id: identity.id(),
            }
            .into());
        }
        let store = match RocksStore::open(&data_dir) {
            Ok(store) => store,
            Err(StorageError::Missing { .. }) if config.found.is_some() || config.join => {
                RocksStore::create(&data_dir, config.id, ConfState::default())?
            }
            Err(StorageError::Missing { .. }) => {
                return Err(StartError::NoStore {
                    path: data_dir,
                    id: config.id,
                })
            }
            Err(e) => return Err(e.into()),
        };
        // Refuse a wrong store before the transport says anything to the peers.
        check_store(&store, &config, &data_dir)?;
        let logger = config.logger.clone().unwrap_or_else(discard_logger);
        let listen = config.listen_addr().ok_or(ConfigError::SelfNotInPeers {
            id: config.id,
            peers: config.member_ids(),
        })?;
        let peers = config
            .peers
            .iter()
            .filter(|(id, _)| **id != config.id)
            .map(|(id, a)| (*id, a.clone()))
            .collect();
        let mut qc = QuicConfig::new(config.id, listen, Default::default(), identity);
        qc.peers = peers;
        qc.logger = logger.new(o!("component" => "quic"));
        qc.tls_files = tls_files;
        qc.tls_poll = config.tls_poll;
        if let Some(max) = config.hooks.max_frame {
            qc.max_frame = max;
        }
        if let Some(depth) = config.hooks.inbound_depth {
            qc.inbound_depth = depth;
        }
        // The first hello says what the store holds: the node sets it once it has read it.
        qc.hello = None;
        let (transport, inbound) = QuicTransport::start(qc)?;
        let quic = Arc::new(transport);
        let mut node = Node::start_with(config, store, quic.clone(), inbound).await?;
        // `tenure_cert_expiry_seconds` follows every identity the transport swaps in; the
        // task ends with the transport.
        let mut updates = quic.tls_updates();
        let metrics = node.metrics.clone();
        tokio::spawn(async move {
            loop {
                let not_after = updates.borrow_and_update().not_after();
                metrics.set_cert_not_after(not_after);
                if updates.changed().await.is_err() {
                    return;
                }
            }
        });
        node.quic = Some(quic);
        Ok(node)
    }

    /// Starts a node on a store and transport of your choice (memory store and in-process
    /// transport in tests; the same driver either way). `config.data_dir` and `config.tls`
    /// are not used. The store is checked as by [`Node::start`]; a fresh store is founded
    /// (with [`Config::found`]) or joins (with [`Config::join`]).
    pub async fn start_with<S: RaftStore>(
        config: Config,
        store: S,
        transport: Arc<dyn Transport>,
        inbound: Inbox,
    ) -> Result<Node, StartError> {
        let warnings = config.validate()?;
        let logger = config.logger.clone().unwrap_or_else(discard_logger);
        let logger = logger.new(o!("node" => config.id));
        for w in &warnings {
            warn!(logger, "configuration warning"; "warning" => %w);
        }
        let path = config.data_dir.clone().unwrap_or_default();
        let kind = check_store(&store, &config, &path)?;
        let (cmd_tx, cmd_rx) = mpsc::channel(1024);
        let (confirm_tx, confirm_rx) = mpsc::channel(1024);
        let cs = store.conf_state();
        let initial = Leadership {
            term: store.hard_state().term,
            leader: None,
            role: match kind {
                StoreKind::Fresh => Role::Founding,
                StoreKind::Joining => Role::Joining,
                StoreKind::Member if cs.learners.contains(&config.id) => Role::Learner,
                StoreKind::Member => Role::Follower,
            },
            leased: false,
            election: None,
            suspended: false,
        };
        let (ltx, lrx) = watch::channel(initial);
        let watches = Watches::default();
        let (view_tx, view_rx) = watch::channel(ElectionsView::default());
        let (disk_tx, disk_rx) = watch::channel(crate::status::DiskHealth::Healthy);
        let metrics = Metrics::new(config.id);
        let id = config.id;
        let read_mode = config.read_mode;
        let setup = Setup {
            config,
            store,
            transport: transport.clone(),
            inbound,
            commands: cmd_rx,
            confirms: confirm_rx,
            confirm_tx: confirm_tx.downgrade(),
            leadership: ltx,
            metrics: metrics.clone(),
            logger,
            path,
            watches: watches.clone(),
            view: view_tx,
            disk: disk_tx,
        };
        let task = match kind {
            StoreKind::Fresh => tokio::spawn(setup.found_then_run()),
            StoreKind::Joining | StoreKind::Member => {
                let driver = setup.into_driver()?;
                tokio::spawn(driver.run(Vec::new()))
            }
        };
        Ok(Node {
            id,
            commands: cmd_tx,
            _keep_confirms: confirm_tx,
            leadership: lrx,
            transport,
            read_mode,
            task: Arc::new(tokio::sync::Mutex::new(Some(task))),
            quic: None,
            metrics,
            watches,
            elections: view_rx,
            disk: disk_rx,
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
        match self.ask(|reply| Command::Lease { reply }).await? {
            Ok(lease) => Ok(lease),
            Err(e) => Err(NodeStopped::shutdown(&e.to_string())),
        }
    }

    /// The handle of named election `name` (`docs/design.md`, section 11). It need not
    /// exist yet: its watch shows no leader and [`Election::lease`] waits until this node
    /// runs the election and leads it.
    pub fn election(&self, name: &str) -> Election {
        let watch = watch_of(&self.watches, name);
        Election {
            name: name.into(),
            commands: self.commands.clone(),
            watch: watch.subscribe(),
        }
    }

    /// Creates named election `name`, replicated through the group; resolves once this
    /// node applied it. Only the group's leader changes the catalog: elsewhere this fails
    /// with [`ElectionError::NotLeader`] naming the leader it knows.
    ///
    /// # Errors
    /// [`ElectionError::Exists`], [`ElectionError::InvalidName`], [`ElectionError::Full`],
    /// [`ElectionError::NotLeader`], [`ElectionError::TimedOut`] (look at the catalog).
    pub async fn create_election(
        &self,
        name: &str,
        options: ElectionOptions,
    ) -> Result<ElectionInfo, ElectionError> {
        let name = name.to_string();
        self.ask(|reply| Command::CreateElection {
            name,
            options,
            reply,
        })
        .await?
    }

    /// Removes named election `name`: every holder revokes its lease as it applies the
    /// removal, and its data is deleted. Root leader only, as [`Node::create_election`].
    ///
    /// # Errors
    /// [`ElectionError::NotFound`], [`ElectionError::NotLeader`], [`ElectionError::TimedOut`].
    pub async fn remove_election(&self, name: &str) -> Result<Removed, ElectionError> {
        let name = name.to_string();
        self.ask(|reply| Command::RemoveElection { name, reply })
            .await?
    }

    /// Suspends named election `name`: its leases stop, its Raft group does not. Every
    /// node revokes the lease it holds as it applies the suspension, none grants one
    /// until [`Node::resume_election`], and [`crate::Election::lease`] waits meanwhile;
    /// [`crate::Election::watch`] shows it ([`Leadership::suspended`]). Resolves once the
    /// election's own log carries the suspension, when no lease of it is held anywhere
    /// (`docs/design.md`, section 11, "Suspending an election"). Replicated through the
    /// catalog: it survives restarts, and backups carry it. Root leader only, as
    /// [`Node::create_election`]; suspending a suspended election changes nothing.
    ///
    /// # Errors
    /// [`ElectionError::NotFound`], [`ElectionError::NotLeader`], [`ElectionError::TimedOut`]
    /// (look at the catalog: the suspension may have applied).
    pub async fn suspend_election(&self, name: &str) -> Result<ElectionInfo, ElectionError> {
        self.suspend(name, true).await
    }

    /// Resumes named election `name` ([`Node::suspend_election`]): resolves once its own
    /// log carries the resumption. Its first lease after that is in a new term, so its
    /// token is above every token the election handed out before.
    ///
    /// # Errors
    /// As [`Node::suspend_election`].
    pub async fn resume_election(&self, name: &str) -> Result<ElectionInfo, ElectionError> {
        self.suspend(name, false).await
    }

    async fn suspend(&self, name: &str, suspended: bool) -> Result<ElectionInfo, ElectionError> {
        let name = name.to_string();
        self.ask(|reply| Command::SuspendElection {
            name,
            suspended,
            reply,
        })
        .await?
    }

    /// The catalog of named elections as this node applied it.
    ///
    /// # Errors
    /// [`NodeStopped`] if the node stopped.
    pub async fn list_elections(&self) -> Result<Vec<ElectionInfo>, NodeStopped> {
        self.ask(|reply| Command::Elections { reply }).await
    }

    /// Every named election's leadership on this node, by name; changes after a driver
    /// turn that changed any, at most once per heartbeat interval (with thousands of
    /// names a copy per turn would cost more than the turn). [`crate::Election::watch`]
    /// follows one name without delay.
    pub fn elections(&self) -> watch::Receiver<ElectionsView> {
        self.elections.clone()
    }

    /// Hands leadership to `to`, or to the most up-to-date follower when `None`. This
    /// node's leases are revoked first. Resolves with the new leader's id once it leads.
    /// A handover that fails after the target was asked to campaign ends in a new
    /// election: this node steps down ([`TransferError::TimedOut`]).
    pub async fn transfer_leadership(&self, to: Option<NodeId>) -> Result<NodeId, TransferError> {
        self.ask(|reply| Command::Transfer { to, reply }).await?
    }

    /// Whether this node's disk keeps up, and every change of it: a synced write slower
    /// than [`Config::disk_stall_bound`](crate::Config::disk_stall_bound) makes it
    /// [`DiskHealth::Stalled`](crate::DiskHealth::Stalled) (the node then leads nothing),
    /// and a few fast probe writes in a row make it healthy again (`docs/design.md`,
    /// section 15).
    pub fn disk(&self) -> watch::Receiver<crate::status::DiskHealth> {
        self.disk.clone()
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

    /// Waits until the driver has ended and its store is closed; its error if it stopped
    /// on a fatal error. Cancel-safe: a `join` dropped before it completes (in a
    /// `select!`, say) leaves the driver's task for the next `join` or `shutdown`.
    pub async fn join(&self) -> Result<(), NodeStopped> {
        let result = self.join_driver().await;
        if let Some(q) = &self.quic {
            q.shutdown().await;
        }
        result
    }

    async fn join_driver(&self) -> Result<(), NodeStopped> {
        // The task stays in its slot while it is awaited, so that a cancelled join does
        // not take it away from the next one.
        let mut slot = self.task.lock().await;
        match slot.as_mut() {
            Some(t) => {
                let r = match t.await {
                    Ok(r) => r,
                    Err(e) => Err(NodeStopped::new(StopCause::DriverTask(e.to_string()))),
                };
                *slot = None;
                r
            }
            None => {
                drop(slot);
                // Another handle joined already; wait for the published stop, which the
                // driver sends once its store is closed.
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
        self.ask(|reply| Command::History { reply }).await
    }

    /// What this node knows about itself and the group: role, term, leader, lease,
    /// membership, quorum health.
    pub async fn status(&self) -> Result<Status, NodeStopped> {
        self.ask(|reply| Command::Status { reply }).await
    }

    /// A backup of the group's replicated state as this node applied it (membership,
    /// drains, history, the catalog with its next id) and the highest term of the root
    /// and of each named election it runs, and when it was taken: what a
    /// [`RestorePlan`](crate::backup::RestorePlan) founding again with
    /// [`ConfigBuilder::restore_from`](crate::ConfigBuilder::restore_from) needs so that
    /// tokens never go back. Ask the leader for the newest view.
    pub async fn backup(&self) -> Result<crate::backup::Backup, NodeStopped> {
        self.ask(|reply| Command::Backup { reply })
            .await?
            .map_err(|e| NodeStopped::shutdown(&e))
    }

    /// The first and last index of this node's Raft log (for tests of compaction).
    #[doc(hidden)]
    #[cfg(feature = "testing")]
    pub async fn log_span(&self) -> Result<(u64, u64), NodeStopped> {
        self.ask(|reply| Command::LogSpan { reply }).await
    }

    /// This node's metrics (register fences on it with
    /// [`Metrics::register_fence`]).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Registers this node's metrics, transport counters included, into the host's
    /// `registry` (names `tenure_*`, each with the label `node` but for the histograms
    /// and fence counters; see [`crate::metrics`]). The registry holds handles to the
    /// live values: it shows them as they are whenever it is encoded, and it does not
    /// keep the node's transport alive (its counters leave the exposition with it).
    ///
    /// Register each node once; several nodes in one registry go into sub-registries
    /// with a label that tells them apart (such as the group):
    ///
    /// ```
    /// # async fn example(node: tenure::Node) {
    /// use tenure::metrics::prometheus_client::registry::Registry;
    ///
    /// let mut registry = Registry::default();
    /// node.register_metrics(registry.sub_registry_with_label(("group".into(), "billing".into())));
    /// # }
    /// ```
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        let transport = Arc::downgrade(&self.transport);
        self.metrics.register_with_transport(
            registry,
            Some(move || transport.upgrade().map(|t| t.stats())),
        );
    }

    /// The Prometheus text exposition (format 0.0.4) of this node's metrics, transport
    /// counters included: a registry that holds only this node's
    /// ([`register_metrics`](Node::register_metrics)), encoded.
    pub fn metrics_text(&self) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        self.register_metrics(&mut registry);
        crate::metrics::encode(&registry)
    }

    /// Reads this node's TLS files again (certificate, key, CA bundle) and, if they
    /// changed and pass every check a start makes, uses them for new connections; open
    /// connections, and so the group's leader and its lease, are not touched. A failure
    /// keeps the credential in use and says what is wrong with the files. The node also
    /// does this every [`Config::tls_poll`]; `tenure-worker` on SIGHUP.
    ///
    /// [`TlsError::NotReloadable`] for a node started with [`Node::start_with`] or with
    /// an identity given loaded ([`TlsSource::Identity`]).
    pub fn reload_tls(&self) -> Result<TlsReload, TlsError> {
        match &self.quic {
            Some(quic) => quic.reload_tls(),
            None => Err(TlsError::NotReloadable),
        }
    }

    /// The TLS identity this node's new connections use now (`None` without the QUIC
    /// transport of [`Node::start`]).
    pub fn tls_identity(&self) -> Option<TlsIdentity> {
        self.quic.as_ref().map(|q| q.tls_identity())
    }

    /// Sees each TLS identity the node swaps in (`None` without the QUIC transport of
    /// [`Node::start`]).
    pub(crate) fn tls_updates(&self) -> Option<watch::Receiver<TlsIdentity>> {
        self.quic.as_ref().map(|q| q.tls_updates())
    }

    /// Transport counters (messages sent, dropped, frames rejected, …).
    pub fn transport_stats(&self) -> TransportStatsSnapshot {
        self.transport.stats()
    }

    /// Fault-injection hooks of this node's transport: cut and heal its links to peers,
    /// in this process only. For tests, and for partition drills without root
    /// (`tenure-worker` cuts every link on SIGUSR1 and heals them on SIGUSR2): a cut
    /// node behaves as one a network partition isolated, and nothing else changes.
    pub fn faults(&self) -> &Faults {
        self.transport.faults()
    }
}

/// What a store holds, as far as starting is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreKind {
    /// Nothing raft ever wrote, and the node founds a group: founding waits for the first
    /// members' hellos.
    Fresh,
    /// Nothing raft ever wrote, and the node joins: it waits for a leader's snapshot.
    Joining,
    /// The store of a member (or of a node that has joined).
    Member,
}

/// Checks that `store` may be started as `config` says, and what it holds. Refuses the
/// store of another node or group, a store that holds no group when the node neither
/// founds nor joins, and a group that does not include this node.
fn check_store<S: RaftStore>(
    store: &S,
    config: &Config,
    path: &std::path::Path,
) -> Result<StoreKind, StartError> {
    if let Some(stored) = store.node_id() {
        if stored != config.id {
            return Err(StartError::WrongNode {
                path: path.to_path_buf(),
                stored,
                id: config.id,
            });
        }
    }
    let fresh = raft::Storage::last_index(store).map_err(StartError::Raft)? == 0
        && raft::Storage::first_index(store).map_err(StartError::Raft)? == 1
        && store.hard_state() == Default::default();
    if fresh {
        return if config.found.is_some() {
            config.check_restore_voters()?;
            Ok(StoreKind::Fresh)
        } else if config.join {
            Ok(StoreKind::Joining)
        } else {
            Err(StartError::NotFounded {
                path: path.to_path_buf(),
                id: config.id,
            })
        };
    }
    if let Some(expected) = config.expected_group() {
        let snap = raft::Storage::snapshot(store, 0, 0).map_err(StartError::Raft)?;
        let state = GroupState::from_snapshot(&snap.data).map_err(|detail| {
            StartError::Storage(StorageError::Corrupt {
                path: path.to_path_buf(),
                detail,
            })
        })?;
        if let Some(stored) = state.group.filter(|g| *g != expected) {
            return Err(StartError::WrongGroup {
                path: path.to_path_buf(),
                id: config.id,
                stored,
                expected,
            });
        }
    }
    check_membership(store, config, path)?;
    Ok(StoreKind::Member)
}

/// Founds the group in a fresh store: a snapshot at index 1 (term `term`: 1, or a term
/// floor) holding `state`: the first membership, the group id and the members'
/// addresses (and what a backup restores). The membership then exists only in
/// snapshots, never in log entries, so a node that joins later can only learn the group
/// from a snapshot whose membership includes it (raft-rs refuses others) — never by
/// replaying entries on top of an empty membership.
fn found<S: RaftStore>(
    store: &S,
    config: &Config,
    state: GroupState,
    term: u64,
) -> Result<(), StorageError> {
    let mut snap = raft::eraftpb::Snapshot {
        data: state.to_snapshot().into(),
        ..Default::default()
    };
    let meta = snap.mut_metadata();
    meta.index = 1;
    meta.term = term;
    meta.set_conf_state(ConfState {
        voters: config.member_ids(),
        ..Default::default()
    });
    let hard_state = raft::eraftpb::HardState {
        term,
        vote: 0,
        commit: 1,
        ..Default::default()
    };
    store.write(ReadyWrite {
        snapshot: Some(snap),
        hard_state: Some(hard_state),
        ..Default::default()
    })
}

/// Everything a node's task needs before its driver exists.
struct Setup<S: RaftStore> {
    config: Config,
    store: S,
    transport: Arc<dyn Transport>,
    inbound: Inbox,
    commands: mpsc::Receiver<Command>,
    confirms: mpsc::Receiver<ConfirmRequest>,
    confirm_tx: mpsc::WeakSender<ConfirmRequest>,
    leadership: watch::Sender<Leadership>,
    metrics: Arc<Metrics>,
    logger: Logger,
    path: std::path::PathBuf,
    watches: Watches,
    view: watch::Sender<ElectionsView>,
    disk: watch::Sender<crate::status::DiskHealth>,
}

impl<S: RaftStore> Setup<S> {
    /// Founding (see [`founding`]): waits for the first members, writes the founding
    /// snapshot, then runs the driver. Commands that came meanwhile are answered by it.
    async fn found_then_run(mut self) -> Result<(), NodeStopped> {
        let Some(group) = self.config.found else {
            return Err(NodeStopped::new(StopCause::DriverTask(
                "founding without a group id".into(),
            )));
        };
        let (state, term, floor) = founding::founding_plan(&self.config, group);
        let waited = founding::wait_to_found(
            self.config.id,
            group,
            floor,
            &self.config.member_ids(),
            self.transport.as_ref(),
            &mut self.inbound,
            &mut self.commands,
            &self.leadership,
            &self.logger,
            self.config.hooks.election_seed,
        )
        .await;
        let founded = match waited {
            Ok(founded) => founded,
            Err(not) => {
                self.transport.close();
                let mut last = self.leadership.borrow().clone();
                last.role = Role::Stopped;
                self.leadership.send_replace(last);
                return match not {
                    founding::NotFounded::Stopped => Ok(()),
                    founding::NotFounded::LostData(detail) => {
                        Err(NodeStopped::new(StopCause::LostData { detail }))
                    }
                };
            }
        };
        let failed = |e: &dyn std::fmt::Display| {
            NodeStopped::new(StopCause::DriverTask(format!("founding failed: {e}")))
        };
        // The nonces first: a crash before the snapshot leaves a fresh store, founded
        // again (and recorded anew) on the next start.
        self.store
            .record_founding_nonces(&founded.with)
            .map_err(|e| failed(&e))?;
        found(&self.store, &self.config, state, term).map_err(|e| failed(&e))?;
        let driver = self.into_driver().map_err(|e| failed(&e))?;
        // The commands kept while waiting go to the driver first and all of them: put
        // back into the channel, those past its capacity were dropped, and 1,000
        // `Election::lease` calls made before founding ended lost their tail ("node
        // stopped").
        driver.run(founded.kept).await
    }

    /// The driver over the store's state.
    fn into_driver(self) -> Result<Driver<S>, StartError> {
        let config = self.config;
        let store = self.store;
        // The replicated state as of the last snapshot; the log above it is replayed
        // (conf changes included: the stored membership is the snapshot's).
        let snap = raft::Storage::snapshot(&store, 0, 0).map_err(StartError::Raft)?;
        let applied = snap.get_metadata().index;
        let state = GroupState::from_snapshot(&snap.data).map_err(|detail| {
            StartError::Storage(StorageError::Corrupt {
                path: self.path.clone(),
                detail,
            })
        })?;
        let t = config.timing;
        let raft_config = raft::Config {
            id: config.id,
            // The refusal window, one tick shorter than any campaign's wait
            // (docs/design.md, section 2).
            election_tick: t.refusal_ticks(),
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
        // Quoted in this node's hellos as a member (docs/design.md, section 6).
        let quotes = store.founding_nonces()?;
        self.transport.set_quotes(quotes.clone());
        let named = NamedParts {
            watches: self.watches,
            view: self.view,
            raft_config: raft_config.clone(),
            raft_logger: self.logger.new(o!("component" => "raft")),
            election_seed: config.hooks.election_seed,
            timeouts_at_minimum: config.hooks.election_timeouts_at_minimum,
            declared: config.elections.clone(),
        };
        let raw = RawNode::new(
            &raft_config,
            crate::storage::Staged::new(store.clone()),
            &self.logger.new(o!("component" => "raft")),
        )?;
        Ok(Driver::new(DriverParts {
            raw,
            store,
            transport: self.transport,
            inbound: self.inbound,
            commands: self.commands,
            confirms: self.confirms,
            confirm_tx: self.confirm_tx,
            leadership: self.leadership,
            timing: t,
            read_mode: config.read_mode,
            logger: self.logger,
            clock: match &config.hooks.clock_control {
                Some(c) => crate::clock::LocalClock::controlled(config.hooks.clock_rate, c.clone()),
                None => crate::clock::LocalClock::with_rate(config.hooks.clock_rate),
            },
            metrics: self.metrics,
            state,
            applied,
            configured: config.peers.keys().copied().collect(),
            history_retention: config.history_retention,
            catalog_limit: config.hooks.catalog_limit,
            compact_after: config.compact_after,
            disk_stall_bound: config.stall_bound(),
            disk: self.disk,
            election_seed: config.hooks.election_seed,
            election_timeouts_at_minimum: config.hooks.election_timeouts_at_minimum,
            named,
            quotes,
        }))
    }
}

/// Refuses to start on a store whose group does not include this node (a data directory
/// of another node or group), unless the node is joining (empty membership) or the log
/// above the snapshot holds the conf change that added it.
fn check_membership<S: RaftStore>(
    store: &S,
    config: &Config,
    path: &std::path::Path,
) -> Result<(), StartError> {
    let cs = store.conf_state();
    let mut members: Vec<NodeId> = cs
        .voters
        .iter()
        .chain(&cs.learners)
        .chain(&cs.voters_outgoing)
        .copied()
        .collect();
    members.sort_unstable();
    members.dedup();
    if members.contains(&config.id) || (members.is_empty() && config.join) {
        return Ok(());
    }
    let first = raft::Storage::first_index(store).map_err(StartError::Raft)?;
    let last = raft::Storage::last_index(store).map_err(StartError::Raft)?;
    if last >= first {
        let entries = raft::Storage::entries(
            store,
            first,
            last + 1,
            None,
            raft::GetEntriesContext::empty(false),
        )
        .map_err(StartError::Raft)?;
        let added = entries.iter().any(|e| {
            e.get_entry_type() == raft::eraftpb::EntryType::EntryConfChangeV2
                && <raft::eraftpb::ConfChangeV2 as protobuf::Message>::parse_from_bytes(&e.data)
                    .is_ok_and(|cc| cc.changes.iter().any(|c| c.node_id == config.id))
        });
        if added {
            return Ok(());
        }
    }
    Err(StartError::NotAMember {
        path: path.to_path_buf(),
        id: config.id,
        members,
    })
}

fn stopped() -> NodeStopped {
    NodeStopped::shutdown("the node has stopped")
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
