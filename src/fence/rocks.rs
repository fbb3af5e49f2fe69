//! [`RocksFence`]: the fence for key-value data in RocksDB, advanced in the same write
//! batch as the data.
//!
//! A `RocksFence` owns its directory, so named elections get one each, named by the
//! election (`RocksFence::open(dir.join("shard-3"), "shard-3")`), and each is written
//! with its own election's tokens only (see [the module docs](super#one-fence-per-election-keyed-by-its-name)).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rocksdb::{ColumnFamily, ErrorKind, Options, WriteBatch, WriteOptions, DB};

use super::{BackendError, FenceError, FenceStats};
use crate::token::FencingToken;

/// The column family that holds the highest token, under the fence's name. Callers'
/// writes go to the default column family and cannot reach it.
const FENCE_CF: &str = "tenure_fence";

/// A fence for resources without SQL: key-value data in a RocksDB directory that the
/// fence owns.
///
/// [`apply`](Self::apply) checks the token and, if it is accepted, writes the caller's
/// changes and the new highest token in **one** `WriteBatch`, synced to disk before it
/// returns. The changes and the token advance are durable together or not at all. An
/// in-process lock serializes the read-check-write of concurrent callers. RocksDB's
/// directory lock keeps other processes out, so share one `RocksFence` (in an `Arc`)
/// among the threads that write.
///
/// The caller's data lives in the default column family: read it with
/// [`get`](Self::get). The highest token lives in a column family of its own,
/// `tenure_fence`, which the caller's batch cannot reach.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use tenure::fence::{FenceError, RocksFence};
/// use tenure::FencingToken;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let fence = Arc::new(RocksFence::open(dir.path().join("ledger"), "ledger")?);
///
/// fence.apply(FencingToken::new(42), |batch| batch.put(b"batch/1", b"settled by 42"))?;
/// // A replaced leader (term 41) tries to write: rejected, nothing is written.
/// let err = fence
///     .apply(FencingToken::new(41), |batch| batch.put(b"batch/1", b"settled by 41"))
///     .unwrap_err();
/// assert!(matches!(
///     err,
///     FenceError::Stale { presented, highest }
///         if (presented.term(), highest.term()) == (41, 42)
/// ));
/// assert_eq!(fence.get(b"batch/1")?.as_deref(), Some(&b"settled by 42"[..]));
/// assert_eq!(fence.highest()?, FencingToken::new(42));
/// # Ok(())
/// # }
/// ```
pub struct RocksFence {
    /// The key of the highest token in `tenure_fence`, and the fence's name in errors.
    name: String,
    /// The directory, for errors.
    path: PathBuf,
    /// The open database; its directory lock keeps other processes out.
    db: DB,
    /// Held from reading the highest token to writing the batch, so that two threads
    /// cannot both pass the check against the same highest token.
    apply_lock: Mutex<()>,
    /// What this fence accepted and rejected.
    stats: Arc<FenceStats>,
}

impl fmt::Debug for RocksFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksFence")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("stats", &self.stats.snapshot())
            .finish_non_exhaustive()
    }
}

impl RocksFence {
    /// Opens the fence in the RocksDB directory `path`, creating the directory (and its
    /// parents) and the fence with token 0 if they are missing. The stored token is read
    /// once here, so a corrupt one fails the open.
    ///
    /// Errors: [`FenceError::Locked`] if another process or `RocksFence` has the directory
    /// open; [`FenceError::Corrupt`] if RocksDB reports corruption or the token does not
    /// decode; [`FenceError::Backend`] for other failures (a path that cannot be created,
    /// permissions). Each error names the path.
    ///
    /// A fence created at a wrong path starts at token 0, so it accepts any token. Keep the
    /// path fixed and on durable storage.
    pub fn open(path: impl AsRef<Path>, name: &str) -> Result<RocksFence, FenceError> {
        let path = path.as_ref().to_path_buf();
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let db = DB::open_cf(
            &opts,
            &path,
            [rocksdb::DEFAULT_COLUMN_FAMILY_NAME, FENCE_CF],
        )
        .map_err(|e| open_error(name, &path, e))?;
        let fence = RocksFence {
            name: name.to_owned(),
            path,
            db,
            apply_lock: Mutex::new(()),
            stats: Arc::default(),
        };
        fence.highest()?;
        Ok(fence)
    }

