//! The log model both stores share: the in-memory picture of a store, the checks that
//! keep it valid, and how a write or a compaction changes it.
//!
//! A store first asks [`LogState::plan_write`] (or [`LogState::plan_compact`]) what a
//! write means. The plan is validated against the current state and says exactly which
//! records change. The store makes the plan durable (RocksDB: one synced `WriteBatch`;
//! memory: under the disk's lock), and only then applies it to its [`LogState`]. A
//! refused plan changes nothing anywhere.

use std::collections::VecDeque;

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};

use super::{ReadyWrite, StorageError};

/// The highest log index a store accepts, so that `index + 1` never overflows.
pub(crate) const MAX_INDEX: u64 = u64::MAX - 1;

/// What the model keeps per log entry: RocksDB keeps only the term (the entry itself
/// stays on disk), memory keeps the whole entry.
pub(crate) trait LogItem: Sized {
    /// Turns an entry being written into what the model keeps.
    fn from_entry(entry: Entry) -> Self;
    /// The entry's term.
    fn term(&self) -> u64;
}

impl LogItem for u64 {
    fn from_entry(entry: Entry) -> Self {
        entry.term
    }
    fn term(&self) -> u64 {
        *self
    }
}

impl LogItem for Entry {
    fn from_entry(entry: Entry) -> Self {
        entry
    }
    fn term(&self) -> u64 {
        self.term
    }
}

/// The state of a store, without the snapshot's data.
#[derive(Debug, Clone)]
pub(crate) struct LogState<T> {
    /// Term, vote and commit index.
    pub(crate) hard_state: HardState,
    /// Current membership.
    pub(crate) conf_state: ConfState,
    /// The stored snapshot's metadata. Its index is the last compacted entry (0 when
    /// nothing was ever compacted), so the log starts right after it.
    pub(crate) snapshot: SnapshotMetadata,
    /// `log[i]` is entry `snapshot.index + 1 + i`.
    pub(crate) log: VecDeque<T>,
}

/// What one [`ReadyWrite`] changes, after validation.
#[derive(Debug, Default)]
pub(crate) struct WritePlan {
    /// A snapshot that replaces the whole log.
    pub(crate) snapshot: Option<Snapshot>,
    /// Delete every stored entry with an index at or above this one (a conflicting
    /// suffix) before putting `entries`.
    pub(crate) truncate_from: Option<u64>,
    /// Entries to store: consecutive, all above the snapshot index.
    pub(crate) entries: Vec<Entry>,
    /// The new hard state, when it differs from the stored one.
    pub(crate) hard_state: Option<HardState>,
    /// The new conf state, when it differs from the stored one.
    pub(crate) conf_state: Option<ConfState>,
    /// Whether the write must be synced before it returns: everything but a write that
    /// only moves the commit index (raft-rs does not need that durable; see
    /// `docs/design.md`, section 5).
    pub(crate) sync: bool,
}

impl WritePlan {
    /// True when the write changes nothing, so no disk write is needed.
    pub(crate) fn is_empty(&self) -> bool {
        self.snapshot.is_none()
            && self.truncate_from.is_none()
            && self.entries.is_empty()
            && self.hard_state.is_none()
            && self.conf_state.is_none()
    }
}

fn store_err(err: raft::StorageError) -> raft::Error {
    raft::Error::Store(err)
}

impl<T: LogItem> LogState<T> {
    /// A fresh store: no entries, snapshot index and term 0, membership `initial`.
    pub(crate) fn new(initial: ConfState) -> Self {
        let mut snapshot = SnapshotMetadata::default();
        snapshot.set_conf_state(initial.clone());
        LogState {
            hard_state: HardState::default(),
            conf_state: initial,
            snapshot,
            log: VecDeque::new(),
        }
    }

    /// A named election as founded: the snapshot at index 1 with term `term` and
    /// membership `conf_state`, hard state term `term`, no vote, commit 1, no entries.
    pub(crate) fn founded(term: u64, conf_state: ConfState) -> Self {
        let mut snapshot = SnapshotMetadata {
            index: 1,
            term,
            ..Default::default()
        };
        snapshot.set_conf_state(conf_state.clone());
        LogState {
            hard_state: HardState {
                term,
                vote: 0,
                commit: 1,
                ..Default::default()
            },
            conf_state,
            snapshot,
            log: VecDeque::new(),
        }
    }

