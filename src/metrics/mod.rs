//! Metrics on [`prometheus_client`]: registered into the host's registry, or encoded as
//! Prometheus text on their own; and (cargo feature `http`) a hardened HTTP endpoint.
//!
//! The driver updates this node's [`Metrics`] ([`Node::metrics`](crate::Node::metrics)).
//! A host that exposes a [`Registry`] registers each node into it with
//! [`Node::register_metrics`](crate::Node::register_metrics); nothing in tenure opens a
//! port for that. [`Node::metrics_text`](crate::Node::metrics_text) encodes a registry
//! that holds only this node's metrics, in the Prometheus text format 0.0.4. Values are
//! the latest state, not every change; the transport and fence counters are read when
//! the registry is encoded (collectors), so every scrape sees them as they are.
//!
//! ```
//! use tenure::metrics::prometheus_client::encoding::prometheus_text;
//! use tenure::metrics::prometheus_client::registry::Registry;
//!
//! let mut registry = Registry::default(); // the host's, with its own metrics
//! // A host registers a node with `node.register_metrics(…)`; its `Metrics` alone
//! // (no transport counters) register the same way:
//! let metrics = tenure::metrics::Metrics::new(1);
//! // One sub-registry per group, so that two groups' series differ by a label.
//! metrics.register(registry.sub_registry_with_label(("group".into(), "billing".into())));
//!
//! let mut text = String::new();
//! prometheus_text::encode(&mut text, &registry).unwrap();
//! assert!(text.contains("tenure_term{group=\"billing\",node=\"1\"} 0\n"));
//! ```
//!
//! Register each node once, and several nodes into sub-registries with a label that
//! tells them apart: the histograms and fence counters carry no `node` label, so two
//! nodes side by side would export the same series twice. Each registration also
//! writes its own `# HELP` and `# TYPE` lines, so several nodes in one registry repeat
//! them, which the text format does not allow and strict parsers (`promtool check
//! metrics`) refuse; [`Node::metrics_text`](crate::Node::metrics_text) has one node and
//! is valid.
//!
//! With the cargo feature `http` (on by default), [`serve`] answers `GET /metrics` with
//! any text (usually `Node::metrics_text`), and [`serve_with`] does so with a logger and
//! other limits. It is kept in the library because its limits are what make an
//! unauthenticated port safe to open, and each host would otherwise have to rebuild
//! them ([`ServeOptions`]): at most 32 connections (when all are taken, the oldest one
//! that has not sent its request is closed to make room for the new one), 5 s to send
//! the request head and 5 s to take the answer; an accept error (`EMFILE`: out of file
//! descriptors) pauses the accept loop, 10 ms doubling to 1 s, and is logged once a
//! minute. HTTP itself is hyper's.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `tenure_term` | gauge | current Raft term at this node |
//! | `tenure_role` | gauge | 0 follower, 1 pre-candidate, 2 candidate, 3 leader, 4 stopped, 5 learner, 6 removed, 7 joining |
//! | `tenure_leader_id` | gauge | leader this node knows of (0: none) |
//! | `tenure_lease_held` | gauge | 1 while this node holds a confirmed lease |
//! | `tenure_members` | gauge | voters in the group |
//! | `tenure_peers_reachable` | gauge | voters heard from recently (leader: itself and the voters heard from within an election timeout; follower: 1 + leader) |
//! | `tenure_quorum_healthy` | gauge | leader: holds its lease; follower: hears from a leader |
//! | `tenure_lease_renew_seconds` | histogram | round trip of quorum-acknowledged ReadIndex rounds |
//! | `tenure_failover_seconds` | histogram | time this node spent without a known leader, per episode |
//! | `tenure_elections_started_total` | counter | campaigns this node started (became candidate) |
//! | `tenure_elections_won_total` | counter | times this node became leader |
//! | `tenure_leases_acquired_total` | counter | leases granted |
//! | `tenure_heartbeats_merged_total` | counter | raft-rs heartbeats not sent because a lease round's heartbeats had just gone to every peer |
//! | `tenure_disk_stalled` | gauge | 1 while this node's disk is stalled: it leads nothing until its probe writes are fast (`docs/design.md`, section 15) |
//! | `tenure_ready_passes_held_total` | counter | Ready passes whose writes waited for the batch on the disk and went with the next |
//! | `tenure_disk_stalls_total` | counter | disk stalls: synced writes slower than the bound (`Config::disk_stall_bound`) while the disk was healthy |
//! | `tenure_takeovers_refused_total` | counter | handovers to this node (`MsgTimeoutNow`, root or named) it refused because it is drained or its disk is stalled; each costs the election its lease until the handover times out |
//! | `tenure_lease_expiries_total` | counter | leases that ran out unrenewed |
//! | `tenure_lease_revocations_total{reason}` | counter | leases revoked, by reason |
//! | `tenure_fence_accepted_total{fence}` / `tenure_fence_rejections_total{fence}` | counter | registered fences |
//! | `tenure_transport_*_total` | counter | messages sent/received/dropped, frames rejected, connections |
//! | `tenure_cert_expiry_seconds` | gauge | seconds until this node's own certificate expires (updated on every reload of its TLS files; absent without a certificate) |
//! | `tenure_peer_messages_refused_total{reason}` | counter | authenticated peer messages dropped before raft-rs, by [`Refusal`] (a correct peer sends none) |
//!
//! Every series carries the label `node` (this node's id), except the two histograms and
//! the fence counters.

