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
    /// An operator suspended the election during this tenure, or before it and not yet
    /// resumed (`Node::suspend_election`): from then on its leader held no lease.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
    /// The first tenure after the election was resumed (`Node::resume_election`): its
    /// term is above every term in which a lease was held before the suspension. The
    /// tenure before it ended because the resumption stepped its leader down, not
    /// because the leader was lost, although `ended` (`Lost`) cannot tell.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumed: bool,
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
            suspended: false,
            resumed: false,
        };
        let mut out = vec![ENTRY_TAG];
        out.extend(serde_json::to_vec(&rec).unwrap_or_default());
        out
    }

    /// Applies a committed normal entry; entries that are not history records (the
    /// leader's empty entry, other data) are ignored. Returns whether it was a record.
    pub(crate) fn apply(&mut self, data: &[u8], retention: usize) -> bool {
        self.apply_in(data, retention, false)
    }

    /// [`History::apply`] in a named election that is `suspended` (its own log says so)
    /// as the entry applies: the record is marked suspended, or, if it is the first
    /// after a suspension that ended, resumed.
    pub(crate) fn apply_in(&mut self, data: &[u8], retention: usize, suspended: bool) -> bool {
        let Some((&ENTRY_TAG, json)) = data.split_first() else {
            return false;
        };
        let Ok(mut rec) = serde_json::from_slice::<TenureRecord>(json) else {
            return false;
        };
        // A term has one leader: a replayed or duplicate record changes nothing.
        if self.records.iter().any(|r| r.term >= rec.term) {
            return true;
        }
        rec.suspended = suspended;
        rec.resumed = !suspended && self.records.back().is_some_and(|r| r.suspended);
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

    /// The election's own log suspended it (a mark applied): the current tenure, if
    /// any is recorded, is marked suspended.
    pub(crate) fn mark_suspended(&mut self) {
        if let Some(last) = self.records.back_mut() {
            last.suspended = true;
        }
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

    #[test]
    fn suspensions_mark_the_tenures_they_fall_in_and_the_first_after() {
        let mut h = History::default();
        h.apply_in(&History::entry(2, 1, TenureStart::Election, 0), 9, false);
        h.mark_suspended(); // under the leader of term 2
        h.apply_in(&History::entry(3, 2, TenureStart::Election, 0), 9, true);
        h.apply_in(&History::entry(4, 2, TenureStart::Election, 0), 9, false); // resumed
        h.apply_in(&History::entry(5, 3, TenureStart::Election, 0), 9, false);
        let flags: Vec<_> = h
            .records()
            .iter()
            .map(|r| (r.suspended, r.resumed))
            .collect();
        let want = [(true, false), (true, false), (false, true), (false, false)];
        assert_eq!(flags, want);
        // Records without the flags are written as before, and read as before.
        let json = serde_json::to_string(&h.records()[3]).unwrap();
        assert!(
            !json.contains("suspended") && !json.contains("resumed"),
            "{json}"
        );
        let old = r#"{"term":7,"leader":1,"began_unix_ms":0,"started_by":"election","ended":null}"#;
        let rec: TenureRecord = serde_json::from_str(old).unwrap();
        assert!(!rec.suspended && !rec.resumed);
    }
}