    /// Checks a state read back from disk: what raft-rs assumes when it starts (the
    /// commit index lies inside the log) and what a Raft log always satisfies (terms
    /// never go down). Returns what is wrong.
    pub(crate) fn check_restored(&self) -> Result<(), String> {
        let len = u64::try_from(self.log.len()).unwrap_or(u64::MAX);
        let last = match self.snapshot.index.checked_add(len) {
            Some(last) if last <= MAX_INDEX => last,
            _ => {
                return Err(format!(
                    "log index out of range after {}",
                    self.snapshot.index
                ))
            }
        };
        let mut prev_term = self.snapshot.term;
        for (i, item) in self.log.iter().enumerate() {
            if item.term() < prev_term {
                return Err(format!(
                    "entry {} has term {} below the term {} before it",
                    self.snapshot.index + 1 + i as u64,
                    item.term(),
                    prev_term
                ));
            }
            prev_term = item.term();
        }
        let commit = self.hard_state.commit;
        if commit < self.snapshot.index || commit > last {
            return Err(format!(
                "commit index {commit} lies outside the log (snapshot {}, last entry {last})",
                self.snapshot.index
            ));
        }
        Ok(())
    }

    /// `raft::Storage::first_index`.
    pub(crate) fn first_index(&self) -> u64 {
        self.snapshot.index + 1
    }

    /// `raft::Storage::last_index`.
    pub(crate) fn last_index(&self) -> u64 {
        self.snapshot.index + self.log.len() as u64
    }

    /// The model's item for entry `index`, if the log holds it.
    pub(crate) fn item(&self, index: u64) -> Option<&T> {
        let offset = index.checked_sub(self.first_index())?;
        self.log.get(usize::try_from(offset).ok()?)
    }

    /// `raft::Storage::term`: the snapshot index answers with the snapshot term, lower
    /// indexes are `Compacted`, indexes beyond the last entry `Unavailable`.
    pub(crate) fn term(&self, index: u64) -> raft::Result<u64> {
        if index == self.snapshot.index {
            return Ok(self.snapshot.term);
        }
        if index < self.snapshot.index {
            return Err(store_err(raft::StorageError::Compacted));
        }
        self.item(index)
            .map(LogItem::term)
            .ok_or(store_err(raft::StorageError::Unavailable))
    }

    /// The range checks of `raft::Storage::entries` for `[low, high)`: `Compacted` when
    /// `low` is below the first index, `Unavailable` when `high` is beyond the last
    /// index + 1 (raft-rs's `MemStorage` panics there; a store must not) or when
    /// `low > high`.
    pub(crate) fn check_range(&self, low: u64, high: u64) -> raft::Result<()> {
        if low < self.first_index() {
            return Err(store_err(raft::StorageError::Compacted));
        }
        if high > self.last_index() + 1 || low > high {
            return Err(store_err(raft::StorageError::Unavailable));
        }
        Ok(())
    }