mod collectors;
#[cfg(feature = "http")]
mod http;

use std::borrow::Cow;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use prometheus_client;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

#[cfg(feature = "http")]
pub use http::{
    serve, serve_with, Health, HealthCheck, MetricsServer, ServeOptions, ServeStats,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_REQUEST_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, HEALTH_CACHE,
    HEALTH_STATUS_TIMEOUT,
};

use crate::error::LostReason;
use crate::fence::FenceStats;
use crate::peer_input::Refusal;
use crate::transport::TransportStatsSnapshot;
use collectors::{CertExpiry, Fences, TransportCollector};

const RENEW_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0,
];
const FAILOVER_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0,
];

const REASONS: [LostReason; 8] = [
    LostReason::Expired,
    LostReason::TermChanged,
    LostReason::SteppedDown,
    LostReason::HandedOver,
    LostReason::Shutdown,
    LostReason::Failed,
    LostReason::Removed,
    LostReason::Suspended,
];

/// A gauge of a count (never negative).
type CountGauge = Gauge<u64, AtomicU64>;
/// `reason="…"`.
type ReasonLabel = [(&'static str, &'static str); 1];

/// This node's metrics: prometheus-client gauges, counters and histograms that the driver
/// updates. Shared (`Arc`) between the driver and the node handle; a registry they are
/// registered into ([`Metrics::register`]) holds its own handles to the same values.
#[derive(Debug)]
pub struct Metrics {
    node: u64,
    term: CountGauge,
    role: CountGauge,
    leader: CountGauge,
    lease_held: CountGauge,
    members: CountGauge,
    peers_reachable: CountGauge,
    quorum_healthy: CountGauge,
    elections_started: Counter,
    elections_won: Counter,
    leases_acquired: Counter,
    heartbeats_merged: Counter,
    disk_stalled: CountGauge,
    disk_stalls: Counter,
    takeovers_refused: Counter,
    revocations: Family<ReasonLabel, Counter>,
    /// `revocations`' counters, in [`REASONS`] order.
    revoked: [Counter; REASONS.len()],
    peer_refusals: Family<ReasonLabel, Counter>,
    /// `peer_refusals`' counters, by [`Refusal::index`].
    refused: [Counter; Refusal::ALL.len()],
    renew: Histogram,
    failover: Histogram,
    fences: Fences,
    named_elections: CountGauge,
    named_led: CountGauge,
    named_leased: CountGauge,
    named_leaderless: CountGauge,
    named_dropped_unknown: Counter,
    named_dropped_removed: Counter,
    turn_writes: Counter,
    turn_parts: Counter,
    passes_held: Counter,
    named_quiet: CountGauge,
    named_suspended: CountGauge,
    support_requests: Counter,
    support_acks: Counter,
    support_malformed: Counter,
    support_books_dropped: Counter,
    named_wakes: Counter,
    named_wakes_message: Counter,
    support_book_max: CountGauge,
    named_wake_queue: CountGauge,
    named_wake_burst_max: CountGauge,
    prevotes_ignored_quiet: Counter,
    /// When this node's certificate expires (Unix seconds; `i64::MIN` while unknown).
    cert_not_after: Arc<AtomicI64>,
}

