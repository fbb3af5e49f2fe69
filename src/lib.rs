//! # tenure: safe leader election among peer worker processes
//!
//! Several stateless workers must have exactly one of them run scheduled work (say,
//! settlement) at any moment, while workers crash, restart, stall and get partitioned.
//! Each worker embeds a tenure [`Node`]. The workers themselves form a Raft group
//! (tikv's raft-rs) over mutually authenticated QUIC, with durable Raft state in RocksDB:
//! no etcd, ZooKeeper or Consul beside them.
//!
//! ## The guarantees
//!
//! 1. **Election safety.** At most one leader per Raft term; pre-vote and check-quorum
//!    are always on, so a minority side of a partition never elects.
//! 2. **Fencing.** The Raft term is the [`FencingToken`]. Resources remember the highest
//!    token they accepted and reject older ones, so a leader that stalled and woke up
//!    after being replaced can write nothing.
//! 3. **Confirmed leadership.** A [`Lease`] exists only after a ReadIndex round of its
//!    term was acknowledged by a quorum; [`Lease::confirm`] proves leadership again.
//! 4. **Leases that do not overlap.** tenure's lease ends before any other node can be
//!    elected (see [`Timing`]); it is revoked at once when it runs out, the term moves on,
//!    or the node hands over or stops.
//!
//! ## A worker, step by step
//!
//! In production each worker starts one node with the group's membership, a data
//! directory and the TLS files written by `cargo run --example certs -- --nodes 3 --out
//! DIR`, and the group's id, drawn once (`GroupId::random()`, or `worker
//! --new-group-id`). [`Config::found`] founds the group the first time, safely: a node
//! whose data folder was lost does not come back as a voter, whatever its configuration
//! (see [`Config::found`] and the README's "Founding a group"):
//!
//! ```no_run
//! use tenure::{Config, GroupId, Node, Timing};
//!
//! # async fn worker() -> Result<(), Box<dyn std::error::Error>> {
//! let group: GroupId = "4f3a9c0e5b7d21f86a0c3e9d1b2f4a57".parse()?;
//! let config = Config::builder(1)
//!     .peer(1, "127.0.0.1:7001")
//!     .peer(2, "127.0.0.1:7002")
//!     .peer(3, "127.0.0.1:7003")
//!     .data_dir("/var/lib/worker-1/tenure")
//!     .tls_dir("/etc/worker/tenure-certs")
//!     .timing(Timing::lan())
//!     .found(group)
//!     .build();
//! let node = Node::start(config).await?;
//! # Ok(()) }
//! ```
//!
//! The examples below run: they start a whole group in one process, on memory stores
//! and the in-process network ([`Node::start_with`]; the same driver as above), as a
//! test would:
//!
//! ```
//! # use std::sync::Arc;
//! # use tenure::storage::{MemDisk, MemStore};
//! # use tenure::transport::mem::MemNetwork;
//! # use tenure::{Config, GroupId, Node, Timing};
//! # /// Three nodes of one group in this process, on memory stores and the memory network.
//! # async fn group() -> Vec<Node> {
//! #     let net = MemNetwork::new();
//! #     let group = GroupId::random();
//! #     let peers: Vec<(u64, std::net::SocketAddr)> =
//! #         (1..=3).map(|id| (id, ([127, 0, 0, 1], 7000 + id as u16).into())).collect();
//! #     let mut nodes = Vec::new();
//! #     for id in 1..=3 {
//! #         let config = Config::builder(id).peers(peers.clone())
//! #             .timing(Timing::from_millis(10, 30, 150, 250)).found(group).build();
//! #         let (transport, inbound) = net.endpoint(id);
//! #         let store = MemStore::open(MemDisk::for_node(id));
//! #         nodes.push(Node::start_with(config, store, Arc::new(transport), inbound).await.unwrap());
//! #     }
//! #     nodes
//! # }
//! # async fn leader(nodes: &[Node]) -> Node {
//! #     loop {
//! #         if let Some(n) = nodes.iter().find(|n| n.leadership().leased) { return n.clone() }
//! #         tokio::time::sleep(std::time::Duration::from_millis(5)).await;
//! #     }
//! # }
//! # #[tokio::main] async fn main() {
//! let nodes = group().await; // three nodes founding one group
//! // Watch who leads (every change is published, "no leader known" included):
//! let mut leadership = nodes[0].watch();
//! let leader = loop {
//!     let l = leadership.borrow_and_update().clone();
//!     println!("term {} leader {:?} (node 1 is {:?})", l.term, l.leader, l.role);
//!     if let Some(leader) = l.leader {
//!         break leader;
//!     }
//!     leadership.changed().await.unwrap();
//! };
//! assert!((1..=3).contains(&leader));
//! # }
//! ```
//!
//! Do leader-only work under a lease, carrying its token to every resource, and stop the
//! moment the lease is lost:
//!
//! ```
//! # use std::sync::Arc;
//! # use tenure::storage::{MemDisk, MemStore};
//! # use tenure::transport::mem::MemNetwork;
//! # use tenure::{Config, GroupId, Node, Timing};
//! # /// Three nodes of one group in this process, on memory stores and the memory network.
//! # async fn group() -> Vec<Node> {
//! #     let net = MemNetwork::new();
//! #     let group = GroupId::random();
//! #     let peers: Vec<(u64, std::net::SocketAddr)> =
//! #         (1..=3).map(|id| (id, ([127, 0, 0, 1], 7000 + id as u16).into())).collect();
//! #     let mut nodes = Vec::new();
//! #     for id in 1..=3 {
//! #         let config = Config::builder(id).peers(peers.clone())
//! #             .timing(Timing::from_millis(10, 30, 150, 250)).found(group).build();
//! #         let (transport, inbound) = net.endpoint(id);
//! #         let store = MemStore::open(MemDisk::for_node(id));
//! #         nodes.push(Node::start_with(config, store, Arc::new(transport), inbound).await.unwrap());
//! #     }
//! #     nodes
//! # }
//! # async fn leader(nodes: &[Node]) -> Node {
//! #     loop {
//! #         if let Some(n) = nodes.iter().find(|n| n.leadership().leased) { return n.clone() }
//! #         tokio::time::sleep(std::time::Duration::from_millis(5)).await;
//! #     }
//! # }
//! # async fn settle_next_batch(token: tenure::FencingToken) -> bool { token.term() > 0 }
//! # #[tokio::main] async fn main() -> Result<(), tenure::NodeStopped> {
//! # let nodes = group().await;
//! # let node = leader(&nodes).await;
//! # let mut batches = 0;
//! // On every worker: resolves when this node leads and a quorum confirmed it.
//! let lease = node.lease().await?;
//! let stop = lease.cancellation_token();
//! loop {
//!     // Re-confirm before each critical step (one quorum round in `Safe` mode).
//!     let Ok(token) = lease.confirm().await else { break };
//!     tokio::select! {
//!         _ = stop.cancelled() => break,          // lost: stop at once
//!         _ = settle_next_batch(token) => {}      // the resource checks `token`
//!     }
//! #   batches += 1;
//! #   if batches == 3 { break }
//! }
//! # assert_eq!(batches, 3);
//! # Ok(()) }
//! ```
//!
//! Hand over before maintenance, and shut down gracefully (a leader hands over first, so
//! the group does not wait for an election timeout):
//!
//! ```
//! # use std::sync::Arc;
//! # use tenure::storage::{MemDisk, MemStore};
//! # use tenure::transport::mem::MemNetwork;
//! # use tenure::{Config, GroupId, Node, Timing};
//! # /// Three nodes of one group in this process, on memory stores and the memory network.
//! # async fn group() -> Vec<Node> {
//! #     let net = MemNetwork::new();
//! #     let group = GroupId::random();
//! #     let peers: Vec<(u64, std::net::SocketAddr)> =
//! #         (1..=3).map(|id| (id, ([127, 0, 0, 1], 7000 + id as u16).into())).collect();
//! #     let mut nodes = Vec::new();
//! #     for id in 1..=3 {
//! #         let config = Config::builder(id).peers(peers.clone())
//! #             .timing(Timing::from_millis(10, 30, 150, 250)).found(group).build();
//! #         let (transport, inbound) = net.endpoint(id);
//! #         let store = MemStore::open(MemDisk::for_node(id));
//! #         nodes.push(Node::start_with(config, store, Arc::new(transport), inbound).await.unwrap());
//! #     }
//! #     nodes
//! # }
//! # async fn leader(nodes: &[Node]) -> Node {
//! #     loop {
//! #         if let Some(n) = nodes.iter().find(|n| n.leadership().leased) { return n.clone() }
//! #         tokio::time::sleep(std::time::Duration::from_millis(5)).await;
//! #     }
//! # }
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let nodes = group().await;
//! # let node = leader(&nodes).await;
//! let lease = node.lease().await?;
//! let next = node.transfer_leadership(None).await?; // to the most up-to-date follower
//! assert_ne!(next, node.id());
//! assert!(lease.lost_reason().is_some()); // revoked before the handover began
//! node.shutdown().await?;
//! # for n in &nodes { n.shutdown().await?; }
//! # Ok(()) }
//! ```
//!
//! ## Changing the group
//!
//! Membership changes go through the leader and Raft's joint consensus (raft-rs
//! `ConfChangeV2`); one change at a time, refused with a clear
//! [`MembershipError`] otherwise. To grow the group, start the new worker with
//! [`Config::join`] (it waits, [`Role::Joining`]), add it as a learner, and promote it
//! once it has caught up from the leader's snapshot:
//!
//! ```
//! # use std::sync::Arc;
//! # use tenure::storage::{MemDisk, MemStore};
//! # use tenure::transport::mem::MemNetwork;
//! # use tenure::{Config, GroupId, Node, Timing};
//! # /// Three nodes of one group in this process, on memory stores and the memory network.
//! # async fn group() -> Vec<Node> {
//! #     let net = MemNetwork::new();
//! #     let group = GroupId::random();
//! #     let peers: Vec<(u64, std::net::SocketAddr)> =
//! #         (1..=3).map(|id| (id, ([127, 0, 0, 1], 7000 + id as u16).into())).collect();
//! #     let mut nodes = Vec::new();
//! #     for id in 1..=3 {
//! #         let config = Config::builder(id).peers(peers.clone())
//! #             .timing(Timing::from_millis(10, 30, 150, 250)).found(group).build();
//! #         let (transport, inbound) = net.endpoint(id);
//! #         let store = MemStore::open(MemDisk::for_node(id));
//! #         nodes.push(Node::start_with(config, store, Arc::new(transport), inbound).await.unwrap());
//! #     }
//! #     nodes
//! # }
//! # async fn leader(nodes: &[Node]) -> Node {
//! #     loop {
//! #         if let Some(n) = nodes.iter().find(|n| n.leadership().leased) { return n.clone() }
//! #         tokio::time::sleep(std::time::Duration::from_millis(5)).await;
//! #     }
//! # }
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let nodes = group().await;
//! # let leader = leader(&nodes).await;
//! // Node 4 starts with Config::join on an empty store and waits (Role::Joining); then:
//! let members = leader.add_learner(4, "10.0.0.4:7004".parse::<tenure::PeerAddr>()?).await?;
//! assert!(members.learners.contains(&4));
//! // leader.promote(4) is refused with LearnerBehind until node 4 has the log; retry.
//! // Replace a dead voter by a learner in one joint change: leader.replace_member(2, 4).
//! leader.remove_member(4).await?; // a removed node stops campaigning (Role::Removed)
//! // A drained node never campaigns and hands over if it leads (replicated, durable):
//! let other = nodes.iter().find(|n| n.id() != leader.id()).unwrap().id();
//! leader.set_drained(other, true).await?;
//! let status = leader.status().await?; // role, term, members, quorum health
//! assert_eq!(status.members.drained, vec![other]);
//! # Ok(()) }
//! ```
//!
//! ## Named elections
//!
//! One group, many leaderships (`docs/design.md`, section 11): each named election is a
//! Raft group of its own over the same workers, so its term is its token, in a range of
//! its own ([`election::term_floor`]). The group's leader creates and removes them; every
//! node gets an [`Election`] handle of a name with the same shape as the node's own API:
//!
//! ```
//! # use std::sync::Arc;
//! # use tenure::storage::{MemDisk, MemStore};
//! # use tenure::transport::mem::MemNetwork;
//! # use tenure::{Config, GroupId, Node, Timing};
//! # /// Three nodes of one group in this process, on memory stores and the memory network.
//! # async fn group() -> Vec<Node> {
//! #     let net = MemNetwork::new();
//! #     let group = GroupId::random();
//! #     let peers: Vec<(u64, std::net::SocketAddr)> =
//! #         (1..=3).map(|id| (id, ([127, 0, 0, 1], 7000 + id as u16).into())).collect();
//! #     let mut nodes = Vec::new();
//! #     for id in 1..=3 {
//! #         let config = Config::builder(id).peers(peers.clone())
//! #             .timing(Timing::from_millis(10, 30, 150, 250)).found(group).build();
//! #         let (transport, inbound) = net.endpoint(id);
//! #         let store = MemStore::open(MemDisk::for_node(id));
//! #         nodes.push(Node::start_with(config, store, Arc::new(transport), inbound).await.unwrap());
//! #     }
//! #     nodes
//! # }
//! # async fn leader(nodes: &[Node]) -> Node {
//! #     loop {
//! #         if let Some(n) = nodes.iter().find(|n| n.leadership().leased) { return n.clone() }
//! #         tokio::time::sleep(std::time::Duration::from_millis(5)).await;
//! #     }
//! # }
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let nodes = group().await;
//! # let leader = leader(&nodes).await;
//! use tenure::election::election_of_term;
//! use tenure::ElectionOptions;
//!
//! let info = leader.create_election("shard-0", ElectionOptions::new()).await?;
//! // Whichever node leads shard-0 gets its lease; its token is in shard-0's range.
//! let shard = nodes.iter().map(|n| n.election("shard-0"));
//! let lease = futures_lease(shard.collect()).await;
//! assert_eq!(election_of_term(lease.token().term()), info.id);
//! let token = lease.confirm().await?;            // one quorum round of shard-0
//! # let _ = token;
//! leader.remove_election("shard-0").await?;      // its holder revokes the lease
//! # Ok(()) }
//! # async fn futures_lease(elections: Vec<tenure::Election>) -> tenure::Lease {
//! #     loop {
//! #         for e in &elections {
//! #             if e.leadership().leased {
//! #                 if let Ok(Ok(l)) = tokio::time::timeout(
//! #                     std::time::Duration::from_millis(100), e.lease()).await { return l }
//! #             }
//! #         }
//! #         tokio::time::sleep(std::time::Duration::from_millis(5)).await;
//! #     }
//! # }
//! ```
//!
//! ## Logging
//!
//! tenure logs through [slog](https://docs.rs/slog), as raft-rs does: to stderr by default
//! ([`terminal_logger`]), or to any slog logger given to [`ConfigBuilder::logger`]. A host
//! that logs with `tracing` turns on the cargo feature `tracing` and gives the node
//! `tenure::logging::tracing_logger()`. Every record, raft-rs's included, then reaches
//! the host's subscriber as a `tracing` event: its level, its message, its key-value
//! pairs as fields (`node`, `raft_id`, `term`, ...), and the module it was logged in as
//! the target, so that a filter can quiet raft-rs alone:
//!
//! ```toml
//! tenure = { version = "0.1", features = ["tracing"] }
//! ```
//!
//! ```no_run
//! # #[cfg(feature = "tracing")]
//! # async fn host() -> Result<(), Box<dyn std::error::Error>> {
//! use tracing_subscriber::filter::{LevelFilter, Targets};
//! use tracing_subscriber::prelude::*;
//!
//! // The host's subscriber: raft-rs at WARN, tenure's own records at INFO.
//! let filter = Targets::new()
//!     .with_target("raft", LevelFilter::WARN)
//!     .with_default(LevelFilter::INFO);
//! tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer())
//!     .with(filter)
//!     .init();
//!
//! let config = tenure::Config::builder(1)
//!     .peer(1, "127.0.0.1:7001")
//!     .peer(2, "127.0.0.1:7002")
//!     .peer(3, "127.0.0.1:7003")
//!     .data_dir("/var/lib/worker-1/tenure")
//!     .tls_dir("/etc/worker/tenure-certs")
//!     .logger(tenure::logging::tracing_logger())
//!     .build();
//! let node = tenure::Node::start(config).await?;
//! # let _ = node; Ok(()) }
//! ```
//!
//! Events are dispatched on the thread that logs, so a subscriber that writes to a slow
//! sink should do so through a non-blocking writer. The module `logging` documents the
//! mapping in full.
//!
//! ## Layout
//!
//! | module | role |
//! |---|---|
//! | [`config`] | [`Config`], its builder and validation; [`Timing`] presets; [`ReadMode`] |
//! | `node` | the public [`Node`] handle: start, watch, lease, transfer, shutdown, membership |
//! | `founding` | founding a group once: the first members' hellos, the founding rule |
//! | `status` | [`Role`], [`Leadership`], [`Membership`], [`Status`]: what a node knows |
//! | `state` | the replicated state beside raft-rs's membership: group id, history, drains, addresses, removed ids |
//! | `driver/` | the task that owns raft-rs's `RawNode`: the loop, the Ready, commands, peer input, the lease keeper, handover, membership, publishing (its module docs map the files) |
//! | [`lease`] | [`Lease`] handles; `token`: the [`FencingToken`] |
//! | `lease_clock` | the lease clock: one task per node that ends every lease at its deadline, whatever the driver is doing |
//! | [`GroupId`] | which group a store, a node and a peer belong to |
//! | [`storage`] | the [`RaftStore`](storage::RaftStore) trait: RocksDB and memory stores |
//! | [`transport`] | the [`Transport`](transport::Transport) trait; QUIC with mutual TLS (`quic/`: config, outbound, inbound, socket, the credential in use and its reloads); frames (`frame/`, the wire scan in `scan.rs`); the hello; the in-process test network |
//! | [`tls`] | the cluster CA and certificate names (`ca.rs`, `names.rs`); PEM and the certificate folders (`pem.rs`, `files.rs`); node and operator identities on one credential core (`identity.rs`, `credential.rs`); reloading a node's files and rotating them on disk (`reload.rs`, `rotate.rs`); refusing removed nodes at the handshake (`refuse.rs`) |
//! | [`error`] | one error enum per operation |
//! | [`clock`] | `CLOCK_MONOTONIC` timestamps comparable across processes; `CLOCK_BOOTTIME`, which the lease also checks |
//! | [`fence`] | resource-side token checks: SQLite and RocksDB fences |
//! | [`runner`] | leader-only tasks: run while leased, cancel when lost |
//! | [`metrics`] | the node's metrics on `prometheus-client`, into a host's registry or served over HTTP (hyper, feature `http`) |
//! | [`peer_input`] | which messages from peers may reach raft-rs (refused ones are counted) |
//! | [`admin`] | operator controls: the admin endpoint (operator certificates only) and its client |
//! | [`election`] | named elections: their options, views and errors; `election_handle`: the [`Election`] handle of one on a node |
//! | `election_rng` | seeded election timeouts and draws, so a simulation replays a run exactly |
//! | [`history`] | the replicated leadership history: who led which term, from when |
//! | [`backup`] | disaster recovery: a backup of the replicated state, and founding again from it above every old token |
//! | `logging` | tenure's and raft-rs's slog records as `tracing` events (feature `tracing`) |
//! | `mutation` | deliberately broken behaviours for the mutation checks (feature `mutations`; `TENURE_MUTATION` switches them on) |
//!
//! Beside the library, `src/bin/` holds the crate's two programs: `tenure-worker`, the
//! worker the deploy files install (its command line, its events as JSON lines, the
//! settlement ledger it settles with `--ledger`), and `tenure-ctl`, the operator tool.

