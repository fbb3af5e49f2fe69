//! Node configuration: who this node is, who its peers are, where it keeps its state,
//! and how fast it elects.
//!
//! Build a [`Config`] with [`Config::builder`]; [`Config::validate`] (called by
//! [`Node::start`](crate::Node::start)) rejects what cannot work and returns warnings for
//! what works badly (an even group size).
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | [`Config`], its builder, [`Timing`] and [`ReadMode`], validation |
//! | `hooks.rs` | `TestHooks`: what a test may change of a node (feature `testing`) |

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::ConfigError;
use crate::group_id::GroupId;
use crate::tls::TlsIdentity;
use crate::transport::{NodeId, PeerAddr, PeerAddrError, ToPeerAddr};

mod hooks;
pub use hooks::TestHooks;

/// How a leader answers [`Lease::confirm`](crate::Lease::confirm).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// Every confirm is a fresh ReadIndex round: a quorum of the group acknowledges that
    /// this node still leads, after the call began. Costs one network round trip to a
    /// quorum. Correct whatever the clocks do.
    #[default]
    Safe,
    /// A confirm answers locally while tenure's own lease (renewed by a ReadIndex round
    /// about every heartbeat) is valid: no network round trip.
    ///
    /// **Clock caveat:** this relies on every node's clock running at a rate within
    /// [`Timing::max_clock_drift`] of the others, and on voters' clocks not stepping
    /// forward. A node whose clock runs slow by more than that, or a VM paused by its
    /// hypervisor in a way neither of the guest's clocks counts, can answer "still
    /// leader" after a new leader exists. A system suspend is handled: the lease is
    /// checked on `CLOCK_BOOTTIME` too, which counts it. Fencing tokens still protect the
    /// resources; the confirmation itself does not. `docs/design.md`, section 8, has the
    /// whole list.
    LeaseBased,
}

/// Election timing, counted in ticks of the driver's clock.
///
/// raft-rs picks each election timeout uniformly in
/// `[election_ticks, election_ticks_max)`; a follower that has heard from its leader
/// within `election_ticks − 1` ticks refuses to vote for anyone else (one tick less than
/// any campaign waits, so that no pre-vote is refused only because the receiver's ticks
/// lag). The leader's lease lasts `(election_ticks − 2) × tick × (1 − max_clock_drift)`
/// from the send time of the last ReadIndex round (or first append of its term) a quorum
/// acknowledged, which is shorter than any voter's refusal, so a new leader can exist
/// only after the old lease ended (`docs/design.md`, section 2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Length of one tick.
    pub tick: Duration,
    /// Heartbeat interval, in ticks. The leader also renews its lease about this often.
    pub heartbeat_ticks: usize,
    /// Minimum election timeout, in ticks (and the vote-refusal window of followers).
    pub election_ticks: usize,
    /// Upper bound (exclusive) of the randomized election timeout, in ticks.
    pub election_ticks_max: usize,
    /// The largest relative clock-rate difference between nodes that the lease tolerates
    /// (0.05 = 5 %). The lease is shortened by this share.
    pub max_clock_drift: f64,
}

impl Default for Timing {
    /// [`Timing::lan`].
    fn default() -> Self {
        Timing::lan()
    }
}

impl Timing {
    /// The default: 10 ms ticks, 50 ms heartbeats, election timeouts 200–300 ms.
    ///
    /// Suits hosts on one LAN or data centre (round trips well under 10 ms). It rides out
    /// process stalls of about 150 ms without a failover, and replaces a dead leader in
    /// roughly 250–400 ms.
    pub fn lan() -> Self {
        Timing::from_millis(10, 50, 200, 300)
    }

    /// Aggressive: 2 ms ticks, 4 ms heartbeats, election timeouts 12–24 ms (the Raft
    /// paper's fastest setting). Only for a quiet, dedicated network and machines that
    /// never stall for more than ~10 ms; otherwise leadership flaps.
    pub fn fast() -> Self {
        Timing::from_millis(2, 4, 12, 24)
    }