impl Metrics {
    /// Empty metrics for node `node`.
    pub fn new(node: u64) -> Arc<Metrics> {
        let revocations = Family::<ReasonLabel, Counter>::default();
        let revoked = REASONS.map(|r| revocations.get_or_create_owned(&[("reason", r.as_str())]));
        let peer_refusals = Family::<ReasonLabel, Counter>::default();
        let refused =
            Refusal::ALL.map(|r| peer_refusals.get_or_create_owned(&[("reason", r.as_str())]));
        Arc::new(Metrics {
            node,
            term: CountGauge::default(),
            role: CountGauge::default(),
            leader: CountGauge::default(),
            lease_held: CountGauge::default(),
            members: CountGauge::default(),
            peers_reachable: CountGauge::default(),
            quorum_healthy: CountGauge::default(),
            elections_started: Counter::default(),
            elections_won: Counter::default(),
            leases_acquired: Counter::default(),
            heartbeats_merged: Counter::default(),
            disk_stalled: CountGauge::default(),
            disk_stalls: Counter::default(),
            takeovers_refused: Counter::default(),
            revocations,
            revoked,
            peer_refusals,
            refused,
            renew: Histogram::new(RENEW_BUCKETS.iter().copied()),
            failover: Histogram::new(FAILOVER_BUCKETS.iter().copied()),
            fences: Fences::default(),
            named_elections: CountGauge::default(),
            named_led: CountGauge::default(),
            named_leased: CountGauge::default(),
            named_leaderless: CountGauge::default(),
            named_dropped_unknown: Counter::default(),
            named_dropped_removed: Counter::default(),
            turn_writes: Counter::default(),
            turn_parts: Counter::default(),
            passes_held: Counter::default(),
            named_quiet: CountGauge::default(),
            named_suspended: CountGauge::default(),
            support_requests: Counter::default(),
            support_acks: Counter::default(),
            support_malformed: Counter::default(),
            support_books_dropped: Counter::default(),
            named_wakes: Counter::default(),
            named_wakes_message: Counter::default(),
            support_book_max: CountGauge::default(),
            named_wake_queue: CountGauge::default(),
            named_wake_burst_max: CountGauge::default(),
            prevotes_ignored_quiet: Counter::default(),
            cert_not_after: Arc::new(AtomicI64::new(i64::MIN)),
        })
    }

