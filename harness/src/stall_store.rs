//! A store wrapper whose writes can be held on command, as a disk that stalls holds a
//! synced write: every write, compaction and election write of the wrapped store (every
//! handle of it: the root's and each named election's) waits at one [`Gate`] while the
//! gate is shut. The gate can also fail the next Ready write with an I/O error, as a
//! failed fsync does, or slow every write down. Used over real RocksDB by
//! `tests/faults/disk_stall.rs`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use tenure::storage::{ElectionIds, RaftStore, ReadyWrite, StorageError};

/// Which writes a gate holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Shut {
    #[default]
    Open,
    /// Every write and probe.
    All,
    /// Only the writes the driver waits for (creating or removing an election's store,
    /// compactions, the founding nonces): not its Ready batches nor its probes, which it
    /// hands to the writer and does not wait for.
    Waited,
}

/// Where a store's writes wait while the disk "stalls". Shared by every handle of one
/// store.
#[derive(Default)]
pub struct Gate {
    shut: Mutex<Shut>,
    opened: Condvar,
    /// Writes waiting at the gate right now.
    waiting: AtomicUsize,
    /// Writes that ever waited at it.
    held: AtomicUsize,
    /// The next Ready write fails (and writes nothing).
    fail_next: AtomicBool,
    /// Ready writes failed so far.
    failed: AtomicUsize,
    /// Every write (and probe) takes this much longer, in milliseconds: a slow disk.
    slow_ms: std::sync::atomic::AtomicU64,
    /// Probe writes that passed the gate.
    probes: AtomicUsize,
}

impl Gate {
    /// From now on every write waits until [`open`](Self::open).
    pub fn shut(&self) {
        *self.shut.lock().unwrap() = Shut::All;
    }

    /// From now on only the writes the driver waits for wait until
    /// [`open`](Self::open): a stall that meets a driver in such a write (an election
    /// created or removed, a compaction) holds its turn.
    pub fn shut_waited(&self) {
        *self.shut.lock().unwrap() = Shut::Waited;
    }

    /// Lets every waiting write (and every later one) through.
    pub fn open(&self) {
        *self.shut.lock().unwrap() = Shut::Open;
        self.opened.notify_all();
    }

    /// From now on every write and probe takes `d` longer (zero: as fast as the disk).
    pub fn slow(&self, d: Duration) {
        self.slow_ms.store(d.as_millis() as u64, Ordering::SeqCst);
    }

    /// How many probe writes passed the gate.
    pub fn probes(&self) -> usize {
        self.probes.load(Ordering::SeqCst)
    }

    /// The next Ready write (`write` or `write_all`) fails with an I/O error, as a failed
    /// fsync does, and writes nothing.
    pub fn fail_next_write(&self) {
        self.fail_next.store(true, Ordering::SeqCst);
    }

    /// How many Ready writes failed.
    pub fn failed(&self) -> usize {
        self.failed.load(Ordering::SeqCst)
    }

    /// The injected failure, if one is armed (it fires once).
    fn fault(&self) -> Result<(), StorageError> {
        if self.fail_next.swap(false, Ordering::SeqCst) {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(StorageError::Io {
                path: "the test's disk".into(),
                detail: "fsync: Input/output error (os error 5) (injected)".into(),
            });
        }
        Ok(())
    }