    /// Conservative: 50 ms ticks, 200 ms heartbeats, election timeouts 1–2 s. For groups
    /// across regions or on busy machines with long GC pauses.
    pub fn wan() -> Self {
        Timing::from_millis(50, 200, 1000, 2000)
    }

    /// Timing from milliseconds, rounded to whole ticks (at least one tick each).
    pub fn from_millis(
        tick_ms: u64,
        heartbeat_ms: u64,
        election_ms: u64,
        election_max_ms: u64,
    ) -> Self {
        let tick_ms = tick_ms.max(1);
        let ticks = |ms: u64| ((ms + tick_ms / 2) / tick_ms).max(1) as usize;
        Timing {
            tick: Duration::from_millis(tick_ms),
            heartbeat_ticks: ticks(heartbeat_ms),
            election_ticks: ticks(election_ms),
            election_ticks_max: ticks(election_max_ms),
            max_clock_drift: 0.05,
        }
    }

    /// The minimum election timeout as a duration.
    pub fn election_timeout(&self) -> Duration {
        self.tick * self.election_ticks as u32
    }

    /// The default disk stall bound ([`Config::disk_stall_bound`]): half the shortest
    /// election timeout, and at least 50 ms (100 ms with [`Timing::lan`], 500 ms with
    /// [`Timing::wan`]). Below the election timeout, so that a node whose writes are
    /// slow enough to lose its leadership steps aside instead of winning again; above
    /// the tail of a healthy disk's synced writes (a few ms on a datacentre SSD, tens of
    /// ms on a consumer one or a network volume), so that an ordinary slow fsync is not
    /// a stall (`docs/design.md`, section 15).
    pub fn disk_stall_bound(&self) -> Duration {
        (self.election_timeout() / 2).max(Duration::from_millis(50))
    }

    /// The heartbeat interval as a duration.
    pub fn heartbeat_interval(&self) -> Duration {
        self.tick * self.heartbeat_ticks as u32
    }

    /// How long one quorum-acknowledged ReadIndex round keeps the lease, counted from the
    /// round's send time: `((election_ticks − 2) × tick − TICK_CATCH_UP) × (1 −
    /// max_clock_drift)` (the voters' refusal window, `election_ticks − 1` ticks, less the
    /// tick that may be partly gone when the round arrives, less what a tick timer may
    /// catch up on after a late tick ([`crate::clock::TICK_CATCH_UP`], 1 ms), less the
    /// drift).
    pub fn lease_duration(&self) -> Duration {
        // Broken on purpose (mutation testing): the lease as long as before the refusal
        // window was shortened by a tick.
        let spare = if crate::mutation::active("lease-one-tick-long") {
            1
        } else {
            2
        };
        let base = (self.tick * (self.election_ticks.saturating_sub(spare)) as u32)
            .saturating_sub(crate::clock::TICK_CATCH_UP);
        base.mul_f64((1.0 - self.max_clock_drift).clamp(0.0, 1.0))
    }

    /// The voters' refusal window in ticks (raft-rs's `election_tick`): one tick less
    /// than the shortest election timeout.
    pub(crate) fn refusal_ticks(&self) -> usize {
        self.election_ticks.saturating_sub(1).max(1)
    }

    /// Checks the timing on its own.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.tick.is_zero() {
            return Err(ConfigError::Timing("tick must be longer than zero".into()));
        }
        if self.heartbeat_ticks == 0 {
            return Err(ConfigError::Timing(
                "heartbeat_ticks must be at least 1".into(),
            ));
        }
        if self.election_ticks < 3 * self.heartbeat_ticks {
            return Err(ConfigError::Timing(format!(
                "the heartbeat ({} ticks) must be well below the election timeout ({} ticks): \
                 election_ticks must be at least 3 × heartbeat_ticks",
                self.heartbeat_ticks, self.election_ticks
            )));
        }
        if self.tick * (self.election_ticks - 2) as u32 <= crate::clock::TICK_CATCH_UP * 2 {
            return Err(ConfigError::Timing(format!(
                "an election timeout of {} ticks of {:?} leaves no room for a lease: \
                 (election_ticks − 2) × tick must be over 2 ms",
                self.election_ticks, self.tick
            )));
        }
        if self.election_ticks_max <= self.election_ticks {
            return Err(ConfigError::Timing(format!(
                "election_ticks_max ({}) must be greater than election_ticks ({}): raft picks \
                 the timeout in [election_ticks, election_ticks_max)",
                self.election_ticks_max, self.election_ticks
            )));
        }
        if !(0.0..0.5).contains(&self.max_clock_drift) || self.max_clock_drift.is_nan() {
            return Err(ConfigError::Timing(format!(
                "max_clock_drift must be in [0, 0.5), got {}",
                self.max_clock_drift
            )));
        }
        Ok(())
    }
}