    /// Validates `write` against this state and works out what it changes, in the
    /// order documented on [`ReadyWrite`].
    pub(crate) fn plan_write(&self, write: ReadyWrite) -> Result<WritePlan, StorageError> {
        let ReadyWrite {
            snapshot,
            mut entries,
            hard_state,
            conf_state,
            commit,
        } = write;
        let mut hs = self.hard_state.clone();
        let mut cs = self.conf_state.clone();
        let mut snap_index = self.snapshot.index;
        let mut snap_term = self.snapshot.term;
        let mut last = self.last_index();

        // 1. A snapshot replaces the log.
        if let Some(snap) = &snapshot {
            let meta = snap.get_metadata();
            if meta.index <= self.snapshot.index {
                return Err(StorageError::invalid(format!(
                    "snapshot at index {} is not newer than the stored snapshot at index {}",
                    meta.index, self.snapshot.index
                )));
            }
            if meta.index > MAX_INDEX {
                return Err(StorageError::invalid("snapshot index out of range"));
            }
            snap_index = meta.index;
            snap_term = meta.term;
            last = meta.index;
            cs = meta.get_conf_state().clone();
            hs.commit = hs.commit.max(meta.index);
            hs.term = hs.term.max(meta.term);
        }

        // 2. Entries: skip what the snapshot covers, truncate a conflicting suffix.
        let covered = entries.iter().take_while(|e| e.index <= snap_index).count();
        entries.drain(..covered);
        let mut truncate_from = None;
        if let (Some(first), Some(end)) = (entries.first(), entries.last()) {
            let (first_index, first_term) = (first.index, first.term);
            if first_index > last + 1 {
                return Err(StorageError::invalid(format!(
                    "entry {first_index} would leave a gap after the last entry {last}"
                )));
            }
            if end.index > MAX_INDEX {
                return Err(StorageError::invalid("entry index out of range"));
            }
            for pair in entries.windows(2) {
                if pair[0].index.checked_add(1) != Some(pair[1].index) {
                    return Err(StorageError::invalid(format!(
                        "entries are not consecutive: {} follows {}",
                        pair[1].index, pair[0].index
                    )));
                }
                if pair[1].term < pair[0].term {
                    return Err(StorageError::invalid(format!(
                        "entry {} has term {} below the term {} of entry {}",
                        pair[1].index, pair[1].term, pair[0].term, pair[0].index
                    )));
                }
            }
            // first_index > snap_index >= 0, and first_index - 1 <= last.
            let prev = first_index - 1;
            let prev_term = if prev == snap_index {
                snap_term
            } else {
                self.term(prev).map_err(|_| {
                    StorageError::invalid(format!("no term for entry {prev} before the write"))
                })?
            };
            if first_term < prev_term {
                return Err(StorageError::invalid(format!(
                    "entry {first_index} has term {first_term} below the term {prev_term} of entry {prev}"
                )));
            }
            if first_index <= last {
                if first_index <= hs.commit {
                    return Err(StorageError::invalid(format!(
                        "entry {first_index} would overwrite a committed entry (commit index {})",
                        hs.commit
                    )));
                }
                truncate_from = Some(first_index);
            }
            last = end.index;
        }

        // 3-5. Hard state, conf state, commit.
        if let Some(new_hs) = hard_state {
            hs = new_hs;
        }
        if let Some(new_cs) = conf_state {
            cs = new_cs;
        }
        if let Some(c) = commit {
            hs.commit = hs.commit.max(c);
        }
        if hs.commit < snap_index || hs.commit > last {
            return Err(StorageError::invalid(format!(
                "commit index {} would lie outside the log (snapshot {snap_index}, last entry {last})",
                hs.commit
            )));
        }

        let term_or_vote = hs.term != self.hard_state.term || hs.vote != self.hard_state.vote;
        let sync = snapshot.is_some()
            || truncate_from.is_some()
            || !entries.is_empty()
            || cs != self.conf_state
            || term_or_vote;
        // Mutation: a write that changes the term or the vote returns before it is synced.
        let sync = sync && !(term_or_vote && crate::mutation::active("hard-state-unsynced"));
        Ok(WritePlan {
            snapshot,
            truncate_from,
            entries,
            hard_state: (hs != self.hard_state).then_some(hs),
            conf_state: (cs != self.conf_state).then_some(cs),
            sync,
        })
    }

    /// Applies a plan from [`plan_write`](Self::plan_write) once it is durable.
    pub(crate) fn apply_write(&mut self, plan: WritePlan) {
        if let Some(snap) = plan.snapshot {
            self.snapshot = snap.get_metadata().clone();
            self.log.clear();
        }
        if let Some(from) = plan.truncate_from {
            let keep = from.saturating_sub(self.first_index());
            self.log
                .truncate(usize::try_from(keep).unwrap_or(usize::MAX));
        }
        self.log.extend(plan.entries.into_iter().map(T::from_entry));
        if let Some(hs) = plan.hard_state {
            self.hard_state = hs;
        }
        if let Some(cs) = plan.conf_state {
            self.conf_state = cs;
        }
    }

