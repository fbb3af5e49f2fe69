//! Disaster recovery: a backup of the group's replicated state, and founding again from
//! it with a term floor so that fencing tokens never go back (`docs/design.md`,
//! section 6, "Disaster recovery").
//!
//! If every member loses its data, a group founded again would start at term 1, and every
//! resource that remembers token 41 would refuse the new leaders forever. A [`Backup`]
//! ([`Node::backup`](crate::Node::backup), `tenure-ctl backup`) holds what the group
//! replicates (membership, drains, history, the catalog of named elections with the next
//! id) and the highest term of the root and of every named election the answering node
//! knows. Founding with [`ConfigBuilder::restore_from`](crate::ConfigBuilder::restore_from)
//! restores it and starts every election above its recorded term plus
//! [`RESTORE_MARGIN`]; [`ConfigBuilder::term_floor`](crate::ConfigBuilder::term_floor)
//! sets the root's floor by hand.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::election::{term_floor, term_range, ElectionId, ElectionOptions};
use crate::group_id::GroupId;
use crate::history::TenureRecord;
use crate::status::Membership;
use crate::NodeId;

/// The version of the backup file this build writes and reads.
pub const BACKUP_VERSION: u32 = 1;

/// How far above a recorded term a restored election starts: room for the terms the
/// group went through between the backup and the loss (a million elections).
pub const RESTORE_MARGIN: u64 = 1 << 20;

/// The highest term the root election may reach (its tokens stay below the first named
/// election's).
pub const MAX_ROOT_TERM: u64 = (1 << crate::election::TERM_BITS) - 1;

/// A backup of a group's replicated state (a versioned JSON document).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    /// [`BACKUP_VERSION`].
    pub version: u32,
    /// The group.
    pub group: GroupId,
    /// The node that answered, and whether it led the group then (a leader's view is the
    /// newest; a follower's may lag a little behind).
    pub taken_by: NodeId,
    /// Whether `taken_by` led the group when it answered.
    pub taken_from_leader: bool,
    /// The root election's term at `taken_by` (its highest token so far).
    pub term: u64,
    /// The membership (voters, learners, drained, addresses).
    pub members: Membership,
    /// The leadership history, oldest first.
    pub history: Vec<TenureRecord>,
    /// The id the next created election gets (ids are never reused).
    pub next_election_id: ElectionId,
    /// The named elections, by name.
    pub elections: BTreeMap<String, BackupElection>,
}

/// One named election in a [`Backup`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupElection {
    /// Its id.
    pub id: ElectionId,
    /// Its options.
    pub options: ElectionOptions,
    /// Its highest term (token) the answering node knew: 0 if it did not run it.
    pub term: u64,
}

impl Backup {
    /// Reads a backup file's text; an error says what is wrong.
    pub fn from_json(text: &str) -> Result<Backup, String> {
        let backup: Backup =
            serde_json::from_str(text).map_err(|e| format!("not a tenure backup: {e}"))?;
        if backup.version != BACKUP_VERSION {
            return Err(format!(
                "backup version {}; this build reads version {BACKUP_VERSION}",
                backup.version
            ));
        }
        backup.check()?;
        Ok(backup)
    }

    /// The backup as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Refuses a backup whose numbers cannot be restored.
    pub fn check(&self) -> Result<(), String> {
        if self.term > MAX_ROOT_TERM {
            return Err(format!(
                "the backup's root term {} is above the root's maximum {MAX_ROOT_TERM}",
                self.term
            ));
        }
        for (name, e) in &self.elections {
            if e.id == 0 || e.id >= self.next_election_id {
                return Err(format!(
                    "election {name:?} has id {}, not in 1..{} (the backup's next id)",
                    e.id, self.next_election_id
                ));
            }
            if e.term != 0 && !term_range(e.id).contains(&e.term) {
                return Err(format!(
                    "election {name:?} (id {}) has term {}, outside its range {:?}",
                    e.id,
                    e.term,
                    term_range(e.id)
                ));
            }
        }
        Ok(())
    }

    /// The term the root is founded at when restoring this backup: above every token the
    /// backup knows, with [`RESTORE_MARGIN`] for those after it.
    pub fn root_floor(&self) -> u64 {
        self.term.saturating_add(RESTORE_MARGIN).min(MAX_ROOT_TERM)
    }
}

/// The term named election `id` is founded at after a restore: its own floor, or above
/// its recorded term with the margin (never past its range).
pub(crate) fn election_floor(id: ElectionId, recorded: u64) -> u64 {
    let last = term_floor(id.saturating_add(1)).saturating_sub(1);
    if recorded == 0 {
        // Not run by the node that answered: its floor plus the margin still keeps it
        // above what the others may have handed out, up to a million terms.
        return term_floor(id).saturating_add(RESTORE_MARGIN).min(last);
    }
    recorded.saturating_add(RESTORE_MARGIN).min(last)
}

/// A 64-bit digest (FNV-1a) of what founders must agree on; the same on every build.
pub(crate) fn digest(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup() -> Backup {
        Backup {
            version: BACKUP_VERSION,
            group: GroupId::random(),
            taken_by: 1,
            taken_from_leader: true,
            term: 41,
            members: Membership::default(),
            history: vec![],
            next_election_id: 3,
            elections: BTreeMap::from([(
                "a".to_string(),
                BackupElection {
                    id: 2,
                    options: ElectionOptions::default(),
                    term: term_floor(2) + 7,
                },
            )]),
        }
    }

    #[test]
    fn round_trips_and_refuses_what_it_cannot_restore() {
        let b = backup();
        assert_eq!(Backup::from_json(&b.to_json()).unwrap(), b);
        assert_eq!(b.root_floor(), 41 + RESTORE_MARGIN);
        let mut v = b.clone();
        v.version = 2;
        assert!(Backup::from_json(&v.to_json())
            .unwrap_err()
            .contains("version"));
        let mut v = b.clone();
        v.next_election_id = 2;
        assert!(v.check().unwrap_err().contains("next id"));
        let mut v = b.clone();
        v.elections.get_mut("a").unwrap().term = 5;
        assert!(v.check().unwrap_err().contains("range"));
        assert!(Backup::from_json("{}")
            .unwrap_err()
            .contains("not a tenure backup"));
    }

    #[test]
    fn restored_elections_start_above_their_terms_within_their_range() {
        assert_eq!(
            election_floor(2, term_floor(2) + 7),
            term_floor(2) + 7 + RESTORE_MARGIN
        );
        assert_eq!(election_floor(2, 0), term_floor(2) + RESTORE_MARGIN);
        assert_eq!(election_floor(2, term_floor(3) - 2), term_floor(3) - 1);
        assert_ne!(digest(b"a"), digest(b"b"));
        assert_eq!(digest(b""), 0xcbf2_9ce4_8422_2325);
    }
}
