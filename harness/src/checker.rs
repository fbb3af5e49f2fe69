//! A history checker: judges what the nodes of one run reported (their lease events, in
//! one time base) and what a fenced resource accepted, against tenure's guarantees.
//!
//! Feed it [`Event`]s (built in process by a simulation, or parsed from the worker's JSON
//! lines with [`Event::from_json_line`] / [`events_from_json`]) and the resource's
//! [`Write`] log in commit order, then call [`check`]. A failure is a [`Failure`] whose
//! `Display` is a readable timeline of the events around each violation.
//!
//! # Time
//!
//! Every `*_ns` field is in **one** time base for the whole history: `CLOCK_MONOTONIC`
//! for worker processes on one host, simulated time in the simulation. A node whose
//! clock runs at a skewed rate still reports real instants (the worker converts with
//! [`Lease::valid_until`](tenure::Lease::valid_until), the simulation with its own clock).
//!
//! # Rules
//!
//! **Named elections** (`docs/design.md`, section 11). Events carry their election
//! ([`Event::in_election`]: its name and the id the node's catalog gives it; none for the
//! root and for events of no election, like starts, crashes, faults and membership, which
//! belong to every election). Rules (a) to (f) below judge each election by itself, with
//! its own fence ([`Options::fences`], one per name) and its own liveness
//! ([`Options::election_liveness`]); rules (g), (h) and (i) judge them against each other
//! (see [`check`]).
//!
//! **(a) One holder per term.** At most one node reports `lease_acquired` for a term. The
//! same node may acquire several leases in one term (a lease that ran out unrenewed is
//! granted again when a later round is acknowledged); that is the same tenure.
//!
//! **(b) Fencing.** Taking the accepted writes in commit order (`seq`), no write carries a
//! token lower than one accepted before it. Also, every accepted write with token `t` comes
//! from one node, and if the history has a `lease_acquired` of term `t`, from that node:
//! equal tokens are the same tenure.
//!
//! **(c) No confirm after a majority moved past its term.** Derivation, for a group of
//! `n` nodes, quorum `q = n/2 + 1`:
//!
//! * A `Safe` confirm of term `t` is answered by a ReadIndex round that the leader starts
//!   *after the confirm call began* (the driver gives confirms a round of their own) and
//!   that a quorum acknowledges, the leader included.
//! * A follower acknowledges a term-`t` heartbeat only while its own term is `t`: with a
//!   lower term it first moves to `t`; with a higher term it answers with a rejection in
//!   its own term (check-quorum), which is not an acknowledgement and makes the old
//!   leader step down.
//! * A node's term never decreases (it is persisted before anything that depends on it
//!   is sent, and the watch channel publishes a term only after that Ready was
//!   persisted). raft-rs ignores a higher-term vote request while it is in lease (it heard
//!   from its leader within the election timeout) *without* raising its term, and
//!   pre-vote never raises terms; so a reported term change is a real one, and the
//!   acknowledgements of a round of term `t` all happen before those nodes moved past `t`.
//! * A node *reports* its term (`leader_changed`) after the change happened, so "node `k`
//!   reported a term > `t` at `r_k`" implies its term was > `t` from `r_k` on.
//!
//! Let `M(t)` be the `q`-th earliest of the nodes' first reports of a term > `t`. If a
//! confirm of term `t` **began** after `M(t)`, a majority already had a term > `t` when
//! its round was sent; that majority intersects every quorum, so some acknowledger would
//! have had to acknowledge term `t` after leaving it. Hence the rule:
//!
//! > violation if `began > M(t)` (strictly), where `began = began_ns`, or
//! > `at_ns − latency_ns` when the event does not say.
//!
//! For `LeaseBased` confirms the same rule applies (the local validity check happens at
//! the call, not before it), but it is **not** a theorem there: it holds only while the
//! holder's clock runs within `max_clock_drift` of the others, which is exactly what the
//! clock tests probe. Not checked by (c): acquisitions (covered by (a) and (d)); confirms
//! that began before `M(t)` but returned after it (legal: the round was acknowledged in
//! time); nodes whose term changes were never reported (a killed node's last report
//! stands until it reports again). `at_ns − latency_ns` is slightly *after* the real call
//! start (the event is stamped after the call returned), so a process stalled between
//! the return and the stamp could be flagged falsely; events that carry `began_ns` avoid
//! that.
//!
//! **Membership changes.** The derivation counts a majority of *the group*. When the
//! voters change (joint consensus), a round of term `t` needs a quorum of the
//! configuration the leader counted it in: a majority of its voters, of each half while
//! a joint change is in flight. Nodes report the voter configurations they applied as
//! `members` events ([`Event::members`]; the simulation samples every node every 10 ms),
//! and the harness (node 0) may report the configurations a change it asked for can
//! bring, from the moment it asked. When the history holds any, rule (c) is judged per
//! configuration: a confirm of node `L` that began at `b` and returned at `a` is stale
//! only if **every** configuration `L` may have counted its round in had lost its quorum
//! for term `t` before `b` (the `q`-th earliest report of a term > `t` among its voters,
//! `q` a majority of them, or of either half if joint, came before `b`). The
//! configurations `L` may have used: its last report at or before `b`; its own reports in
//! `(b, a + members_lag_ns]` (a report lags the change by up to the sampling period);
//! the harness's up to then; and, if `L` reported none before `b` or restarted since, the
//! founding group (nodes `1..=group_size`) and every configuration any node reported by
//! then. More configurations than `L` can have had only make the rule more lenient,
//! never falsely strict; with one configuration throughout it is the rule above. Nodes
//! outside a configuration (learners, joining spares, removed nodes) count for nothing
//! in it. The other rules do not depend on who votes: one holder per term, fencing, no
//! overlap, a lease after the heal and one applied history hold whatever the membership
//! did.
//!
//! **(d) Leases do not overlap.** A lease acquired by node `B` in term `t` at `a` must
//! start after every lease of an earlier term held by another node ended. It starts when
//! it was granted: its `granted_ns` when the event carries one (`tenure-worker`'s do),
//! else the event's time. A holder announces a lease some time after the grant (its task
//! wakes; its process may be paused in between), so judging by the announcement would
//! pass a lease granted early and announced late; the grant time judges both alike, and
//! the violation names both. A lease ends at
//! its `lease_lost` `ended_ns` (the earlier of revocation and validity); without one, at
//! the earlier of its last reported `valid_until_ns` and the holder's crash or stop. (A
//! lease renewed after its last report really lasted longer than we know: the check is
//! lenient there, never falsely strict.) Every one of these times is real time (see
//! "Time"): the reporter converts the node's reading when it reports it, so a node whose
//! clock ran fast, slow, stepped or stood still is judged by when its lease really held,
//! not by what its clock said.
//!
//! **(e) Liveness.** When [`Options::liveness`] is set: some node reports
//! `lease_acquired` or `lease_confirmed` within `bound_ns` after `healed_at_ns` (the end
//! of the last fault). The history must run that long; if it ends first without a lease,
//! that is a violation too. The bound is the caller's: it depends on the timing and on
//! what the transport needs to reconnect (see the simulation for the one it uses).
//!
//! **Clock faults.** [`Options::clock_faults`] tells the checker which nodes' clocks
//! stepped forward or stood still, and when. Rules (a), (b), (e), (f) and (c) for `Safe`
//! confirms do not depend on any clock and are judged whatever the clocks did. Rule (d),
//! and rule (c) for `LeaseBased` confirms, are theorems only while the clocks keep what
//! the lease assumes (`docs/design.md`, section 8), so they are judged only when every
//! clock fault of the run stayed inside that:
//!
//! * a **forward step** of a node that held a lease at that moment (it only shortens
//!   that lease). A step of any other node shortens the vote refusal it owes a leader's
//!   lease (by up to a tick) and its restart quiet period (by the whole step): outside.
//! * a **stall that `CLOCK_BOOTTIME` counts** (a suspend), on any node: the lease's
//!   validity is checked on the boot-time clock too, and a stalled voter only refuses
//!   longer.
//! * a **stall that neither clock counts**, on a node that held no lease at any moment
//!   of it (a voter only refuses longer). On a lease holder it lets the lease outlive
//!   its real end: outside.
//!
//! Otherwise [`Summary::clock_rules_skipped`] says which fault it was, and those rules
//! are not judged (the history is not claimed to keep them).
//!
//! **(f) State machine safety: the applied histories agree.** Each `history` event is a
//! snapshot of the leadership history one node had applied at `at_ns`
//! ([`Node::history`](tenure::Node::history)): its records as (term, leader), oldest
//! first. Why they must fit together: every node applies the same committed log in log
//! order; a leader proposes its "tenure began" record in its own term, so the record
//! sits in an entry of that term, and entry terms only rise along the log; a node's
//! history drops its oldest records beyond the retention count. So every snapshot is a
//! *window* of one global sequence of records, strictly rising in term: a prefix of it
//! (the node may not have applied the newest yet) with a prefix cut off (retention).
//! The rule, for snapshots `A` and `B` (of any nodes, at any times, `A = B` excluded):
//!
//! * (f1) within a snapshot, terms strictly rise;
//! * (f2) if both hold term `t`, they name the same leader for it;
//! * (f3) between their common bounds, `max(first(A), first(B)) ≤ t ≤ min(last(A),
//!   last(B))`, they hold the same terms: `t ∈ A ⇔ t ∈ B`.
//!
//! (f3) is the durability half: a record that any node applied was committed, so every
//! later leader's log holds it, and every snapshot that reaches past its term (and has
//! not dropped it to retention) must hold it too. It catches a committed entry that was
//! lost: a follower acknowledged an entry it had not yet written (persist-after-send),
//! died, and a leader elected without that entry replaced it with its own record. Not
//! caught: a lost record that no snapshot ever showed applied, and snapshots that do not
//! overlap. The more often histories are sampled (at the end of a run, before a crash),
//! the less of that there is.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