    /// Validates a compaction to `index` and builds the snapshot it records: `index`,
    /// its term, `conf_state` and `data`.
    pub(crate) fn plan_compact(
        &self,
        index: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<Snapshot, StorageError> {
        if index < self.snapshot.index {
            return Err(StorageError::invalid(format!(
                "cannot compact to {index}: below the snapshot at index {}",
                self.snapshot.index
            )));
        }
        if index > self.hard_state.commit {
            return Err(StorageError::invalid(format!(
                "cannot compact to {index}: beyond the commit index {}",
                self.hard_state.commit
            )));
        }
        let term = self.term(index).map_err(|_| {
            StorageError::invalid(format!("cannot compact to {index}: no such entry"))
        })?;
        let mut snapshot = Snapshot {
            data: Bytes::from(data),
            ..Default::default()
        };
        let meta = snapshot.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(conf_state);
        Ok(snapshot)
    }

    /// Applies a compaction from [`plan_compact`](Self::plan_compact) once it is durable.
    pub(crate) fn apply_compact(&mut self, meta: SnapshotMetadata) {
        let dropped = meta.index.saturating_sub(self.snapshot.index);
        let dropped = usize::try_from(dropped)
            .unwrap_or(usize::MAX)
            .min(self.log.len());
        self.log.drain(..dropped);
        self.conf_state = meta.get_conf_state().clone();
        self.snapshot = meta;
    }
}

/// The `max_size` rule of `raft::Storage::entries`: the first entry always fits; each
/// further entry fits while the total encoded size stays within `max_size`.
#[derive(Debug)]
pub(crate) struct SizeLimit {
    max: Option<u64>,
    used: u64,
    taken: usize,
}

impl SizeLimit {
    /// `None` and `raft::NO_LIMIT` mean no limit.
    pub(crate) fn new(max: Option<u64>) -> Self {
        SizeLimit {
            max: max.filter(|&m| m != raft::NO_LIMIT),
            used: 0,
            taken: 0,
        }
    }

    /// Whether `entry` still fits; if so it is counted.
    pub(crate) fn admit(&mut self, entry: &Entry) -> bool {
        let size = u64::from(entry.compute_size());
        let total = self.used.saturating_add(size);
        let fits = self.taken == 0 || self.max.is_none_or(|max| total <= max);
        if fits {
            self.used = total;
            self.taken += 1;
        }
        fits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Default::default()
        }
    }

    fn hs(term: u64, vote: u64, commit: u64) -> HardState {
        HardState {
            term,
            vote,
            commit,
            ..Default::default()
        }
    }

    /// A log of entries 1..=3 in term 2, term 2, vote 1, commit 1.
    fn log() -> LogState<u64> {
        let mut state = LogState::<u64>::new(ConfState {
            voters: vec![1, 2, 3],
            ..Default::default()
        });
        let plan = state
            .plan_write(ReadyWrite {
                entries: (1..=3).map(|i| entry(i, 2)).collect(),
                hard_state: Some(hs(2, 1, 1)),
                ..Default::default()
            })
            .unwrap();
        state.apply_write(plan);
        state
    }

    #[test]
    fn only_a_write_that_moves_nothing_but_the_commit_index_goes_unsynced() {
        let state = log();
        let plan = |w: ReadyWrite| state.plan_write(w).unwrap();
        // The commit index alone: from a LightReady, or a Ready's hard state.
        assert!(
            !plan(ReadyWrite {
                commit: Some(3),
                ..Default::default()
            })
            .sync
        );
        assert!(
            !plan(ReadyWrite {
                hard_state: Some(hs(2, 1, 2)),
                ..Default::default()
            })
            .sync
        );
        // A term, a vote, entries, a membership: synced.
        for w in [
            ReadyWrite {
                hard_state: Some(hs(3, 1, 1)),
                ..Default::default()
            },
            ReadyWrite {
                hard_state: Some(hs(2, 2, 1)),
                ..Default::default()
            },
            ReadyWrite {
                entries: vec![entry(4, 2)],
                ..Default::default()
            },
            ReadyWrite {
                conf_state: Some(ConfState {
                    voters: vec![1, 2],
                    ..Default::default()
                }),
                ..Default::default()
            },
            ReadyWrite {
                entries: vec![entry(4, 2)],
                commit: Some(3),
                ..Default::default()
            },
        ] {
            assert!(plan(w.clone()).sync, "{w:?}");
        }
    }
}
