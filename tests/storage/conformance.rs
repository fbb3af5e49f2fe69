//! One conformance suite for both stores: every case is written once, generic over a
//! [`Harness`] that makes and reopens a store, and runs against [`RocksStore`] (in a
//! temporary directory) and [`MemStore`], each on the store itself (the root election)
//! and on a named election's handle in a store that holds other groups too
//! ([`ElectionHarness`]). "Reopen" drops every handle and opens the store again from its
//! disk, which is what a restart after a crash sees.
//!
//! The named-election cases (`elections_*`) cover what only many groups in one store
//! have: shared handles, `write_all`, founding, removal and tombstones.
//!
//! The RocksDB-only cases at the end cover opening: missing, locked, corrupt and foreign
//! directories.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, Storage, StorageError as RaftStorageError};
use tenure::storage::{
    ElectionIds, MemDisk, MemStore, RaftStore, ReadyWrite, RocksStore, StorageError,
};

/// Makes a fresh store and reopens it.
trait Harness {
    type S: RaftStore + std::fmt::Debug;
    /// A new, empty store with membership `initial`.
    fn fresh(&mut self, initial: ConfState) -> Self::S;
    /// Drops `store` and opens it again from what it persisted.
    fn reopen(&mut self, store: Self::S) -> Self::S;
}

struct RocksHarness {
    dir: tempfile::TempDir,
    stores: u32,
}

impl RocksHarness {
    fn new() -> Self {
        RocksHarness {
            dir: tempfile::tempdir().expect("temporary directory"),
            stores: 0,
        }
    }
}

impl Harness for RocksHarness {
    type S = RocksStore;

    fn fresh(&mut self, initial: ConfState) -> RocksStore {
        self.stores += 1;
        let path = self.dir.path().join(format!("store{}", self.stores));
        RocksStore::create(path, 1, initial).expect("create store")
    }

    fn reopen(&mut self, store: RocksStore) -> RocksStore {
        let path = store.path().to_path_buf();
        drop(store);
        RocksStore::open(&path).expect("reopen store")
    }
}

struct MemHarness;

impl Harness for MemHarness {
    type S = MemStore;

    fn fresh(&mut self, initial: ConfState) -> MemStore {
        MemStore::open(MemDisk::new(initial))
    }

    fn reopen(&mut self, store: MemStore) -> MemStore {
        let disk = store.disk();
        drop(store);
        MemStore::open(disk)
    }
}

/// Runs a case on named election [`ELECTION`]'s handle instead of the store itself. The
/// store also holds root entries and a founded neighbour election, both checked on
/// every reopen: a write of the election's that lands in another group's keys fails
/// the case.
struct ElectionHarness<H> {
    inner: H,
}

/// The election the suite runs on, and its neighbours' ids (one below, one above: its
/// keys lie between theirs).
const ELECTION: u32 = 0x0100;
const NEIGHBOURS: [u32; 2] = [ELECTION - 1, ELECTION + 1];

impl<H: Harness> ElectionHarness<H> {
    fn new(inner: H) -> Self {
        ElectionHarness { inner }
    }
}

/// What [`ElectionHarness`] writes beside the election, and checks on every reopen.
fn fill_neighbours(root: &impl RaftStore) {
    append(root, entries(1..=3, 9));
    set_hard_state(root, hard_state(9, 2, 3));
    for id in NEIGHBOURS {
        let e = root
            .found_election(
                id,
                term_floor(id),
                voters(&[1, 2, 3]),
                b"neighbour".to_vec(),
            )
            .expect("found a neighbour election");
        append(&e, entries(2..=4, term_floor(id) + 1));
    }
}

#[track_caller]
fn check_neighbours<S: RaftStore>(root: &S) {
    assert_eq!(bounds(root), (1, 3), "the root's log");
    assert_eq!(terms(root), vec![9, 9, 9]);
    assert_eq!(root.hard_state(), hard_state(9, 2, 3));
    assert_eq!(root.conf_state(), voters(&[1, 2, 3]));
    for id in NEIGHBOURS {
        let e = root.election(id).unwrap().expect("the neighbour election");
        let floor = term_floor(id);
        assert_eq!(bounds(&e), (2, 4), "election {id}'s log");
        assert_eq!(read(&e, 2, 5), Ok(entries(2..=4, floor + 1)));
        assert_eq!(e.hard_state(), hard_state(floor, 0, 1));
        assert_eq!(&e.snapshot(1, 2).unwrap().data[..], b"neighbour");
    }
}

impl<H: Harness> Harness for ElectionHarness<H> {
    type S = H::S;

    fn fresh(&mut self, initial: ConfState) -> H::S {
        let root = self.inner.fresh(voters(&[1, 2, 3]));
        fill_neighbours(&root);
        root.join_election(ELECTION, initial)
            .expect("create the election")
    }

    fn reopen(&mut self, store: H::S) -> H::S {
        // The inner harness reopens the whole store from any handle of it.
        let root = self.inner.reopen(store);
        check_neighbours(&root);
        root.election(ELECTION)
            .expect("open the election")
            .expect("the election survives a reopen")
    }
}

// ---------------------------------------------------------------------------------
// Helpers

/// Design section 11: election `id` is founded at term `id << 40`.
fn term_floor(id: u32) -> u64 {
    u64::from(id) << 40
}

fn voters(ids: &[u64]) -> ConfState {
    ConfState::from((ids.to_vec(), Vec::<u64>::new()))
}

fn entry(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        data: Bytes::from(format!("entry {index:04}")),
        ..Default::default()
    }
}

fn entries(range: RangeInclusive<u64>, term: u64) -> Vec<Entry> {
    range.map(|i| entry(i, term)).collect()
}

fn hard_state(term: u64, vote: u64, commit: u64) -> HardState {
    HardState {
        term,
        vote,
        commit,
        ..Default::default()
    }
}

fn append(store: &impl RaftStore, ents: Vec<Entry>) {
    store
        .write(ReadyWrite {
            entries: ents,
            ..Default::default()
        })
        .expect("append");
}

fn set_hard_state(store: &impl RaftStore, hs: HardState) {
    store
        .write(ReadyWrite {
            hard_state: Some(hs),
            ..Default::default()
        })
        .expect("write hard state");
}

fn read(store: &impl Storage, low: u64, high: u64) -> raft::Result<Vec<Entry>> {
    store.entries(low, high, None, GetEntriesContext::empty(false))
}

fn read_max(store: &impl Storage, low: u64, high: u64, max: u64) -> Vec<Entry> {
    store
        .entries(low, high, max, GetEntriesContext::empty(false))
        .expect("entries")
}

/// The terms of every entry the store holds, first to last.
fn terms(store: &impl Storage) -> Vec<u64> {
    let first = store.first_index().expect("first index");
    let last = store.last_index().expect("last index");
    read(store, first, last + 1)
        .expect("whole log")
        .iter()
        .map(|e| e.term)
        .collect()
}

fn err<T>(e: RaftStorageError) -> raft::Result<T> {
    Err(raft::Error::Store(e))
}

#[track_caller]
fn assert_invalid(result: Result<(), StorageError>) {
    assert!(
        matches!(result, Err(StorageError::InvalidWrite { .. })),
        "expected InvalidWrite, got {result:?}"
    );
}

fn snapshot_at(index: u64, term: u64, cs: ConfState, data: &[u8]) -> Snapshot {
    let mut s = Snapshot {
        data: Bytes::copy_from_slice(data),
        ..Default::default()
    };
    let meta = s.mut_metadata();
    meta.index = index;
    meta.term = term;
    meta.set_conf_state(cs);
    s
}

