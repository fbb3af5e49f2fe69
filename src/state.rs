//! The state the Raft log replicates, besides the membership raft-rs keeps itself: the
//! leadership history, the drained nodes, and the members' transport addresses.
//!
//! Every node builds the same state by applying the committed log; it is the data of
//! every snapshot (so it survives compaction) and is rebuilt on restart from the last
//! snapshot plus the log above it.
//!
//! Entries are tagged by their first byte: `H` a tenure record ([`History::entry`]),
//! `D` a drain or undrain ([`GroupState::drain_entry`]), `C` and `X` the creation and
//! removal of a named election ([`GroupState::create_entry`], [`GroupState::remove_entry`]),
//! `P` its suspension or resumption ([`GroupState::suspend_entry`];
//! `docs/design.md`, section 11, "The catalog"). Conf changes carry the
//! addresses of the nodes they add in their context ([`encode_addrs`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use crate::election::MAX_CATALOG_BYTES;
use crate::election::{
    term_floor, ElectionError, ElectionId, ElectionOptions, MAX_ELECTIONS, MAX_ELECTION_ID,
};
use crate::group_id::GroupId;
use crate::history::History;
use crate::transport::{NodeId, PeerAddr};

/// Tag byte of a drain entry.
const DRAIN_TAG: u8 = b'D';
const CREATE_TAG: u8 = b'C';
const REMOVE_TAG: u8 = b'X';
const SUSPEND_TAG: u8 = b'P';

/// The replicated application state (the snapshot's data).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct GroupState {
    #[serde(flatten)]
    pub(crate) history: History,
    /// Nodes that must not campaign (an operator drained them).
    #[serde(default)]
    pub(crate) drained: BTreeSet<NodeId>,
    /// Where each member listens, as the group was told (first start or conf changes):
    /// an IP address (stored as a `SocketAddr` always was: `"10.0.0.4:7000"`) or a name
    /// (`"worker-4.workers.svc:7000"`).
    #[serde(default)]
    pub(crate) addrs: BTreeMap<NodeId, PeerAddr>,
    /// The group's id, drawn when it was founded (`None` only in snapshots written before
    /// groups had ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) group: Option<GroupId>,
    /// The named elections, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) elections: BTreeMap<String, ElectionSpec>,
    /// The id the next created election gets (ids are never reused).
    #[serde(default = "first_election_id")]
    pub(crate) next_election_id: ElectionId,
    /// Nodes that left the group (removed, or replaced): never admitted again, and
    /// refused at the TLS handshake by every member (`docs/design.md`, section 6,
    /// "Shutting out a node"). Recorded as each conf change applies, so every node
    /// holds the same set; empty in snapshots written before it existed.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) removed: BTreeSet<NodeId>,
    /// A group founded from a restore plan: its margin (`RestorePlan::margin`), so that
    /// the elections it creates start that far above their own floor, like those it
    /// restored (0 for a group founded afresh).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) restore_margin: u64,
    /// Named elections an operator suspended, by id (`docs/design.md`, section 11,
    /// "Suspending an election"): none of them grants or holds a lease until resumed.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) suspended: BTreeSet<ElectionId>,
    /// [`GroupState::catalog_bytes`], kept as entries apply (`None`: not counted yet).
    #[serde(skip)]
    catalog_used: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn first_election_id() -> ElectionId {
    1
}

/// A named election in the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ElectionSpec {
    pub(crate) id: ElectionId,
    #[serde(default)]
    pub(crate) options: ElectionOptions,
    /// The root index of the entry that created it.
    pub(crate) created_at: u64,
    /// The root's voters and learners when it was created: its first membership.
    pub(crate) voters: Vec<NodeId>,
    #[serde(default)]
    pub(crate) learners: Vec<NodeId>,
    /// The term it is founded at when above its own floor (`term_floor(id)`): a group
    /// founded again from a backup starts it above every token it handed out before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) floor: Option<u64>,
}