/// What happened, as far as the checker cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A node (process) started.
    Started,
    /// A node's view of term and leader changed (`term`, `leader`, `role`).
    LeaderChanged,
    /// A node acquired a lease (`term` = `token`, `valid_until_ns`).
    LeaseAcquired,
    /// A node confirmed its lease (`term`, `latency_ns`, `valid_until_ns`, maybe `began_ns`).
    LeaseConfirmed,
    /// A node lost its lease (`term`, `reason`, `ended_ns`).
    LeaseLost,
    /// A node stopped gracefully.
    Stopped,
    /// A node died without a word (SIGKILL, simulated crash).
    Crashed,
    /// A leader began a batch of fenced work (`token`).
    BatchStarted,
    /// A batch of fenced work was settled (`token`).
    Settled,
    /// The resource rejected a stale token (`token`, `highest`).
    FenceRejected,
    /// A fault was injected (partition, pause, loss…); `note` says which.
    Fault,
    /// Faults were healed; `note` says which.
    Heal,
    /// The resource accepted a write (timeline only; the checked log is [`Write`]).
    Write,
    /// A node's applied leadership history (`records`), for rule (f).
    History,
    /// The voter configuration a node has applied (`voters`, and `outgoing` while a joint
    /// change is in flight), for rule (c); from the harness (node 0), a configuration that
    /// may be in force on any node from then on.
    Members,
    /// The harness (node 0) created named election `election` (its id: `election_id`);
    /// `at_ns` is when `create_election` returned. For rule (i).
    ElectionCreated,
    /// `remove_election` returned for named election `election` (`election_id`) at
    /// `at_ns` (from the harness, node 0). For rule (h).
    ElectionRemoved,
    /// `suspend_election` returned for named election `election` (`election_id`) at
    /// `at_ns` (from the harness, node 0). For rule (j).
    ElectionSuspended,
    /// `resume_election` was called for named election `election` at `at_ns` (from the
    /// harness, node 0; logged once the call succeeded). For rule (j).
    ElectionResumed,
    /// Anything else, by name.
    Other(String),
}

impl Kind {
    fn name(&self) -> &str {
        match self {
            Kind::Started => "started",
            Kind::LeaderChanged => "leader_changed",
            Kind::LeaseAcquired => "lease_acquired",
            Kind::LeaseConfirmed => "lease_confirmed",
            Kind::LeaseLost => "lease_lost",
            Kind::Stopped => "stopped",
            Kind::Crashed => "crashed",
            Kind::BatchStarted => "batch_started",
            Kind::Settled => "settled",
            Kind::FenceRejected => "fence_rejected",
            Kind::Fault => "fault",
            Kind::Heal => "heal",
            Kind::Write => "write",
            Kind::History => "history",
            Kind::Members => "members",
            Kind::ElectionCreated => "election_created",
            Kind::ElectionRemoved => "election_removed",
            Kind::ElectionSuspended => "election_suspended",
            Kind::ElectionResumed => "election_resumed",
            Kind::Other(s) => s,
        }
    }

    fn from_name(s: &str) -> Kind {
        match s {
            "started" => Kind::Started,
            "leader_changed" => Kind::LeaderChanged,
            "lease_acquired" => Kind::LeaseAcquired,
            "lease_confirmed" => Kind::LeaseConfirmed,
            "lease_lost" => Kind::LeaseLost,
            "stopped" => Kind::Stopped,
            "crashed" | "killed" => Kind::Crashed,
            "batch_started" => Kind::BatchStarted,
            "settled" => Kind::Settled,
            "fence_rejected" => Kind::FenceRejected,
            "fault" | "isolated" => Kind::Fault,
            "heal" | "healed" => Kind::Heal,
            "write" => Kind::Write,
            "history" => Kind::History,
            "members" => Kind::Members,
            "election_created" => Kind::ElectionCreated,
            "election_removed" => Kind::ElectionRemoved,
            "election_suspended" => Kind::ElectionSuspended,
            "election_resumed" => Kind::ElectionResumed,
            other => Kind::Other(other.to_string()),
        }
    }
}

/// One event of one node, in the history's time base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The reporting node (0 for events of the harness itself, like faults).
    pub node: u64,
    /// When it was reported.
    pub at_ns: u64,
    /// What happened.
    pub kind: Kind,
    /// The node's term (`leader_changed`), or the lease's term.
    pub term: Option<u64>,
    /// The fencing token (equal to the lease's term).
    pub token: Option<u64>,
    /// The leader a `leader_changed` names.
    pub leader: Option<u64>,
    /// The role a `leader_changed` names.
    pub role: Option<String>,
    /// Until when the lease holds, as reported with an acquire or confirm.
    pub valid_until_ns: Option<u64>,
    /// When an acquired lease was granted, if the reporter knows (`tenure-worker`'s
    /// `granted_ns`; else `at_ns` stands for it): earlier than `at_ns` by the time the
    /// holder's task took to wake, longer if its process was paused in between.
    pub granted_ns: Option<u64>,
    /// How long a confirm took.
    pub latency_ns: Option<u64>,
    /// When a confirm call began, if known exactly (else `at_ns − latency_ns`).
    pub began_ns: Option<u64>,
    /// When a lost lease really ended.
    pub ended_ns: Option<u64>,
    /// The resource's highest token, with `fence_rejected`.
    pub highest: Option<u64>,
    /// Why a lease was lost.
    pub reason: Option<String>,
    /// Free text for the timeline (fault descriptions).
    pub note: String,
    /// With `history`: the node's applied records as (term, leader), oldest first.
    pub records: Vec<(u64, u64)>,
    /// With `members`: the voters (of the incoming configuration while joint).
    pub voters: Vec<u64>,
    /// With `members`: the voters of the outgoing configuration while a joint change is
    /// in flight; empty otherwise.
    pub outgoing: Vec<u64>,
    /// The named election the event belongs to (`None`: the root election, the group's
    /// own). Events of no election (starts, crashes, faults, membership) carry `None` and
    /// belong to every election.
    pub election: Option<String>,
    /// The election's id as the node's catalog names it (0: the root).
    pub election_id: u32,
}

impl Event {
    /// An event with only the required fields set.
    pub fn new(node: u64, at_ns: u64, kind: Kind) -> Event {
        Event {
            node,
            at_ns,
            kind,
            term: None,
            token: None,
            leader: None,
            role: None,
            valid_until_ns: None,
            granted_ns: None,
            latency_ns: None,
            began_ns: None,
            ended_ns: None,
            highest: None,
            reason: None,
            note: String::new(),
            records: Vec::new(),
            voters: Vec::new(),
            outgoing: Vec::new(),
            election: None,
            election_id: 0,
        }
    }

    /// Marks the event as one of named election `name`, id `id` (rules (a)–(f) judge
    /// each election by itself; (g)–(i) judge them against each other).
    pub fn in_election(mut self, name: &str, id: u32) -> Event {
        self.election = Some(name.to_string());
        self.election_id = id;
        self
    }

    /// Sets `term` and `token` (a lease event).
    pub fn term(mut self, t: u64) -> Event {
        self.term = Some(t);
        self.token = Some(t);
        self
    }

    /// Sets `valid_until_ns`.
    pub fn until(mut self, ns: u64) -> Event {
        self.valid_until_ns = Some(ns);
        self
    }

    /// Sets `granted_ns`, when an acquired lease was granted.
    pub fn granted(mut self, ns: u64) -> Event {
        self.granted_ns = Some(ns);
        self
    }

    /// Sets a free-text note.
    pub fn note(mut self, s: impl Into<String>) -> Event {
        self.note = s.into();
        self
    }

    /// `lease_acquired` of term `t` by `node` at `at`, valid until `until`.
    pub fn acquired(node: u64, at: u64, t: u64, until: u64) -> Event {
        Event::new(node, at, Kind::LeaseAcquired)
            .term(t)
            .until(until)
    }

    /// `lease_confirmed` of term `t`, the call having begun at `began`.
    pub fn confirmed(node: u64, began: u64, at: u64, t: u64, until: u64) -> Event {
        let mut e = Event::new(node, at, Kind::LeaseConfirmed)
            .term(t)
            .until(until);
        e.began_ns = Some(began);
        e.latency_ns = Some(at.saturating_sub(began));
        e
    }

