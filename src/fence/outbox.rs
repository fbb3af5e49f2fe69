//! A transactional outbox under a fence: messages a leader sends, written in the same
//! transaction as the state change they announce, so a stale leader sends nothing.
//!
//! A leader that publishes to a broker directly has two writes to make, the state and
//! the message, and no fence on the broker: a stale leader's message goes out although
//! its state change was refused, and a crash between the two loses one of them. The
//! outbox makes the message part of the fenced write:
//!
//! 1. **Push, under the fence.** In [`SqliteFence::write`]'s transaction, the leader
//!    changes its state and [`push`](SqliteOutbox::push)es the message into
//!    `tenure_outbox`, with its token. Both commit or neither does; a stale token's
//!    transaction is refused whole, message included.
//! 2. **Relay.** A relay (the leader, under its lease) reads the messages in the order
//!    they committed and publishes each with its fence, token and sequence number
//!    attached ([`relay`](SqliteOutbox::relay)), then marks them published through the
//!    fence. A relay that crashes between publishing and marking publishes those messages
//!    again: delivery is at least once. A relay that stalled and wakes publishes what it
//!    had read (a broker has no fence), and its mark is refused as stale.
//! 3. **Consume, dropping what is old.** Sequence numbers and tokens both grow in commit
//!    order (the fence orders every write of its name), so a consumer keeps, per fence,
//!    the highest token and sequence number it applied, and drops a message below
//!    either ([`Consumer`]): a duplicate from a relay's retry, or a stalled relay's late
//!    copy. It keeps them in its own store, in the transaction that applies the message
//!    (the consumer is a fenced resource itself), or in memory when it starts from
//!    nothing each time.
//!
//! The same tables work on PostgreSQL (with `bigserial` for `seq`, and `PgFence::write`
//! for the push and the mark).
//!
//! ```
//! use tenure::fence::outbox::{Consumer, SqliteOutbox, Verdict};
//! use tenure::fence::{rusqlite::Connection, SqliteFence};
//! use tenure::FencingToken;
//!
//! let mut conn = Connection::open_in_memory()?;
//! conn.execute_batch("CREATE TABLE balances (account TEXT PRIMARY KEY, cents INTEGER)")?;
//! let fence = SqliteFence::install(&conn, "settlement")?;
//! let outbox = SqliteOutbox::install(&conn, &fence)?;
//!
//! // The leader with token 42 changes the state and sends a message, in one transaction.
//! let token = FencingToken::new(42);
//! fence.write(&mut conn, token, |tx| {
//!     tx.execute("INSERT INTO balances VALUES ('acme', 1200)", [])?;
//!     outbox.push(tx, token, "payouts", b"acme paid 12.00")?;
//!     Ok(())
//! })?;
//!
//! // The relay publishes (here into a Vec; a broker's client in production).
//! let mut sent = Vec::new();
//! let n = outbox.relay(&mut conn, token, 100, |m| {
//!     sent.push(m.clone());
//!     Ok::<(), std::convert::Infallible>(())
//! })?;
//! assert_eq!(n, 1);
//!
//! // The consumer applies each message once, and drops what an older token sent.
//! let mut consumer = Consumer::new();
//! assert_eq!(consumer.accept(&sent[0]), Verdict::Apply);
//! assert!(matches!(consumer.accept(&sent[0]), Verdict::Duplicate { .. }));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;

use rusqlite::{params, Connection, Transaction};

use super::{FenceError, SqliteFence};
use crate::FencingToken;

/// The outbox's table (created by [`SqliteOutbox::install`], or by a DBA).
pub const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS tenure_outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    fence TEXT NOT NULL,
    token INTEGER NOT NULL CHECK (token >= 0),
    topic TEXT NOT NULL,
    payload BLOB NOT NULL,
    published_ns INTEGER
);
CREATE INDEX IF NOT EXISTS tenure_outbox_pending ON tenure_outbox (fence, seq)
    WHERE published_ns IS NULL;";