fn bounds(store: &impl Storage) -> (u64, u64) {
    (store.first_index().unwrap(), store.last_index().unwrap())
}

// ---------------------------------------------------------------------------------
// The suite

fn fresh_store_has_empty_log_and_initial_membership<H: Harness>(h: &mut H) {
    let cs = voters(&[1, 2, 3]);
    let check = |s: &H::S| {
        let state = s.initial_state().unwrap();
        assert_eq!(state.hard_state, HardState::default());
        assert_eq!(state.conf_state, cs);
        assert!(state.initialized());
        assert_eq!(s.hard_state(), HardState::default());
        assert_eq!(s.conf_state(), cs);
        assert_eq!(bounds(s), (1, 0));
        assert_eq!(s.term(0), Ok(0));
        assert_eq!(s.term(1), err(RaftStorageError::Unavailable));
        assert_eq!(read(s, 1, 1), Ok(vec![]));
        assert_eq!(read(s, 1, 2), err(RaftStorageError::Unavailable));
        assert_eq!(read(s, 0, 1), err(RaftStorageError::Compacted));
        let snap = s.snapshot(0, 2).unwrap();
        assert_eq!(snap.get_metadata().index, 0);
        assert_eq!(snap.get_metadata().term, 0);
        assert!(snap.data.is_empty());
        assert_eq!(
            s.snapshot(1, 2),
            err(RaftStorageError::SnapshotTemporarilyUnavailable)
        );
    };
    let s = h.fresh(cs.clone());
    check(&s);
    let s = h.reopen(s);
    check(&s);
}

fn appended_entries_read_back_in_order<H: Harness>(h: &mut H) {
    let s = h.fresh(voters(&[1]));
    append(&s, entries(1..=5, 1));
    append(&s, entries(6..=7, 2));
    let check = |s: &H::S| {
        let mut all = entries(1..=5, 1);
        all.extend(entries(6..=7, 2));
        assert_eq!(bounds(s), (1, 7));
        assert_eq!(read(s, 1, 8), Ok(all.clone()));
        assert_eq!(read(s, 3, 5), Ok(all[2..4].to_vec()));
        assert_eq!(read(s, 7, 8), Ok(all[6..].to_vec()));
        for e in &all {
            assert_eq!(s.term(e.index), Ok(e.term), "term of {}", e.index);
        }
    };
    check(&s);
    let s = h.reopen(s);
    check(&s);
    let clone = s.clone();
    append(&clone, entries(8..=8, 2));
    drop(clone);
    assert_eq!(s.last_index(), Ok(8), "clones share one store");
    assert_eq!(read(&s, 8, 9), Ok(entries(8..=8, 2)));
    let s = h.reopen(s);
    assert_eq!(bounds(&s), (1, 8));
    assert_eq!(read(&s, 8, 9), Ok(entries(8..=8, 2)));
}

fn entries_are_limited_by_max_size<H: Harness>(h: &mut H) {
    let s = h.fresh(voters(&[1]));
    append(&s, entries(1..=5, 1));
    let size = u64::from(entry(1, 1).compute_size());
    let count = |max: u64| read_max(&s, 1, 6, max).len();
    assert_eq!(count(0), 1, "at least one entry, whatever the limit");
    assert_eq!(count(1), 1);
    assert_eq!(count(size), 1);
    assert_eq!(count(2 * size), 2);
    assert_eq!(count(2 * size + size / 2), 2);
    assert_eq!(count(5 * size), 5);
    assert_eq!(count(raft::NO_LIMIT), 5);
    assert_eq!(read_max(&s, 2, 4, 0), entries(2..=2, 1));
    assert_eq!(
        read(&s, 1, 6).map(|e| e.len()),
        Ok(5),
        "None means no limit"
    );
}

fn term_is_known_from_snapshot_to_last_entry<H: Harness>(h: &mut H) {
    let s = h.fresh(voters(&[1]));
    append(&s, entries(1..=2, 1));
    append(&s, entries(3..=4, 2));
    append(&s, entries(5..=6, 3));
    set_hard_state(&s, hard_state(3, 1, 6));
    s.compact(4, s.conf_state(), b"app@4".to_vec()).unwrap();
    let check = |s: &H::S| {
        assert_eq!(bounds(s), (5, 6));
        assert_eq!(s.term(3), err(RaftStorageError::Compacted));
        assert_eq!(s.term(0), err(RaftStorageError::Compacted));
        assert_eq!(
            s.term(4),
            Ok(2),
            "the snapshot index answers with the snapshot term"
        );
        assert_eq!(s.term(5), Ok(3));
        assert_eq!(s.term(6), Ok(3));
        assert_eq!(s.term(7), err(RaftStorageError::Unavailable));
    };
    check(&s);
    let s = h.reopen(s);
    check(&s);
}

fn out_of_range_reads_are_errors_not_panics<H: Harness>(h: &mut H) {
    let s = h.fresh(voters(&[1]));
    append(&s, entries(1..=5, 1));
    set_hard_state(&s, hard_state(1, 1, 5));
    s.compact(2, s.conf_state(), Vec::new()).unwrap();
    assert_eq!(bounds(&s), (3, 5));
    assert_eq!(read(&s, 2, 4), err(RaftStorageError::Compacted));
    assert_eq!(read(&s, 1, 3), err(RaftStorageError::Compacted));
    assert_eq!(read(&s, 3, 7), err(RaftStorageError::Unavailable));
    assert_eq!(read(&s, 7, 7), err(RaftStorageError::Unavailable));
    assert_eq!(read(&s, 5, 3), err(RaftStorageError::Unavailable));
    assert_eq!(
        read(&s, u64::MAX, u64::MAX),
        err(RaftStorageError::Unavailable)
    );
    assert_eq!(s.term(u64::MAX), err(RaftStorageError::Unavailable));
    assert_eq!(read(&s, 6, 6), Ok(vec![]));
    assert_eq!(read(&s, 3, 6), Ok(entries(3..=5, 1)));
}

fn conflicting_suffix_is_truncated<H: Harness>(h: &mut H) {
    let s = h.fresh(voters(&[1]));
    append(&s, entries(1..=5, 1));
    append(&s, entries(3..=4, 2));
    let check = |s: &H::S| {
        assert_eq!(bounds(s), (1, 4));
        assert_eq!(terms(s), vec![1, 1, 2, 2]);
        assert_eq!(read(s, 3, 5), Ok(entries(3..=4, 2)));
        assert_eq!(read(s, 5, 6), err(RaftStorageError::Unavailable));
        assert_eq!(s.term(5), err(RaftStorageError::Unavailable));
    };
    check(&s);
    let s = h.reopen(s);
    check(&s);
    append(&s, entries(5..=5, 3));
    assert_eq!(terms(&s), vec![1, 1, 2, 2, 3]);
    let s = h.reopen(s);
    assert_eq!(terms(&s), vec![1, 1, 2, 2, 3]);
}

