//! The JSON messages of the admin protocol, version 1.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::election::{ElectionId, ElectionInfo, ElectionOptions};
use crate::error::NodeStopped;
use crate::history::TenureRecord;
use crate::status::{Membership, Status};
use crate::transport::{NodeId, PeerAddr};

use super::PROTOCOL_VERSION;

/// A command to a node. On the wire: `{"v":1,"command":"<name>", ...arguments}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Request {
    /// The node's view: role, term, leader, members, quorum health, lease. Any node.
    Status,
    /// The replicated leadership history, oldest first. Any node.
    History,
    /// Hand leadership to `to`, or to the most up-to-date follower. Leader only.
    Transfer {
        /// The node to hand over to; `None`: the most up-to-date follower.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<NodeId>,
    },
    /// Keep node `id` from campaigning; if it leads, it hands over at once. Leader only.
    Drain {
        /// The node.
        id: NodeId,
    },
    /// Let node `id` campaign again. Leader only.
    Undrain {
        /// The node.
        id: NodeId,
    },
    /// Add node `id`, reachable at `addr` (its raft address), as a learner. Leader only.
    AddLearner {
        /// The new node.
        id: NodeId,
        /// Its raft transport address: `"10.0.0.4:7000"`, `"[fd00::4]:7000"` or a name,
        /// `"worker-4.workers.svc:7000"` (on the wire a string either way, as before
        /// names; a node older than names refuses a name as a bad argument).
        addr: PeerAddr,
    },
    /// Make learner `id` a voter once it has caught up. Leader only.
    Promote {
        /// The learner.
        id: NodeId,
    },
    /// Remove node `id` from the group. Leader only.
    Remove {
        /// The member.
        id: NodeId,
    },
    /// Replace voter `old` by the caught-up learner `new` in one joint change. Leader only.
    Replace {
        /// The voter to remove.
        old: NodeId,
        /// The learner to promote in its place.
        new: NodeId,
    },
    /// The catalog of named elections as this node applied it, each with this node's view
    /// of its leader and term. Any node.
    Elections,
    /// Create named election `name`. Leader (of the group, the root election) only.
    CreateElection {
        /// The name: 1 to 128 bytes of `[A-Za-z0-9._-]`.
        name: String,
        /// Preferred leaders, in order (none: any).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        affinity: Vec<NodeId>,
        /// Which elections the balancer moves first (lower first); `None`: 128.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        priority: Option<u8>,
    },
    /// Remove named election `name`: every holder of its lease revokes it. Leader (of the
    /// group) only.
    RemoveElection {
        /// The name.
        name: String,
    },
    /// Suspend named election `name`: no lease of it is granted or held until it is
    /// resumed (its Raft group runs on). Leader (of the group) only.
    SuspendElection {
        /// The name.
        name: String,
    },
    /// Resume named election `name`: its first lease after that is in a new term.
    /// Leader (of the group) only.
    ResumeElection {
        /// The name.
        name: String,
    },
    /// Hand named election `name`'s leadership to `to`, or to the most up-to-date
    /// follower. That election's leader only: elsewhere [`ErrorKind::NotLeader`] names
    /// the election's leader this node knows of.
    TransferElection {
        /// The name.
        name: String,
        /// The node to hand over to; `None`: the most up-to-date follower.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<NodeId>,
    },
    /// The named elections this node leads, with their terms and whether it holds their
    /// lease. Any node.
    Leaderships,
    /// A backup of the replicated state, for founding again after every member lost its
    /// data ([`crate::backup`]). Any node; the leader's is the newest.
    Backup,
}

/// The names of the commands, as they appear on the wire.
pub const COMMANDS: &[&str] = &[
    "status",
    "history",
    "transfer",
    "drain",
    "undrain",
    "add_learner",
    "promote",
    "remove",
    "replace",
    "elections",
    "create_election",
    "remove_election",
    "transfer_election",
    "leaderships",
    "backup",
    "suspend_election",
    "resume_election",
];

