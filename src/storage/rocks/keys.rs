//! Where a [`RocksStore`](super::RocksStore) keeps each group's records: the root's keys
//! as version 2 has them, a named election's under `tenure/e/<id>/`.

use rocksdb::WriteBatch;

use super::{
    election_prefix, encode, CONF_STATE_KEY, HARD_STATE_KEY, LOG_END, LOG_PREFIX,
    SNAPSHOT_DATA_KEY, SNAPSHOT_META_KEY,
};
use crate::storage::model::{LogState, WritePlan};
use crate::storage::StorageError;

/// Where one group's records are.
pub(super) struct Keys {
    pub(super) hard_state: Vec<u8>,
    pub(super) conf_state: Vec<u8>,
    pub(super) snapshot_meta: Vec<u8>,
    pub(super) snapshot_data: Vec<u8>,
    pub(super) log_prefix: Vec<u8>,
    /// The first key after every log key of the group.
    pub(super) log_end: Vec<u8>,
}

impl Keys {
    /// The root election's keys, exactly as version 2 has them.
    pub(super) fn root() -> Self {
        Keys {
            hard_state: HARD_STATE_KEY.to_vec(),
            conf_state: CONF_STATE_KEY.to_vec(),
            snapshot_meta: SNAPSHOT_META_KEY.to_vec(),
            snapshot_data: SNAPSHOT_DATA_KEY.to_vec(),
            log_prefix: LOG_PREFIX.to_vec(),
            log_end: LOG_END.to_vec(),
        }
    }

    /// Named election `id`'s keys, under `tenure/e/<id>/`.
    pub(super) fn election(id: u32) -> Self {
        let prefix = election_prefix(id);
        let key = |suffix: &[u8]| [prefix.as_slice(), suffix].concat();
        Keys {
            hard_state: key(b"hard_state"),
            conf_state: key(b"conf_state"),
            snapshot_meta: key(b"snapshot_meta"),
            snapshot_data: key(b"snapshot_data"),
            log_prefix: key(b"log/"),
            log_end: key(b"log0"),
        }
    }

    pub(super) fn log(&self, index: u64) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.log_prefix.len() + 8);
        key.extend_from_slice(&self.log_prefix);
        key.extend_from_slice(&index.to_be_bytes());
        key
    }

    pub(super) fn parse_log(&self, key: &[u8]) -> Option<u64> {
        let index: [u8; 8] = key
            .strip_prefix(self.log_prefix.as_slice())?
            .try_into()
            .ok()?;
        Some(u64::from_be_bytes(index))
    }

    /// Puts what `plan` changes into `batch`, in the order of [`ReadyWrite`].
    pub(super) fn add_plan(
        &self,
        batch: &mut WriteBatch,
        plan: &WritePlan,
    ) -> Result<(), StorageError> {
        if let Some(snapshot) = &plan.snapshot {
            batch.delete_range(&self.log_prefix, &self.log_end);
            batch.put(&self.snapshot_meta, encode(snapshot.get_metadata())?);
            batch.put(&self.snapshot_data, &snapshot.data);
        }
        if let Some(from) = plan.truncate_from {
            batch.delete_range(self.log(from), self.log_end.clone());
        }
        for entry in &plan.entries {
            batch.put(self.log(entry.index), encode(entry)?);
        }
        if let Some(hs) = &plan.hard_state {
            batch.put(&self.hard_state, encode(hs)?);
        }
        if let Some(cs) = &plan.conf_state {
            batch.put(&self.conf_state, encode(cs)?);
        }
        Ok(())
    }

    /// Puts a whole group state (no entries) and its snapshot data into `batch`.
    pub(super) fn add_state(
        &self,
        batch: &mut WriteBatch,
        state: &LogState<u64>,
        snapshot_data: &[u8],
    ) -> Result<(), StorageError> {
        batch.put(&self.hard_state, encode(&state.hard_state)?);
        batch.put(&self.conf_state, encode(&state.conf_state)?);
        batch.put(&self.snapshot_meta, encode(&state.snapshot)?);
        batch.put(&self.snapshot_data, snapshot_data);
        Ok(())
    }
}
