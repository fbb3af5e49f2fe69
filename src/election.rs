//! Named elections: one worker group, many leaderships (`docs/design.md`, section 11).
//!
//! Each named election is its own raft group whose voters are the worker group's voters;
//! its Raft term is its fencing token, so every guarantee tenure gives the group's own
//! election (the *root*, id 0) holds per name. The root replicates the catalog: which
//! names exist, their ids and options. A node's [`Node::election`](crate::Node::election)
//! gives the handle of one name, an [`Election`](crate::Election).
//!
//! # Tokens across incarnations
//!
//! Election `id` is founded at term [`term_floor`]`(id)` = `id × 2^40` and its terms stay
//! below `term_floor(id + 1)`. Ids are never reused, so a name removed and created again
//! hands out tokens above every token its earlier incarnation ever did, and tokens of
//! different elections never coincide ([`FencingToken::election_id`](crate::FencingToken)).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::NodeStopped;
use crate::status::Leadership;
use crate::token::FencingToken;
use crate::transport::NodeId;

/// Every named election's leadership on this node, by name, as of the last driver turn
/// that changed one (see [`Node::elections`](crate::Node::elections)).
pub type ElectionsView = Arc<std::collections::BTreeMap<String, Leadership>>;

/// An election's id: 0 is the root (the group's own election), named elections count up
/// from 1 and are never reused.
pub type ElectionId = u32;

/// Bits of a term below the election id: election `i`'s terms lie in
/// `[i × 2^40, (i + 1) × 2^40)`.
pub const TERM_BITS: u32 = 40;

/// Ids below this keep every token under 2^63 (a signed 64-bit column).
pub const MAX_ELECTION_ID: ElectionId = (1 << 23) - 1;

/// The most named elections a catalog holds at once (fewer when their names are long:
/// [`MAX_CATALOG_BYTES`]).
pub const MAX_ELECTIONS: usize = 65_536;

/// The most bytes the catalog's elections may take together in the root's snapshot:
/// 3 MiB, three quarters of the transport's
/// [`DEFAULT_MAX_FRAME`](crate::transport::frame::DEFAULT_MAX_FRAME).
///
/// The root's snapshot carries the whole catalog to a learner or a lagging follower in
/// one frame, beside the leadership history (at most
/// [`MAX_HISTORY_RETENTION`](crate::config::MAX_HISTORY_RETENTION) records, about 0.6
/// MB) and the members' addresses: a catalog past this would make a snapshot no peer
/// accepts, and no node could join the group again. A `create_election` that would take
/// the catalog past it is refused with [`ElectionError::Full`] when its entry applies,
/// the same on every node. An election takes about 100 bytes and its name: with
/// 128-byte names and five voters the catalog holds about 14,000 elections, with
/// 16-byte names about 28,000 (`docs/design.md`, section 9).
pub const MAX_CATALOG_BYTES: u64 = (crate::transport::frame::DEFAULT_MAX_FRAME as u64) / 4 * 3;

/// The term election `id` is founded at (its first leader leads in the next one).
#[must_use]
pub fn term_floor(id: ElectionId) -> u64 {
    u64::from(id) << TERM_BITS
}

/// The terms a message of election `id` may carry: `[term_floor(id), term_floor(id + 1))`,
/// except that the root's start at 1 (term 0 is raft-rs's "local").
#[must_use]
pub fn term_range(id: ElectionId) -> std::ops::Range<u64> {
    term_floor(id).max(1)..term_floor(id.saturating_add(1))
}

/// The election a term (a token) belongs to.
#[must_use]
pub fn election_of_term(term: u64) -> ElectionId {
    u32::try_from(term >> TERM_BITS).unwrap_or(u32::MAX)
}