pub mod admin;
pub mod backup;
pub mod clock;
pub mod config;
mod driver;
pub mod election;
mod election_handle;
mod election_rng;
pub mod error;
pub mod fence;
mod founding;
mod group_id;
pub mod history;
pub mod lease;
mod lease_clock;
#[cfg(feature = "tracing")]
pub mod logging;
pub mod metrics;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod mutation;
// Its items are `pub` for the `testing` feature, which exports the module.
#[cfg(not(feature = "testing"))]
#[allow(unreachable_pub)]
mod mutation;
mod node;
pub mod peer_input;
/// What tests of hostile members send (the `testing` feature): messages no correct node
/// makes.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing {
    pub use crate::driver::forged_support_request;
}
pub mod runner;
mod state;
mod status;
pub mod storage;
pub mod tls;
mod token;
pub mod transport;

pub use config::{Config, ConfigBuilder, ReadMode, Timing, TlsSource};
pub use election::{
    ElectionError, ElectionId, ElectionInfo, ElectionOptions, ElectionsView, Removed,
};
pub use election_handle::Election;
pub use error::{
    LeaseLost, LostReason, MembershipError, NodeStopped, StartError, StopCause, TransferError,
};
pub use fence::{FenceError, RocksFence, SqliteFence};
pub use group_id::{GroupId, GroupIdError};
pub use history::{TenureEnd, TenureRecord, TenureStart};
pub use lease::Lease;
pub use node::{terminal_logger, Node};
pub use status::{DiskHealth, Leadership, Membership, Role, Status};
pub use token::FencingToken;
pub use transport::PeerAddr;

/// A node's identity in the group: the raft-rs peer id, named by the node's certificate
/// (`node-<id>.tenure`). Never 0.
pub type NodeId = u64;