    /// How many writes wait at the gate now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// How many writes have waited at it since the store was made.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Waits while the gate is shut for this write (`waited`: one the driver waits
    /// for). Never longer than `MAX_STALL`: a test that forgot to open it must not hang
    /// forever.
    fn pass(&self, waited: bool) {
        let slow = self.slow_ms.load(Ordering::SeqCst);
        if slow > 0 {
            std::thread::sleep(Duration::from_millis(slow));
        }
        let holds = |s: &mut Shut| *s == Shut::All || (*s == Shut::Waited && waited);
        let mut shut = self.shut.lock().unwrap();
        if !holds(&mut shut) {
            return;
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        self.held.fetch_add(1, Ordering::SeqCst);
        let (guard, _) = self
            .opened
            .wait_timeout_while(shut, MAX_STALL, holds)
            .unwrap();
        shut = guard;
        drop(shut);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The longest any write waits at a gate.
pub const MAX_STALL: Duration = Duration::from_secs(60);

/// A store whose writes wait at `gate` while it is shut.
#[derive(Clone)]
pub struct StallStore<S> {
    /// The store written to.
    pub inner: S,
    /// Where writes wait while it is shut.
    pub gate: Arc<Gate>,
}

impl<S> StallStore<S> {
    /// `inner`, its writes held at `gate`.
    pub fn new(inner: S, gate: Arc<Gate>) -> Self {
        StallStore { inner, gate }
    }

    fn wrap(&self, inner: S) -> Self {
        StallStore {
            inner,
            gate: Arc::clone(&self.gate),
        }
    }
}

impl<S: RaftStore> raft::Storage for StallStore<S> {
    fn initial_state(&self) -> raft::Result<raft::RaftState> {
        self.inner.initial_state()
    }
    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: raft::GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.inner.entries(low, high, max_size, context)
    }
    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.inner.term(idx)
    }
    fn first_index(&self) -> raft::Result<u64> {
        self.inner.first_index()
    }
    fn last_index(&self) -> raft::Result<u64> {
        self.inner.last_index()
    }
    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        self.inner.snapshot(request_index, to)
    }
}

impl<S: RaftStore> RaftStore for StallStore<S> {
    fn write(&self, write: ReadyWrite) -> Result<(), StorageError> {
        self.gate.pass(false);
        self.gate.fault()?;
        self.inner.write(write)
    }
    fn write_all(parts: Vec<(Self, ReadyWrite)>) -> Result<(), StorageError> {
        if let Some((first, _)) = parts.first() {
            first.gate.pass(false);
            first.gate.fault()?;
        }
        S::write_all(parts.into_iter().map(|(s, w)| (s.inner, w)).collect())
    }
    fn compact(
        &self,
        index: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<(), StorageError> {
        self.gate.pass(true);
        self.inner.compact(index, conf_state, data)
    }
    fn hard_state(&self) -> HardState {
        self.inner.hard_state()
    }
    fn conf_state(&self) -> ConfState {
        self.inner.conf_state()
    }
    fn node_id(&self) -> Option<tenure::NodeId> {
        self.inner.node_id()
    }
    fn blocks_on_io(&self) -> bool {
        true
    }
    fn probe(&self) -> Result<(), StorageError> {
        self.gate.pass(false);
        self.gate.probes.fetch_add(1, Ordering::SeqCst);
        self.inner.probe()
    }
    fn election(&self, id: u32) -> Result<Option<Self>, StorageError> {
        Ok(self.inner.election(id)?.map(|s| self.wrap(s)))
    }
    fn election_ids(&self) -> Result<ElectionIds, StorageError> {
        self.inner.election_ids()
    }
    fn found_election(
        &self,
        id: u32,
        term: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<Self, StorageError> {
        self.gate.pass(true);
        let s = self.inner.found_election(id, term, conf_state, data)?;
        Ok(self.wrap(s))
    }
    fn join_election(&self, id: u32, initial: ConfState) -> Result<Self, StorageError> {
        self.gate.pass(true);
        let s = self.inner.join_election(id, initial)?;
        Ok(self.wrap(s))
    }
    fn remove_election(&self, id: u32) -> Result<(), StorageError> {
        self.gate.pass(true);
        self.inner.remove_election(id)
    }
    fn founding_nonces(
        &self,
    ) -> Result<std::collections::BTreeMap<tenure::NodeId, u128>, StorageError> {
        self.inner.founding_nonces()
    }
    fn record_founding_nonces(
        &self,
        nonces: &std::collections::BTreeMap<tenure::NodeId, u128>,
    ) -> Result<(), StorageError> {
        self.gate.pass(true);
        self.inner.record_founding_nonces(nonces)
    }
}