/// The arguments each command takes.
fn arguments_of(command: &str) -> &'static [&'static str] {
    match command {
        "transfer" => &["to"],
        "drain" | "undrain" | "promote" | "remove" => &["id"],
        "add_learner" => &["id", "addr"],
        "replace" => &["old", "new"],
        "create_election" => &["name", "affinity", "priority"],
        "remove_election" | "suspend_election" | "resume_election" => &["name"],
        "transfer_election" => &["name", "to"],
        _ => &[],
    }
}

impl Request {
    /// The command's name on the wire (`"add_learner"`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::History => "history",
            Request::Transfer { .. } => "transfer",
            Request::Drain { .. } => "drain",
            Request::Undrain { .. } => "undrain",
            Request::AddLearner { .. } => "add_learner",
            Request::Promote { .. } => "promote",
            Request::Remove { .. } => "remove",
            Request::Replace { .. } => "replace",
            Request::Elections => "elections",
            Request::CreateElection { .. } => "create_election",
            Request::RemoveElection { .. } => "remove_election",
            Request::TransferElection { .. } => "transfer_election",
            Request::SuspendElection { .. } => "suspend_election",
            Request::ResumeElection { .. } => "resume_election",
            Request::Leaderships => "leaderships",
            Request::Backup => "backup",
        }
    }

    /// Whether only a leader can carry it out (everything but the reads `status`,
    /// `history`, `elections` and `leaderships`): the group's leader, or for
    /// `transfer_election` that election's leader. Another node answers such a command
    /// with [`ErrorKind::NotLeader`] and the leader it knows of.
    pub fn leader_only(&self) -> bool {
        !matches!(
            self,
            Request::Status
                | Request::History
                | Request::Elections
                | Request::Leaderships
                | Request::Backup
        )
    }

    /// The request as it goes on the wire, version included.
    pub fn to_json(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("v".into(), PROTOCOL_VERSION.into());
        }
        v
    }

    /// Parses a request as it comes off the wire. Every failure is an
    /// [`ErrorKind::BadRequest`] or [`ErrorKind::UnsupportedVersion`] reply that says what
    /// is wrong.
    pub fn from_json(bytes: &[u8]) -> Result<Request, ErrorReply> {
        let bad = |message: String| ErrorReply::new(ErrorKind::BadRequest, message);
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| bad(format!("the request is not valid JSON: {e}")))?;
        let Value::Object(mut obj) = value else {
            return Err(bad(
                "the request is not a JSON object like {\"v\":1,\"command\":\"status\"}".into(),
            ));
        };
        match obj.remove("v") {
            Some(v) if v.as_u64() == Some(u64::from(PROTOCOL_VERSION)) => {}
            Some(v) => {
                return Err(ErrorReply::new(
                    ErrorKind::UnsupportedVersion,
                    format!(
                        "protocol version {v} is not supported; this node speaks version {PROTOCOL_VERSION}"
                    ),
                ))
            }
            None => {
                return Err(bad(format!(
                    "the request has no protocol version \"v\" (this node speaks {PROTOCOL_VERSION})"
                )))
            }
        }
        let command = match obj.get("command") {
            Some(Value::String(c)) => c.clone(),
            Some(other) => return Err(bad(format!("\"command\" is {other}, not a string"))),
            None => {
                return Err(bad(format!(
                    "the request has no \"command\" (one of: {})",
                    COMMANDS.join(", ")
                )))
            }
        };
        if !COMMANDS.contains(&command.as_str()) {
            return Err(bad(format!(
                "unknown command {command:?} (known: {})",
                COMMANDS.join(", ")
            )));
        }
        let takes = arguments_of(&command);
        if let Some(extra) = obj
            .keys()
            .find(|k| k.as_str() != "command" && !takes.contains(&k.as_str()))
        {
            return Err(bad(format!(
                "bad arguments for {command}: unknown argument {extra:?} (it takes: {})",
                if takes.is_empty() {
                    "none".to_string()
                } else {
                    takes.join(", ")
                }
            )));
        }
        serde_json::from_value(Value::Object(obj))
            .map_err(|e| bad(format!("bad arguments for {command}: {e}")))
    }
}