/// Where the node's TLS identity comes from.
#[derive(Clone)]
pub enum TlsSource {
    /// A folder written by `cargo run --example certs`: `ca.pem`, `node-<id>.pem`,
    /// `node-<id>-key.pem`.
    Dir(PathBuf),
    /// Explicit PEM files.
    Files {
        /// The cluster CA certificate.
        ca: PathBuf,
        /// This node's certificate.
        cert: PathBuf,
        /// This node's private key.
        key: PathBuf,
    },
    /// An identity already loaded.
    Identity(TlsIdentity),
}

impl fmt::Debug for TlsSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsSource::Dir(d) => f.debug_tuple("Dir").field(d).finish(),
            TlsSource::Files { ca, cert, key } => f
                .debug_struct("Files")
                .field("ca", ca)
                .field("cert", cert)
                .field("key", key)
                .finish(),
            TlsSource::Identity(_) => f.write_str("Identity(..)"),
        }
    }
}

/// What a node needs to start.
#[derive(Clone)]
pub struct Config {
    /// This node's id (non-zero; must be one of `peers`).
    pub id: NodeId,
    /// The UDP address to listen on. Defaults to this node's entry in `peers` (for a
    /// name: the unspecified address `0.0.0.0` on its port, see
    /// [`PeerAddr::listen_addr`]).
    pub listen: Option<SocketAddr>,
    /// Every member of the group, this node included: id → address, an IP address or a
    /// DNS name (resolved again on every reconnect, so a member that moves keeps its
    /// name; `docs/design.md`, Transport).
    pub peers: BTreeMap<NodeId, PeerAddr>,
    /// Addresses given to the builder that did not parse: [`Config::validate`] reports
    /// the first.
    pub(crate) malformed_peers: BTreeMap<NodeId, PeerAddrError>,
    /// The RocksDB directory (created on first start).
    pub data_dir: Option<PathBuf>,
    /// TLS identity for the QUIC transport.
    pub tls: Option<TlsSource>,
    /// How often the node looks at its TLS files (`Config::tls_dir`, [`TlsSource::Files`])
    /// for a renewed certificate, key or CA bundle, and uses a changed, valid one for
    /// new connections without dropping any (5 s; zero: only on
    /// [`Node::reload_tls`](crate::Node::reload_tls)). README, "Rotating certificates".
    pub tls_poll: Duration,
    /// Election timing.
    pub timing: Timing,
    /// How [`Lease::confirm`](crate::Lease::confirm) is answered.
    pub read_mode: ReadMode,
    /// Where tenure logs; `None` logs nothing.
    pub logger: Option<slog::Logger>,
    /// How many tenures the replicated leadership history keeps (oldest dropped first).
    pub history_retention: usize,
    /// Compact the Raft log (snapshot the history, drop older entries) once this many
    /// applied entries sit above the last snapshot. Keeps disk use flat. `u64::MAX`
    /// never compacts on size (a conf change still takes a snapshot).
    pub compact_after: u64,
    /// A synced write slower than this is a **disk stall**: the node hands over every
    /// election it leads and campaigns in none until a few small synced probe writes in
    /// a row have come back within it ([`Node::disk`](crate::Node::disk),
    /// `docs/design.md`, section 15). `None`: [`Timing::disk_stall_bound`], half the
    /// shortest election timeout and at least 50 ms (100 ms with [`Timing::lan`]).
    pub disk_stall_bound: Option<Duration>,
    /// Join an existing group instead of founding one: on first start the node has no
    /// membership; it waits until a member adds it ([`Node::add_learner`]) and the leader
    /// sends it a snapshot of the group. `peers` then lists this node and the members it
    /// should reach (later members are learned from the group). Ignored once the data
    /// directory holds a group.
    ///
    /// [`Node::add_learner`]: crate::Node::add_learner
    pub join: bool,
    /// Found group `found` with `peers` as its first voters, if the data directory holds
    /// no store yet. The node then waits (as [`Role::Founding`](crate::Role::Founding))
    /// until every first member has said hello, and founds only if each of them is
    /// founding too or holds a store of this group that is pristine (nothing happened
    /// since founding). If a member's store has moved on, this node's empty store means
    /// it lost its data: it stops with an error that says so instead of coming back as
    /// a voter that forgot its vote. So this setting may stay in a unit file: once the
    /// group exists it never founds it again. Ignored (but checked against the stored
    /// group) once the data directory holds a store. See `docs/design.md`, section 6.
    pub found: Option<GroupId>,
    /// Found the group's own election at this term or above (disaster recovery: tokens
    /// must not go back below what resources remember). Every first member must be given
    /// the same floor, or none founds. 0: no floor. Ignored once the store exists. See
    /// `docs/design.md`, section 6, "Disaster recovery".
    pub term_floor: u64,
    /// Found the group of this restore plan ([`crate::backup::RestorePlan`]): a new group
    /// with its backup's drains, history and catalog of named elections, every election
    /// above its recorded term by the plan's margin. The plan's group must be `found`,
    /// and its backup's voters the `peers`. Ignored once the store exists.
    pub restore: Option<std::sync::Arc<crate::backup::RestorePlan>>,
    /// The group this node must belong to: a data directory of another group is
    /// refused. Defaults to `found`; `None` accepts the stored group.
    pub group: Option<GroupId>,
    /// Named elections this group should have (`docs/design.md`, section 11): while
    /// this node leads the group, it creates those the catalog lacks (it never removes
    /// one). Every worker of a group may declare the same list.
    pub elections: Vec<(String, crate::election::ElectionOptions)>,
    /// Test hooks (set them with the `testing` feature's [`Config::hooks_mut`]).
    pub(crate) hooks: TestHooks,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("id", &self.id)
            .field("listen", &self.listen)
            .field("peers", &self.peers)
            .field("data_dir", &self.data_dir)
            .field("tls", &self.tls)
            .field("tls_poll", &self.tls_poll)
            .field("timing", &self.timing)
            .field("read_mode", &self.read_mode)
            .field("join", &self.join)
            .field("found", &self.found)
            .field("term_floor", &self.term_floor)
            .field(
                "restore",
                &self.restore.as_ref().map(|p| (p.group, p.root_floor())),
            )
            .field("group", &self.group)
            .field("disk_stall_bound", &self.stall_bound())
            .finish_non_exhaustive()
    }
}