fn invalid_writes_are_refused_and_change_nothing<H: Harness>(h: &mut H) {
    let s = h.fresh(voters(&[1]));
    append(&s, entries(1..=3, 2));
    set_hard_state(&s, hard_state(2, 1, 2));
    let write_entries = |ents: Vec<Entry>| {
        s.write(ReadyWrite {
            entries: ents,
            ..Default::default()
        })
    };
    // A gap after the last entry.
    assert_invalid(write_entries(entries(5..=6, 2)));
    // Not consecutive within the write.
    assert_invalid(write_entries(vec![entry(4, 2), entry(6, 2)]));
    // Terms going down, within the write and against the entry before.
    assert_invalid(write_entries(vec![entry(4, 3), entry(5, 2)]));
    assert_invalid(write_entries(entries(4..=4, 1)));
    // Indexes at the end of the range: refused, no overflow.
    assert_invalid(write_entries(vec![
        entry(4, 2),
        entry(u64::MAX, 2),
        entry(6, 2),
    ]));
    assert_invalid(write_entries(entries(u64::MAX..=u64::MAX, 2)));
    assert_invalid(s.write(ReadyWrite {
        snapshot: Some(snapshot_at(u64::MAX, 9, voters(&[1]), b"")),
        ..Default::default()
    }));
    // Overwriting a committed entry.
    assert_invalid(write_entries(entries(2..=4, 3)));
    // A commit index beyond the last entry, by hard state or by commit.
    assert_invalid(s.write(ReadyWrite {
        hard_state: Some(hard_state(2, 1, 4)),
        ..Default::default()
    }));
    assert_invalid(s.write(ReadyWrite {
        commit: Some(4),
        ..Default::default()
    }));
    // A refused write changes nothing, not even its valid parts.
    assert_invalid(s.write(ReadyWrite {
        entries: entries(4..=4, 2),
        hard_state: Some(hard_state(2, 1, 9)),
        conf_state: Some(voters(&[1, 2])),
        ..Default::default()
    }));
    let check = |s: &H::S| {
        assert_eq!(bounds(s), (1, 3));
        assert_eq!(terms(s), vec![2, 2, 2]);
        assert_eq!(s.hard_state(), hard_state(2, 1, 2));
        assert_eq!(s.conf_state(), voters(&[1]));
    };
    check(&s);
    let s = h.reopen(s);
    check(&s);
    // Rewriting the uncommitted tail is fine.
    append(&s, entries(3..=4, 3));
    assert_eq!(terms(&s), vec![2, 2, 3, 3]);
}