    /// `lease_lost` of term `t`, the lease having ended at `ended`.
    pub fn lost(node: u64, at: u64, t: u64, ended: u64, reason: &str) -> Event {
        let mut e = Event::new(node, at, Kind::LeaseLost).term(t);
        e.ended_ns = Some(ended);
        e.reason = Some(reason.to_string());
        e
    }

    /// `leader_changed`: `node` is now in `term`, following `leader`.
    pub fn term_changed(node: u64, at: u64, term: u64, leader: Option<u64>, role: &str) -> Event {
        let mut e = Event::new(node, at, Kind::LeaderChanged);
        e.term = Some(term);
        e.leader = leader;
        e.role = Some(role.to_string());
        e
    }

    /// `history`: the records (term, leader) `node` had applied at `at`, oldest first.
    pub fn history(node: u64, at: u64, records: Vec<(u64, u64)>) -> Event {
        let mut e = Event::new(node, at, Kind::History);
        e.records = records;
        e
    }

    /// `members`: the voters `node` had applied at `at` (`outgoing`: the outgoing
    /// configuration's, while joint; else empty). From node 0, the harness: a
    /// configuration that may be in force from `at` on (see rule (c)).
    pub fn members(node: u64, at: u64, mut voters: Vec<u64>, mut outgoing: Vec<u64>) -> Event {
        voters.sort_unstable();
        outgoing.sort_unstable();
        let mut e = Event::new(node, at, Kind::Members);
        e.voters = voters;
        e.outgoing = outgoing;
        e
    }

    /// Parses one worker JSON line (`{"event": .., "node": .., "mono_ns": .., ...}`);
    /// `None` for anything else. `latency_us` becomes `latency_ns`; an optional
    /// `began_ns` is taken as is; a `history` event's `records` is `[[term, leader], ...]`.
    pub fn from_json_line(line: &str) -> Option<Event> {
        let v: Value = serde_json::from_str(line.trim()).ok()?;
        Event::from_json(&v)
    }

    /// [`Event::from_json_line`] on a parsed value.
    pub fn from_json(v: &Value) -> Option<Event> {
        let u = |k: &str| v.get(k).and_then(Value::as_u64);
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let mut e = Event::new(
            u("node")?,
            u("mono_ns")?,
            Kind::from_name(v.get("event")?.as_str()?),
        );
        e.term = u("term");
        e.token = u("token").or(e.term);
        e.leader = u("leader");
        e.role = s("role");
        e.valid_until_ns = u("valid_until_ns");
        e.granted_ns = u("granted_ns");
        e.latency_ns = v
            .get("latency_us")
            .and_then(Value::as_f64)
            .map(|us| (us * 1e3) as u64)
            .or_else(|| u("latency_ns"));
        e.began_ns = u("began_ns");
        e.ended_ns = u("ended_ns");
        e.highest = u("highest");
        e.reason = s("reason");
        e.election = s("election");
        // Worker events name the election; its id is what their tokens say (`term >> 40`)
        // when they do not give it.
        e.election_id = u("election_id")
            .or_else(|| {
                e.election.as_ref()?;
                let first_record = || v.get("records")?.as_array()?.first()?.get(0)?.as_u64();
                e.term
                    .or(e.token)
                    .or_else(first_record)
                    .filter(|t| *t >> 40 > 0)
                    .map(|t| t >> 40)
            })
            .and_then(|i| u32::try_from(i).ok())
            .unwrap_or(0);
        if let Some(records) = v.get("records").and_then(Value::as_array) {
            e.records = records
                .iter()
                .filter_map(|r| Some((r.get(0)?.as_u64()?, r.get(1)?.as_u64()?)))
                .collect();
        }
        if e.kind == Kind::Members {
            let ids = |k: &str| -> Vec<u64> {
                let mut v: Vec<u64> = v
                    .get(k)
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_u64).collect())
                    .unwrap_or_default();
                v.sort_unstable();
                v
            };
            e.voters = ids("voters");
            e.outgoing = ids("outgoing");
        }
        if let Kind::Other(_) | Kind::Fault | Kind::Heal = e.kind {
            e.note = s("note").unwrap_or_default();
        }
        Some(e)
    }

    /// When a confirm began (see rule (c)).
    pub fn began(&self) -> u64 {
        self.began_ns
            .unwrap_or_else(|| self.at_ns.saturating_sub(self.latency_ns.unwrap_or(0)))
    }
}

/// Parses every event line of a worker's output (other lines are skipped).
pub fn events_from_json(text: &str) -> Vec<Event> {
    text.lines().filter_map(Event::from_json_line).collect()
}

/// A write the fenced resource accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// Commit order at the resource (strictly increasing along the log).
    pub seq: u64,
    /// The token the write carried.
    pub token: u64,
    /// The node that wrote.
    pub node: u64,
    /// When it was accepted, if known (for the timeline).
    pub at_ns: Option<u64>,
}

/// Which rule a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// (a) at most one lease holder per term.
    OneHolderPerTerm,
    /// (b) accepted tokens never decrease; one tenure per token.
    Fencing,
    /// (c) no confirm that began after a majority moved past its term.
    StaleConfirm,
    /// (d) no lease acquired before an earlier-term lease of another node ended.
    Overlap,
    /// (e) a lease within the bound after the last heal.
    Liveness,
    /// (f) the applied histories are windows of one sequence.
    AppliedHistory,
    /// (g) a token belongs to its election (`term >> 40` is its id), and a fence sees
    /// tokens of one name's elections only.
    TokenOfElection,
    /// (h) no lease of an election is used after `remove_election` returned for it.
    UsedAfterRemoval,
    /// (i) per name, every token of a later incarnation is above every token of an
    /// earlier one.
    Incarnations,
    /// (j) no lease of an election is used while it is suspended, and every token after
    /// its resumption is above every token before its suspension.
    Suspension,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::OneHolderPerTerm => "(a) one lease holder per term",
            Rule::Fencing => "(b) fencing",
            Rule::StaleConfirm => "(c) no confirm after a majority moved past the term",
            Rule::Overlap => "(d) leases do not overlap",
            Rule::Liveness => "(e) liveness after the last heal",
            Rule::AppliedHistory => "(f) applied histories agree (state machine safety)",
            Rule::TokenOfElection => "(g) a token belongs to its election and its fence",
            Rule::UsedAfterRemoval => "(h) no lease is used after its election was removed",
            Rule::Incarnations => "(i) tokens rise across a name's incarnations",
            Rule::Suspension => "(j) no lease while suspended; tokens rise across a suspension",
        })
    }
}

/// One broken rule, with the timeline around it.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// What exactly is wrong.
    pub message: String,
    /// The events around it, one per line.
    pub timeline: String,
}

/// Liveness requirement: a lease within `bound_ns` after `healed_at_ns`.
#[derive(Debug, Clone, Copy)]
pub struct Liveness {
    /// When the last fault was healed.
    pub healed_at_ns: u64,
    /// How long after that a lease must be acquired or confirmed.
    pub bound_ns: u64,
}

/// A fault injected into one node's clock, in the history's time base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockFault {
    /// Whose clock.
    pub node: u64,
    /// When it began.
    pub from_ns: u64,
    /// When it ended (a jump: `from_ns`).
    pub to_ns: u64,
    /// What it was.
    pub kind: ClockFaultKind,
}

/// What a [`ClockFault`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockFaultKind {
    /// The clock stepped forward at once.
    Jump,
    /// The clock stood still, then ran on without counting the stalled span.
    Stall {
        /// `CLOCK_BOOTTIME` counted it (a suspend), or neither clock did.
        counted_by_boottime: bool,
    },
}

/// What to check.
#[derive(Debug, Clone)]
pub struct Options {
    /// Number of voters (for the majority of rule (c)).
    pub group_size: usize,
    /// Rule (e), when set.
    pub liveness: Option<Liveness>,
    /// Events shown on each side of a violation.
    pub context: usize,
    /// The clock faults of the run (see "Clock faults" in the module docs).
    pub clock_faults: Vec<ClockFault>,
    /// Whether confirms were answered from the lease (`ReadMode::LeaseBased`).
    pub lease_based: bool,
    /// How late a node's `members` report may come after it applied the configuration
    /// (rule (c) with membership changes: see "Membership changes" in the module docs).
    pub members_lag_ns: u64,
    /// The log of each named election's fence, by name (one fence per name, shared by
    /// its incarnations); `check`'s `writes` is the root election's.
    pub fences: BTreeMap<String, Vec<Write>>,
    /// Rule (e) per named election, by id: the elections the run claims are live, each
    /// from when it must have a lease within the bound.
    pub election_liveness: BTreeMap<u32, Liveness>,
}

impl Options {
    /// Rules (a)–(d) and (f) for a group of `group_size`, 12 events of context.
    pub fn new(group_size: usize) -> Options {
        Options {
            group_size,
            liveness: None,
            context: 12,
            clock_faults: Vec::new(),
            lease_based: false,
            members_lag_ns: 50_000_000,
            fences: BTreeMap::new(),
            election_liveness: BTreeMap::new(),
        }
    }