/// Something that works but is probably not what the operator wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigWarning {
    /// An even group tolerates no more failures than the odd group one smaller, and can
    /// split evenly.
    EvenGroupSize(usize),
    /// A group of one has no fault tolerance at all.
    SingleNode,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigWarning::EvenGroupSize(n) => write!(
                f,
                "group of {n} members: an even group tolerates no more failures than {} members; use 3, 5 or 7",
                n - 1
            ),
            ConfigWarning::SingleNode => {
                write!(f, "group of one member: no fault tolerance")
            }
        }
    }
}

impl Config {
    /// Starts a builder for node `id`.
    pub fn builder(id: NodeId) -> ConfigBuilder {
        ConfigBuilder {
            config: Config {
                id,
                listen: None,
                peers: BTreeMap::new(),
                malformed_peers: BTreeMap::new(),
                data_dir: None,
                tls: None,
                tls_poll: crate::transport::quic::DEFAULT_TLS_POLL,
                timing: Timing::default(),
                read_mode: ReadMode::default(),
                logger: None,
                hooks: TestHooks::default(),
                history_retention: 1000,
                compact_after: 1024,
                disk_stall_bound: None,
                join: false,
                found: None,
                term_floor: 0,
                restore: None,
                group: None,
                elections: Vec::new(),
            },
        }
    }