fn hard_and_conf_state_survive_reopen<H: Harness>(h: &mut H) {
    let s = h.fresh(voters(&[1, 2, 3]));
    append(&s, entries(1..=3, 2));
    let cs = ConfState::from((vec![1, 2, 3, 4], vec![5]));
    s.write(ReadyWrite {
        hard_state: Some(hard_state(2, 3, 2)),
        conf_state: Some(cs.clone()),
        ..Default::default()
    })
    .unwrap();
    let s = h.reopen(s);
    let state = s.initial_state().unwrap();
    assert_eq!(state.hard_state, hard_state(2, 3, 2));
    assert_eq!(state.conf_state, cs);
    assert_eq!(s.hard_state(), hard_state(2, 3, 2));
    assert_eq!(s.conf_state(), cs);

    // A commit alone raises the commit index and keeps term and vote.
    s.write(ReadyWrite {
        commit: Some(3),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.hard_state(), hard_state(2, 3, 3));
    // ... and is ignored when lower.
    s.write(ReadyWrite {
        commit: Some(1),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.hard_state(), hard_state(2, 3, 3));
    // Entries, hard state and commit in one write: the commit applies last.
    s.write(ReadyWrite {
        entries: entries(4..=5, 4),
        hard_state: Some(hard_state(4, 0, 3)),
        commit: Some(5),
        ..Default::default()
    })
    .unwrap();
    let s = h.reopen(s);
    assert_eq!(s.hard_state(), hard_state(4, 0, 5));
    assert_eq!(s.conf_state(), cs);
    assert_eq!(terms(&s), vec![2, 2, 2, 4, 4]);
}

fn compaction_moves_first_index_and_records_a_snapshot<H: Harness>(h: &mut H) {
    let cs = voters(&[1, 2, 3]);
    let s = h.fresh(cs.clone());
    append(&s, entries(1..=4, 1));
    append(&s, entries(5..=10, 2));
    set_hard_state(&s, hard_state(2, 1, 8));
    s.compact(5, s.conf_state(), b"state@5".to_vec()).unwrap();
    let check = |s: &H::S| {
        assert_eq!(bounds(s), (6, 10));
        assert_eq!(read(s, 5, 7), err(RaftStorageError::Compacted));
        assert_eq!(read(s, 6, 11), Ok(entries(6..=10, 2)));
        assert_eq!(s.term(5), Ok(2));
        assert_eq!(s.term(4), err(RaftStorageError::Compacted));
        let snap = s.snapshot(0, 2).unwrap();
        assert_eq!(snap.get_metadata().index, 5);
        assert_eq!(snap.get_metadata().term, 2);
        assert_eq!(snap.get_metadata().get_conf_state(), &cs);
        assert_eq!(&snap.data[..], b"state@5");
        assert_eq!(s.hard_state(), hard_state(2, 1, 8));
    };
    check(&s);
    // Beyond the commit index, or below the snapshot: refused, nothing changes.
    assert_invalid(s.compact(9, s.conf_state(), Vec::new()));
    assert_invalid(s.compact(4, s.conf_state(), Vec::new()));
    check(&s);
    let s = h.reopen(s);
    check(&s);

    // Again at the same index replaces the data; further moves on.
    s.compact(5, s.conf_state(), b"again@5".to_vec()).unwrap();
    assert_eq!(&s.snapshot(0, 2).unwrap().data[..], b"again@5");
    s.compact(8, s.conf_state(), b"state@8".to_vec()).unwrap();
    assert_eq!(bounds(&s), (9, 10));
    // Up to the last entry: the log is empty, its last term stays known.
    s.write(ReadyWrite {
        commit: Some(10),
        ..Default::default()
    })
    .unwrap();
    s.compact(10, s.conf_state(), b"state@10".to_vec()).unwrap();
    assert_eq!(bounds(&s), (11, 10));
    assert_eq!(s.term(10), Ok(2));
    assert_eq!(read(&s, 11, 11), Ok(vec![]));
    let s = h.reopen(s);
    assert_eq!(bounds(&s), (11, 10));
    assert_eq!(s.term(10), Ok(2));
    assert_eq!(&s.snapshot(10, 2).unwrap().data[..], b"state@10");
    append(&s, entries(11..=11, 3));
    assert_eq!(bounds(&s), (11, 11));
}

fn applying_a_snapshot_replaces_the_log<H: Harness>(h: &mut H) {
    let s = h.fresh(voters(&[1, 2, 3]));
    append(&s, entries(1..=5, 1));
    set_hard_state(&s, hard_state(1, 1, 3));
    let new_cs = voters(&[1, 2, 3, 4]);
    // Entries the snapshot covers are skipped; the rest follow it.
    let mut ents = entries(9..=10, 3);
    ents.extend(entries(11..=12, 4));
    s.write(ReadyWrite {
        snapshot: Some(snapshot_at(10, 3, new_cs.clone(), b"remote state")),
        entries: ents,
        ..Default::default()
    })
    .unwrap();
    let check = |s: &H::S| {
        assert_eq!(bounds(s), (11, 12));
        assert_eq!(s.term(10), Ok(3));
        assert_eq!(s.term(5), err(RaftStorageError::Compacted));
        assert_eq!(read(s, 5, 6), err(RaftStorageError::Compacted));
        assert_eq!(read(s, 11, 13), Ok(entries(11..=12, 4)));
        // Commit rises to the snapshot, the term to the snapshot's; the vote stays.
        assert_eq!(s.hard_state(), hard_state(3, 1, 10));
        assert_eq!(s.conf_state(), new_cs);
        let snap = s.snapshot(10, 2).unwrap();
        assert_eq!(snap.get_metadata().index, 10);
        assert_eq!(snap.get_metadata().term, 3);
        assert_eq!(snap.get_metadata().get_conf_state(), &new_cs);
        assert_eq!(&snap.data[..], b"remote state");
    };
    check(&s);
    let s = h.reopen(s);
    check(&s);
    // A snapshot that is not newer than the stored one is refused.
    for index in [7, 10] {
        assert_invalid(s.write(ReadyWrite {
            snapshot: Some(snapshot_at(index, 3, voters(&[9]), b"old")),
            ..Default::default()
        }));
    }
    check(&s);

    // A snapshot inside the log also drops the entries after it.
    let s = h.fresh(voters(&[1]));
    append(&s, entries(1..=20, 1));
    set_hard_state(&s, hard_state(1, 0, 5));
    s.write(ReadyWrite {
        snapshot: Some(snapshot_at(8, 1, voters(&[1]), b"")),
        hard_state: Some(hard_state(2, 0, 8)),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(bounds(&s), (9, 8));
    assert_eq!(s.hard_state(), hard_state(2, 0, 8));
    let s = h.reopen(s);
    assert_eq!(bounds(&s), (9, 8));
    assert_eq!(read(&s, 9, 10), err(RaftStorageError::Unavailable));
}

fn snapshot_honours_request_index<H: Harness>(h: &mut H) {
    let s = h.fresh(voters(&[1]));
    append(&s, entries(1..=6, 1));
    set_hard_state(&s, hard_state(1, 1, 6));
    s.compact(4, s.conf_state(), b"s".to_vec()).unwrap();
    assert_eq!(s.snapshot(0, 2).unwrap().get_metadata().index, 4);
    assert_eq!(s.snapshot(4, 2).unwrap().get_metadata().index, 4);
    assert_eq!(
        s.snapshot(5, 2),
        err(RaftStorageError::SnapshotTemporarilyUnavailable)
    );
}

fn empty_and_unchanged_writes_succeed<H: Harness>(h: &mut H) {
    let s = h.fresh(voters(&[1]));
    s.write(ReadyWrite::default()).unwrap();
    set_hard_state(&s, HardState::default());
    s.write(ReadyWrite {
        conf_state: Some(voters(&[1])),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(bounds(&s), (1, 0));
    assert_eq!(s.hard_state(), HardState::default());
}

macro_rules! conformance {
    ($store:ident, $harness:expr, [$($case:ident),* $(,)?]) => {
        mod $store {
            use super::*;
            $(
                #[test]
                fn $case() {
                    let mut harness = $harness;
                    super::$case(&mut harness);
                }
            )*
        }
    };
}

macro_rules! suite {
    ($store:ident, $harness:expr) => {
        conformance!(
            $store,
            $harness,
            [
                fresh_store_has_empty_log_and_initial_membership,
                appended_entries_read_back_in_order,
                entries_are_limited_by_max_size,
                term_is_known_from_snapshot_to_last_entry,
                out_of_range_reads_are_errors_not_panics,
                conflicting_suffix_is_truncated,
                invalid_writes_are_refused_and_change_nothing,
                hard_and_conf_state_survive_reopen,
                compaction_moves_first_index_and_records_a_snapshot,
                applying_a_snapshot_replaces_the_log,
                snapshot_honours_request_index,
                empty_and_unchanged_writes_succeed,
            ]
        );
    };
}

suite!(rocks, RocksHarness::new());
suite!(mem, MemHarness);
suite!(rocks_election, ElectionHarness::new(RocksHarness::new()));
suite!(mem_election, ElectionHarness::new(MemHarness));

// ---------------------------------------------------------------------------------
// Named elections, on both stores

/// Founds election `id` (term floor, voters 1-3, data `e<id>`) and appends entries
/// 2..=`1 + n` in the floor's next term, committing them all.
fn found_with_entries<S: RaftStore>(root: &S, id: u32, n: u64) -> S {
    let floor = term_floor(id);
    let e = root
        .found_election(id, floor, voters(&[1, 2, 3]), format!("e{id}").into_bytes())
        .expect("found");
    e.write(ReadyWrite {
        entries: entries(2..=1 + n, floor + 1),
        hard_state: Some(hard_state(floor + 1, 1, 1 + n)),
        ..Default::default()
    })
    .expect("write the election's entries");
    e
}

#[track_caller]
fn check_founded_with_entries(e: &impl RaftStore, id: u32, n: u64) {
    let floor = term_floor(id);
    assert_eq!(bounds(e), (2, 1 + n), "election {id}");
    assert_eq!(read(e, 2, 2 + n), Ok(entries(2..=1 + n, floor + 1)));
    assert_eq!(e.term(1), Ok(floor), "the founding snapshot's term");
    assert_eq!(e.hard_state(), hard_state(floor + 1, 1, 1 + n));
    assert_eq!(e.conf_state(), voters(&[1, 2, 3]));
    let snap = e.snapshot(1, 2).unwrap();
    assert_eq!(snap.get_metadata().index, 1);
    assert_eq!(snap.get_metadata().term, floor);
    assert_eq!(snap.get_metadata().get_conf_state(), &voters(&[1, 2, 3]));
    assert_eq!(&snap.data[..], format!("e{id}").as_bytes());
}

#[track_caller]
fn assert_invalid_naming<T: std::fmt::Debug>(result: Result<T, StorageError>, needle: &str) {
    match result {
        Err(e @ StorageError::InvalidWrite { .. }) => {
            assert!(
                e.to_string().contains(needle),
                "{e} does not mention {needle:?}"
            );
        }
        other => panic!("expected InvalidWrite mentioning {needle:?}, got {other:?}"),
    }
}

#[track_caller]
fn assert_removed<T: std::fmt::Debug>(result: Result<T, StorageError>, id: u32) {
    match result {
        Err(e @ StorageError::ElectionRemoved { .. }) => {
            assert_eq!(e, StorageError::ElectionRemoved { id });
            let text = e.to_string();
            assert!(
                text.contains(&format!("election {id}")) && text.contains("removed"),
                "{text}"
            );
        }
        other => panic!("expected ElectionRemoved {{ id: {id} }}, got {other:?}"),
    }
}

fn ids(live: impl IntoIterator<Item = u32>, removed: impl IntoIterator<Item = u32>) -> ElectionIds {
    ElectionIds {
        live: live.into_iter().collect(),
        removed: removed.into_iter().collect(),
    }
}

fn elections_founding_gives_the_founding_state<H: Harness>(h: &mut H) {
    let root = h.fresh(voters(&[1, 2, 3]));
    assert_eq!(root.election_ids(), Ok(ElectionIds::default()));
    assert!(root.election(3).unwrap().is_none(), "never founded");
    let floor = term_floor(3);
    let e = root
        .found_election(3, floor, voters(&[1, 2]), b"empty history".to_vec())
        .unwrap();
    let check = |e: &H::S| {
        let state = e.initial_state().unwrap();
        assert_eq!(state.hard_state, hard_state(floor, 0, 1));
        assert_eq!(state.conf_state, voters(&[1, 2]));
        assert_eq!(
            bounds(e),
            (2, 1),
            "the log starts after the founding snapshot"
        );
        assert_eq!(e.term(1), Ok(floor));
        assert_eq!(e.term(0), err(RaftStorageError::Compacted));
        let snap = e.snapshot(1, 2).unwrap();
        assert_eq!(snap.get_metadata().index, 1);
        assert_eq!(snap.get_metadata().term, floor);
        assert_eq!(&snap.data[..], b"empty history");
    };
    check(&e);
    assert_eq!(e.node_id(), root.node_id(), "node_id() is the store's");
    // The first leader's term, right after the floor.
    e.write(ReadyWrite {
        entries: entries(2..=2, floor + 1),
        hard_state: Some(hard_state(floor + 1, 1, 1)),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(root.election_ids(), Ok(ids([3], [])));
    // The root is untouched.
    assert_eq!(bounds(&root), (1, 0));
    assert_eq!(root.hard_state(), HardState::default());
    drop(e);
    let root = h.reopen(root);
    let e = root
        .election(3)
        .unwrap()
        .expect("founded before the reopen");
    assert_eq!(bounds(&e), (2, 2));
    assert_eq!(e.hard_state(), hard_state(floor + 1, 1, 1));
    assert_eq!(root.election_ids(), Ok(ids([3], [])));
}

fn elections_handles_of_one_id_share_one_state<H: Harness>(h: &mut H) {
    let root = h.fresh(voters(&[1]));
    let founded = found_with_entries(&root, 5, 2);
    let a = root.election(5).unwrap().unwrap();
    let b = root.election(5).unwrap().unwrap();
    let from_handle = a.election(5).unwrap().unwrap();
    append(&a, entries(4..=4, term_floor(5) + 1));
    for (name, handle) in [
        ("founded", &founded),
        ("b", &b),
        ("from a handle", &from_handle),
    ] {
        assert_eq!(handle.last_index(), Ok(4), "{name} sees a's write");
        assert_eq!(read(handle, 4, 5), Ok(entries(4..=4, term_floor(5) + 1)));
    }
    b.compact(3, b.conf_state(), b"at 3".to_vec()).unwrap();
    assert_eq!(a.first_index(), Ok(4), "a sees b's compaction");
    assert_eq!(&founded.snapshot(0, 2).unwrap().data[..], b"at 3");
    assert_eq!(bounds(&root), (1, 0), "the root is another group");
}

fn elections_sixteen_survive_reopen<H: Harness>(h: &mut H) {
    let root = h.fresh(voters(&[1, 2, 3]));
    for id in 1..=16 {
        found_with_entries(&root, id, u64::from(id));
    }
    append(&root, entries(1..=2, 1));
    let root = h.reopen(root);
    assert_eq!(root.election_ids(), Ok(ids(1..=16, [])));
    for id in 1..=16 {
        let e = root
            .election(id)
            .unwrap()
            .expect("founded before the reopen");
        check_founded_with_entries(&e, id, u64::from(id));
    }
    assert_eq!(terms(&root), vec![1, 1]);
    assert!(root.election(17).unwrap().is_none());
}

fn elections_write_all_writes_every_group<H: Harness>(h: &mut H) {
    let root = h.fresh(voters(&[1, 2, 3]));
    let handles: Vec<H::S> = (1..=16)
        .map(|id| found_with_entries(&root, id, 1))
        .collect();
    let mut parts = vec![(
        root.clone(),
        ReadyWrite {
            entries: entries(1..=2, 3),
            hard_state: Some(hard_state(3, 1, 1)),
            ..Default::default()
        },
    )];
    // Not in id order: the order of the parts does not matter.
    for (i, e) in handles.iter().enumerate().rev() {
        let id = i as u32 + 1;
        let floor = term_floor(id);
        parts.push((
            e.clone(),
            ReadyWrite {
                entries: entries(3..=3 + u64::from(id % 3), floor + 2),
                hard_state: Some(hard_state(floor + 2, 2, 3)),
                ..Default::default()
            },
        ));
    }
    H::S::write_all(parts).unwrap();
    let check = |root: &H::S| {
        assert_eq!(terms(root), vec![3, 3]);
        assert_eq!(root.hard_state(), hard_state(3, 1, 1));
        for id in 1..=16u32 {
            let e = root.election(id).unwrap().unwrap();
            let floor = term_floor(id);
            let last = 3 + u64::from(id % 3);
            assert_eq!(bounds(&e), (2, last), "election {id}");
            assert_eq!(e.term(2), Ok(floor + 1));
            assert_eq!(read(&e, 3, last + 1), Ok(entries(3..=last, floor + 2)));
            assert_eq!(e.hard_state(), hard_state(floor + 2, 2, 3));
        }
    };
    check(&root);
    drop(handles);
    let root = h.reopen(root);
    check(&root);
    // Nothing to write at all is fine.
    H::S::write_all(Vec::new()).unwrap();
    H::S::write_all(vec![(root.clone(), ReadyWrite::default())]).unwrap();
}

fn elections_write_all_is_atomic<H: Harness>(h: &mut H) {
    let root = h.fresh(voters(&[1, 2, 3]));
    append(&root, entries(1..=2, 1));
    let e1 = found_with_entries(&root, 1, 2);
    let e2 = found_with_entries(&root, 2, 2);
    let check = |root: &H::S| {
        assert_eq!(terms(root), vec![1, 1]);
        assert_eq!(root.hard_state(), HardState::default());
        check_founded_with_entries(&root.election(1).unwrap().unwrap(), 1, 2);
        check_founded_with_entries(&root.election(2).unwrap().unwrap(), 2, 2);
    };
    let valid_root = || ReadyWrite {
        entries: entries(3..=3, 1),
        hard_state: Some(hard_state(1, 1, 3)),
        ..Default::default()
    };
    let valid_e1 = || ReadyWrite {
        entries: entries(4..=5, term_floor(1) + 1),
        commit: Some(5),
        ..Default::default()
    };
    // The last part leaves a gap after election 2's last entry (3).
    let gap_e2 = ReadyWrite {
        entries: entries(5..=5, term_floor(2) + 1),
        ..Default::default()
    };
    assert_invalid_naming(
        H::S::write_all(vec![
            (root.clone(), valid_root()),
            (e1.clone(), valid_e1()),
            (e2.clone(), gap_e2),
        ]),
        "named election 2",
    );
    check(&root);
    // An invalid root part names the root.
    assert_invalid_naming(
        H::S::write_all(vec![
            (e1.clone(), valid_e1()),
            (
                root.clone(),
                ReadyWrite {
                    commit: Some(9),
                    ..Default::default()
                },
            ),
        ]),
        "root election",
    );
    check(&root);
    // Two parts of one group.
    assert_invalid_naming(
        H::S::write_all(vec![(e1.clone(), valid_e1()), (e1.clone(), valid_e1())]),
        "two parts for election 1",
    );
    check(&root);
    drop((e1, e2));
    let root = h.reopen(root);
    check(&root);
}

fn elections_write_all_refuses_another_stores_handle<H: Harness>(h: &mut H) {
    let a = h.fresh(voters(&[1]));
    let b = h.fresh(voters(&[1]));
    let b7 = b
        .found_election(7, term_floor(7), voters(&[1]), Vec::new())
        .unwrap();
    assert_invalid_naming(
        H::S::write_all(vec![
            (
                a.clone(),
                ReadyWrite {
                    entries: entries(1..=1, 1),
                    ..Default::default()
                },
            ),
            (
                b7.clone(),
                ReadyWrite {
                    entries: entries(2..=2, term_floor(7) + 1),
                    ..Default::default()
                },
            ),
        ]),
        "another store",
    );
    assert_eq!(bounds(&a), (1, 0), "nothing written in the first store");
    assert_eq!(bounds(&b7), (2, 1), "nothing written in the second");
}

fn elections_id_zero_and_live_ids_are_refused<H: Harness>(h: &mut H) {
    let root = h.fresh(voters(&[1]));
    assert_invalid_naming(
        root.found_election(0, 0, voters(&[1]), Vec::new()),
        "election 0",
    );
    assert_invalid_naming(root.join_election(0, voters(&[1])), "election 0");
    assert_invalid_naming(root.election(0), "election 0");
    assert_invalid_naming(root.remove_election(0), "election 0");
    let e = found_with_entries(&root, 4, 2);
    assert_invalid_naming(
        root.found_election(4, 1, voters(&[9]), b"again".to_vec()),
        "named election 4: it is already founded",
    );
    assert_invalid_naming(root.join_election(4, voters(&[9])), "election 4");
    check_founded_with_entries(&e, 4, 2);
    assert_eq!(root.election_ids(), Ok(ids([4], [])));
    drop(e);
    let root = h.reopen(root);
    check_founded_with_entries(&root.election(4).unwrap().unwrap(), 4, 2);
}

fn elections_removal_is_for_good<H: Harness>(h: &mut H) {
    let root = h.fresh(voters(&[1, 2, 3]));
    let e1 = found_with_entries(&root, 1, 2);
    let e2 = found_with_entries(&root, 2, 3);
    let e3 = found_with_entries(&root, 3, 2);
    let other = root.election(2).unwrap().unwrap();
    root.remove_election(2).unwrap();
    // Every handle of it refuses writes, compactions and reads.
    for handle in [&e2, &other] {
        assert_removed(
            handle.write(ReadyWrite {
                entries: entries(5..=5, term_floor(2) + 1),
                ..Default::default()
            }),
            2,
        );
        assert_removed(handle.compact(2, voters(&[1]), Vec::new()), 2);
        assert!(handle.initial_state().is_err());
        assert!(handle.last_index().is_err());
        assert!(read(handle, 2, 3).is_err());
        assert_eq!(handle.hard_state(), HardState::default());
    }
    assert_removed(
        H::S::write_all(vec![
            (e1.clone(), ReadyWrite::default()),
            (e2.clone(), ReadyWrite::default()),
        ]),
        2,
    );
    // A removal of an id never held writes the tombstone only; again, nothing changes.
    root.remove_election(9).unwrap();
    root.remove_election(2).unwrap();
    let check = |root: &H::S| {
        assert_eq!(root.election_ids(), Ok(ids([1, 3], [2, 9])));
        for id in [2, 9] {
            assert!(root.election(id).unwrap().is_none(), "election {id}");
            assert_removed(
                root.found_election(id, term_floor(id), voters(&[1]), Vec::new()),
                id,
            );
            assert_removed(root.join_election(id, voters(&[1])), id);
        }
        check_founded_with_entries(&root.election(1).unwrap().unwrap(), 1, 2);
        check_founded_with_entries(&root.election(3).unwrap().unwrap(), 3, 2);
    };
    check(&root);
    drop((e1, e2, e3, other));
    let root = h.reopen(root);
    check(&root);
}

macro_rules! elections {
    ($store:ident, $harness:expr) => {
        conformance!(
            $store,
            $harness,
            [
                elections_founding_gives_the_founding_state,
                elections_handles_of_one_id_share_one_state,
                elections_sixteen_survive_reopen,
                elections_write_all_writes_every_group,
                elections_write_all_is_atomic,
                elections_write_all_refuses_another_stores_handle,
                elections_id_zero_and_live_ids_are_refused,
                elections_removal_is_for_good,
            ]
        );
    };
}

elections!(rocks_elections, RocksHarness::new());
// MemHarness::reopen drops the store and opens its MemDisk again: a simulated crash.
elections!(mem_elections, MemHarness);

// ---------------------------------------------------------------------------------
// Named elections, RocksStore only: write counts, format version, raw keys, corruption

mod rocks_elections_disk {
    use super::*;

    fn election_key(id: u32, suffix: &[u8]) -> Vec<u8> {
        [b"tenure/e/".as_slice(), &id.to_be_bytes(), b"/", suffix].concat()
    }

    fn meta_version(path: &Path) -> u32 {
        let db = rocksdb::DB::open_default(path).expect("raw rocksdb open");
        let meta = db.get(b"tenure/meta").unwrap().expect("meta record");
        let version = meta.strip_prefix(b"tenure-raft-store").expect("magic");
        u32::from_be_bytes(version.try_into().expect("a u32"))
    }

    /// Every key of the database that starts with `prefix`.
    fn keys_under(path: &Path, prefix: &[u8]) -> Vec<Vec<u8>> {
        let db = rocksdb::DB::open_default(path).expect("raw rocksdb open");
        db.iterator(rocksdb::IteratorMode::From(
            prefix,
            rocksdb::Direction::Forward,
        ))
        .map(|item| item.expect("iterate").0.to_vec())
        .take_while(|key| key.starts_with(prefix))
        .collect()
    }

    #[track_caller]
    fn assert_corrupt_naming<T: std::fmt::Debug>(
        result: Result<T, StorageError>,
        needles: &[&str],
    ) {
        match result {
            Err(e @ StorageError::Corrupt { .. }) => {
                for needle in needles {
                    assert!(
                        e.to_string().contains(needle),
                        "{e} does not mention {needle:?}"
                    );
                }
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    /// The driver's turn: one write_all for the root and 16 elections is one fsync, and
    /// a turn that only moves commit indexes is one unsynced write.
    #[test]
    fn write_all_of_sixteen_elections_and_the_root_is_one_write() {
        let dir = tempfile::tempdir().unwrap();
        let root = RocksStore::create(dir.path().join("store"), 1, voters(&[1, 2, 3])).unwrap();
        let handles: Vec<RocksStore> = (1..=16)
            .map(|id| found_with_entries(&root, id, 1))
            .collect();
        let before = root.write_counts();
        let turn = |commit_only: bool| {
            let mut parts = vec![(
                root.clone(),
                if commit_only {
                    ReadyWrite {
                        commit: Some(2),
                        ..Default::default()
                    }
                } else {
                    ReadyWrite {
                        entries: entries(1..=2, 1),
                        hard_state: Some(hard_state(1, 1, 1)),
                        ..Default::default()
                    }
                },
            )];
            for (i, e) in handles.iter().enumerate() {
                let floor = term_floor(i as u32 + 1);
                parts.push((
                    e.clone(),
                    if commit_only {
                        ReadyWrite {
                            commit: Some(3),
                            ..Default::default()
                        }
                    } else {
                        ReadyWrite {
                            entries: entries(3..=3, floor + 1),
                            hard_state: Some(hard_state(floor + 1, 1, 2)),
                            ..Default::default()
                        }
                    },
                ));
            }
            RocksStore::write_all(parts).unwrap();
        };
        turn(false);
        assert_eq!(
            root.write_counts(),
            (before.0 + 1, before.1),
            "one synced write"
        );
        turn(true);
        assert_eq!(
            root.write_counts(),
            (before.0 + 1, before.1 + 1),
            "one unsynced write"
        );
        for e in &handles {
            assert_eq!(e.hard_state().commit, 3);
            assert_eq!(
                e.write_counts(),
                root.write_counts(),
                "one counter per store"
            );
        }
        assert_eq!(root.hard_state(), hard_state(1, 1, 2));
        // One synced part makes the whole batch synced.
        let e1 = &handles[0];
        RocksStore::write_all(vec![
            (
                root.clone(),
                ReadyWrite {
                    commit: Some(2),
                    ..Default::default()
                },
            ),
            (
                e1.clone(),
                ReadyWrite {
                    entries: entries(4..=4, term_floor(1) + 1),
                    ..Default::default()
                },
            ),
        ])
        .unwrap();
        assert_eq!(root.write_counts(), (before.0 + 2, before.1 + 1));
        // A refused write_all writes nothing and counts nothing.
        assert_invalid(RocksStore::write_all(vec![(
            e1.clone(),
            ReadyWrite {
                commit: Some(99),
                ..Default::default()
            },
        )]));
        assert_eq!(root.write_counts(), (before.0 + 2, before.1 + 1));
    }

    #[test]
    fn the_format_becomes_version_3_with_the_first_election() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let root = RocksStore::create(&path, 1, voters(&[1])).unwrap();
        append(&root, entries(1..=1, 1));
        drop(root);
        assert_eq!(
            meta_version(&path),
            2,
            "a store without elections stays version 2"
        );
        let root = RocksStore::open(&path).unwrap();
        drop(found_with_entries(&root, 1, 1));
        drop(root);
        assert_eq!(meta_version(&path), 3);
        let root = RocksStore::open(&path).unwrap();
        check_founded_with_entries(&root.election(1).unwrap().unwrap(), 1, 1);
        drop(root);
        // A removal alone also writes election keys (the tombstone).
        let other = dir.path().join("other");
        let root = RocksStore::create(&other, 1, voters(&[1])).unwrap();
        root.remove_election(5).unwrap();
        drop(root);
        assert_eq!(meta_version(&other), 3);
        // A version above 3 is refused, naming it.
        let mut meta = b"tenure-raft-store".to_vec();
        meta.extend_from_slice(&4u32.to_be_bytes());
        rocksdb::DB::open_default(&path)
            .unwrap()
            .put(b"tenure/meta", meta)
            .unwrap();
        assert_corrupt_naming(
            RocksStore::open(&path),
            &["format version 4", "versions 2 and 3"],
        );
    }

    #[test]
    fn removal_leaves_only_the_tombstone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let root = RocksStore::create(&path, 1, voters(&[1, 2, 3])).unwrap();
        for id in [1, 2, 3] {
            let e = found_with_entries(&root, id, 5);
            e.compact(3, e.conf_state(), b"compacted".to_vec()).unwrap();
        }
        let (synced, _) = root.write_counts();
        root.remove_election(2).unwrap();
        assert_eq!(
            root.write_counts().0,
            synced + 1,
            "a removal is one synced write"
        );
        drop(root);
        assert_eq!(
            keys_under(&path, &election_key(2, b"")),
            vec![election_key(2, b"removed")]
        );
        for id in [1, 3] {
            let keys = keys_under(&path, &election_key(id, b""));
            assert!(
                keys.contains(&election_key(id, b"hard_state")),
                "election {id}: {keys:?}"
            );
            assert_eq!(
                keys.len(),
                4 + 3,
                "4 records and entries 4..=6 of election {id}"
            );
        }
        let root = RocksStore::open(&path).unwrap();
        assert_eq!(root.election_ids(), Ok(ids([1, 3], [2])));
        assert!(root.election(2).unwrap().is_none());
        assert_removed(
            root.found_election(2, term_floor(2), voters(&[1]), Vec::new()),
            2,
        );
        for id in [1, 3] {
            let e = root.election(id).unwrap().unwrap();
            assert_eq!(bounds(&e), (4, 6));
            assert_eq!(&e.snapshot(0, 2).unwrap().data[..], b"compacted");
        }
    }

    #[test]
    fn a_damaged_election_is_corrupt_naming_it_and_the_root_still_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let root = RocksStore::create(&path, 1, voters(&[1])).unwrap();
        for id in [5, 6, 7] {
            found_with_entries(&root, id, 3);
        }
        drop(root);
        {
            let db = rocksdb::DB::open_default(&path).unwrap();
            db.put(election_key(5, b"hard_state"), [0xff; 16]).unwrap();
            let mut log3 = election_key(6, b"log/");
            log3.extend_from_slice(&3u64.to_be_bytes());
            db.delete(&log3).unwrap();
            let hs = hard_state(term_floor(7) + 1, 1, 99)
                .write_to_bytes()
                .unwrap();
            db.put(election_key(7, b"hard_state"), hs).unwrap();
        }
        let root = RocksStore::open(&path).expect("the root is whole");
        assert_eq!(root.election_ids(), Ok(ids([5, 6, 7], [])));
        assert_corrupt_naming(root.election(5), &["named election 5", "does not decode"]);
        assert_corrupt_naming(
            root.election(6),
            &["named election 6", "entry 4 found where entry 3"],
        );
        assert_corrupt_naming(root.election(7), &["named election 7", "commit index 99"]);
        // Refused again, not cached as whole by the first attempt.
        assert_corrupt_naming(root.election(5), &["named election 5"]);
        assert_invalid_naming(
            root.found_election(5, term_floor(5), voters(&[1]), Vec::new()),
            "already founded",
        );
    }

    #[test]
    fn election_keys_are_not_the_roots_log() {
        // The root's log range (tenure/log/..tenure/log0) and the elections' prefix
        // (tenure/e/) are disjoint: the root opens whole beside elections and its
        // snapshot (a DeleteRange of its log) leaves them alone.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let root = RocksStore::create(&path, 1, voters(&[1])).unwrap();
        append(&root, entries(1..=3, 1));
        found_with_entries(&root, 1, 2);
        root.write(ReadyWrite {
            snapshot: Some(snapshot_at(10, 2, voters(&[1]), b"root")),
            ..Default::default()
        })
        .unwrap();
        drop(root);
        let root = RocksStore::open(&path).unwrap();
        assert_eq!(bounds(&root), (11, 10));
        check_founded_with_entries(&root.election(1).unwrap().unwrap(), 1, 2);
    }
}

// ---------------------------------------------------------------------------------
// RocksStore: opening missing, locked, corrupt and foreign directories

mod rocks_open {
    use super::*;

    fn store_with_entries(dir: &Path) -> PathBuf {
        let path = dir.join("store");
        let s = RocksStore::create(&path, 1, voters(&[1, 2, 3])).unwrap();
        append(&s, entries(1..=5, 1));
        set_hard_state(&s, hard_state(1, 1, 5));
        path
    }

    #[track_caller]
    fn assert_names_path(err: &StorageError, path: &Path) {
        let text = err.to_string();
        assert!(
            text.contains(&path.display().to_string()),
            "{text:?} does not name {}",
            path.display()
        );
    }

    #[track_caller]
    fn assert_corrupt(result: Result<RocksStore, StorageError>, path: &Path, needle: &str) {
        match result {
            Err(e @ StorageError::Corrupt { .. }) => {
                assert_names_path(&e, path);
                assert!(
                    e.to_string().contains(needle),
                    "{e} does not mention {needle:?}"
                );
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    fn raw_db(path: &Path) -> rocksdb::DB {
        rocksdb::DB::open_default(path).expect("raw rocksdb open")
    }

    #[test]
    fn missing_directory_is_missing_and_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope");
        let e = RocksStore::open(&path).unwrap_err();
        assert!(matches!(e, StorageError::Missing { .. }), "{e:?}");
        assert_names_path(&e, &path);
        assert!(!path.exists(), "open must not create the directory");
    }

    #[test]
    fn empty_directory_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let e = RocksStore::open(dir.path()).unwrap_err();
        assert!(matches!(e, StorageError::Missing { .. }), "{e:?}");
        assert_names_path(&e, dir.path());
    }

    #[test]
    fn create_needs_an_existing_parent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a").join("b");
        let e = RocksStore::create(&path, 1, voters(&[1])).unwrap_err();
        assert!(matches!(e, StorageError::Io { .. }), "{e:?}");
        assert_names_path(&e, &path);
    }

    #[test]
    fn create_on_an_initialized_store_is_refused_and_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_with_entries(dir.path());
        let e = RocksStore::create(&path, 1, voters(&[7])).unwrap_err();
        assert!(
            matches!(e, StorageError::AlreadyInitialized { .. }),
            "{e:?}"
        );
        assert_names_path(&e, &path);
        let s = RocksStore::open(&path).unwrap();
        assert_eq!(s.conf_state(), voters(&[1, 2, 3]));
        assert_eq!(s.last_index(), Ok(5));
    }

    #[test]
    fn create_records_the_node_and_open_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let s = RocksStore::create(&path, 7, voters(&[1, 2])).unwrap();
        assert_eq!(s.path(), path);
        assert_eq!(s.node_id(), Some(7));
        append(&s, entries(1..=1, 1));
        drop(s);
        let s = RocksStore::open(&path).unwrap();
        assert_eq!(s.node_id(), Some(7));
        assert_eq!(s.conf_state(), voters(&[1, 2]));
        assert_eq!(s.last_index(), Ok(1));
    }

    /// An operator copied a data folder without `CURRENT` (or it was deleted). RocksDB,
    /// asked to create a missing database, would write a new `CURRENT` over the old
    /// files on the first attempt, and the second would find an empty store: a node
    /// that forgot its vote. The folder is `Corrupt`, every time, and left as it was.
    #[test]
    fn a_folder_without_current_is_corrupt_every_time_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_with_entries(dir.path());
        std::fs::remove_file(path.join("CURRENT")).unwrap();
        let listing = |p: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        let before = listing(&path);
        for _ in 0..2 {
            assert_corrupt(RocksStore::open(&path), &path, "CURRENT file is missing");
            assert_corrupt(
                RocksStore::create(&path, 1, voters(&[1])),
                &path,
                "CURRENT file is missing",
            );
        }
        assert_eq!(
            listing(&path),
            before,
            "nothing may be written to the folder"
        );
    }

    #[test]
    fn create_refuses_a_folder_holding_anything_else() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("notes.txt"), b"not a store").unwrap();
        assert_corrupt(
            RocksStore::create(&path, 1, voters(&[1])),
            &path,
            "notes.txt",
        );
        assert_corrupt(RocksStore::open(&path), &path, "notes.txt");
    }

    #[test]
    fn a_lost_and_found_alone_counts_as_empty() {
        // The root of a mounted ext4 volume (a Kubernetes volume claim, say).
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("lost+found")).unwrap();
        let e = RocksStore::open(dir.path()).unwrap_err();
        assert!(matches!(e, StorageError::Missing { .. }), "{e:?}");
        let s = RocksStore::create(dir.path(), 3, voters(&[3])).unwrap();
        assert_eq!(s.node_id(), Some(3));
    }

    #[test]
    fn a_version_1_store_is_refused_with_a_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_with_entries(dir.path());
        let mut meta = b"tenure-raft-store".to_vec();
        meta.extend_from_slice(&1u32.to_be_bytes());
        raw_db(&path).put(b"tenure/meta", meta).unwrap();
        assert_corrupt(RocksStore::open(&path), &path, "format version 1");
    }

    #[test]
    fn second_open_while_open_is_locked() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_with_entries(dir.path());
        let first = RocksStore::open(&path).unwrap();
        let clone = first.clone();
        for e in [
            RocksStore::open(&path).unwrap_err(),
            RocksStore::create(&path, 1, voters(&[1])).unwrap_err(),
        ] {
            assert!(matches!(e, StorageError::Locked { .. }), "{e:?}");
            assert_names_path(&e, &path);
        }
        drop(first);
        assert!(
            RocksStore::open(&path).is_err(),
            "a clone still holds the store open"
        );
        drop(clone);
        let again = RocksStore::open(&path).unwrap();
        assert_eq!(again.last_index(), Ok(5));
    }

    #[test]
    fn garbage_current_file_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_with_entries(dir.path());
        std::fs::write(path.join("CURRENT"), b"\x00\xffnot a manifest").unwrap();
        assert_corrupt(RocksStore::open(&path), &path, "");
    }

    #[test]
    fn garbage_manifest_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_with_entries(dir.path());
        let current = std::fs::read_to_string(path.join("CURRENT")).unwrap();
        let manifest = path.join(current.trim());
        let len = std::fs::metadata(&manifest).unwrap().len() as usize;
        std::fs::write(&manifest, vec![0xA5; len]).unwrap();
        assert_corrupt(RocksStore::open(&path), &path, "");
    }

    #[test]
    fn undecodable_hard_state_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_with_entries(dir.path());
        raw_db(&path).put(b"tenure/hard_state", [0xff; 16]).unwrap();
        assert_corrupt(RocksStore::open(&path), &path, "tenure/hard_state");
    }

    #[test]
    fn undecodable_entry_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_with_entries(dir.path());
        let mut key = b"tenure/log/".to_vec();
        key.extend_from_slice(&3u64.to_be_bytes());
        raw_db(&path).put(&key, [0xff; 16]).unwrap();
        assert_corrupt(RocksStore::open(&path), &path, "does not decode");
    }

    #[test]
    fn hole_in_the_log_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_with_entries(dir.path());
        let mut key = b"tenure/log/".to_vec();
        key.extend_from_slice(&3u64.to_be_bytes());
        raw_db(&path).delete(&key).unwrap();
        assert_corrupt(
            RocksStore::open(&path),
            &path,
            "entry 4 found where entry 3",
        );
    }

    #[test]
    fn commit_beyond_the_log_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_with_entries(dir.path());
        let hs = hard_state(1, 1, 99).write_to_bytes().unwrap();
        raw_db(&path).put(b"tenure/hard_state", hs).unwrap();
        assert_corrupt(RocksStore::open(&path), &path, "commit index 99");
    }

    #[test]
    fn foreign_rocksdb_is_not_a_tenure_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other");
        raw_db(&path).put(b"hello", b"world").unwrap();
        assert_corrupt(RocksStore::open(&path), &path, "not a tenure store");
        assert_corrupt(
            RocksStore::create(&path, 1, voters(&[1])),
            &path,
            "not a tenure store",
        );
        assert_eq!(
            raw_db(&path).get(b"hello").unwrap().as_deref(),
            Some(&b"world"[..])
        );
        assert_eq!(raw_db(&path).get(b"tenure/meta").unwrap(), None);
    }

    #[test]
    fn newer_format_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_with_entries(dir.path());
        let mut meta = b"tenure-raft-store".to_vec();
        meta.extend_from_slice(&4u32.to_be_bytes());
        raw_db(&path).put(b"tenure/meta", meta).unwrap();
        assert_corrupt(RocksStore::open(&path), &path, "format version 4");
    }

    #[test]
    fn interrupted_create_is_missing_then_creatable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        // An empty RocksDB database: what a create killed before its first write leaves.
        drop(raw_db(&path));
        let e = RocksStore::open(&path).unwrap_err();
        assert!(matches!(e, StorageError::Missing { .. }), "{e:?}");
        let s = RocksStore::create(&path, 1, voters(&[1])).unwrap();
        assert_eq!(s.conf_state(), voters(&[1]));
    }
}