    /// The fence's name: the key of its token.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fence's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This fence's counters.
    pub fn stats(&self) -> &Arc<FenceStats> {
        &self.stats
    }

    /// Writes what `f` puts into the batch, if `token` is accepted, together with the new
    /// highest token, in one batch synced to disk.
    ///
    /// `token` is accepted if it is at least the highest accepted so far (equal means the
    /// same tenure). Otherwise the result is [`FenceError::Stale`], and `f` does not run.
    /// `f` runs under the fence's lock. While it runs, no other fenced write of this
    /// fence happens, so it can read current values with [`get`](Self::get) and base its
    /// changes on them. It must not call `apply` itself, which would deadlock. If `f`
    /// panics, nothing is written.
    pub fn apply(
        &self,
        token: FencingToken,
        f: impl FnOnce(&mut WriteBatch),
    ) -> Result<(), FenceError> {
        // A panic in an earlier `f` poisons the lock, but it wrote nothing, so the
        // database is as consistent as before.
        let _guard = self
            .apply_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let highest = self.highest()?;
        if token < highest {
            self.stats.record_stale();
            return Err(FenceError::Stale {
                presented: token,
                highest,
            });
        }
        let mut batch = WriteBatch::default();
        f(&mut batch);
        // Added after `f`, so that a `batch.clear()` in `f` cannot drop it.
        batch.put_cf(self.fence_cf()?, &self.name, token.term().to_be_bytes());
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        self.db
            .write_opt(batch, &sync)
            .map_err(|e| self.rocks_error("writing the fenced batch", e))?;
        self.stats.record_accepted();
        Ok(())
    }

    /// Reads `key` from the caller's data (the default column family).
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, FenceError> {
        self.db
            .get(key)
            .map_err(|e| self.rocks_error("reading a key", e))
    }

    /// The highest token this fence accepted (0 if none).
    pub fn highest(&self) -> Result<FencingToken, FenceError> {
        let stored = self
            .db
            .get_cf(self.fence_cf()?, &self.name)
            .map_err(|e| self.rocks_error("reading the token", e))?;
        match stored {
            None => Ok(FencingToken::new(0)),
            Some(bytes) => match <[u8; 8]>::try_from(bytes.as_slice()) {
                Ok(b) => Ok(FencingToken::new(u64::from_be_bytes(b))),
                Err(_) => Err(FenceError::Corrupt {
                    fence: self.name.clone(),
                    location: self.token_location(),
                    detail: format!("the stored token is {} bytes, expected 8", bytes.len()),
                }),
            },
        }
    }

    fn fence_cf(&self) -> Result<&ColumnFamily, FenceError> {
        self.db
            .cf_handle(FENCE_CF)
            .ok_or_else(|| FenceError::Corrupt {
                fence: self.name.clone(),
                location: self.path.display().to_string(),
                detail: format!("the column family {FENCE_CF} is missing"),
            })
    }

    fn token_location(&self) -> String {
        format!(
            "{}, column family {FENCE_CF}, key {:?}",
            self.path.display(),
            self.name
        )
    }

    fn rocks_error(&self, doing: &str, e: rocksdb::Error) -> FenceError {
        if e.kind() == ErrorKind::Corruption {
            return FenceError::Corrupt {
                fence: self.name.clone(),
                location: self.path.display().to_string(),
                detail: format!("{doing}: {e}"),
            };
        }
        FenceError::Backend {
            fence: self.name.clone(),
            context: format!("{doing} in {}", self.path.display()),
            source: BackendError::Rocks(e),
        }
    }
}

/// Sorts an error of `DB::open` into locked, corrupt and the rest.
fn open_error(name: &str, path: &Path, e: rocksdb::Error) -> FenceError {
    let message = e.to_string();
    if e.kind() == ErrorKind::Corruption {
        return FenceError::Corrupt {
            fence: name.to_owned(),
            location: path.display().to_string(),
            detail: message,
        };
    }
    // RocksDB's wording for its `LOCK` file held by this process or by another one.
    if message.contains("lock hold by current process") || message.contains("While lock file") {
        return FenceError::Locked {
            fence: name.to_owned(),
            path: path.to_path_buf(),
        };
    }
    FenceError::Backend {
        fence: name.to_owned(),
        context: format!("opening RocksDB at {}", path.display()),
        source: BackendError::Rocks(e),
    }
}