    /// Checks the configuration. Errors make the node unable to run; warnings are
    /// returned (and logged by [`Node::start`](crate::Node::start)).
    pub fn validate(&self) -> Result<Vec<ConfigWarning>, ConfigError> {
        if self.id == 0 {
            return Err(ConfigError::ZeroId);
        }
        if let Some((id, e)) = self.malformed_peers.iter().next() {
            return Err(ConfigError::InvalidPeer {
                id: *id,
                reason: e.to_string(),
            });
        }
        if let Some(bad) = self.peers.keys().find(|id| **id == 0) {
            return Err(ConfigError::InvalidPeer {
                id: *bad,
                reason: "node id 0 is reserved by raft".into(),
            });
        }
        if !self.peers.contains_key(&self.id) {
            return Err(ConfigError::SelfNotInPeers {
                id: self.id,
                peers: self.peers.keys().copied().collect(),
            });
        }
        self.timing.validate()?;
        if self.join && self.found.is_some() {
            return Err(ConfigError::FoundAndJoin);
        }
        if let (Some(found), Some(group)) = (self.found, self.group) {
            if found != group {
                return Err(ConfigError::GroupMismatch { found, group });
            }
        }
        if self.term_floor > crate::backup::MAX_ROOT_TERM {
            return Err(ConfigError::Restore(format!(
                "term floor {} is above the root election's maximum term {}",
                self.term_floor,
                crate::backup::MAX_ROOT_TERM
            )));
        }
        if let Some(p) = &self.restore {
            p.check().map_err(ConfigError::Restore)?;
            if self.found != Some(p.group) {
                return Err(ConfigError::Restore(format!(
                    "the restore plan founds group {}, but this node founds {:?}",
                    p.group, self.found
                )));
            }
        }
        if self.history_retention > MAX_HISTORY_RETENTION {
            return Err(ConfigError::HistoryRetention {
                retention: self.history_retention,
                max: MAX_HISTORY_RETENTION,
            });
        }
        if self.disk_stall_bound.is_some_and(|b| b.is_zero()) {
            return Err(ConfigError::Timing(
                "disk_stall_bound is zero: every synced write would be a stall".into(),
            ));
        }
        if !(0.25..=4.0).contains(&self.hooks.clock_rate) {
            return Err(ConfigError::Timing(format!(
                "clock_rate {} is outside [0.25, 4]",
                self.hooks.clock_rate
            )));
        }
        let mut warnings = Vec::new();
        let n = self.peers.len();
        if self.join {
            // `peers` is a contact list, not the group.
        } else if n == 1 {
            warnings.push(ConfigWarning::SingleNode);
        } else if n.is_multiple_of(2) {
            warnings.push(ConfigWarning::EvenGroupSize(n));
        }
        Ok(warnings)
    }

    /// Refuses to found from a backup whose voters are not the first members given (checked
    /// only when founding: once the store exists, the backup is ignored, and the
    /// membership may have changed since).
    pub(crate) fn check_restore_voters(&self) -> Result<(), ConfigError> {
        let Some(p) = &self.restore else {
            return Ok(());
        };
        let ids = self.member_ids();
        let mut voters = p.backup.members.voters.clone();
        voters.sort_unstable();
        if voters != ids {
            return Err(ConfigError::Restore(format!(
                "the backup's voters are {voters:?}, the first members given are {ids:?}: \
                 found it again with its voters (replace members afterwards)"
            )));
        }
        Ok(())
    }

    /// The disk stall bound in force: [`Config::disk_stall_bound`], or the timing's
    /// default.
    pub fn stall_bound(&self) -> Duration {
        self.disk_stall_bound
            .unwrap_or_else(|| self.timing.disk_stall_bound())
    }