/// A successful answer. On the wire: `{"<kind>": {...}}`, e.g.
/// `{"transferred":{"leader":2}}` (externally tagged: the membership's address map has
/// numeric keys, which an internally tagged enum could not read back).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reply {
    /// Answer to [`Request::Status`].
    Status(Status),
    /// Answer to [`Request::History`].
    History {
        /// The tenures, oldest first.
        records: Vec<TenureRecord>,
    },
    /// Answer to [`Request::Transfer`]: the node that leads now.
    Transferred {
        /// The new leader.
        leader: NodeId,
    },
    /// Answer to the drain and membership commands: the configuration after the change.
    Membership(Membership),
    /// Answer to [`Request::Elections`]: the catalog, by name.
    Elections {
        /// Every named election this node has applied, by name.
        elections: Vec<ElectionEntry>,
    },
    /// Answer to [`Request::CreateElection`]: the election as the catalog holds it.
    ElectionCreated(ElectionInfo),
    /// Answer to [`Request::SuspendElection`] and [`Request::ResumeElection`]: the
    /// election as the catalog holds it now.
    ElectionSuspended(ElectionInfo),
    /// Answer to [`Request::RemoveElection`].
    ElectionRemoved {
        /// The name removed.
        name: String,
        /// The removed incarnation's id.
        id: ElectionId,
        /// A token above every token the removed incarnation can hand out: advance a fence
        /// to it to refuse every leader of the removed incarnation.
        retired_above: u64,
    },
    /// Answer to [`Request::TransferElection`]: the node that leads the election now.
    ElectionTransferred {
        /// The election.
        name: String,
        /// Its new leader.
        leader: NodeId,
    },
    /// Answer to [`Request::Leaderships`].
    Leaderships(Leaderships),
    /// Answer to [`Request::Backup`].
    Backup(crate::backup::Backup),
}

/// One named election in a [`Reply::Elections`]: the catalog's entry and the answering
/// node's view of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectionEntry {
    /// Its name.
    pub name: String,
    /// Its id (never reused).
    pub id: ElectionId,
    /// Its options.
    pub options: ElectionOptions,
    /// The root log index of the entry that created it.
    pub created_at: u64,
    /// The election's leader as the answering node knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<NodeId>,
    /// The election's term at the answering node (0: not founded there yet).
    #[serde(default)]
    pub term: u64,
    /// An operator suspended it: no lease of it is granted or held.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
}