    /// The named elections' fence logs, by name (rules (b) and (g) per fence).
    pub fn fences(mut self, fences: BTreeMap<String, Vec<Write>>) -> Options {
        self.fences = fences;
        self
    }

    /// Also check liveness (e) for named election `id`: a lease of it within `bound_ns`
    /// after `from_ns`.
    pub fn election_liveness(mut self, id: u32, from_ns: u64, bound_ns: u64) -> Options {
        self.election_liveness.insert(
            id,
            Liveness {
                healed_at_ns: from_ns,
                bound_ns,
            },
        );
        self
    }

    /// The run's clock faults, and whether its confirms were `LeaseBased`: rules that
    /// trust the clocks are judged only while every clock fault stayed inside what the
    /// lease assumes (see "Clock faults" in the module docs).
    pub fn clock_faults(mut self, faults: Vec<ClockFault>, lease_based: bool) -> Options {
        self.clock_faults = faults;
        self.lease_based = lease_based;
        self
    }

    /// Also check liveness (e).
    pub fn liveness(mut self, healed_at_ns: u64, bound_ns: u64) -> Options {
        self.liveness = Some(Liveness {
            healed_at_ns,
            bound_ns,
        });
        self
    }
}

/// What a passing history looked like.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Events judged.
    pub events: usize,
    /// Distinct terms in which a lease was acquired.
    pub terms_with_leases: usize,
    /// Confirms judged by rule (c).
    pub confirms: usize,
    /// Writes judged by rule (b).
    pub writes: usize,
    /// Time from the last heal to the first lease event after it (rule (e)).
    pub recovery_ns: Option<u64>,
    /// History snapshots judged by rule (f).
    pub histories: usize,
    /// Why rule (d), and for `LeaseBased` confirms rule (c), were not judged: the first
    /// clock fault outside what the lease assumes. `None`: every rule was judged.
    pub clock_rules_skipped: Option<String>,
    /// Named elections (incarnations) judged by rules (a)–(f).
    pub elections: usize,
    /// Named elections judged by rule (e).
    pub elections_live: usize,
    /// The longest time from its liveness start to a lease, over the named elections
    /// judged by rule (e), and which id.
    pub slowest_election: Option<(u64, u32)>,
    /// Named elections removed (rule (h) judged after each).
    pub removals: usize,
    /// Suspensions of named elections (rule (j)).
    pub suspensions: usize,
}

/// Every violation of one history.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The violations, in rule order.
    pub violations: Vec<Violation>,
    /// What the history looked like anyway.
    pub summary: Summary,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} violation(s):", self.violations.len())?;
        for v in &self.violations {
            writeln!(f, "\n{}: {}\n{}", v.rule, v.message, v.timeline)?;
        }
        Ok(())
    }
}

impl Failure {
    /// Whether `rule` is among the violations.
    pub fn broke(&self, rule: Rule) -> bool {
        self.violations.iter().any(|v| v.rule == rule)
    }
}

/// A voter configuration: the voters (incoming, while joint) and the outgoing voters
/// (empty unless joint).
type Conf = (Vec<u64>, Vec<u64>);

/// A lease instance: from acquisition to its end.
#[derive(Debug, Clone)]
struct Tenure {
    node: u64,
    term: u64,
    /// When the lease was granted: its acquisition's `granted_ns`, else the event's time.
    acquired_ns: u64,
    /// Index of the acquisition in the sorted history.
    idx: usize,
    end_ns: u64,
}

/// The sorted history and the timeline printer.
struct History<'a> {
    events: Vec<&'a Event>,
    writes: &'a [Write],
    origin: u64,
    context: usize,
}

impl History<'_> {
    fn rel(&self, ns: u64) -> String {
        let d = i128::from(ns) - i128::from(self.origin);
        format!("{:+.3}ms", d as f64 / 1e6)
    }

    fn line(&self, e: &Event) -> String {
        let mut s = format!(
            "{:>12}  n{:<2} {:<15}",
            self.rel(e.at_ns),
            e.node,
            e.kind.name()
        );
        let mut kv = |k: &str, v: String| {
            s.push(' ');
            s.push_str(k);
            s.push('=');
            s.push_str(&v);
        };
        if let Some(t) = e.term {
            kv("term", t.to_string());
        }
        if let (Some(tok), Some(t)) = (e.token, e.term) {
            if tok != t {
                kv("token", tok.to_string());
            }
        } else if let Some(tok) = e.token {
            kv("token", tok.to_string());
        }
        if e.kind == Kind::LeaderChanged {
            kv(
                "leader",
                e.leader.map_or("none".into(), |l| format!("n{l}")),
            );
        }
        if let Some(r) = &e.role {
            kv("role", r.clone());
        }
        if e.kind == Kind::LeaseConfirmed {
            kv("began", self.rel(e.began()));
        }
        if let Some(v) = e.valid_until_ns {
            kv("until", self.rel(v));
        }
        if let Some(v) = e.ended_ns {
            kv("ended", self.rel(v));
        }
        if let Some(r) = &e.reason {
            kv("reason", r.clone());
        }
        if let Some(h) = e.highest {
            kv("highest", h.to_string());
        }
        if e.kind == Kind::History {
            kv("records", show_records(&e.records));
        }
        if e.kind == Kind::Members {
            kv("voters", show_ids(&e.voters));
            if !e.outgoing.is_empty() {
                kv("outgoing", show_ids(&e.outgoing));
            }
        }
        if !e.note.is_empty() {
            s.push_str("  ");
            s.push_str(&e.note);
        }
        s
    }

    /// The events around index `focus`, the focus marked `>>`.
    fn around(&self, focus: usize, also: &[usize]) -> String {
        let lo = focus.saturating_sub(self.context);
        let hi = (focus + self.context + 1).min(self.events.len());
        let mut out = String::new();
        if lo > 0 {
            out.push_str(&format!("      ... {lo} earlier event(s)\n"));
        }
        for i in lo..hi {
            let mark = if i == focus {
                ">> "
            } else if also.contains(&i) {
                " * "
            } else {
                "   "
            };
            out.push_str(mark);
            out.push_str(self.line(self.events[i]).trim_end());
            out.push('\n');
        }
        if hi < self.events.len() {
            out.push_str(&format!(
                "      ... {} later event(s)\n",
                self.events.len() - hi
            ));
        }
        out
    }

    /// The first event at or after `ns`.
    fn index_at(&self, ns: u64) -> usize {
        self.events
            .partition_point(|e| e.at_ns < ns)
            .min(self.events.len().saturating_sub(1))
    }

    /// The writes around write `focus` of the log, then the events around its time.
    fn around_write(&self, focus: usize) -> String {
        let lo = focus.saturating_sub(self.context);
        let hi = (focus + self.context / 2 + 1).min(self.writes.len());
        let mut out = String::from("   resource log (commit order):\n");
        for (i, w) in self.writes.iter().enumerate().take(hi).skip(lo) {
            let mark = if i == focus { ">> " } else { "   " };
            let at = w.at_ns.map(|a| self.rel(a)).unwrap_or_default();
            out.push_str(&format!(
                "{mark}seq {:<6} token {:<4} n{:<2} {at}\n",
                w.seq, w.token, w.node
            ));
        }
        if let Some(at) = self.writes[focus].at_ns {
            if !self.events.is_empty() {
                out.push_str("   events around it:\n");
                out.push_str(&self.around(self.index_at(at), &[]));
            }
        }
        out
    }
}

/// The whole history as the failure timelines show it, without lease confirms and
/// writes (there are many), one event per line, times from the first event.
pub fn timeline(events: &[Event]) -> String {
    let mut sorted: Vec<&Event> = events.iter().collect();
    sorted.sort_by_key(|e| e.at_ns);
    let h = History {
        origin: sorted.first().map_or(0, |e| e.at_ns),
        events: sorted,
        writes: &[],
        context: 0,
    };
    h.events
        .iter()
        .filter(|e| !matches!(e.kind, Kind::LeaseConfirmed | Kind::Write))
        .map(|e| h.line(e).trim_end().to_string() + "\n")
        .collect()
}