    /// The address this node listens on.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.listen
            .or_else(|| self.peers.get(&self.id).map(PeerAddr::listen_addr))
    }

    /// Every member's id.
    pub fn member_ids(&self) -> Vec<NodeId> {
        self.peers.keys().copied().collect()
    }

    /// The test hooks, to set them (feature `testing`).
    #[cfg(feature = "testing")]
    pub fn hooks_mut(&mut self) -> &mut TestHooks {
        &mut self.hooks
    }

    /// The group this node must belong to: [`group`](Self::group), else
    /// [`found`](Self::found).
    pub fn expected_group(&self) -> Option<GroupId> {
        self.group.or(self.found)
    }
}

/// Builds a [`Config`].
#[derive(Debug, Clone)]
pub struct ConfigBuilder {
    config: Config,
}

impl ConfigBuilder {
    /// Adds a member (call once per member, this node included): a [`SocketAddr`], a
    /// [`PeerAddr`], or a string such as `"10.0.0.4:7000"`, `"[fd00::4]:7000"` or
    /// `"worker-4.workers.svc:7000"`. A string that is not `host:port` is reported by
    /// [`Config::validate`] (`peer 4: 'foo' is not host:port (no port)`).
    pub fn peer(mut self, id: NodeId, addr: impl ToPeerAddr) -> Self {
        self.set_peer(id, addr);
        self
    }
    /// Sets every member at once (each as [`peer`](Self::peer) takes it).
    pub fn peers<A: ToPeerAddr>(mut self, peers: impl IntoIterator<Item = (NodeId, A)>) -> Self {
        self.config.peers.clear();
        self.config.malformed_peers.clear();
        for (id, addr) in peers {
            self.set_peer(id, addr);
        }
        self
    }
    fn set_peer(&mut self, id: NodeId, addr: impl ToPeerAddr) {
        match addr.to_peer_addr() {
            Ok(a) => {
                self.config.malformed_peers.remove(&id);
                self.config.peers.insert(id, a);
            }
            Err(e) => {
                self.config.peers.remove(&id);
                self.config.malformed_peers.insert(id, e);
            }
        }
    }
    /// Listens on `addr` instead of this node's address in the peer list (e.g. `0.0.0.0:port`).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.config.listen = Some(addr);
        self
    }
    /// The RocksDB directory.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.data_dir = Some(dir.into());
        self
    }
    /// TLS files from a folder written by the `certs` example.
    pub fn tls_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.tls = Some(TlsSource::Dir(dir.into()));
        self
    }
    /// TLS identity from any source.
    pub fn tls(mut self, tls: TlsSource) -> Self {
        self.config.tls = Some(tls);
        self
    }
    /// How often to look at the TLS files for renewed ones ([`Config::tls_poll`]).
    pub fn tls_poll(mut self, every: Duration) -> Self {
        self.config.tls_poll = every;
        self
    }
    /// Election timing.
    pub fn timing(mut self, timing: Timing) -> Self {
        self.config.timing = timing;
        self
    }
    /// How confirms are answered.
    pub fn read_mode(mut self, mode: ReadMode) -> Self {
        self.config.read_mode = mode;
        self
    }
    /// Where tenure logs.
    pub fn logger(mut self, logger: slog::Logger) -> Self {
        self.config.logger = Some(logger);
        self
    }
    /// Declares named election `name` (see [`Config::elections`]).
    pub fn election(mut self, name: &str, options: crate::election::ElectionOptions) -> Self {
        self.config.elections.push((name.to_string(), options));
        self
    }
    /// How many tenures the leadership history keeps.
    pub fn history_retention(mut self, n: usize) -> Self {
        self.config.history_retention = n.max(1);
        self
    }
    /// Compact the log after this many applied entries.
    pub fn compact_after(mut self, entries: u64) -> Self {
        self.config.compact_after = entries.max(1);
        self
    }
    /// [`Config::disk_stall_bound`].
    pub fn disk_stall_bound(mut self, bound: Duration) -> Self {
        self.config.disk_stall_bound = Some(bound);
        self
    }

    /// Join an existing group (see [`Config::join`]).
    pub fn join(mut self, join: bool) -> Self {
        self.config.join = join;
        self
    }
    /// Found group `group` with the peers as its first voters, once, safely (see
    /// [`Config::found`]).
    pub fn found(mut self, group: GroupId) -> Self {
        self.config.found = Some(group);
        self
    }
    /// Found the root election at term `floor` or above (see [`Config::term_floor`]).
    pub fn term_floor(mut self, floor: u64) -> Self {
        self.config.term_floor = floor;
        self
    }
    /// Found the group of restore plan `plan` (see [`Config::restore`]); founds the plan's
    /// new group.
    pub fn restore_from(mut self, plan: crate::backup::RestorePlan) -> Self {
        self.config.found = Some(plan.group);
        self.config.restore = Some(std::sync::Arc::new(plan));
        self
    }
    /// Belong to group `group` only (see [`Config::group`]).
    pub fn group(mut self, group: GroupId) -> Self {
        self.config.group = Some(group);
        self
    }
    /// The finished configuration (validated when the node starts).
    pub fn build(self) -> Config {
        self.config
    }
}