/// The named elections one node runs and leads ([`Request::Leaderships`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leaderships {
    /// The node answering.
    pub node: NodeId,
    /// How many named elections it runs.
    pub elections: u64,
    /// How many of them it knows no leader of.
    #[serde(default)]
    pub leaderless: u64,
    /// How many of them are suspended (no lease is held of them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub suspended: u64,
    /// The ones it leads, by name.
    #[serde(default)]
    pub led: Vec<LedElection>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A named election a node leads ([`Leaderships::led`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedElection {
    /// Its name.
    pub name: String,
    /// The term it leads in (the token of its lease).
    pub term: u64,
    /// Whether it holds a confirmed lease of it right now.
    pub leased: bool,
}

impl Leaderships {
    /// How many of its elections it holds a lease of.
    pub fn leased(&self) -> usize {
        self.led.iter().filter(|l| l.leased).count()
    }
}

/// What kind of refusal an [`ErrorReply`] is. Unknown kinds (from a newer node) read as
/// [`ErrorKind::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The command needs the leader and this node is not it; see `leader_hint`.
    NotLeader,
    /// Another membership change is still in flight; retry when it is done.
    ChangeInFlight,
    /// The node named is not a member (or not a voter, for a transfer).
    UnknownNode,
    /// The node to add is already a member.
    AlreadyMember,
    /// The node to add was removed before: its id is never admitted again.
    RemovedNode,
    /// The node to promote (or replace with) is not a learner.
    NotALearner,
    /// The learner has not caught up with the log yet; retry later.
    LearnerBehind,
    /// The change would leave the group without a reachable quorum.
    WouldLoseQuorum,
    /// The leader does not reach a quorum now: nothing can be committed.
    NoQuorum,
    /// The transfer target already leads.
    AlreadyLeader,
    /// No follower to transfer to.
    NoCandidate,
    /// The transfer target is drained and may not lead; undrain it or pick another.
    Drained,
    /// No named election of that name exists (as far as this node has applied the
    /// catalog).
    UnknownElection,
    /// A named election of that name exists already.
    ElectionExists,
    /// The election name is not 1 to 128 bytes of `[A-Za-z0-9._-]`.
    InvalidName,
    /// The catalog holds as many named elections as it may.
    CatalogFull,
    /// The operation did not complete in time (for example no quorum); it may still
    /// take effect.
    TimedOut,
    /// The node has stopped.
    Stopped,
    /// The request is malformed: not JSON, too large, unknown command, bad arguments.
    BadRequest,
    /// The request's protocol version is not spoken by this node.
    UnsupportedVersion,
    /// Something else; the message says what.
    #[serde(other)]
    Other,
}

impl ErrorKind {
    /// The kind's name on the wire (`"not_leader"`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorKind::NotLeader => "not_leader",
            ErrorKind::ChangeInFlight => "change_in_flight",
            ErrorKind::UnknownNode => "unknown_node",
            ErrorKind::AlreadyMember => "already_member",
            ErrorKind::RemovedNode => "removed_node",
            ErrorKind::NotALearner => "not_a_learner",
            ErrorKind::LearnerBehind => "learner_behind",
            ErrorKind::WouldLoseQuorum => "would_lose_quorum",
            ErrorKind::NoQuorum => "no_quorum",
            ErrorKind::AlreadyLeader => "already_leader",
            ErrorKind::NoCandidate => "no_candidate",
            ErrorKind::Drained => "drained",
            ErrorKind::UnknownElection => "unknown_election",
            ErrorKind::ElectionExists => "election_exists",
            ErrorKind::InvalidName => "invalid_name",
            ErrorKind::CatalogFull => "catalog_full",
            ErrorKind::TimedOut => "timed_out",
            ErrorKind::Stopped => "stopped",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::UnsupportedVersion => "unsupported_version",
            ErrorKind::Other => "other",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node's refusal of a command: what kind, a message for people, and for
/// [`ErrorKind::NotLeader`] the leader it knows of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ErrorReply {
    /// The kind, for programs.
    pub kind: ErrorKind,
    /// What happened, for people.
    pub message: String,
    /// With [`ErrorKind::NotLeader`]: the leader the node knows of, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_hint: Option<NodeId>,
}

impl ErrorReply {
    /// A refusal without a leader hint.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ErrorReply {
            kind,
            message: message.into(),
            leader_hint: None,
        }
    }

    pub(super) fn not_leader(node: NodeId, leader_hint: Option<NodeId>) -> Self {
        let message = match leader_hint {
            Some(l) => format!("node {node} is not the leader; node {l} leads"),
            None => format!(
                "node {node} is not the leader, and knows of no leader right now (no quorum?)"
            ),
        };
        ErrorReply {
            kind: ErrorKind::NotLeader,
            message,
            leader_hint,
        }
    }
}