/// Checks a history: `events` in any order (sorted by `at_ns`, stable), `writes` in the
/// root fence's commit order (and `opts.fences`, the named elections' fences).
///
/// Rules (a)–(f) judge each election by itself: the root (events without an election)
/// and every named incarnation (events of one `election_id`), each with the events of no
/// election (starts, crashes, faults, membership). A violation of a named election says
/// which (`election "x" (id 5): ...`). Then across elections:
///
/// * **(g) Tokens belong to their election.** Every lease event's token lies in its
///   election's range (`election_of_term(token) == election_id`: the range the catalog's
///   id gives, `[id × 2^40, (id + 1) × 2^40)`), and every token a fence accepted belongs
///   to an incarnation of the fence's name (the root fence: the root's), so tokens of
///   different elections never reach one fence.
/// * **(h) No lease is used after its election was removed.** After an
///   `election_removed` event (the harness saw `remove_election` return) no lease of that
///   id confirms (a `lease_confirmed` stamped later) and its fence accepts no write with
///   a token of it (the harness retires the fence to `Removed::retired_above` as the
///   call returns). `LeaseBased` confirms only while the clocks keep what the lease
///   assumes (see "Clock faults"): a stall no clock counts lets such a lease outlive the
///   removal as it outlives anything else. Leases lost with reason `removed` are fine.
/// * **(i) Tokens rise across incarnations.** Per name, taking its incarnations in the
///   order they were created (`election_created`, else their first event), their ids
///   rise and every token of a later one is above every token of an earlier one: a fence
///   keyed by the name keeps working across a remove and a create.
// A failure is a test's end: its size does not matter.
#[allow(clippy::result_large_err)]
pub fn check(events: &[Event], writes: &[Write], opts: &Options) -> Result<Summary, Failure> {
    let mut sorted: Vec<&Event> = events.iter().collect();
    sorted.sort_by_key(|e| e.at_ns);
    let origin = sorted.first().map_or(0, |e| e.at_ns);
    // Events of no election belong to every election.
    let shared = |e: &Event| {
        matches!(
            e.kind,
            Kind::Started
                | Kind::Stopped
                | Kind::Crashed
                | Kind::Fault
                | Kind::Heal
                | Kind::Members
                | Kind::Other(_)
        ) && e.election.is_none()
    };
    let mut ids: BTreeMap<u32, Option<&str>> = BTreeMap::new();
    ids.insert(0, None);
    for e in &sorted {
        if let Some(name) = &e.election {
            ids.entry(e.election_id).or_insert(Some(name.as_str()));
        }
    }
    let label = |id: u32| -> String {
        match ids.get(&id).copied().flatten() {
            Some(name) => format!("election {name:?} (id {id})"),
            None if id == 0 => "the root election".to_string(),
            None => format!("election id {id}"),
        }
    };
    let mut violations: Vec<Violation> = Vec::new();
    let mut summary = Summary::default();
    let mut trusted: BTreeMap<u32, bool> = BTreeMap::new();
    for (&id, name) in &ids {
        let evs: Vec<&Event> = sorted
            .iter()
            .copied()
            .filter(|e| {
                shared(e)
                    || (e.election.is_none() && id == 0 && e.election_id == 0)
                    || (e.election.as_deref() == *name && name.is_some() && e.election_id == id)
            })
            .collect();
        if id == 0 {
            let (s, v, trust) = check_group(evs, writes, opts, opts.liveness, origin);
            summary = Summary {
                events: events.len(),
                ..s
            };
            violations.extend(v);
            trusted.insert(0, trust);
        } else {
            let live = opts.election_liveness.get(&id).copied();
            let (s, v, trust) = check_group(evs, &[], opts, live, origin);
            summary.elections += 1;
            summary.terms_with_leases += s.terms_with_leases;
            summary.confirms += s.confirms;
            summary.histories += s.histories;
            if live.is_some() {
                summary.elections_live += 1;
                if let Some(ns) = s.recovery_ns {
                    if summary.slowest_election.is_none_or(|(m, _)| ns > m) {
                        summary.slowest_election = Some((ns, id));
                    }
                }
            }
            if summary.clock_rules_skipped.is_none() {
                summary.clock_rules_skipped = s.clock_rules_skipped;
            }
            let l = label(id);
            violations.extend(v.into_iter().map(|mut v| {
                v.message = format!("{l}: {}", v.message);
                v
            }));
            trusted.insert(id, trust);
        }
    }
    // (b) per named fence, over every incarnation of its name.
    for (name, log) in &opts.fences {
        summary.writes += log.len();
        let evs: Vec<&Event> = sorted
            .iter()
            .copied()
            .filter(|e| shared(e) || e.election.as_deref() == Some(name.as_str()))
            .collect();
        let h = History {
            events: evs,
            writes: log,
            origin,
            context: opts.context,
        };
        let mut v = Vec::new();
        fencing(&h, log, &holders_of(&h), &mut v);
        violations.extend(v.into_iter().map(|mut v| {
            v.message = format!("the fence of {name:?}: {}", v.message);
            v
        }));
    }
    let h = History {
        events: sorted,
        writes,
        origin,
        context: opts.context,
    };
    cross_elections(&h, opts, &label, &trusted, &mut summary, &mut violations);
    if violations.is_empty() {
        Ok(summary)
    } else {
        violations.sort_by_key(|v| v.rule);
        Err(Failure {
            violations,
            summary,
        })
    }
}

/// The lease holders of each term: term → [(node, index of its first acquisition)].
fn holders_of(h: &History<'_>) -> BTreeMap<u64, Vec<(u64, usize)>> {
    let mut holders: BTreeMap<u64, Vec<(u64, usize)>> = BTreeMap::new();
    for (i, e) in h.events.iter().enumerate() {
        if let (Kind::LeaseAcquired, Some(t)) = (&e.kind, e.term) {
            let hs = holders.entry(t).or_default();
            if !hs.iter().any(|(n, _)| *n == e.node) {
                hs.push((e.node, i));
            }
        }
    }
    holders
}

/// The election a token belongs to (`docs/design.md`, section 11: `term >> 40`).
fn election_of(token: u64) -> u32 {
    u32::try_from(token >> 40).unwrap_or(u32::MAX)
}

