//! The state the Raft log replicates, besides the membership raft-rs keeps itself: the
//! leadership history, the drained nodes, and the members' transport addresses.
//!
//! Every node builds the same state by applying the committed log; it is the data of
//! every snapshot (so it survives compaction) and is rebuilt on restart from the last
//! snapshot plus the log above it.
//!
//! Entries are tagged by their first byte: `H` a tenure record ([`History::entry`]),
//! `D` a drain or undrain ([`GroupState::drain_entry`]). Conf changes carry the
//! addresses of the nodes they add in their context ([`encode_addrs`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::group_id::GroupId;
use crate::history::History;
use crate::transport::NodeId;

/// Tag byte of a drain entry.
const DRAIN_TAG: u8 = b'D';

/// The replicated application state (the snapshot's data).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct GroupState {
    #[serde(flatten)]
    pub(crate) history: History,
    /// Nodes that must not campaign (an operator drained them).
    #[serde(default)]
    pub(crate) drained: BTreeSet<NodeId>,
    /// Where each member listens, as the group was told (first start or conf changes).
    #[serde(default)]
    pub(crate) addrs: BTreeMap<NodeId, SocketAddr>,
    /// The group's id, drawn when it was founded (`None` only in snapshots written before
    /// groups had ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) group: Option<GroupId>,
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
    pub(crate) fn bootstrap(group: GroupId, addrs: BTreeMap<NodeId, SocketAddr>) -> GroupState {
        GroupState {
            addrs,
            group: Some(group),
            ..Default::default()
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

/// The context of a conf change: the addresses of the nodes it adds.
pub(crate) fn encode_addrs(addrs: &BTreeMap<NodeId, SocketAddr>) -> Vec<u8> {
    serde_json::to_vec(addrs).unwrap_or_default()
}

/// Reads a conf change's context; an empty or foreign context carries no addresses.
pub(crate) fn decode_addrs(ctx: &[u8]) -> BTreeMap<NodeId, SocketAddr> {
    if ctx.is_empty() {
        return BTreeMap::new();
    }
    serde_json::from_slice(ctx).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::TenureStart;

    #[test]
    fn drains_history_and_addresses_round_trip_through_a_snapshot() {
        let mut addrs = BTreeMap::new();
        addrs.insert(1, "127.0.0.1:7001".parse().unwrap());
        let group = GroupId::random();
        let mut s = GroupState::bootstrap(group, addrs.clone());
        assert_eq!(
            s.apply(&History::entry(2, 1, TenureStart::Election), 10),
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
    }
}