/// Who proposed a catalog change and which request of theirs it was (so the proposer can
/// answer its caller when the entry applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Request {
    pub(crate) node: NodeId,
    pub(crate) nonce: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CreateEntry {
    name: String,
    #[serde(default)]
    options: ElectionOptions,
    req: Request,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RemoveEntry {
    name: String,
    id: ElectionId,
    req: Request,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SuspendEntry {
    name: String,
    id: ElectionId,
    suspended: bool,
    req: Request,
}

/// What applying a catalog entry did.
#[derive(Debug, Clone)]
pub(crate) enum CatalogChange {
    /// Not a catalog entry.
    NotCatalog,
    Created {
        name: String,
        spec: ElectionSpec,
        req: Request,
    },
    Removed {
        name: String,
        id: ElectionId,
        req: Request,
    },
    /// Suspended (`suspended`) or resumed (an election already so applies the same).
    Suspended {
        name: String,
        id: ElectionId,
        suspended: bool,
        req: Request,
        /// The entry's root index (the election's marks carry it).
        index: u64,
    },
    /// The entry applied as a no-op: why.
    Refused { req: Request, error: ElectionError },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct DrainEntry {
    node: NodeId,
    drained: bool,
}

/// What applying a normal entry changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Not a tenure entry (the leader's empty entry, foreign data): nothing changed.
    Nothing,
    /// A tenure record.
    Tenure,
    /// A node was drained (`true`) or undrained.
    Drain(NodeId, bool),
}

impl GroupState {
    /// A fresh group's state: its id, no history, nobody drained, the first members'
    /// addresses.
    pub(crate) fn bootstrap(group: GroupId, addrs: BTreeMap<NodeId, PeerAddr>) -> GroupState {
        GroupState {
            addrs,
            group: Some(group),
            ..Default::default()
        }
    }

    /// The entry that creates election `name`.
    pub(crate) fn create_entry(name: &str, options: &ElectionOptions, req: Request) -> Vec<u8> {
        let mut out = vec![CREATE_TAG];
        let e = CreateEntry {
            name: name.into(),
            options: options.clone(),
            req,
        };
        out.extend(serde_json::to_vec(&e).unwrap_or_default());
        out
    }

    /// The entry that removes election `name` if its id is still `id`.
    pub(crate) fn remove_entry(name: &str, id: ElectionId, req: Request) -> Vec<u8> {
        let mut out = vec![REMOVE_TAG];
        let e = RemoveEntry {
            name: name.into(),
            id,
            req,
        };
        out.extend(serde_json::to_vec(&e).unwrap_or_default());
        out
    }

    /// The entry that suspends (`true`) or resumes election `name` if its id is still `id`.
    pub(crate) fn suspend_entry(
        name: &str,
        id: ElectionId,
        suspended: bool,
        req: Request,
    ) -> Vec<u8> {
        let mut out = vec![SUSPEND_TAG];
        let e = SuspendEntry {
            name: name.into(),
            id,
            suspended,
            req,
        };
        out.extend(serde_json::to_vec(&e).unwrap_or_default());
        out
    }

    /// What the catalog's elections take of their limit ([`MAX_CATALOG_BYTES`]), as
    /// [`catalog_bytes`] charges each.
    pub(crate) fn catalog_bytes(&self) -> u64 {
        self.elections
            .iter()
            .map(|(name, spec)| catalog_bytes(name, spec))
            .sum()
    }

    /// Applies a catalog entry at root `index`, where the root's applied membership is
    /// `voters` and `learners` (a new election's first membership). Every member applies
    /// the same log, so every member gives a name the same id. `limit` is the most bytes
    /// the catalog may take ([`MAX_CATALOG_BYTES`], smaller in some tests: the same on
    /// every node).
    pub(crate) fn apply_catalog(
        &mut self,
        data: &[u8],
        index: u64,
        voters: &[NodeId],
        learners: &[NodeId],
        limit: u64,
    ) -> CatalogChange {
        match data.split_first() {
            Some((&CREATE_TAG, json)) => {
                let Ok(e) = serde_json::from_slice::<CreateEntry>(json) else {
                    return CatalogChange::NotCatalog;
                };
                let refused = |error| CatalogChange::Refused { req: e.req, error };
                if let Err(err) = crate::election::check_name(&e.name) {
                    return refused(err);
                }
                if self.elections.contains_key(&e.name) {
                    return refused(ElectionError::Exists(e.name.clone()));
                }
                if self.elections.len() >= MAX_ELECTIONS {
                    return refused(ElectionError::Full(format!(
                        "the catalog holds {MAX_ELECTIONS} elections"
                    )));
                }
                if self.next_election_id.max(1) > MAX_ELECTION_ID {
                    return refused(ElectionError::Full(format!(
                        "every election id up to {MAX_ELECTION_ID} was used"
                    )));
                }
                let id = self.next_election_id.max(1);
                let spec = ElectionSpec {
                    id,
                    options: e.options,
                    created_at: index,
                    voters: voters.to_vec(),
                    learners: learners.to_vec(),
                    floor: (self.restore_margin > 0)
                        .then(|| term_floor(id).saturating_add(self.restore_margin)),
                };
                let used = self.catalog_used.unwrap_or_else(|| self.catalog_bytes());
                let needs = catalog_bytes(&e.name, &spec);
                if used.saturating_add(needs) > limit
                    && !crate::mutation::active("catalog-ignores-its-byte-limit")
                {
                    return refused(ElectionError::Full(format!(
                        "the catalog's {} elections take {used} of its {limit} bytes and {:?} \
                         needs {needs} more: the root's snapshot must fit one frame \
                         (docs/design.md, section 9); remove elections or use shorter names",
                        self.elections.len(),
                        e.name
                    )));
                }
                self.next_election_id = id + 1;
                self.catalog_used = Some(used + needs);
                self.elections.insert(e.name.clone(), spec.clone());
                CatalogChange::Created {
                    name: e.name,
                    spec,
                    req: e.req,
                }
            }
            Some((&REMOVE_TAG, json)) => {
                let Ok(e) = serde_json::from_slice::<RemoveEntry>(json) else {
                    return CatalogChange::NotCatalog;
                };
                match self.elections.get(&e.name) {
                    Some(spec) if spec.id == e.id => {
                        let freed = catalog_bytes(&e.name, spec);
                        self.catalog_used = self.catalog_used.map(|u| u.saturating_sub(freed));
                        self.elections.remove(&e.name);
                        self.suspended.remove(&e.id);
                        CatalogChange::Removed {
                            name: e.name,
                            id: e.id,
                            req: e.req,
                        }
                    }
                    _ => CatalogChange::Refused {
                        req: e.req,
                        error: ElectionError::NotFound(e.name),
                    },
                }
            }
            Some((&SUSPEND_TAG, json)) => {
                let Ok(e) = serde_json::from_slice::<SuspendEntry>(json) else {
                    return CatalogChange::NotCatalog;
                };
                match self.elections.get(&e.name) {
                    Some(spec) if spec.id == e.id => {
                        if e.suspended {
                            self.suspended.insert(e.id);
                        } else {
                            self.suspended.remove(&e.id);
                        }
                        CatalogChange::Suspended {
                            name: e.name,
                            id: e.id,
                            suspended: e.suspended,
                            req: e.req,
                            index,
                        }
                    }
                    _ => CatalogChange::Refused {
                        req: e.req,
                        error: ElectionError::NotFound(e.name),
                    },
                }
            }
            _ => CatalogChange::NotCatalog,
        }
    }

    /// Restores from snapshot data (empty: a group that never took a snapshot).
    /// Undecodable data yields an error string naming the problem.
    pub(crate) fn from_snapshot(data: &[u8]) -> Result<GroupState, String> {
        if data.is_empty() {
            return Ok(GroupState::default());
        }
        serde_json::from_slice(data)
            .map_err(|e| format!("snapshot data is not a tenure group state: {e}"))
    }

    pub(crate) fn to_snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The entry that drains (or undrains) `node`.
    pub(crate) fn drain_entry(node: NodeId, drained: bool) -> Vec<u8> {
        let mut out = vec![DRAIN_TAG];
        out.extend(serde_json::to_vec(&DrainEntry { node, drained }).unwrap_or_default());
        out
    }

    /// Applies a committed normal entry.
    pub(crate) fn apply(&mut self, data: &[u8], retention: usize) -> Applied {
        if self.history.apply(data, retention) {
            return Applied::Tenure;
        }
        let Some((&DRAIN_TAG, json)) = data.split_first() else {
            return Applied::Nothing;
        };
        let Ok(d) = serde_json::from_slice::<DrainEntry>(json) else {
            return Applied::Nothing;
        };
        if d.drained {
            self.drained.insert(d.node);
        } else {
            self.drained.remove(&d.node);
        }
        Applied::Drain(d.node, d.drained)
    }

    pub(crate) fn is_drained(&self, id: NodeId) -> bool {
        self.drained.contains(&id)
    }
}

/// What election `name` takes of the catalog's limit ([`MAX_CATALOG_BYTES`]): its JSON in
/// the root's snapshot, `"name":{...},`, counted from its fields.
///
/// Every node must charge an election the same, or one would refuse a creation another
/// applies, so this is a formula of the fields, part of the replicated protocol, and not
/// the length of whatever the running version serializes: a version that adds a field to
/// [`ElectionSpec`] keeps it (the quarter of a frame left beside the catalog has room for
/// a few bytes more per election). It equals the JSON's length today (a test checks).
pub(crate) fn catalog_bytes(name: &str, spec: &ElectionSpec) -> u64 {
    fn digits(n: u64) -> u64 {
        u64::from(n.checked_ilog10().unwrap_or(0)) + 1
    }
    fn list(ids: &[NodeId]) -> u64 {
        ids.iter().map(|&i| digits(i) + 1).sum::<u64>().max(1) - 1
    }
    let o = &spec.options;
    let affinity = if o.affinity.is_empty() {
        0
    } else {
        r#""affinity":[],"#.len() as u64 + list(&o.affinity)
    };
    let floor = spec
        .floor
        .map_or(0, |f| r#","floor":"#.len() as u64 + digits(f));
    let fixed = r#""":{"id":,"options":{"priority":},"created_at":,"voters":[],"learners":[]},"#;
    fixed.len() as u64
        + name.len() as u64
        + digits(u64::from(spec.id))
        + affinity
        + digits(u64::from(o.priority))
        + digits(spec.created_at)
        + list(&spec.voters)
        + list(&spec.learners)
        + floor
}

/// The context of a conf change: the addresses of the nodes it adds, a JSON map of id to
/// address string (the form a `SocketAddr` map had, so an IP address reads on any node).
pub(crate) fn encode_addrs(addrs: &BTreeMap<NodeId, PeerAddr>) -> Vec<u8> {
    serde_json::to_vec(addrs).unwrap_or_default()
}

/// Reads a conf change's context; an empty or foreign context carries no addresses.
pub(crate) fn decode_addrs(ctx: &[u8]) -> BTreeMap<NodeId, PeerAddr> {
    if ctx.is_empty() {
        return BTreeMap::new();
    }
    serde_json::from_slice(ctx).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::TenureStart;

    fn spec(id: ElectionId, nodes: &[NodeId], floor: Option<u64>) -> ElectionSpec {
        ElectionSpec {
            id,
            options: ElectionOptions::new(),
            created_at: 7,
            voters: nodes.to_vec(),
            learners: Vec::new(),
            floor,
        }
    }

    #[test]
    fn an_elections_charge_is_its_json_in_the_snapshot() {
        let big = u64::MAX;
        let mut specs = vec![
            ("a".to_string(), spec(1, &[1], None)),
            (
                "shard-0".to_string(),
                spec(2, &[1, 2, 3, 4, 5], Some(1 << 41)),
            ),
            ("x".repeat(128), spec(MAX_ELECTION_ID, &[big; 7], Some(big))),
            ("none".to_string(), spec(9, &[], None)),
        ];
        specs[1].1.options = ElectionOptions::new().affinity([3, 1]).priority(0);
        specs[2].1.options = ElectionOptions::new().affinity([big; 3]).priority(255);
        specs[2].1.learners = vec![big, 10];
        specs[2].1.created_at = big;
        specs[3].1.learners = vec![4];
        for (name, s) in &specs {
            let one: BTreeMap<_, _> = [(name.clone(), s.clone())].into();
            let json = serde_json::to_vec(&one).unwrap();
            // `{"name":{...}}` is the charge less its comma, plus the braces.
            assert_eq!(json.len() as u64, catalog_bytes(name, s) + 1, "{name}");
        }
        let state = GroupState {
            elections: specs.into_iter().collect(),
            ..Default::default()
        };
        let all = serde_json::to_vec(&state.elections).unwrap();
        assert_eq!(all.len() as u64, state.catalog_bytes() + 1);
    }

    /// Creates `name` at `index`, where the root's voters are 1 to 5.
    fn create(s: &mut GroupState, name: &str, index: u64, limit: u64) -> CatalogChange {
        let req = Request {
            node: 1,
            nonce: index,
        };
        let entry = GroupState::create_entry(name, &ElectionOptions::new(), req);
        s.apply_catalog(&entry, index, &[1, 2, 3, 4, 5], &[], limit)
    }

    #[test]
    fn a_creation_past_the_catalogs_bytes_is_refused_and_a_removal_makes_room() {
        let limit = 10_000;
        let mut s = GroupState::default();
        let mut index = 100;
        let name = |i: u64| format!("{i:0>128}");
        let refused = loop {
            index += 1;
            match create(&mut s, &name(index), index, limit) {
                CatalogChange::Created { .. } => {}
                CatalogChange::Refused { error, .. } => break error,
                other => panic!("{other:?}"),
            }
        };
        let msg = refused.to_string();
        assert!(matches!(refused, ElectionError::Full(_)), "{msg}");
        assert!(
            msg.contains("of its 10000 bytes") && msg.contains("section 9"),
            "{msg}"
        );
        let n = s.elections.len();
        assert!(n > 30, "only {n} elections fit 10,000 bytes");
        assert!(s.catalog_bytes() <= limit);
        assert_eq!(s.catalog_used, Some(s.catalog_bytes()));
        // A refused creation uses no id; a removal frees what the election took.
        let next = s.next_election_id;
        let (first, spec) = s
            .elections
            .iter()
            .next()
            .map(|(n, s)| (n.clone(), s.id))
            .unwrap();
        let rm = GroupState::remove_entry(&first, spec, Request { node: 1, nonce: 1 });
        assert!(matches!(
            s.apply_catalog(&rm, 1, &[1], &[], limit),
            CatalogChange::Removed { .. }
        ));
        assert_eq!(s.catalog_used, Some(s.catalog_bytes()));
        assert!(matches!(
            create(&mut s, "short", index + 1, limit),
            CatalogChange::Created { .. }
        ));
        assert_eq!(s.elections[&"short".to_string()].id, next);
        // A state read from a snapshot counts its catalog afresh, and refuses the same.
        let mut back = GroupState::from_snapshot(&s.to_snapshot()).unwrap();
        assert_eq!(back.catalog_used, None);
        let full = |c: &CatalogChange| {
            matches!(
                c,
                CatalogChange::Refused {
                    error: ElectionError::Full(_),
                    ..
                }
            )
        };
        for i in index + 2.. {
            let (a, b) = (
                create(&mut s, &name(i), i, limit),
                create(&mut back, &name(i), i, limit),
            );
            assert_eq!(full(&a), full(&b), "{a:?} {b:?}");
            if full(&a) {
                break;
            }
        }
        assert_eq!(back.elections, s.elections);
    }

    #[test]
    fn a_root_snapshot_at_every_limit_fits_one_frame() {
        use crate::election::MAX_CATALOG_BYTES;
        use crate::history::{TenureEnd, TenureRecord};
        use crate::transport::frame::{encode, DEFAULT_MAX_FRAME};
        // The widest of everything: 128-byte names, seven voters and learners with the
        // longest ids, the longest history, addresses of DNS names at their longest.
        let big = u64::MAX;
        let members: Vec<NodeId> = (0..14).map(|i| big - i).collect();
        let mut s = GroupState::default();
        let mut index = big / 2;
        let mut made = 0;
        loop {
            index += 1;
            let req = Request {
                node: 1,
                nonce: index,
            };
            let options = ElectionOptions::new().affinity(members[..7].to_vec());
            let entry = GroupState::create_entry(&format!("{index:x>128}"), &options, req);
            match s.apply_catalog(
                &entry,
                index,
                &members[..7],
                &members[7..],
                MAX_CATALOG_BYTES,
            ) {
                CatalogChange::Created { .. } => made += 1,
                _ => break,
            }
        }
        let records = (0..crate::config::MAX_HISTORY_RETENTION as u64)
            .map(|i| TenureRecord {
                term: big - i,
                leader: big,
                began_unix_ms: big,
                started_by: crate::history::TenureStart::Handover,
                ended: Some(TenureEnd::HandedOver),
                suspended: false,
                resumed: false,
            })
            .collect();
        s.history = History::from_records(records);
        let host = format!(
            "{}.{}",
            ["w".repeat(63).as_str(); 3].join("."),
            "w".repeat(61)
        );
        for &m in &members {
            s.addrs.insert(m, format!("{host}:65535").parse().unwrap());
            s.drained.insert(m);
        }
        s.removed = (1..=1000).collect();
        s.group = Some(GroupId::random());
        s.restore_margin = big;
        let data = s.to_snapshot();
        let mut m = raft::eraftpb::Message::default();
        m.set_msg_type(raft::eraftpb::MessageType::MsgSnapshot);
        m.mut_snapshot().set_data(data.clone().into());
        let meta = m.mut_snapshot().mut_metadata();
        meta.mut_conf_state().set_voters(members[..7].to_vec());
        meta.mut_conf_state().set_learners(members[7..].to_vec());
        meta.index = big;
        meta.term = big;
        let framed = encode(&m, DEFAULT_MAX_FRAME).map(|f| f.len());
        assert!(
            framed.is_ok(),
            "{made} elections, snapshot of {} bytes: {framed:?}",
            data.len()
        );
        assert!(made > 4000, "only {made} elections");
    }

    #[test]
    fn the_catalog_holds_what_the_docs_say() {
        // MAX_CATALOG_BYTES's docs and design section 9: about 14,000 elections with
        // 128-byte names and 16-byte names about 28,000, five voters (ids 1 to 5).
        use crate::election::MAX_CATALOG_BYTES;
        for (len, least, most) in [(128, 13_500, 14_500), (16, 27_500, 28_500)] {
            let mut s = GroupState::default();
            let mut index = 1000;
            while let CatalogChange::Created { .. } =
                create(&mut s, &format!("{index:0>len$}"), index, MAX_CATALOG_BYTES)
            {
                index += 1;
            }
            let n = s.elections.len();
            assert!(
                (least..=most).contains(&n),
                "{n} elections of {len}-byte names"
            );
        }
    }

    #[test]
    fn drains_history_and_addresses_round_trip_through_a_snapshot() {
        let mut addrs = BTreeMap::new();
        addrs.insert(1, "127.0.0.1:7001".parse().unwrap());
        let group = GroupId::random();
        let mut s = GroupState::bootstrap(group, addrs.clone());
        assert_eq!(
            s.apply(&History::entry(2, 1, TenureStart::Election, 0), 10),
            Applied::Tenure
        );
        assert_eq!(
            s.apply(&GroupState::drain_entry(3, true), 10),
            Applied::Drain(3, true)
        );
        assert!(s.is_drained(3));
        assert_eq!(s.apply(b"Dnot json", 10), Applied::Nothing);
        assert_eq!(s.apply(b"", 10), Applied::Nothing);
        let back = GroupState::from_snapshot(&s.to_snapshot()).unwrap();
        assert!(back.is_drained(3));
        assert_eq!(back.addrs, addrs);
        assert_eq!(back.group, Some(group));
        assert_eq!(back.history.records(), s.history.records());
        assert_eq!(
            s.apply(&GroupState::drain_entry(3, false), 10),
            Applied::Drain(3, false)
        );
        assert!(!s.is_drained(3));
        assert!(GroupState::from_snapshot(b"garbage").is_err());
    }

    #[test]
    fn a_history_only_snapshot_still_reads() {
        // Snapshots written before drains and addresses were replicated.
        let old = br#"{"records":[]}"#;
        let s = GroupState::from_snapshot(old).unwrap();
        assert!(s.drained.is_empty() && s.addrs.is_empty());
    }

    #[test]
    fn conf_change_context_round_trips_and_tolerates_garbage() {
        let mut addrs = BTreeMap::new();
        addrs.insert(4, "10.0.0.4:7004".parse().unwrap());
        assert_eq!(decode_addrs(&encode_addrs(&addrs)), addrs);
        assert!(decode_addrs(b"").is_empty());
        assert!(decode_addrs(b"\xff").is_empty());
        let mut named = BTreeMap::new();
        named.insert(4, "worker-4.workers.svc:7004".parse().unwrap());
        named.insert(5, "[fd00::5]:7005".parse().unwrap());
        assert_eq!(decode_addrs(&encode_addrs(&named)), named);
    }

    #[test]
    fn addresses_stored_before_names_still_decode_and_ip_ones_encode_as_before() {
        // A snapshot and a conf change context as a node before names wrote them.
        let old_snapshot = br#"{"records":[],"addrs":{"1":"10.0.0.1:7001","2":"[fd00::2]:7002"}}"#;
        let s = GroupState::from_snapshot(old_snapshot).unwrap();
        assert_eq!(s.addrs[&1], PeerAddr::Ip("10.0.0.1:7001".parse().unwrap()));
        assert_eq!(s.addrs[&2], PeerAddr::Ip("[fd00::2]:7002".parse().unwrap()));
        let old_ctx = br#"{"4":"10.0.0.4:7004"}"#;
        let d = decode_addrs(old_ctx);
        assert_eq!(d[&4], PeerAddr::Ip("10.0.0.4:7004".parse().unwrap()));
        // What this version writes for IP addresses is what the old one wrote (and read).
        assert_eq!(encode_addrs(&d), old_ctx.to_vec());
        let old: BTreeMap<NodeId, std::net::SocketAddr> =
            serde_json::from_slice(&encode_addrs(&d)).unwrap();
        assert_eq!(old[&4], "10.0.0.4:7004".parse().unwrap());
        // A name's round trip through a snapshot.
        let mut s = s;
        s.addrs.insert(3, "n3.lab:7003".parse().unwrap());
        let back = GroupState::from_snapshot(&s.to_snapshot()).unwrap();
        assert_eq!(back.addrs, s.addrs);
    }
}