/// A message as the outbox keeps it and a relay publishes it: the consumer needs
/// `fence`, `token` and `seq` beside the payload (as a broker's headers or attributes,
/// or in an envelope).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxMessage {
    /// Its place in the outbox: grows in commit order.
    pub seq: u64,
    /// The fence it was written under.
    pub fence: String,
    /// The token of the leader that wrote it.
    pub token: FencingToken,
    /// Where it goes (a topic, a queue, a subject).
    pub topic: String,
    /// What it says.
    pub payload: Vec<u8>,
}

/// Why a relay stopped: the outbox or the fence failed (a stale token among them), or
/// publishing did.
#[derive(Debug, thiserror::Error)]
pub enum RelayError<E: std::error::Error + 'static> {
    /// The outbox's database or its fence (`FenceError::Stale`: this relay no longer
    /// leads; what it published is dropped by consumers that saw newer tokens).
    #[error(transparent)]
    Fence(#[from] FenceError),
    /// Publishing message `seq` failed; it and those after it stay unpublished.
    #[error("publishing outbox message {seq}: {source}")]
    Publish {
        /// The message that was not published.
        seq: u64,
        /// The publisher's error.
        #[source]
        source: E,
    },
}

/// The outbox of one fence, in the fence's SQLite database.
#[derive(Debug, Clone)]
pub struct SqliteOutbox {
    fence: SqliteFence,
}

impl SqliteOutbox {
    /// Creates `tenure_outbox` if it is missing (calling it at every start is right).
    ///
    /// # Errors
    /// [`FenceError::Backend`] naming what failed.
    pub fn install(conn: &Connection, fence: &SqliteFence) -> Result<SqliteOutbox, FenceError> {
        let outbox = SqliteOutbox {
            fence: fence.clone(),
        };
        conn.execute_batch(CREATE_TABLE)
            .map_err(|e| outbox.fence.backend("creating the table tenure_outbox", e))?;
        Ok(outbox)
    }

    /// Writes a message into the outbox, inside the fence's transaction (the closure of
    /// [`SqliteFence::write`], or a transaction that
    /// [`check_and_advance`](SqliteFence::check_and_advance) passed), with the token that
    /// transaction was checked with. Returns its sequence number.
    ///
    /// Outside a fenced transaction the message is not fenced: that is the caller's
    /// promise, as for every guarded write.
    pub fn push(
        &self,
        tx: &Transaction<'_>,
        token: FencingToken,
        topic: &str,
        payload: &[u8],
    ) -> rusqlite::Result<u64> {
        let token = i64::try_from(token.term())
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        tx.execute(
            "INSERT INTO tenure_outbox (fence, token, topic, payload) VALUES (?1, ?2, ?3, ?4)",
            params![self.fence.name(), token, topic, payload],
        )?;
        Ok(tx.last_insert_rowid() as u64)
    }

    /// Up to `limit` messages not yet published, oldest first.
    ///
    /// # Errors
    /// [`FenceError::Backend`] naming what failed.
    pub fn pending(
        &self,
        conn: &Connection,
        limit: usize,
    ) -> Result<Vec<OutboxMessage>, FenceError> {
        let read = || -> rusqlite::Result<Vec<OutboxMessage>> {
            let mut st = conn.prepare_cached(
                "SELECT seq, token, topic, payload FROM tenure_outbox
                 WHERE fence = ?1 AND published_ns IS NULL ORDER BY seq LIMIT ?2",
            )?;
            let rows = st.query_map(
                params![self.fence.name(), i64::try_from(limit).unwrap_or(i64::MAX)],
                |r| {
                    Ok(OutboxMessage {
                        seq: r.get::<_, i64>(0)? as u64,
                        fence: self.fence.name().to_owned(),
                        token: FencingToken::new(r.get::<_, i64>(1)? as u64),
                        topic: r.get(2)?,
                        payload: r.get(3)?,
                    })
                },
            )?;
            rows.collect()
        };
        read().map_err(|e| {
            self.fence
                .backend("reading the unpublished messages of tenure_outbox", e)
        })
    }

