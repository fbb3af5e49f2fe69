//! The replicated leadership history.
//!
//! Each new leader appends a "tenure began" entry to the Raft log. Applying the log
//! builds the same history on every node; it survives restarts (the log is replayed)
//! and compaction (the history is part of the snapshot's data, see `state.rs`), bounded
//! by a retention count.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::transport::NodeId;

/// How a tenure began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TenureStart {
    /// The leader won an election after the group stopped hearing from its predecessor
    /// (crash, stall, partition) or at first start.
    Election,
    /// The predecessor handed leadership over (transfer or graceful shutdown).
    Handover,
}

/// How a tenure ended, as far as the group knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TenureEnd {
    /// It handed leadership over.
    HandedOver,
    /// The group stopped hearing from it and elected another leader.
    Lost,
}

/// One tenure: a term and its leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenureRecord {
    /// The Raft term (the fencing token of this tenure).
    pub term: u64,
    /// The leader.
    pub leader: NodeId,
    /// When the leader proposed the record, milliseconds since the Unix epoch on the
    /// leader's wall clock (informational: clocks of different hosts differ).
    pub began_unix_ms: u64,
    /// How it began.
    pub started_by: TenureStart,
    /// How it ended, once a later tenure is recorded.
    pub ended: Option<TenureEnd>,
}

/// Tag byte of a history entry in the Raft log.
const ENTRY_TAG: u8 = b'H';

/// The state the log replicates: the history, newest last.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct History {
    records: VecDeque<TenureRecord>,
}

impl History {
    /// The entry a new leader proposes (`began_unix_ms`: its wall clock now).
    pub(crate) fn entry(
        term: u64,
        leader: NodeId,
        started_by: TenureStart,
        began_unix_ms: u64,
    ) -> Vec<u8> {
        let rec = TenureRecord {
            term,
            leader,
            began_unix_ms,
            started_by,
            ended: None,
        };
        let mut out = vec![ENTRY_TAG];
        out.extend(serde_json::to_vec(&rec).unwrap_or_default());
        out
    }

    /// Applies a committed normal entry; entries that are not history records (the
    /// leader's empty entry, other data) are ignored. Returns whether it was a record.
    pub(crate) fn apply(&mut self, data: &[u8], retention: usize) -> bool {
        let Some((&ENTRY_TAG, json)) = data.split_first() else {
            return false;
        };
        let Ok(rec) = serde_json::from_slice::<TenureRecord>(json) else {
            return false;
        };
        // A term has one leader: a replayed or duplicate record changes nothing.
        if self.records.iter().any(|r| r.term >= rec.term) {
            return true;
        }
        if let Some(prev) = self.records.back_mut() {
            prev.ended = Some(match rec.started_by {
                TenureStart::Handover => TenureEnd::HandedOver,
                TenureStart::Election => TenureEnd::Lost,
            });
        }
        self.records.push_back(rec);
        while self.records.len() > retention.max(1) {
            self.records.pop_front();
        }
        true
    }

    pub(crate) fn records(&self) -> Vec<TenureRecord> {
        self.records.iter().cloned().collect()
    }

    /// A history holding `records` (oldest first): a restored backup's.
    pub(crate) fn from_records(records: Vec<TenureRecord>) -> History {
        History {
            records: records.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_chain_and_respect_retention() {
        let mut h = History::default();
        assert!(h.apply(&History::entry(2, 1, TenureStart::Election, 0), 3));
        assert!(h.apply(&History::entry(3, 2, TenureStart::Handover, 0), 3));
        assert!(h.apply(&History::entry(3, 2, TenureStart::Handover, 0), 3)); // replay
        assert!(h.apply(&History::entry(5, 3, TenureStart::Election, 0), 3));
        assert!(h.apply(&History::entry(6, 1, TenureStart::Election, 0), 3));
        let r = h.records();
        assert_eq!(r.iter().map(|r| r.term).collect::<Vec<_>>(), vec![3, 5, 6]);
        assert_eq!(r[0].ended, Some(TenureEnd::Lost));
        assert_eq!(r[2].ended, None);
        let back: History = serde_json::from_slice(&serde_json::to_vec(&h).unwrap()).unwrap();
        assert_eq!(back.records(), r);
        assert!(!h.apply(b"", 3));
        assert!(!h.apply(b"Hgarbage", 3));
    }
}
