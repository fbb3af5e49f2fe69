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
//! Start a node with the group's membership, a data directory and the TLS files written
//! by `cargo run --example certs -- --nodes 3 --out DIR`:
//!
//! ```no_run
//! use tenure::{Config, Node, Timing};
//!
//! # async fn worker() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::builder(1)
//!     .peer(1, "127.0.0.1:7001".parse()?)
//!     .peer(2, "127.0.0.1:7002".parse()?)
//!     .peer(3, "127.0.0.1:7003".parse()?)
//!     .data_dir("/var/lib/worker-1/tenure")
//!     .tls_dir("/etc/worker/tenure-certs")
//!     .timing(Timing::lan())
//!     .build();
//! let node = Node::start(config).await?;
//! # Ok(()) }
//! ```
//!
//! Watch who leads (every change is published, "no leader known" included):
//!
//! ```no_run
//! # async fn watch(node: tenure::Node) {
//! let mut leadership = node.watch();
//! while leadership.changed().await.is_ok() {
//!     let l = leadership.borrow().clone();
//!     println!("term {} leader {:?} (I am {:?})", l.term, l.leader, l.role);
//! }
//! # }
//! ```
//!
//! Do leader-only work under a lease, carrying its token to every resource, and stop the
//! moment the lease is lost:
//!
//! ```no_run
//! # async fn settle_next_batch(_token: tenure::FencingToken) {}
//! # async fn work(node: tenure::Node) -> Result<(), tenure::NodeStopped> {
//! loop {
//!     // Resolves when this node leads and a quorum confirmed it.
//!     let lease = node.lease().await?;
//!     let stop = lease.cancellation_token();
//!     loop {
//!         // Re-confirm before each critical step (one quorum round in `Safe` mode).
//!         let Ok(token) = lease.confirm().await else { break };
//!         tokio::select! {
//!             _ = stop.cancelled() => break,          // lost: stop at once
//!             _ = settle_next_batch(token) => {}      // the resource checks `token`
//!         }
//!     }
//! }
//! # }
//! ```
//!
//! Hand over before maintenance, and shut down gracefully (a leader hands over first, so
//! the group does not wait for an election timeout):
//!
//! ```no_run
//! # async fn stop(node: tenure::Node) -> Result<(), Box<dyn std::error::Error>> {
//! node.transfer_leadership(None).await?; // to the most up-to-date follower
//! node.shutdown().await?;
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
//! ```no_run
//! # async fn grow(leader: tenure::Node) -> Result<(), Box<dyn std::error::Error>> {
//! leader.add_learner(4, "10.0.0.4:7004".parse()?).await?;
//! // Refused with LearnerBehind until node 4 has the log; retry.
//! leader.promote(4).await?;
//! // Replace a dead voter 2 by learner 5 in one joint change:
//! // leader.replace_member(2, 5).await?;
//! leader.remove_member(3).await?; // a removed node stops campaigning (Role::Removed)
//! // A drained node never campaigns and hands over if it leads (replicated, durable):
//! leader.set_drained(1, true).await?;
//! let status = leader.status().await?; // role, term, members, quorum health
//! # let _ = status; Ok(()) }
//! ```
//!
//! ## Layout
//!
//! | module | role |
//! |---|---|
//! | [`config`] | [`Config`], its builder and validation; [`Timing`] presets; [`ReadMode`] |
//! | `node` | the public [`Node`] handle: start, watch, lease, transfer, shutdown, membership, status |
//! | `state` | the replicated state beside raft-rs's membership: history, drains, member addresses |
//! | `driver` | the task that owns raft-rs's `RawNode`; Ready handling; tenure's lease |
//! | [`lease`] | [`Lease`] and [`FencingToken`] |
//! | [`storage`] | the [`RaftStore`](storage::RaftStore) trait: RocksDB and memory stores |
//! | [`transport`] | QUIC with mutual TLS, frames, the in-process test network |
//! | [`error`] | one error enum per operation |
//! | [`clock`] | `CLOCK_MONOTONIC` timestamps comparable across processes |
//! | [`fence`] | resource-side token checks: SQLite and RocksDB fences |
//! | [`runner`] | leader-only tasks: run while leased, cancel when lost |
//! | [`metrics`] | Prometheus text exposition and a tiny HTTP endpoint |
//! | [`peer_input`] | which messages from peers may reach raft-rs (refused ones are counted) |
//! | [`admin`] | operator controls: the admin endpoint (operator certificates only) and its client |
#![deny(missing_docs)]

pub mod admin;
pub mod clock;
pub mod config;
mod driver;
mod election_rng;
pub mod error;
pub mod fence;
pub mod history;
pub mod lease;
pub mod metrics;
#[doc(hidden)]
pub mod mutation;
mod node;
pub mod peer_input;
pub mod runner;
mod state;
pub mod storage;
pub mod transport;

pub use config::{Config, ConfigBuilder, ReadMode, Timing, TlsSource};
pub use error::{
    LeaseLost, LostReason, MembershipError, NodeStopped, StartError, StopCause, TransferError,
};
pub use fence::{FenceError, RocksFence, SqliteFence};
pub use history::{TenureEnd, TenureRecord, TenureStart};
pub use lease::{FencingToken, Lease};
pub use node::{terminal_logger, Leadership, Membership, Node, Role, Status};
pub use transport::NodeId;