    /// Publishes up to `limit` pending messages in order with `publish`, then marks those
    /// published through the fence with `token` (the relay's lease's). Returns how many
    /// it published.
    ///
    /// # Errors
    /// [`RelayError::Publish`] when `publish` fails (the messages before it are marked);
    /// [`RelayError::Fence`] when the outbox cannot be read or marked, `Stale` when this
    /// relay's token is older than the fence's (it must stop: it no longer leads).
    pub fn relay<E: std::error::Error + 'static>(
        &self,
        conn: &mut Connection,
        token: FencingToken,
        limit: usize,
        mut publish: impl FnMut(&OutboxMessage) -> Result<(), E>,
    ) -> Result<usize, RelayError<E>> {
        let pending = self.pending(conn, limit)?;
        let mut done: Option<u64> = None;
        let mut failed = None;
        for m in &pending {
            if let Err(source) = publish(m) {
                failed = Some(RelayError::Publish { seq: m.seq, source });
                break;
            }
            done = Some(m.seq);
        }
        if let Some(through) = done {
            self.mark_published(conn, token, through)?;
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(pending.len()),
        }
    }

    /// Marks this fence's messages up to `through` published, through the fence with
    /// `token`.
    ///
    /// # Errors
    /// What [`SqliteFence::write`] says (`Stale` for an older token).
    pub fn mark_published(
        &self,
        conn: &mut Connection,
        token: FencingToken,
        through: u64,
    ) -> Result<usize, FenceError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        self.fence.write(conn, token, |tx| {
            tx.execute(
                "UPDATE tenure_outbox SET published_ns = ?1
                 WHERE fence = ?2 AND seq <= ?3 AND published_ns IS NULL",
                params![now, self.fence.name(), through as i64],
            )
        })
    }
}

/// What a [`Consumer`] says of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// New: apply it.
    Apply,
    /// Applied already (or a message after it was): drop it. A relay's retry.
    Duplicate {
        /// The highest sequence number applied for its fence.
        applied: u64,
    },
    /// Sent under a token older than one already applied for its fence: drop it. A
    /// stalled relay's late copy.
    Stale {
        /// The message's token.
        presented: FencingToken,
        /// The highest token applied for its fence.
        highest: FencingToken,
    },
}

/// The consumer's side of the outbox: per fence, the highest token and sequence number
/// applied. A consumer whose effects outlive it keeps these in its own store, in the
/// transaction that applies the message; this one keeps them in memory.
#[derive(Debug, Clone, Default)]
pub struct Consumer {
    applied: HashMap<String, (FencingToken, u64)>,
}

impl Consumer {
    /// A consumer that has applied nothing.
    pub fn new() -> Consumer {
        Consumer::default()
    }

    /// A consumer that resumes from what its store says it applied: `(fence, highest
    /// token, highest sequence number)`.
    pub fn resume(applied: impl IntoIterator<Item = (String, FencingToken, u64)>) -> Consumer {
        Consumer {
            applied: applied.into_iter().map(|(f, t, s)| (f, (t, s))).collect(),
        }
    }

    /// Judges `m` by its fence, token and sequence number, and counts it applied if it
    /// is new.
    pub fn accept(&mut self, m: &OutboxMessage) -> Verdict {
        self.judge(&m.fence, m.token, m.seq)
    }

    /// [`accept`](Self::accept) for a message whose fields came apart (a broker's
    /// headers).
    pub fn judge(&mut self, fence: &str, token: FencingToken, seq: u64) -> Verdict {
        match self.applied.get_mut(fence) {
            Some((highest, _)) if token < *highest => Verdict::Stale {
                presented: token,
                highest: *highest,
            },
            Some((_, applied)) if seq <= *applied => Verdict::Duplicate { applied: *applied },
            Some(last) => {
                *last = (token, seq);
                Verdict::Apply
            }
            None => {
                self.applied.insert(fence.to_owned(), (token, seq));
                Verdict::Apply
            }
        }
    }

    /// What it applied, per fence: `(fence, highest token, highest sequence number)`.
    pub fn applied(&self) -> impl Iterator<Item = (&str, FencingToken, u64)> {
        self.applied.iter().map(|(f, (t, s))| (f.as_str(), *t, *s))
    }
}