    /// When this node's certificate expires: `tenure_cert_expiry_seconds` is the time
    /// left until then at each encoding (negative once past). [`Node::start`] sets it
    /// at start and at every reload of the TLS files; a host with a transport of its
    /// own may set it too. Not exported until set.
    ///
    /// [`Node::start`]: crate::Node::start
    pub fn set_cert_not_after(&self, not_after: SystemTime) {
        let secs = match not_after.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            Err(e) => i64::try_from(e.duration().as_secs()).map_or(i64::MIN + 1, |s| -s),
        };
        self.cert_not_after.store(secs, Ordering::Relaxed);
    }

    /// The named elections this node runs, leads, holds a lease of, and knows no leader of.
    pub(crate) fn set_named(&self, running: u64, led: u64, leased: u64, leaderless: u64) {
        self.named_elections.set(running);
        self.named_led.set(led);
        self.named_leased.set(leased);
        self.named_leaderless.set(leaderless);
    }

    /// The named elections suspended on this node (docs/design.md, section 11).
    pub(crate) fn set_named_suspended(&self, suspended: u64) {
        self.named_suspended.set(suspended);
    }

    pub(crate) fn set_named_quiet(&self, quiet: u64) {
        self.named_quiet.set(quiet);
    }

    /// A support request (`request`) or ack left.
    pub(crate) fn support_sent(&self, request: bool) {
        if request {
            self.support_requests.inc();
        } else {
            self.support_acks.inc();
        }
    }

    /// A support message that did not decode was dropped.
    pub(crate) fn support_malformed(&self) {
        self.support_malformed.inc();
    }

    /// A peer's support book was dropped (docs/design.md, section 12: it did not
    /// confirm this node's reports, or its offers would have passed the book's cap).
    pub(crate) fn support_book_dropped(&self) {
        self.support_books_dropped.inc();
    }

    /// A peer's support book holds `entries` after a request (the gauge keeps the most).
    pub(crate) fn support_book(&self, entries: usize) {
        let entries = entries as u64;
        if entries > self.support_book_max.get() {
            self.support_book_max.set(entries);
        }
    }

    /// A quiet named election woke (`by_message`: a peer's message of it woke it).
    pub(crate) fn named_woken(&self, by_message: bool) {
        self.named_wakes.inc();
        if by_message {
            self.named_wakes_message.inc();
        }
    }

    /// Quiet named elections woken so far, for any reason.
    pub fn named_wakes(&self) -> u64 {
        self.named_wakes.get()
    }

    /// Quiet named elections woken so far by a peer's message of them (one a correct
    /// peer sends only when the election needs to be awake: an election, a new leader's
    /// append; docs/design.md, section 12, "Judged before waking").
    pub fn named_wakes_by_message(&self) -> u64 {
        self.named_wakes_message.get()
    }

    /// Support acks sent so far (one per peer's request judged).
    pub fn support_acks_sent(&self) -> u64 {
        self.support_acks.get()
    }

    /// Support messages from peers dropped because they did not decode.
    pub fn support_messages_malformed(&self) -> u64 {
        self.support_malformed.get()
    }

    /// Peers' support books dropped so far.
    pub fn support_books_dropped(&self) -> u64 {
        self.support_books_dropped.get()
    }

    /// The most entries (elections held for a peer and refusals or drops reported to
    /// it) one peer's support book reached here: at most the catalog's election limit
    /// ([`MAX_ELECTIONS`](crate::election::MAX_ELECTIONS)) of reports plus the
    /// elections this node runs.
    pub fn support_book_max(&self) -> u64 {
        self.support_book_max.get()
    }

    /// Quiet elections waiting in the paced wake queue (docs/design.md, section 12,
    /// "One queue for mass wakes").
    pub(crate) fn set_named_wake_queue(&self, queued: usize) {
        self.named_wake_queue.set(queued as u64);
    }

    /// `woken` quiet elections woke by a mass wake within one tick so far (the gauge
    /// keeps the most).
    pub(crate) fn named_wake_burst(&self, woken: usize) {
        let woken = woken as u64;
        if woken > self.named_wake_burst_max.get() {
            self.named_wake_burst_max.set(woken);
        }
    }

    /// The most quiet elections that mass wakes (a leader's restart or silence, a lost
    /// book, refusals, drops, lapses) woke here within one tick: at most the paced
    /// queue's budget, `SILENT_WAKE_WHILE_AWAKE_BELOW` (120).
    pub fn named_wake_burst_max(&self) -> u64 {
        self.named_wake_burst_max.get()
    }

    /// Quiet elections waiting in the paced wake queue now.
    pub fn named_wake_queue(&self) -> u64 {
        self.named_wake_queue.get()
    }

    /// A pre-vote of a quiet election was dropped unanswered (its leader is live).
    pub(crate) fn prevote_ignored_quiet(&self) {
        self.prevotes_ignored_quiet.inc();
    }

    /// Named elections quiet on this node now.
    pub fn named_quiet(&self) -> u64 {
        self.named_quiet.get()
    }

    /// Named elections suspended on this node now (no lease of them is held).
    pub fn named_suspended(&self) -> u64 {
        self.named_suspended.get()
    }

    /// A message of a named election this node does not run was dropped: one it has not
    /// founded yet (`removed` false) or one removed (or never run) here.
    pub(crate) fn election_message_dropped(&self, removed: bool) {
        if removed {
            self.named_dropped_removed.inc();
        } else {
            self.named_dropped_unknown.inc();
        }
    }

    /// A Ready pass wrote `parts` groups' state in one store write.
    pub(crate) fn turn_write(&self, parts: usize) {
        self.turn_writes.inc();
        self.turn_parts.inc_by(parts as u64);
    }

    /// A Ready pass's writes were held: a batch was out (they go with the next one).
    pub(crate) fn pass_held(&self) {
        self.passes_held.inc();
    }

    /// Ready passes whose writes were held behind a batch out, so far.
    pub fn passes_held(&self) -> u64 {
        self.passes_held.get()
    }

    /// (store writes of Ready passes, groups they carried) so far: with many elections,
    /// the second above the first means several groups shared one write (one fsync).
    pub fn turn_writes(&self) -> (u64, u64) {
        (self.turn_writes.get(), self.turn_parts.get())
    }

    /// (elections led, leased, leaderless) as last set, for tests.
    pub fn named_elections(&self) -> (u64, u64, u64) {
        (
            self.named_led.get(),
            self.named_leased.get(),
            self.named_leaderless.get(),
        )
    }

    /// Adds a fence's counters to the exposition (`tenure_fence_*{fence="name"}`), in
    /// every registry these metrics are registered into, before or after.
    pub fn register_fence(&self, name: &str, stats: Arc<FenceStats>) {
        self.fences
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((name.to_string(), stats));
    }

    /// Registers these metrics into `registry` (under the prefix `tenure`), without the
    /// transport counters: [`Node::register_metrics`](crate::Node::register_metrics)
    /// adds those.
    pub fn register(&self, registry: &mut Registry) {
        self.register_with_transport(registry, None::<fn() -> Option<TransportStatsSnapshot>>);
    }

    /// [`Metrics::register`], and the transport counters that `transport` reads at every
    /// encoding (none while it returns `None`).
    pub(crate) fn register_with_transport<F>(&self, registry: &mut Registry, transport: Option<F>)
    where
        F: Fn() -> Option<TransportStatsSnapshot> + Send + Sync + 'static,
    {
        let tenure = registry.sub_registry_with_prefix("tenure");
        register(
            tenure,
            "lease_renew_seconds",
            "Round trip of quorum-acknowledged ReadIndex rounds.",
            self.renew.clone(),
        );
        register(
            tenure,
            "failover_seconds",
            "Time this node spent without a known leader, per episode.",
            self.failover.clone(),
        );
        tenure.register_collector(Box::new(self.fences.clone()));

        let node =
            tenure.sub_registry_with_label((Cow::Borrowed("node"), self.node.to_string().into()));
        let gauges = [
            ("term", "Current Raft term at this node.", &self.term),
            (
                "role",
                "0 follower, 1 pre-candidate, 2 candidate, 3 leader, 4 stopped, 5 learner, 6 removed, 7 joining.",
                &self.role,
            ),
            ("leader_id", "Leader known to this node (0: none).", &self.leader),
            ("lease_held", "1 while this node holds a confirmed lease.", &self.lease_held),
            ("members", "Voters in the group.", &self.members),
            (
                "peers_reachable",
                "Voters heard from recently, this node included.",
                &self.peers_reachable,
            ),
            (
                "quorum_healthy",
                "Leader: holds its lease. Follower: hears from a leader.",
                &self.quorum_healthy,
            ),
            ("named_elections", "Named elections this node runs.", &self.named_elections),
            ("named_elections_led", "Named elections this node leads.", &self.named_led),
            (
                "named_elections_leased",
                "Named elections this node holds a confirmed lease of.",
                &self.named_leased,
            ),
            (
                "named_elections_leaderless",
                "Named elections this node knows no leader of.",
                &self.named_leaderless,
            ),
            (
                "named_elections_quiet",
                "Named elections quiet on this node: not ticking, renewed by the support stream.",
                &self.named_quiet,
            ),
            (
                "support_book_entries_max",
                "The most entries one peer's support book reached on this node (held elections and reports not yet confirmed; bounded by the catalog's election limit).",
                &self.support_book_max,
            ),
            (
                "named_wake_queue",
                "Quiet named elections waiting in the paced wake queue (a few wake a tick, each peer in turn).",
                &self.named_wake_queue,
            ),
            (
                "named_wake_burst_max",
                "The most quiet named elections mass wakes woke on this node within one tick (bounded by the paced queue's budget).",
                &self.named_wake_burst_max,
            ),
            (
                "named_elections_suspended",
                "Named elections suspended on this node: no lease of them is granted or held.",
                &self.named_suspended,
            ),
            (
                "disk_stalled",
                "1 while this node's disk is stalled: it leads nothing until its probe writes are fast.",
                &self.disk_stalled,
            ),
        ];
        for (name, help, gauge) in gauges {
            register(node, name, help, gauge.clone());
        }
        let counters = [
            (
                "elections_started",
                "Campaigns this node started.",
                &self.elections_started,
            ),
            (
                "elections_won",
                "Times this node became leader.",
                &self.elections_won,
            ),
            ("leases_acquired", "Leases granted.", &self.leases_acquired),
            (
                "store_turn_writes",
                "Store writes of the driver's Ready passes (one batch for all elections at once; the passes made while one is out share the next).",
                &self.turn_writes,
            ),
            (
                "ready_passes_held",
                "Ready passes whose writes waited for the batch on the disk and went with the next (a disk slower than the driver's turns).",
                &self.passes_held,
            ),
            (
                "store_turn_write_parts",
                "Elections whose state those writes carried (above the writes: elections shared a write).",
                &self.turn_parts,
            ),
            (
                "support_requests",
                "Support requests sent (one per peer per heartbeat renews every quiet election it supports).",
                &self.support_requests,
            ),
            (
                "support_acks",
                "Support acks sent.",
                &self.support_acks,
            ),
            (
                "named_election_wakes",
                "Quiet named elections woken (they tick and heartbeat again until they settle).",
                &self.named_wakes,
            ),
            (
                "named_election_wakes_by_message",
                "Of those, woken by a peer's message of the election that was judged admissible.",
                &self.named_wakes_message,
            ),
            (
                "support_books_dropped",
                "Peers' support books dropped: the peer left this node's reports unconfirmed, or its offers would have passed the book's cap.",
                &self.support_books_dropped,
            ),
            (
                "support_messages_malformed",
                "Support messages from peers that did not decode, dropped.",
                &self.support_malformed,
            ),
            (
                "prevotes_ignored_quiet",
                "Pre-votes of quiet named elections dropped unanswered: the leader's stream is live (raft-rs ignores them in its lease too).",
                &self.prevotes_ignored_quiet,
            ),
            (
                "named_election_messages_unknown",
                "Messages of a named election this node has not founded yet, dropped.",
                &self.named_dropped_unknown,
            ),
            (
                "named_election_messages_removed",
                "Messages of a named election removed here (or never run here), dropped.",
                &self.named_dropped_removed,
            ),
            (
                "heartbeats_merged",
                "raft-rs heartbeats not sent: a lease round's heartbeats had just gone to every peer.",
                &self.heartbeats_merged,
            ),
            (
                "disk_stalls",
                "Disk stalls: synced writes slower than the bound while the disk was healthy.",
                &self.disk_stalls,
            ),
            (
                "takeovers_refused",
                "Handovers to this node it refused: it is drained or its disk is stalled.",
                &self.takeovers_refused,
            ),
            (
                "lease_expiries",
                "Leases that ran out unrenewed.",
                &self.revoked[reason_index(LostReason::Expired)],
            ),
        ];
        for (name, help, counter) in counters {
            register(node, name, help, counter.clone());
        }
        register(
            node,
            "lease_revocations",
            "Leases revoked, by reason.",
            self.revocations.clone(),
        );
        register(
            node,
            "peer_messages_refused",
            "Peer messages dropped before raft-rs, by reason.",
            self.peer_refusals.clone(),
        );
        node.register_collector(Box::new(CertExpiry(self.cert_not_after.clone())));
        if let Some(read) = transport {
            node.register_collector(Box::new(TransportCollector(read)));
        }
    }

    pub(crate) fn set_state(&self, term: u64, role: u64, leader: u64, lease_held: bool) {
        self.term.set(term);
        self.role.set(role);
        self.leader.set(leader);
        self.lease_held.set(u64::from(lease_held));
    }

    pub(crate) fn set_health(&self, members: u64, reachable: u64, quorum_healthy: bool) {
        self.members.set(members);
        self.peers_reachable.set(reachable);
        self.quorum_healthy.set(u64::from(quorum_healthy));
    }

    pub(crate) fn election_started(&self) {
        self.elections_started.inc();
    }

    pub(crate) fn election_won(&self) {
        self.elections_won.inc();
    }

    pub(crate) fn lease_acquired(&self) {
        self.leases_acquired.inc();
    }

    /// The disk stalled (`true`) or recovered.
    pub(crate) fn disk_stalled(&self, stalled: bool) {
        if stalled {
            self.disk_stalls.inc();
        }
        self.disk_stalled.set(u64::from(stalled));
    }

    /// A handover to this node was refused (it is drained or its disk is stalled).
    pub(crate) fn takeover_refused(&self) {
        self.takeovers_refused.inc();
    }

    /// Handovers to this node it refused so far (drained, or its disk stalled).
    pub fn takeovers_refused(&self) -> u64 {
        self.takeovers_refused.get()
    }

    /// Disk stalls so far, and whether the disk is stalled now.
    pub fn disk_stalls(&self) -> (u64, bool) {
        (self.disk_stalls.get(), self.disk_stalled.get() == 1)
    }

    pub(crate) fn heartbeat_merged(&self) {
        self.heartbeats_merged.inc();
    }

    pub(crate) fn lease_revoked(&self, reason: LostReason) {
        self.revoked[reason_index(reason)].inc();
    }

    pub(crate) fn renew_round_trip(&self, d: Duration) {
        self.renew.observe(d.as_secs_f64());
    }

    pub(crate) fn leaderless_for(&self, d: Duration) {
        self.failover.observe(d.as_secs_f64());
    }

    pub(crate) fn peer_refused_one(&self, r: Refusal) {
        self.refused[r.index()].inc();
    }

    /// Peer messages refused so far for `reason` (dropped before raft-rs saw them).
    pub fn peer_refused(&self, reason: Refusal) -> u64 {
        self.refused[reason.index()].get()
    }

    /// Lease revocations so far for `reason`.
    pub fn revocations(&self, reason: LostReason) -> u64 {
        self.revoked[reason_index(reason)].get()
    }

    /// The Prometheus text exposition (format 0.0.4) of a registry that holds only these
    /// metrics (no transport counters: see [`Node::metrics_text`](crate::Node::metrics_text)).
    pub fn render(&self) -> String {
        let mut registry = Registry::default();
        self.register(&mut registry);
        encode(&registry)
    }
}

