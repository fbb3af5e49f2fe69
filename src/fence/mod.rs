//! Resource-side fencing: the resource keeps the highest
//! [`FencingToken`](crate::FencingToken) it accepted and rejects anything older.
//!
//! A tenure's token is its Raft term, so **token order is term order**. At most one node
//! leads in a term, so an **equal token is the same tenure** and is accepted again (a
//! leader writes many times in its term). A token **lower** than the highest accepted
//! one comes from a leader that has been replaced. However long it stalled (GC, SIGSTOP,
//! a partition), and whatever its clock says, the resource rejects it with
//! [`FenceError::Stale`]. This, not timing, is what stops a woken old leader.
//!
//! # The check belongs to the write
//!
//! The fence checks the token and advances the highest token **atomically with the
//! business write it guards**: one transaction (SQLite) or one write batch (RocksDB)
//! holds both, and concurrent writers are serialized around it. A separate
//! check-then-write is unsafe. The old leader checks its token 41 against the highest,
//! 41, and passes. Then it pauses. The new leader writes with 42. The old leader wakes
//! up and writes with the check it already passed, so its stale data lands on top of
//! 42's. Splitting the advance from the write is unsafe too: a write that commits
//! before (or without) its advance leaves the fence behind the data, so a leader with a
//! token in between can still write over it. So the check, the advance and the write
//! commit together, or none of them does.
//!
//! Every write to the guarded data must go through the fence, in the process that owns
//! the data (the service in front of the database, which receives the token with each
//! request). A write that bypasses the fence is not protected. The fence remembers only
//! what its storage keeps: deleting the `tenure_fence` table or the RocksDB directory
//! resets it to token 0.
//!
//! # Fences
//!
//! | fence | for | the guarded write |
//! |---|---|---|
//! | [`SqliteFence`] | a SQLite database | a closure that runs in the fence's transaction |
//! | [`RocksFence`] | key-value data in a RocksDB directory of its own | a closure that fills the fence's write batch |
//!
//! Other SQL databases take the same pattern: in the write's transaction, run
//! `UPDATE tenure_fence SET token = $1 WHERE name = $2 AND token <= $1` first, and
//! roll back if it changed no row.
//!
//! Each fence counts what it accepted and rejected ([`FenceStats`]).

mod error;
mod rocks;
mod sqlite;
mod stats;

pub use error::{BackendError, FenceError};
pub use rocks::RocksFence;
pub use sqlite::SqliteFence;
pub use stats::{FenceStats, FenceStatsSnapshot};

/// The `rocksdb` crate that [`RocksFence`] is built on, so that callers name the same
/// `WriteBatch` type.
pub use rocksdb;
/// The `rusqlite` crate that [`SqliteFence`] is built on, so that callers open their
/// connections with the same version.
pub use rusqlite;