/// Rules (g), (h) and (i) over the whole history (see [`check`]).
fn cross_elections(
    h: &History<'_>,
    opts: &Options,
    label: &dyn Fn(u32) -> String,
    trusted: &BTreeMap<u32, bool>,
    summary: &mut Summary,
    violations: &mut Vec<Violation>,
) {
    let lease_kind = |k: &Kind| {
        matches!(
            k,
            Kind::LeaseAcquired | Kind::LeaseConfirmed | Kind::LeaseLost | Kind::Write
        )
    };
    // (g) each lease event's token in its election's range; one report per election.
    let mut seen: BTreeSet<u32> = BTreeSet::new();
    for (i, e) in h.events.iter().enumerate() {
        let Some(t) = e.token else { continue };
        if !lease_kind(&e.kind) || election_of(t) == e.election_id {
            continue;
        }
        if seen.insert(e.election_id) {
            violations.push(Violation {
                rule: Rule::TokenOfElection,
                message: format!(
                    "{}: n{}'s {} carries token {t}, which belongs to election id {} \
                     (token >> 40), not to {}",
                    label(e.election_id),
                    e.node,
                    e.kind.name(),
                    election_of(t),
                    e.election_id
                ),
                timeline: h.around(i, &[]),
            });
        }
    }
    // (g) each fence's tokens of its own name's elections only.
    let mut incarnations: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    for e in &h.events {
        if let Some(name) = &e.election {
            incarnations.entry(name).or_default().insert(e.election_id);
        }
    }
    let root: BTreeSet<u32> = [0].into();
    let fences = std::iter::once((None, h.writes)).chain(
        opts.fences
            .iter()
            .map(|(n, log)| (Some(n.as_str()), log.as_slice())),
    );
    for (name, log) in fences {
        let own = name.map_or(&root, |n| incarnations.get(n).unwrap_or(&root));
        let fence = name.map_or("the root fence".to_string(), |n| {
            format!("the fence of {n:?}")
        });
        if let Some((i, w)) = log
            .iter()
            .enumerate()
            .find(|(_, w)| !own.contains(&election_of(w.token)))
        {
            let h = History {
                events: h.events.clone(),
                writes: log,
                origin: h.origin,
                context: h.context,
            };
            violations.push(Violation {
                rule: Rule::TokenOfElection,
                message: format!(
                    "{fence} accepted write seq {} with token {} from n{}: a token of {}, \
                     not of {} (ids {})",
                    w.seq,
                    w.token,
                    w.node,
                    label(election_of(w.token)),
                    name.map_or("the root".to_string(), |n| format!("{n:?}")),
                    own.iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                timeline: h.around_write(i),
            });
        }
    }
    // (h) nothing used after the removal returned.
    for (ri, r) in h.events.iter().enumerate() {
        if r.kind != Kind::ElectionRemoved {
            continue;
        }
        summary.removals += 1;
        let id = r.election_id;
        let judge_lease_based = trusted.get(&id).copied().unwrap_or(true);
        let used = h.events.iter().enumerate().find(|(_, e)| {
            e.at_ns > r.at_ns
                && e.election_id == id
                && e.election.is_some()
                && match e.kind {
                    Kind::LeaseConfirmed => !opts.lease_based || judge_lease_based,
                    Kind::Write => true,
                    _ => false,
                }
        });
        let fenced = r
            .election
            .as_ref()
            .and_then(|n| opts.fences.get(n))
            .and_then(|log| {
                log.iter()
                    .find(|w| election_of(w.token) == id && w.at_ns.is_some_and(|a| a > r.at_ns))
            });
        if let Some((i, e)) = used {
            violations.push(Violation {
                rule: Rule::UsedAfterRemoval,
                message: format!(
                    "{} was removed at {} (remove_election returned), but n{}'s lease of \
                     term {} was used after it: {} at {}",
                    label(id),
                    h.rel(r.at_ns),
                    e.node,
                    e.term.unwrap_or(0),
                    e.kind.name(),
                    h.rel(e.at_ns)
                ),
                timeline: h.around(i, &[ri]),
            });
        } else if let Some(w) = fenced {
            violations.push(Violation {
                rule: Rule::UsedAfterRemoval,
                message: format!(
                    "{} was removed at {} (remove_election returned), but its fence accepted \
                     write seq {} with token {} from n{} at {}",
                    label(id),
                    h.rel(r.at_ns),
                    w.seq,
                    w.token,
                    w.node,
                    h.rel(w.at_ns.unwrap_or(0))
                ),
                timeline: h.around(ri, &[]),
            });
        }
    }
    // (i) per name, incarnations in creation order: rising ids, rising tokens.
    struct Inc {
        id: u32,
        created: u64,
        idx: usize,
        lo: Option<(u64, usize)>,
        hi: Option<(u64, usize)>,
    }
    let mut names: BTreeMap<&str, BTreeMap<u32, Inc>> = BTreeMap::new();
    for (i, e) in h.events.iter().enumerate() {
        let Some(name) = e.election.as_deref() else {
            continue;
        };
        if e.election_id == 0 {
            // An event of a named election that says nothing of its id (a history read
            // before the election recorded anything: no term, token or record) belongs to
            // no known incarnation; as "id 0" it looked like an incarnation created after
            // the real one (local_group --elections 10000 polls every history).
            continue;
        }
        let inc = names
            .entry(name)
            .or_default()
            .entry(e.election_id)
            .or_insert(Inc {
                id: e.election_id,
                created: e.at_ns,
                idx: i,
                lo: None,
                hi: None,
            });
        if e.kind == Kind::ElectionCreated {
            inc.created = e.at_ns;
            inc.idx = i;
        }
        if let (true, Some(t)) = (lease_kind(&e.kind), e.token) {
            if inc.lo.is_none_or(|(l, _)| t < l) {
                inc.lo = Some((t, i));
            }
            if inc.hi.is_none_or(|(m, _)| t > m) {
                inc.hi = Some((t, i));
            }
        }
    }
    for (name, incs) in &names {
        let mut order: Vec<&Inc> = incs.values().collect();
        order.sort_by_key(|i| (i.created, i.idx));
        for (x, later) in order.iter().enumerate() {
            for earlier in &order[..x] {
                let what = if later.id <= earlier.id {
                    Some(format!(
                        "incarnation id {} (created at {}) came after id {} (created at {}): \
                         ids must rise",
                        later.id,
                        h.rel(later.created),
                        earlier.id,
                        h.rel(earlier.created)
                    ))
                } else if let (Some((lo, i)), Some((hi, j))) = (later.lo, earlier.hi) {
                    (lo <= hi).then(|| {
                        format!(
                            "incarnation id {} handed out token {lo} (n{} at {}), not above \
                             token {hi} of the earlier incarnation id {} (n{} at {})",
                            later.id,
                            h.events[i].node,
                            h.rel(h.events[i].at_ns),
                            earlier.id,
                            h.events[j].node,
                            h.rel(h.events[j].at_ns)
                        )
                    })
                } else {
                    None
                };
                if let Some(what) = what {
                    violations.push(Violation {
                        rule: Rule::Incarnations,
                        message: format!("election {name:?}: {what}"),
                        timeline: h.around(later.lo.map_or(later.idx, |(_, i)| i), &[earlier.idx]),
                    });
                    break;
                }
            }
        }
    }
    // (j) no lease of a suspended election is acquired, and no confirm of it that began
    // succeeds, between `suspend_election`'s return and the next `resume_election`'s
    // call; and every token acquired or confirmed after that resume is above every one
    // before the suspension. Writes are not judged here: one confirmed before the
    // suspension may land after it with its token (a suspension revokes leases, it does
    // not retire tokens; rule (b) judges the fence).
    let used_kind = |k: &Kind, id: u32| match k {
        Kind::LeaseAcquired => true,
        Kind::LeaseConfirmed => !opts.lease_based || trusted.get(&id).copied().unwrap_or(true),
        _ => false,
    };
    let since = |e: &Event| match e.kind {
        Kind::LeaseConfirmed => e.began_ns.unwrap_or(e.at_ns),
        _ => e.at_ns,
    };
    for (si, s) in h.events.iter().enumerate() {
        if s.kind != Kind::ElectionSuspended {
            continue;
        }
        summary.suspensions += 1;
        let id = s.election_id;
        let of_it = |e: &Event| e.election_id == id && e.election.is_some();
        let resumed = h
            .events
            .iter()
            .enumerate()
            .find(|(_, e)| e.kind == Kind::ElectionResumed && of_it(e) && e.at_ns >= s.at_ns);
        let until = resumed.map_or(u64::MAX, |(_, r)| r.at_ns);
        let used = h.events.iter().enumerate().find(|(_, e)| {
            since(e) > s.at_ns && since(e) < until && of_it(e) && used_kind(&e.kind, id)
        });
        if let Some((i, e)) = used {
            violations.push(Violation {
                rule: Rule::Suspension,
                message: format!(
                    "{} was suspended at {} (suspend_election returned), but n{}'s lease of \
                     term {} was used before it was resumed: {} at {}",
                    label(id),
                    h.rel(s.at_ns),
                    e.node,
                    e.term.unwrap_or(0),
                    e.kind.name(),
                    h.rel(e.at_ns)
                ),
                timeline: h.around(i, &[si]),
            });
            continue;
        }
        let Some((ri, r)) = resumed else {
            continue;
        };
        let token = |e: &Event| e.token.filter(|_| of_it(e) && used_kind(&e.kind, id));
        let before = h
            .events
            .iter()
            .enumerate()
            .filter(|(_, e)| since(e) <= s.at_ns)
            .filter_map(|(i, e)| token(e).map(|t| (t, i)))
            .max();
        let after = h
            .events
            .iter()
            .enumerate()
            .filter(|(_, e)| since(e) > r.at_ns)
            .filter_map(|(i, e)| token(e).map(|t| (t, i)))
            .min();
        if let (Some((hi, i)), Some((lo, j))) = (before, after) {
            if lo <= hi {
                violations.push(Violation {
                    rule: Rule::Suspension,
                    message: format!(
                        "{} was resumed at {}, but its token {lo} (n{} at {}) is not above \
                         the token {hi} used before its suspension (n{} at {})",
                        label(id),
                        h.rel(r.at_ns),
                        h.events[j].node,
                        h.rel(h.events[j].at_ns),
                        h.events[i].node,
                        h.rel(h.events[i].at_ns)
                    ),
                    timeline: h.around(j, &[ri, i]),
                });
            }
        }
    }
}

/// Rules (a)–(f) over the events of one election (and the events of none: starts,
/// crashes, faults, membership), sorted by time, with `writes` the log of the fence it
/// writes to (empty: its fence is judged by [`check_fence`]); `origin` is the whole
/// history's first instant. Returns what it judged, the violations, and whether the
/// clock-trusting rules were judged.
fn check_group(
    sorted: Vec<&Event>,
    writes: &[Write],
    opts: &Options,
    liveness: Option<Liveness>,
    origin: u64,
) -> (Summary, Vec<Violation>, bool) {
    let h = History {
        events: sorted,
        writes,
        origin,
        context: opts.context,
    };
    let mut violations = Vec::new();
    let mut summary = Summary {
        events: h.events.len(),
        writes: writes.len(),
        ..Summary::default()
    };

    // (a) one holder per term.
    let mut holders: BTreeMap<u64, Vec<(u64, usize)>> = BTreeMap::new();
    for (i, e) in h.events.iter().enumerate() {
        if let (Kind::LeaseAcquired, Some(t)) = (&e.kind, e.term) {
            let hs = holders.entry(t).or_default();
            if !hs.iter().any(|(n, _)| *n == e.node) {
                hs.push((e.node, i));
            }
        }
    }
    summary.terms_with_leases = holders.len();
    for (t, hs) in &holders {
        if hs.len() > 1 {
            let nodes: Vec<String> = hs.iter().map(|(n, _)| format!("n{n}")).collect();
            let also: Vec<usize> = hs.iter().map(|(_, i)| *i).collect();
            violations.push(Violation {
                rule: Rule::OneHolderPerTerm,
                message: format!(
                    "term {t}: leases acquired by {} nodes: {}",
                    hs.len(),
                    nodes.join(", ")
                ),
                timeline: h.around(hs[1].1, &also),
            });
        }
    }

    // (b) fencing.
    fencing(&h, writes, &holders, &mut violations);

    // Which clock-trusting rules to judge.
    let tenures = tenures(&h);
    summary.clock_rules_skipped = untrusted_clock_fault(&opts.clock_faults, &tenures, &h);
    let trust_clocks = summary.clock_rules_skipped.is_none();

    // (c) stale confirms (`LeaseBased` ones only while the clocks can be trusted).
    // First report of each term per node: node → [(term, at)] with strictly rising terms.
    let mut rises: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for e in &h.events {
        if e.kind == Kind::LeaderChanged || e.kind == Kind::LeaseAcquired {
            if let Some(t) = e.term {
                let r = rises.entry(e.node).or_default();
                if r.last().is_none_or(|(last, _)| t > *last) {
                    r.push((t, e.at_ns));
                }
            }
        }
    }
    // M_S(t): the q-th earliest first report of a term > t among the voters S, q a
    // majority of S; without S, among all nodes, q a majority of the group.
    let majority_past = |voters: Option<&[u64]>, t: u64| -> Option<(u64, Vec<u64>)> {
        let q = voters.map_or(opts.group_size, <[u64]>::len) / 2 + 1;
        let mut firsts: Vec<(u64, u64)> = rises
            .iter()
            .filter(|(node, _)| voters.is_none_or(|v| v.contains(node)))
            .filter_map(|(node, r)| {
                r.iter()
                    .find(|(term, _)| *term > t)
                    .map(|(_, at)| (*at, *node))
            })
            .collect();
        if firsts.len() < q {
            return None;
        }
        firsts.sort_unstable();
        Some((
            firsts[q - 1].0,
            firsts[..q].iter().map(|(_, n)| *n).collect(),
        ))
    };
    // The configurations reported (see "Membership changes"), per node in time order;
    // node 0: the harness's.
    let mut reports: BTreeMap<u64, Vec<(u64, Conf)>> = BTreeMap::new();
    let mut starts: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for e in &h.events {
        match e.kind {
            Kind::Members if !e.voters.is_empty() => reports
                .entry(e.node)
                .or_default()
                .push((e.at_ns, (e.voters.clone(), e.outgoing.clone()))),
            Kind::Started => starts.entry(e.node).or_default().push(e.at_ns),
            _ => {}
        }
    }
    let initial: Conf = ((1..=opts.group_size as u64).collect(), Vec::new());
    // The configurations node `n` may have counted a quorum in between `began` and
    // `at` (every one it may have had then, or more).
    let candidates = |n: u64, began: u64, at: u64| -> Vec<&Conf> {
        let until = at.saturating_add(opts.members_lag_ns);
        let mut c: Vec<&Conf> = Vec::new();
        let own = reports.get(&n).filter(|_| n != 0);
        let known = own.and_then(|r| r.iter().rev().find(|(t, _)| *t <= began));
        // Its configuration at `began` is its last report before, unless it restarted
        // since (a restart may load an older one) or reported none.
        let restarted = known.is_some_and(|(t, _)| {
            starts
                .get(&n)
                .is_some_and(|s| s.iter().any(|s| *s > *t && *s <= began))
        });
        if let Some((_, conf)) = known {
            c.push(conf);
        }
        if known.is_none() || restarted {
            c.push(&initial);
            for (node, r) in &reports {
                if *node != 0 {
                    c.extend(r.iter().filter(|(t, _)| *t <= until).map(|(_, conf)| conf));
                }
            }
        }
        if let Some(r) = own {
            c.extend(
                r.iter()
                    .filter(|(t, _)| *t > began && *t <= until)
                    .map(|(_, conf)| conf),
            );
        }
        if let Some(r) = reports.get(&0) {
            c.extend(r.iter().filter(|(t, _)| *t <= until).map(|(_, conf)| conf));
        }
        c.sort();
        c.dedup();
        c
    };
    // When configuration `c` can no longer gather a quorum that acknowledges term `t`:
    // once a majority of its voters (or of either half, while joint) has moved past it.
    let config_past = |c: &Conf, t: u64| -> Option<(u64, Vec<u64>)> {
        let halves = [Some(&c.0), (!c.1.is_empty()).then_some(&c.1)];
        halves
            .into_iter()
            .flatten()
            .filter_map(|v| majority_past(Some(v), t))
            .min()
    };
    let mut stale_terms: BTreeSet<(u64, u64)> = BTreeSet::new();
    for (i, e) in h.events.iter().enumerate() {
        if e.kind != Kind::LeaseConfirmed {
            continue;
        }
        let Some(t) = e.term else { continue };
        if opts.lease_based && !trust_clocks {
            continue;
        }
        summary.confirms += 1;
        let began = e.began();
        // (when, the nodes past t, the configuration they are a majority of)
        let past: Option<(u64, Vec<u64>, Option<&Conf>)> = if reports.is_empty() {
            majority_past(None, t).map(|(m, nodes)| (m, nodes, None))
        } else {
            // Stale only if no configuration the node may have used had a quorum left.
            let mut latest: Option<(u64, Vec<u64>, Option<&Conf>)> = None;
            let mut all = true;
            for c in candidates(e.node, began, e.at_ns) {
                match config_past(c, t) {
                    Some((m, nodes)) if began > m => {
                        if latest.as_ref().is_none_or(|(l, _, _)| m > *l) {
                            latest = Some((m, nodes, Some(c)));
                        }
                    }
                    _ => all = false,
                }
            }
            latest.filter(|_| all)
        };
        if let Some((m, nodes, conf)) = past {
            // One report per (node, term) is enough to read.
            if began > m && stale_terms.insert((e.node, t)) {
                let names: Vec<String> = nodes.iter().map(|n| format!("n{n}")).collect();
                let of = conf.map_or(String::new(), |(v, o)| {
                    let out = if o.is_empty() {
                        String::new()
                    } else {
                        format!(" and {}", show_ids(o))
                    };
                    format!(
                        " of the voters {}{out} (every configuration it may have used)",
                        show_ids(v)
                    )
                });
                violations.push(Violation {
                    rule: Rule::StaleConfirm,
                    message: format!(
                        "n{} confirmed term {t} with a call that began at {}, after a majority \
                         ({}){of} had reported a term > {t} (by {})",
                        e.node,
                        h.rel(began),
                        names.join(", "),
                        h.rel(m)
                    ),
                    timeline: h.around(i, &[h.index_at(m)]),
                });
            }
        }
    }

    // (d) overlapping leases.
    let mut reported: BTreeSet<(usize, usize)> = BTreeSet::new();
    for (bi, b) in tenures.iter().enumerate().filter(|_| trust_clocks) {
        for (ai, a) in tenures.iter().enumerate() {
            if a.term < b.term
                && a.node != b.node
                && b.acquired_ns < a.end_ns
                && reported.insert((ai, bi))
            {
                // A lease announced after its grant says both: a late announcement
                // is no excuse for an early grant.
                let announced = h.events[b.idx].at_ns;
                let late = if announced == b.acquired_ns {
                    String::new()
                } else {
                    format!(" (announced at {})", h.rel(announced))
                };
                violations.push(Violation {
                    rule: Rule::Overlap,
                    message: format!(
                        "n{} acquired term {} at {}{late}, {:.3} ms before n{}'s lease of term \
                         {} (acquired {}) ended at {}",
                        b.node,
                        b.term,
                        h.rel(b.acquired_ns),
                        (a.end_ns - b.acquired_ns) as f64 / 1e6,
                        a.node,
                        a.term,
                        h.rel(a.acquired_ns),
                        h.rel(a.end_ns)
                    ),
                    timeline: h.around(b.idx, &[a.idx]),
                });
            }
        }
    }

    // (e) liveness.
    if let Some(l) = liveness {
        let first = h.events.iter().position(|e| {
            e.at_ns >= l.healed_at_ns
                && matches!(e.kind, Kind::LeaseAcquired | Kind::LeaseConfirmed)
        });
        let last_at = h.events.last().map_or(0, |e| e.at_ns);
        match first {
            Some(i) if h.events[i].at_ns - l.healed_at_ns <= l.bound_ns => {
                summary.recovery_ns = Some(h.events[i].at_ns - l.healed_at_ns);
            }
            other => {
                let what = match other {
                    Some(i) => {
                        let d = h.events[i].at_ns - l.healed_at_ns;
                        summary.recovery_ns = Some(d);
                        format!("the first came {:.3} ms after it", d as f64 / 1e6)
                    }
                    None => format!(
                        "none came at all (the history ends {:.3} ms after the heal)",
                        last_at.saturating_sub(l.healed_at_ns) as f64 / 1e6
                    ),
                };
                violations.push(Violation {
                    rule: Rule::Liveness,
                    message: format!(
                        "no lease acquired or confirmed within {:.3} ms of the last heal at {}: \
                         {what}",
                        l.bound_ns as f64 / 1e6,
                        h.rel(l.healed_at_ns)
                    ),
                    timeline: h.around(h.index_at(l.healed_at_ns), &[]),
                });
            }
        }
    }

    // (f) applied histories.
    summary.histories = check_histories(&h, &mut violations);
    (summary, violations, trust_clocks)
}

/// Rule (b) over one fence's log, `holders` the lease holders per term of the elections
/// that write to it.
fn fencing(
    h: &History<'_>,
    writes: &[Write],
    holders: &BTreeMap<u64, Vec<(u64, usize)>>,
    violations: &mut Vec<Violation>,
) {
    let mut highest: Option<(u64, usize)> = None;
    let mut writer_of: BTreeMap<u64, u64> = BTreeMap::new();
    for (i, w) in writes.iter().enumerate() {
        if let Some((hi, hi_idx)) = highest {
            if w.token < hi {
                violations.push(Violation {
                    rule: Rule::Fencing,
                    message: format!(
                        "write seq {} with token {} by n{} accepted after write seq {} with \
                         the higher token {}",
                        w.seq, w.token, w.node, writes[hi_idx].seq, hi
                    ),
                    timeline: h.around_write(i),
                });
                continue;
            }
        }
        if highest.is_none_or(|(hi, _)| w.token > hi) {
            highest = Some((w.token, i));
        }
        match writer_of.get(&w.token) {
            Some(n) if *n != w.node => violations.push(Violation {
                rule: Rule::Fencing,
                message: format!(
                    "token {} used by two writers: n{} and n{} (seq {})",
                    w.token, n, w.node, w.seq
                ),
                timeline: h.around_write(i),
            }),
            Some(_) => {}
            None => {
                writer_of.insert(w.token, w.node);
                if let Some(hs) = holders.get(&w.token) {
                    if !hs.iter().any(|(n, _)| *n == w.node) {
                        violations.push(Violation {
                            rule: Rule::Fencing,
                            message: format!(
                                "write seq {} with token {} by n{}, but the lease of term {} \
                                 was acquired by n{}",
                                w.seq, w.token, w.node, w.token, hs[0].0
                            ),
                            timeline: h.around_write(i),
                        });
                    }
                }
            }
        }
    }
}

/// Every lease instance of the history, from acquisition to its end (see rule (d)).
fn tenures(h: &History<'_>) -> Vec<Tenure> {
    let mut tenures: Vec<Tenure> = Vec::new();
    let mut open: BTreeMap<u64, (usize, u64)> = BTreeMap::new(); // node → (tenure, max until)
    let close = |tenures: &mut Vec<Tenure>, idx: usize, end: u64| {
        let t = &mut tenures[idx];
        t.end_ns = end.max(t.acquired_ns);
    };
    for (i, e) in h.events.iter().enumerate() {
        match e.kind {
            Kind::LeaseAcquired => {
                let Some(t) = e.term else { continue };
                if let Some((idx, until)) = open.remove(&e.node) {
                    close(&mut tenures, idx, until.min(e.at_ns));
                }
                let until = e.valid_until_ns.unwrap_or(e.at_ns);
                tenures.push(Tenure {
                    node: e.node,
                    term: t,
                    acquired_ns: e.granted_ns.unwrap_or(e.at_ns),
                    idx: i,
                    end_ns: until,
                });
                open.insert(e.node, (tenures.len() - 1, until));
            }
            Kind::LeaseConfirmed => {
                if let Some((idx, until)) = open.get_mut(&e.node) {
                    if Some(tenures[*idx].term) == e.term {
                        *until = (*until).max(e.valid_until_ns.unwrap_or(0));
                        tenures[*idx].end_ns = *until;
                    }
                }
            }
            Kind::LeaseLost => {
                if let Some((idx, until)) = open.get(&e.node).copied() {
                    if Some(tenures[idx].term) == e.term {
                        open.remove(&e.node);
                        let end = e.ended_ns.unwrap_or_else(|| until.min(e.at_ns));
                        close(&mut tenures, idx, end);
                    }
                }
            }
            Kind::Crashed | Kind::Stopped | Kind::Started => {
                if let Some((idx, until)) = open.remove(&e.node) {
                    close(&mut tenures, idx, until.min(e.at_ns));
                }
            }
            _ => {}
        }
    }
    tenures
}

/// The first clock fault outside what the lease assumes, described (see "Clock faults"
/// in the module docs), or `None`.
fn untrusted_clock_fault(
    faults: &[ClockFault],
    tenures: &[Tenure],
    h: &History<'_>,
) -> Option<String> {
    // A lease that a step ended held until that step.
    let held = |node: u64, from: u64, to: u64| {
        tenures
            .iter()
            .any(|t| t.node == node && t.acquired_ns <= to && t.end_ns >= from)
    };
    faults.iter().find_map(|f| match f.kind {
        ClockFaultKind::Jump if !held(f.node, f.from_ns, f.from_ns) => Some(format!(
            "n{}'s clock stepped forward at {} while it held no lease (a voter's refusal and \
             quiet period run short)",
            f.node,
            h.rel(f.from_ns)
        )),
        ClockFaultKind::Stall {
            counted_by_boottime: false,
        } if held(f.node, f.from_ns, f.to_ns) => Some(format!(
            "n{}'s clocks stood still from {} to {} (a pause neither clock counts) while it \
             held a lease",
            f.node,
            h.rel(f.from_ns),
            h.rel(f.to_ns)
        )),
        _ => None,
    })
}

/// `{n1,n2,...}`.
fn show_ids(ids: &[u64]) -> String {
    let v: Vec<String> = ids.iter().map(|n| format!("n{n}")).collect();
    format!("{{{}}}", v.join(","))
}

/// `[term:leader, ...]`, eliding the middle of a long history.
fn show_records(records: &[(u64, u64)]) -> String {
    let one = |(t, l): &(u64, u64)| format!("{t}:n{l}");
    if records.len() <= 8 {
        let all: Vec<String> = records.iter().map(one).collect();
        return format!("[{}]", all.join(" "));
    }
    let head: Vec<String> = records[..2].iter().map(one).collect();
    let tail: Vec<String> = records[records.len() - 5..].iter().map(one).collect();
    format!(
        "[{} ..{} more.. {}]",
        head.join(" "),
        records.len() - 7,
        tail.join(" ")
    )
}

/// Rule (f) over every `history` event; returns how many there were.
fn check_histories(h: &History<'_>, violations: &mut Vec<Violation>) -> usize {
    let snaps: Vec<(usize, &Event)> = h
        .events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == Kind::History)
        .map(|(i, e)| (i, *e))
        .collect();
    let at = |e: &Event| h.rel(e.at_ns);
    // Each broken fact once: (f1) per node, (f2)/(f3) per term.
    let mut seen: BTreeSet<(u8, u64)> = BTreeSet::new();
    // (f1) strictly rising terms.
    for (i, e) in &snaps {
        if let Some(w) = e.records.windows(2).find(|w| w[1].0 <= w[0].0) {
            if seen.insert((1, e.node)) {
                violations.push(Violation {
                    rule: Rule::AppliedHistory,
                    message: format!(
                        "n{}'s history at {} does not rise in term: record of term {} after \
                         one of term {}",
                        e.node,
                        at(e),
                        w[1].0,
                        w[0].0
                    ),
                    timeline: h.around(*i, &[]),
                });
            }
        }
    }
    // (f2) and (f3), every pair; the later snapshot is the focus of the timeline.
    for (x, (ia, a)) in snaps.iter().enumerate() {
        for (ib, b) in &snaps[x + 1..] {
            let (Some(fa), Some(la), Some(fb), Some(lb)) = (
                a.records.first(),
                a.records.last(),
                b.records.first(),
                b.records.last(),
            ) else {
                continue;
            };
            let leaders_a: BTreeMap<u64, u64> = a.records.iter().copied().collect();
            let leaders_b: BTreeMap<u64, u64> = b.records.iter().copied().collect();
            for (t, la_t) in &leaders_a {
                if let Some(lb_t) = leaders_b.get(t) {
                    if lb_t != la_t && seen.insert((2, *t)) {
                        violations.push(Violation {
                            rule: Rule::AppliedHistory,
                            message: format!(
                                "term {t}: n{}'s history at {} says n{la_t} led it, n{}'s at {} \
                                 says n{lb_t}",
                                a.node,
                                at(a),
                                b.node,
                                at(b)
                            ),
                            timeline: h.around(*ib, &[*ia]),
                        });
                    }
                }
            }
            let (lo, hi) = (fa.0.max(fb.0), la.0.min(lb.0));
            if lo > hi {
                continue; // disjoint windows (or a history that does not rise: f1)
            }
            let in_range = |m: &BTreeMap<u64, u64>| -> BTreeSet<u64> {
                m.range(lo..=hi).map(|(t, _)| *t).collect()
            };
            let (ta, tb) = (in_range(&leaders_a), in_range(&leaders_b));
            for t in ta.symmetric_difference(&tb) {
                let (has, lacks) = if ta.contains(t) { (a, b) } else { (b, a) };
                if seen.insert((3, *t)) {
                    violations.push(Violation {
                        rule: Rule::AppliedHistory,
                        message: format!(
                            "the record of term {t} (leader n{}) that n{} had applied at {} is \
                             missing from n{}'s history at {}, which runs from term {} to \
                             term {}: a committed entry was lost",
                            has.records.iter().find(|r| r.0 == *t).map_or(0, |r| r.1),
                            has.node,
                            at(has),
                            lacks.node,
                            at(lacks),
                            lacks.records.first().map_or(0, |r| r.0),
                            lacks.records.last().map_or(0, |r| r.0),
                        ),
                        timeline: h.around(*ib, &[*ia]),
                    });
                }
            }
        }
    }
    snaps.len()
}
