//! The founding nonces' record in a [`RocksStore`](super::RocksStore): key
//! `tenure/founded_with`, the first members' ids and nonces as 24-byte records (node id
//! u64 and nonce u128, both big endian), in id order. Not raft state: a store without
//! the key (a joiner's, an older version's) records none.

use std::collections::BTreeMap;
use std::path::Path;

use rocksdb::{WriteBatch, DB};

use crate::storage::StorageError;
use crate::NodeId;

const KEY: &[u8] = b"tenure/founded_with";
const RECORD: usize = 24;

pub(super) fn read(path: &Path, db: &DB) -> Result<BTreeMap<NodeId, u128>, StorageError> {
    let Some(value) = db
        .get_pinned(KEY)
        .map_err(|e| StorageError::from_rocks(path, e))?
    else {
        return Ok(BTreeMap::new());
    };
    if value.len() % RECORD != 0 {
        return Err(StorageError::corrupt(
            path,
            format!(
                "the founding nonces' record has {} bytes, not a multiple of {RECORD}",
                value.len()
            ),
        ));
    }
    Ok(value
        .chunks_exact(RECORD)
        .map(|r| {
            let id = u64::from_be_bytes(r[..8].try_into().expect("8 bytes"));
            let nonce = u128::from_be_bytes(r[8..].try_into().expect("16 bytes"));
            (id, nonce)
        })
        .collect())
}

pub(super) fn put(batch: &mut WriteBatch, nonces: &BTreeMap<NodeId, u128>) {
    let mut value = Vec::with_capacity(nonces.len() * RECORD);
    for (id, nonce) in nonces {
        value.extend_from_slice(&id.to_be_bytes());
        value.extend_from_slice(&nonce.to_be_bytes());
    }
    batch.put(KEY, value);
}