/// The most tenures [`Config::history_retention`] may keep: 4,096. The root's snapshot
/// carries the history beside the catalog of named elections in one frame, and a record
/// takes at most 140 bytes of it (about 0.6 MB for 4,096), which with
/// [`MAX_CATALOG_BYTES`](crate::election::MAX_CATALOG_BYTES) leaves room in
/// [`DEFAULT_MAX_FRAME`](crate::transport::frame::DEFAULT_MAX_FRAME) for the members'
/// addresses (`docs/design.md`, section 9).
pub const MAX_HISTORY_RETENTION: usize = 4096;

/// Parses `1=127.0.0.1:7001,2=worker-2.workers.svc:7001,3=[fd00::3]:7001` into a peer
/// map. An address that is not `host:port` is `peer 3: 'foo' is not host:port (...)`.
pub fn parse_peers(s: &str) -> Result<BTreeMap<NodeId, PeerAddr>, ConfigError> {
    let mut peers = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| ConfigError::PeerSyntax {
                input: part.to_string(),
                reason: "expected ID=HOST:PORT".into(),
            })?;
        let id: NodeId = id.trim().parse().map_err(|_| ConfigError::PeerSyntax {
            input: part.to_string(),
            reason: format!("node id {id:?} is not a positive integer"),
        })?;
        let addr: PeerAddr =
            addr.trim()
                .parse()
                .map_err(|e: PeerAddrError| ConfigError::InvalidPeer {
                    id,
                    reason: e.to_string(),
                })?;
        if peers.insert(id, addr).is_some() {
            return Err(ConfigError::PeerSyntax {
                input: part.to_string(),
                reason: format!("node id {id} is listed twice"),
            });
        }
    }
    Ok(peers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(p: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], p))
    }

    #[test]
    fn self_must_be_a_peer() {
        let c = Config::builder(4)
            .peer(1, addr(1))
            .peer(2, addr(2))
            .peer(3, addr(3))
            .build();
        assert!(matches!(
            c.validate(),
            Err(ConfigError::SelfNotInPeers { id: 4, .. })
        ));
    }

    #[test]
    fn the_disk_stall_bound_defaults_to_half_the_election_timeout_and_is_never_zero() {
        let ms = Duration::from_millis;
        assert_eq!(Timing::lan().disk_stall_bound(), ms(100));
        assert_eq!(Timing::wan().disk_stall_bound(), ms(500));
        assert_eq!(Timing::fast().disk_stall_bound(), ms(50), "at least 50 ms");
        let c = Config::builder(1).peer(1, addr(1)).build();
        assert_eq!(c.stall_bound(), ms(100));
        let c = Config::builder(1)
            .peer(1, addr(1))
            .disk_stall_bound(ms(30))
            .build();
        assert_eq!(c.stall_bound(), ms(30));
        let c = Config::builder(1)
            .peer(1, addr(1))
            .disk_stall_bound(Duration::ZERO)
            .build();
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("disk_stall_bound is zero"), "{e}");
    }

    #[test]
    fn a_history_longer_than_a_snapshot_holds_is_refused() {
        let c = |n| {
            Config::builder(1)
                .peer(1, addr(1))
                .history_retention(n)
                .build()
        };
        assert!(c(MAX_HISTORY_RETENTION).validate().is_ok());
        let e = c(MAX_HISTORY_RETENTION + 1).validate().unwrap_err();
        assert_eq!(
            e,
            ConfigError::HistoryRetention {
                retention: 4097,
                max: 4096
            }
        );
        assert!(e.to_string().contains("must fit one frame"), "{e}");
    }

    #[test]
    fn even_group_warns() {
        let c = Config::builder(1)
            .peers((1..=4).map(|i| (i, addr(i as u16))))
            .build();
        assert_eq!(c.validate().unwrap(), vec![ConfigWarning::EvenGroupSize(4)]);
        let c = Config::builder(1)
            .peers((1..=5).map(|i| (i, addr(i as u16))))
            .build();
        assert!(c.validate().unwrap().is_empty());
    }

    #[test]
    fn heartbeat_must_be_well_below_election() {
        let t = Timing::from_millis(10, 100, 200, 400);
        assert!(matches!(t.validate(), Err(ConfigError::Timing(_))));
        assert!(Timing::lan().validate().is_ok());
        assert!(Timing::fast().validate().is_ok());
        assert!(Timing::wan().validate().is_ok());
    }

    #[test]
    fn lease_is_shorter_than_the_refusal_window_less_a_tick() {
        for t in [Timing::lan(), Timing::fast(), Timing::wan()] {
            let refusal = t.tick * t.refusal_ticks() as u32;
            assert!(t.lease_duration() <= refusal - t.tick, "{t:?}");
            assert!(t.refusal_ticks() < t.election_ticks, "{t:?}");
        }
    }

    #[test]
    fn parse_peers_reports_bad_parts() {
        let p = parse_peers("1=127.0.0.1:7001, 2=127.0.0.1:7002").unwrap();
        assert_eq!(p.len(), 2);
        for bad in [
            "1",
            "x=127.0.0.1:1",
            "1=nohost",
            "1=127.0.0.1:1,1=127.0.0.1:2",
        ] {
            let e = parse_peers(bad).unwrap_err();
            assert!(e.to_string().contains("peer"), "{e}");
        }
        let e = parse_peers("1=127.0.0.1:1,3=foo").unwrap_err();
        assert!(
            e.to_string().starts_with("peer 3: 'foo' is not host:port"),
            "{e}"
        );
    }

    #[test]
    fn peers_by_name_parse_and_ip_literals_keep_working() {
        let p = parse_peers(
            "1=worker-0.workers.svc:7100, 2=127.0.0.1:7002,3=[::1]:7003,4=localhost:7004",
        )
        .unwrap();
        assert_eq!(
            p[&1],
            PeerAddr::Name {
                host: "worker-0.workers.svc".into(),
                port: 7100
            }
        );
        assert_eq!(p[&2], PeerAddr::Ip(addr(7002)));
        assert_eq!(p[&3].to_string(), "[::1]:7003");
        assert!(p[&4].is_name());
        // The builder takes SocketAddrs, PeerAddrs and strings alike.
        let c = Config::builder(1)
            .peer(1, "worker-0.workers.svc:7100")
            .peer(2, addr(7002))
            .peer(3, p[&3].clone())
            .build();
        assert!(c.validate().is_ok());
        assert_eq!(c.peers, p.into_iter().filter(|(id, _)| *id != 4).collect());
        // A name for this node listens on every interface, on its port.
        assert_eq!(c.listen_addr(), Some("0.0.0.0:7100".parse().unwrap()));
    }

    #[test]
    fn a_malformed_peer_address_is_a_clear_config_error() {
        let c = Config::builder(1)
            .peer(1, addr(7001))
            .peer(3, "foo")
            .build();
        let e = c.validate().unwrap_err();
        assert_eq!(
            e,
            ConfigError::InvalidPeer {
                id: 3,
                reason: "'foo' is not host:port (no port)".into()
            }
        );
        assert_eq!(e.to_string(), "peer 3: 'foo' is not host:port (no port)");
        // Giving the peer again, right, replaces the bad entry.
        let c = Config::builder(1)
            .peer(1, addr(7001))
            .peer(3, "foo")
            .peer(3, "n3:7003")
            .build();
        assert!(c.validate().is_ok());
    }
}