/// Checks a name: 1 to 128 bytes of `[A-Za-z0-9._-]`.
///
/// # Errors
/// [`ElectionError::InvalidName`] saying what is wrong.
pub fn check_name(name: &str) -> Result<(), ElectionError> {
    let bad = |why: &str| {
        Err(ElectionError::InvalidName {
            name: name.chars().take(140).collect(),
            why: why.into(),
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > 128 {
        return bad("longer than 128 bytes");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return bad(&format!(
            "holds {c:?}; only A-Z, a-z, 0-9, '.', '_' and '-' are allowed"
        ));
    }
    Ok(())
}

/// Options of a named election.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectionOptions {
    /// Preferred leaders, in order: the balancer places the election on the first of them
    /// that is healthy, undrained and not over its share.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub affinity: Vec<NodeId>,
    /// Which elections move first when the balancer moves some (lower first); 0–255,
    /// default 128.
    #[serde(default = "default_priority")]
    pub priority: u8,
}

fn default_priority() -> u8 {
    128
}

impl ElectionOptions {
    /// Default options: no affinity, priority 128.
    #[must_use]
    pub fn new() -> Self {
        ElectionOptions {
            affinity: Vec::new(),
            priority: 128,
        }
    }

    /// Preferred leaders, in order.
    #[must_use]
    pub fn affinity(mut self, nodes: impl IntoIterator<Item = NodeId>) -> Self {
        self.affinity = nodes.into_iter().collect();
        self
    }

    /// The priority (lower moves first).
    #[must_use]
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }
}

/// A named election as the catalog holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectionInfo {
    /// Its name.
    pub name: String,
    /// Its id (never reused: a name created again gets a new one).
    pub id: ElectionId,
    /// Its options.
    pub options: ElectionOptions,
    /// The root log index of the entry that created it.
    pub created_at: u64,
    /// An operator suspended it ([`Node::suspend_election`](crate::Node::suspend_election)):
    /// no lease of it is granted or held until it is resumed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
}

/// What [`Node::remove_election`](crate::Node::remove_election) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    /// The removed incarnation's id.
    pub id: ElectionId,
    /// A token above every token the removed incarnation can ever hand out: a fence
    /// advanced to it refuses every leader of the removed incarnation, a stalled one
    /// included.
    pub retired_above: FencingToken,
}

/// Why an election operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ElectionError {
    /// No election of that name exists (as far as this node has applied the catalog).
    #[error("no election named {0:?}")]
    NotFound(String),
    /// The name exists already.
    #[error("an election named {0:?} exists already")]
    Exists(String),
    /// The name is not a valid election name.
    #[error("invalid election name {name:?}: {why}")]
    InvalidName {
        /// The name (cut at 140 characters).
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// The catalog is changed by the root leader only; this node is not it.
    #[error("this node does not lead the group; ask the leader{}", leader_hint.map(|l| format!(" (node {l})")).unwrap_or_default())]
    NotLeader {
        /// The leader this node knows of.
        leader_hint: Option<NodeId>,
    },
    /// The catalog holds [`MAX_ELECTIONS`] names already, or every id was used.
    #[error("no room for another election: {0}")]
    Full(String),
    /// The change was proposed but not applied in time (the leader may have changed):
    /// look at the catalog and try again.
    #[error("the change was not applied within {0} ms; look at the catalog and retry")]
    TimedOut(u64),
    /// The election was removed while waiting.
    #[error("election {0:?} was removed")]
    Removed(String),
    /// The node stopped.
    #[error(transparent)]
    Stopped(#[from] NodeStopped),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn term_ranges_are_disjoint_and_fit_a_signed_column() {
        assert_eq!(term_range(0), 1..1 << 40);
        assert_eq!(term_range(1), 1 << 40..2 << 40);
        assert!(term_range(1).end <= term_range(2).start);
        assert!(term_floor(MAX_ELECTION_ID + 1) <= i64::MAX as u64 + 1);
        assert_eq!(term_floor(MAX_ELECTION_ID + 1), 1 << 63);
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("shard-0").is_ok());
        assert!(check_name("a.b_c-D9").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name(&"x".repeat(129)).is_err());
        let e = check_name("shard 0").unwrap_err().to_string();
        assert!(e.contains("' '"), "{e}");
    }
}
