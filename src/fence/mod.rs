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
//! | `PgFence` (the `postgres` feature) | a PostgreSQL database | a closure that runs in the fence's transaction, or your own transaction |
//! | `http::FenceLayer` (the `http-fence` feature) | an HTTP service | its handler's write, through one of the above; the layer hands it the request's token |
//! | [`outbox::SqliteOutbox`] | messages to a broker | a message pushed in the fence's transaction; a relay publishes it with its token, and consumers drop older tokens ([`outbox::Consumer`]) |
//!
//! The files: `sqlite.rs`, `rocks.rs` and `postgres.rs` hold the fences, `error.rs`
//! [`FenceError`], `stats.rs` [`FenceStats`].
//!
//! Other SQL databases take the same pattern: in the write's transaction, run
//! `UPDATE tenure_fence SET token = $1 WHERE name = $2 AND token <= $1` first, and
//! roll back if it changed no row. The update must write the row even for an equal
//! token: its row lock, held to the commit, is what makes the fence's writers take
//! turns (`docs/design.md`, section 16, says why for PostgreSQL's isolation levels).
//!
//! Each fence counts what it accepted and rejected ([`FenceStats`]).
//!
//! # One fence per election, keyed by its name
//!
//! A worker group that runs named elections (`docs/design.md`, section 11) guards each
//! election's resource with a fence of its own, named by the **election's name**: the
//! leader of `shard-3` writes shard 3 through the fence `"shard-3"`, with `shard-3`'s
//! token. Election `id`'s tokens lie in `[id × 2^40, (id + 1) × 2^40)`
//! ([`election::term_floor`](crate::election::term_floor);
//! [`election_of_term`](crate::election::election_of_term) tells the id back), and that
//! is why the key must be the name:
//!
//! - **Tokens of different names never mix.** One fence for every election would accept
//!   only the election with the highest id: `shard-1`'s tokens (id 2) are all above
//!   `shard-0`'s (id 1), so once `shard-1` wrote, every `shard-0` leader would be refused
//!   for good. Compared with each other, two elections' tokens say nothing about who
//!   leads what.
//! - **A removed and recreated name keeps its tokens increasing.** Ids are never reused,
//!   so the name's next incarnation hands out tokens above every token of the one before:
//!   the fence keyed by the name accepts the new leader at once and refuses a stalled
//!   leader of the removed incarnation from the new leader's first write on. A fence
//!   keyed by the election's *id* would start again at 0 for the new incarnation, and the
//!   old incarnation's leader, still holding its own fence, could write the same
//!   resource beside the new one.
//!
//! ```
//! use rusqlite::Connection;
//! use tenure::election::term_floor;
//! use tenure::fence::{FenceError, SqliteFence};
//! use tenure::FencingToken;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut conn = Connection::open_in_memory()?;
//! // One fence per election, keyed by the election's name (rows of one table).
//! let shard0 = SqliteFence::install(&conn, "shard-0")?;
//! let shard1 = SqliteFence::install(&conn, "shard-1")?;
//! // shard-0 is election 1, shard-1 election 2 (ids in creation order).
//! let old_leader = FencingToken::new(term_floor(1) + 3);
//! shard1.write(&mut conn, FencingToken::new(term_floor(2) + 1), |_| Ok(()))?;
//! // shard-1's higher tokens do not refuse shard-0's leader: another fence.
//! shard0.write(&mut conn, old_leader, |_| Ok(()))?;
//!
//! // shard-0 is removed and created again: a new id, 3, so its first token is above
//! // every token of the removed incarnation, and the same fence accepts it...
//! shard0.write(&mut conn, FencingToken::new(term_floor(3) + 1), |_| Ok(()))?;
//! // ... and refuses the removed incarnation's stalled leader from then on.
//! assert!(matches!(
//!     shard0.write(&mut conn, old_leader, |_| Ok(())),
//!     Err(FenceError::Stale { .. })
//! ));
//! # Ok(())
//! # }
//! ```
//!
//! [`LeaderTask::for_elections`](crate::runner::LeaderTask::for_elections) hands each
//! task its election's name with the lease: pick the fence by that name. For
//! [`RocksFence`], which owns its directory, that is one directory per election (or one
//! RocksDB of your own, with the election's name in the key of its token). To retire a
//! removed name's last leader before the name comes back, advance its fence to
//! [`Removed::retired_above`](crate::election::Removed::retired_above).

mod error;
#[cfg(feature = "http-fence")]
pub mod http;
pub mod outbox;
#[cfg(feature = "postgres")]
mod postgres;
mod rocks;
mod sqlite;
mod stats;

pub use error::{BackendError, FenceError};
#[cfg(feature = "postgres")]
pub use postgres::{PgFence, PgWriteFuture};
pub use rocks::RocksFence;
pub use sqlite::SqliteFence;
pub use stats::{FenceStats, FenceStatsSnapshot};

/// The `rocksdb` crate that [`RocksFence`] is built on, so that callers name the same
/// `WriteBatch` type.
pub use rocksdb;
/// The `rusqlite` crate that [`SqliteFence`] is built on, so that callers open their
/// connections with the same version.
pub use rusqlite;
/// The `tokio-postgres` crate that [`PgFence`] is built on (the `postgres` feature), so
/// that callers connect with the same version.
#[cfg(feature = "postgres")]
pub use tokio_postgres;