impl ErrorReply {
    /// Node `node` does not lead named election `name`; `leader_hint` does, as far as it
    /// knows.
    pub(super) fn not_election_leader(
        node: NodeId,
        name: &str,
        leader_hint: Option<NodeId>,
    ) -> Self {
        let message = match leader_hint {
            Some(l) => format!("node {node} does not lead election {name:?}; node {l} leads it"),
            None => format!(
                "node {node} does not lead election {name:?}, and knows of no leader of it right now"
            ),
        };
        ErrorReply {
            kind: ErrorKind::NotLeader,
            message,
            leader_hint,
        }
    }
}

impl From<NodeStopped> for ErrorReply {
    fn from(e: NodeStopped) -> Self {
        ErrorReply::new(ErrorKind::Stopped, e.to_string())
    }
}

/// An answer as it goes on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Response {
    pub(super) v: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) ok: Option<Reply>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<ErrorReply>,
}

impl Response {
    pub(super) fn from_result(r: Result<Reply, ErrorReply>) -> Self {
        let (ok, error) = match r {
            Ok(reply) => (Some(reply), None),
            Err(e) => (None, Some(e)),
        };
        Response {
            v: PROTOCOL_VERSION,
            ok,
            error,
        }
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|e| {
            // Serializing our own types does not fail; answer something valid anyway.
            let fallback = Response::from_result(Err(ErrorReply::new(
                ErrorKind::Other,
                format!("the node could not encode its answer: {e}"),
            )));
            serde_json::to_vec(&fallback).unwrap_or_default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_learner_takes_an_ip_address_as_before_or_a_name() {
        let old = br#"{"v":1,"command":"add_learner","id":4,"addr":"10.0.0.4:7004"}"#;
        let req = Request::from_json(old).unwrap();
        let ip: std::net::SocketAddr = "10.0.0.4:7004".parse().unwrap();
        assert_eq!(
            req,
            Request::AddLearner {
                id: 4,
                addr: ip.into()
            }
        );
        let named = br#"{"v":1,"command":"add_learner","id":4,"addr":"n4.lab:7004"}"#;
        let req = Request::from_json(named).unwrap();
        assert_eq!(
            req,
            Request::AddLearner {
                id: 4,
                addr: "n4.lab:7004".parse().unwrap()
            }
        );
    }

    #[test]
    fn requests_round_trip_with_their_version() {
        let all = vec![
            Request::Status,
            Request::History,
            Request::Transfer { to: None },
            Request::Transfer { to: Some(2) },
            Request::Drain { id: 1 },
            Request::Undrain { id: 1 },
            Request::AddLearner {
                id: 4,
                addr: "127.0.0.1:7004".parse().unwrap(),
            },
            Request::AddLearner {
                id: 5,
                addr: "worker-5.workers.svc:7000".parse().unwrap(),
            },
            Request::Promote { id: 4 },
            Request::Remove { id: 3 },
            Request::Replace { old: 3, new: 4 },
            Request::Elections,
            Request::CreateElection {
                name: "shard-0".into(),
                affinity: vec![],
                priority: None,
            },
            Request::CreateElection {
                name: "shard-1".into(),
                affinity: vec![2, 1],
                priority: Some(7),
            },
            Request::RemoveElection {
                name: "shard-0".into(),
            },
            Request::TransferElection {
                name: "shard-0".into(),
                to: None,
            },
            Request::TransferElection {
                name: "shard-0".into(),
                to: Some(3),
            },
            Request::Leaderships,
            Request::Backup,
            Request::SuspendElection {
                name: "shard-0".into(),
            },
            Request::ResumeElection {
                name: "shard-0".into(),
            },
        ];
        for command in COMMANDS {
            assert!(
                all.iter().any(|r| r.name() == *command),
                "{command} is not tried"
            );
        }
        for r in all {
            let bytes = serde_json::to_vec(&r.to_json()).unwrap();
            assert_eq!(Request::from_json(&bytes).unwrap(), r);
            assert!(COMMANDS.contains(&r.name()));
        }
        assert_eq!(
            Request::Transfer { to: Some(2) }.to_json(),
            serde_json::json!({"v": 1, "command": "transfer", "to": 2})
        );
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        let cases: &[(&[u8], ErrorKind, &str)] = &[
            (b"{not json", ErrorKind::BadRequest, "not valid JSON"),
            (b"[1,2]", ErrorKind::BadRequest, "not a JSON object"),
            (
                br#"{"command":"status"}"#,
                ErrorKind::BadRequest,
                "no protocol version",
            ),
            (
                br#"{"v":2,"command":"status"}"#,
                ErrorKind::UnsupportedVersion,
                "version 2",
            ),
            (br#"{"v":1}"#, ErrorKind::BadRequest, "no \"command\""),
            (
                br#"{"v":1,"command":7}"#,
                ErrorKind::BadRequest,
                "not a string",
            ),
            (
                br#"{"v":1,"command":"reboot"}"#,
                ErrorKind::BadRequest,
                "unknown command \"reboot\"",
            ),
            (
                br#"{"v":1,"command":"drain"}"#,
                ErrorKind::BadRequest,
                "bad arguments for drain",
            ),
            (
                br#"{"v":1,"command":"drain","id":"x"}"#,
                ErrorKind::BadRequest,
                "bad arguments for drain",
            ),
            (
                br#"{"v":1,"command":"status","extra":1}"#,
                ErrorKind::BadRequest,
                "bad arguments for status",
            ),
            (
                br#"{"v":1,"command":"add_learner","id":4,"addr":"nowhere"}"#,
                ErrorKind::BadRequest,
                "bad arguments for add_learner",
            ),
            (
                br#"{"v":1,"command":"create_election"}"#,
                ErrorKind::BadRequest,
                "missing field `name`",
            ),
            (
                br#"{"v":1,"command":"create_election","name":"a","priority":300}"#,
                ErrorKind::BadRequest,
                "bad arguments for create_election",
            ),
            (
                br#"{"v":1,"command":"remove_election","name":"a","to":2}"#,
                ErrorKind::BadRequest,
                "unknown argument \"to\"",
            ),
        ];
        for (input, kind, needle) in cases {
            let e = Request::from_json(input).unwrap_err();
            assert_eq!(e.kind, *kind, "{}", String::from_utf8_lossy(input));
            assert!(
                e.message.contains(needle),
                "{}: {}",
                String::from_utf8_lossy(input),
                e.message
            );
        }
    }

    #[test]
    fn refusals_keep_their_kind_and_hint_on_the_wire() {
        let r = Response::from_result(Err(ErrorReply::not_leader(2, Some(1))));
        let text = String::from_utf8(r.encode()).unwrap();
        assert!(text.contains(r#""kind":"not_leader""#), "{text}");
        assert!(text.contains(r#""leader_hint":1"#), "{text}");
        let back: Response = serde_json::from_str(&text).unwrap();
        assert_eq!(back.error.unwrap().leader_hint, Some(1));
        // Answers carrying the membership's numeric-keyed address map read back.
        let mut m = Membership {
            voters: vec![1, 2],
            learners: vec![3],
            outgoing: vec![],
            drained: vec![2],
            addrs: Default::default(),
        };
        m.addrs.insert(1, "127.0.0.1:7001".into());
        let text =
            String::from_utf8(Response::from_result(Ok(Reply::Membership(m.clone()))).encode())
                .unwrap();
        match serde_json::from_str::<Response>(&text).unwrap().ok {
            Some(Reply::Membership(back)) => assert_eq!(back, m),
            other => panic!("{text} read back as {other:?}"),
        }
        // A kind this client does not know reads as Other.
        let e: ErrorReply = serde_json::from_str(r#"{"kind":"brand_new","message":"m"}"#).unwrap();
        assert_eq!(e.kind, ErrorKind::Other);
    }
}