/// `registry` in the Prometheus text format 0.0.4.
pub(crate) fn encode(registry: &Registry) -> String {
    let mut out = String::with_capacity(8192);
    // Writing to a String cannot fail, and neither can tenure's collectors.
    let _ = prometheus_text::encode(&mut out, registry);
    out
}

/// Registers `metric` with `help` as it is exported: prometheus-client adds the full
/// stop (and a counter's `_total`) itself.
fn register(registry: &mut Registry, name: &str, help: &str, metric: impl Metric) {
    registry.register(name, help.strip_suffix('.').unwrap_or(help), metric);
}

fn reason_index(reason: LostReason) -> usize {
    match reason {
        LostReason::Expired => 0,
        LostReason::TermChanged => 1,
        LostReason::SteppedDown => 2,
        LostReason::HandedOver => 3,
        LostReason::Shutdown => 4,
        LostReason::Failed => 5,
        LostReason::Removed => 6,
        LostReason::Suspended => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    fn encoded(registry: &Registry) -> String {
        encode(registry)
    }

    /// The value of the sample line that starts with `series` (name and labels).
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(|v| v.parse().expect("a number"))
    }

    #[test]
    fn reasons_are_at_their_index() {
        for (i, r) in REASONS.iter().enumerate() {
            assert_eq!(reason_index(*r), i, "{r:?}");
        }
    }

    #[test]
    fn a_registry_shows_what_happened_after_it_was_registered_into() {
        let m = Metrics::new(4);
        let sent = Arc::new(AtomicU64::new(3));
        let mut registry = Registry::default();
        let read = sent.clone();
        m.register_with_transport(
            &mut registry,
            Some(move || {
                let sent = read.load(Ordering::Relaxed);
                (sent != 0).then(|| TransportStatsSnapshot {
                    sent,
                    ..Default::default()
                })
            }),
        );
        let before = encoded(&registry);
        assert_eq!(value(&before, "tenure_term{node=\"4\"}"), Some(0.0));
        assert_eq!(
            value(&before, "tenure_transport_sent_total{node=\"4\"}"),
            Some(3.0)
        );
        assert!(!before.contains("tenure_fence_"), "{before}");

        m.set_state(9, 3, 4, true);
        m.lease_revoked(LostReason::Expired);
        m.lease_revoked(LostReason::Expired);
        m.lease_revoked(LostReason::Shutdown);
        m.peer_refused_one(Refusal::BadSender);
        m.renew_round_trip(Duration::from_millis(3));
        m.register_fence("ledger", Arc::new(FenceStats::default()));
        sent.store(5, Ordering::Relaxed);

        let after = encoded(&registry);
        assert_eq!(value(&after, "tenure_term{node=\"4\"}"), Some(9.0));
        assert_eq!(value(&after, "tenure_lease_held{node=\"4\"}"), Some(1.0));
        // Expiries are the revocations of reason `expired`: one counter, two names.
        assert_eq!(
            value(&after, "tenure_lease_expiries_total{node=\"4\"}"),
            Some(2.0)
        );
        let revoked = |reason: &str| {
            value(
                &after,
                &format!("tenure_lease_revocations_total{{node=\"4\",reason=\"{reason}\"}}"),
            )
        };
        assert_eq!(revoked("expired"), Some(2.0));
        assert_eq!(revoked("shutdown"), Some(1.0));
        assert_eq!(revoked("failed"), Some(0.0));
        assert_eq!(m.revocations(LostReason::Expired), 2);
        assert_eq!(
            value(
                &after,
                "tenure_peer_messages_refused_total{node=\"4\",reason=\"bad_sender\"}"
            ),
            Some(1.0)
        );
        assert_eq!(m.peer_refused(Refusal::BadSender), 1);
        assert_eq!(
            value(&after, "tenure_lease_renew_seconds_bucket{le=\"0.005\"}"),
            Some(1.0)
        );
        assert_eq!(
            value(&after, "tenure_lease_renew_seconds_bucket{le=\"0.002\"}"),
            Some(0.0)
        );
        assert_eq!(
            value(&after, "tenure_fence_accepted_total{fence=\"ledger\"}"),
            Some(0.0)
        );
        assert_eq!(
            value(&after, "tenure_transport_sent_total{node=\"4\"}"),
            Some(5.0)
        );

        // A transport that is gone takes its counters with it.
        sent.store(0, Ordering::Relaxed);
        let gone = encoded(&registry);
        assert!(!gone.contains("tenure_transport_"), "{gone}");
        assert_eq!(value(&gone, "tenure_term{node=\"4\"}"), Some(9.0));
    }

    #[test]
    fn a_host_registry_keeps_its_prefix_and_labels() {
        let m = Metrics::new(2);
        let mut registry = Registry::with_prefix("host");
        m.register(registry.sub_registry_with_label(("group".into(), "billing".into())));
        let text = encoded(&registry);
        assert_eq!(
            value(&text, "host_tenure_term{group=\"billing\",node=\"2\"}"),
            Some(0.0),
            "{text}"
        );
        assert_eq!(
            value(
                &text,
                "host_tenure_failover_seconds_count{group=\"billing\"}"
            ),
            Some(0.0),
            "{text}"
        );
    }
}
