//! Disaster recovery: a backup of the group's replicated state, and founding again from
//! it with a term floor so that fencing tokens never go back (`docs/design.md`,
//! section 6, "Disaster recovery").
//!
//! If every member loses its data, a group founded again would start at term 1, and every
//! resource that remembers token 41 would refuse the new leaders forever. A [`Backup`]
//! ([`Node::backup`](crate::Node::backup), `tenure-ctl backup`) holds what the group
//! replicates (membership, drains, history, the catalog of named elections with the next
//! id) and the highest term of the root and of every named election the answering node
//! knows.
//!
//! A backup is not restored as it is: it is first made into a [`RestorePlan`] (once, by
//! `tenure-ctl restore-plan`), and every first member founds from that one plan with
//! [`ConfigBuilder::restore_from`](crate::ConfigBuilder::restore_from). The plan draws a
//! new group id (the backup's is kept as its origin) and starts every election above its
//! recorded term plus [`RESTORE_MARGIN`] plus one term per millisecond between the
//! backup and the plan, so two restores of one backup are two groups whose nodes refuse
//! each other, and the later plan's tokens start above every token the earlier one's
//! group handed out before it was made (`docs/design.md`, section 6).
//! [`ConfigBuilder::term_floor`](crate::ConfigBuilder::term_floor) sets the root's floor
//! by hand.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::election::{
    term_floor, term_range, ElectionId, ElectionOptions, MAX_CATALOG_BYTES, MAX_ELECTION_ID,
};
use crate::group_id::GroupId;
use crate::history::TenureRecord;
use crate::state::{catalog_bytes, ElectionSpec};
use crate::status::Membership;
use crate::NodeId;

/// The version of the backup file this build writes (it reads 1 too: no creation time).
pub const BACKUP_VERSION: u32 = 2;

/// The version of the restore plan file this build writes and reads.
pub const PLAN_VERSION: u32 = 1;

/// How far above a backup's next election id a restored catalog starts: room for the
/// elections the group created between the backup and the loss (as many as a catalog
/// holds at once), so that no id is handed out twice.
pub const ID_MARGIN: ElectionId = crate::election::MAX_ELECTIONS as ElectionId;

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
    /// When the answering node took it: milliseconds since the Unix epoch on its wall
    /// clock (0 in a version 1 file, which did not record it).
    #[serde(default)]
    pub taken_unix_ms: u64,
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
    /// An operator suspended it: the restored group starts it suspended too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
}

impl Backup {
    /// Reads a backup file's text (version 1 or 2); an error says what is wrong.
    pub fn from_json(text: &str) -> Result<Backup, String> {
        let backup: Backup =
            serde_json::from_str(text).map_err(|e| format!("not a tenure backup: {e}"))?;
        if !(1..=BACKUP_VERSION).contains(&backup.version) {
            return Err(format!(
                "version: backup version {}; this build reads versions 1 to {BACKUP_VERSION}",
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

    /// Refuses a backup whose numbers cannot be restored, naming the field.
    pub fn check(&self) -> Result<(), String> {
        if self.term > MAX_ROOT_TERM {
            return Err(format!(
                "term: the backup's root term {} is above the root's maximum {MAX_ROOT_TERM}",
                self.term
            ));
        }
        if self.next_election_id > MAX_ELECTION_ID.saturating_add(1) {
            return Err(format!(
                "next_election_id: {} is above the largest election id {MAX_ELECTION_ID} + 1",
                self.next_election_id
            ));
        }
        for (name, e) in &self.elections {
            if e.id == 0 || e.id > MAX_ELECTION_ID {
                return Err(format!(
                    "elections.{name}.id: {} is not an election id (1 to {MAX_ELECTION_ID})",
                    e.id
                ));
            }
            if e.id >= self.next_election_id {
                return Err(format!(
                    "elections.{name}.id: {} is not below the backup's next_election_id {}",
                    e.id, self.next_election_id
                ));
            }
            if e.term != 0 && !term_range(e.id).contains(&e.term) {
                return Err(format!(
                    "elections.{name}.term: {} is outside election {}'s range {:?}",
                    e.term,
                    e.id,
                    term_range(e.id)
                ));
            }
        }
        Ok(())
    }

    /// When the backup was taken, as far as it is known: its own record, or for a
    /// version 1 file the newest tenure it recorded (it was taken after that began), or
    /// `None` if it recorded none.
    pub fn taken_at_least_unix_ms(&self) -> Option<u64> {
        if self.taken_unix_ms != 0 {
            return Some(self.taken_unix_ms);
        }
        self.history.iter().map(|r| r.began_unix_ms).max()
    }
}

/// How a backup is restored: the group id every first member founds, and the margin
/// every election starts above its recorded term by (`docs/design.md`, section 6,
/// "Disaster recovery"). Made once ([`RestorePlan::make`], `tenure-ctl restore-plan`)
/// and given to every first member: a restore made from another plan is another group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestorePlan {
    /// [`PLAN_VERSION`].
    pub plan_version: u32,
    /// The restored group's id: new, drawn when the plan was made.
    pub group: GroupId,
    /// The group the backup was taken of.
    pub origin: GroupId,
    /// When the plan was made: milliseconds since the Unix epoch on the planner's clock.
    pub planned_unix_ms: u64,
    /// How far above its recorded term every election starts: [`RESTORE_MARGIN`] plus one
    /// term per millisecond from the backup to the plan.
    pub margin: u64,
    /// The backup restored.
    pub backup: Backup,
}

impl RestorePlan {
    /// The plan of restoring `backup` as group `group`, made at `planned_unix_ms`.
    ///
    /// # Errors
    /// A message naming the field if the backup is invalid, `group` is the backup's own,
    /// or an election would start past the end of its token range.
    pub fn new(backup: Backup, group: GroupId, planned_unix_ms: u64) -> Result<Self, String> {
        let mut since = backup
            .taken_at_least_unix_ms()
            .map_or(0, |t| planned_unix_ms.saturating_sub(t));
        if crate::mutation::active("plan-margin-ignores-the-clock") {
            since = 0;
        }
        let plan = RestorePlan {
            plan_version: PLAN_VERSION,
            group,
            origin: backup.group,
            planned_unix_ms,
            margin: RESTORE_MARGIN.saturating_add(since),
            backup,
        };
        plan.check()?;
        Ok(plan)
    }

    /// The plan of restoring `backup` now, as a new group.
    ///
    /// # Errors
    /// As [`RestorePlan::new`].
    pub fn make(backup: Backup) -> Result<Self, String> {
        RestorePlan::new(backup, GroupId::random(), crate::clock::wall_unix_ms())
    }

    /// Reads a plan file's text; an error says what is wrong, and what to do with a
    /// backup given in its place.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let plan: RestorePlan = match serde_json::from_str(text) {
            Ok(plan) => plan,
            Err(_) if Backup::from_json(text).is_ok() => {
                return Err("this is a backup, not a restore plan: make one plan of it \
                     (`tenure-ctl restore-plan --backup FILE --out PLAN`) and give every \
                     first member that plan"
                    .into());
            }
            Err(e) => return Err(format!("not a tenure restore plan: {e}")),
        };
        if plan.plan_version != PLAN_VERSION {
            return Err(format!(
                "plan_version: {}; this build reads version {PLAN_VERSION}",
                plan.plan_version
            ));
        }
        plan.check()?;
        Ok(plan)
    }

    /// The plan as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Refuses a plan that cannot be restored safely, naming the field.
    pub fn check(&self) -> Result<(), String> {
        self.backup.check().map_err(|e| format!("backup.{e}"))?;
        if self.origin != self.backup.group {
            return Err(format!(
                "origin: {} is not the backup's group {}",
                self.origin, self.backup.group
            ));
        }
        if self.group == self.origin {
            return Err(format!(
                "group: {} is the backup's own group; a restored group gets a new id",
                self.group
            ));
        }
        if self.margin < RESTORE_MARGIN {
            return Err(format!(
                "margin: {} is below the least margin {RESTORE_MARGIN}",
                self.margin
            ));
        }
        if self.root_floor() > MAX_ROOT_TERM {
            return Err(format!(
                "margin: the root would start at term {}, above its maximum {MAX_ROOT_TERM}",
                self.root_floor()
            ));
        }
        if self.next_election_id() > MAX_ELECTION_ID.saturating_add(1) {
            return Err(format!(
                "backup.next_election_id: {} plus the id margin {ID_MARGIN} is past the \
                 largest election id {MAX_ELECTION_ID}",
                self.backup.next_election_id
            ));
        }
        for (name, e) in &self.backup.elections {
            let floor = self.election_floor(e.id, e.term);
            if floor >= term_floor(e.id.saturating_add(1)) {
                return Err(format!(
                    "margin: election {name} (id {}) would start at term {floor}, past the \
                     end of its range {:?}",
                    e.id,
                    term_range(e.id)
                ));
            }
        }
        let catalog = self.catalog(&self.backup.members.voters);
        let bytes: u64 = catalog.iter().map(|(n, s)| catalog_bytes(n, s)).sum();
        if bytes > MAX_CATALOG_BYTES {
            return Err(format!(
                "backup.elections: the {} elections would take {bytes} bytes of the \
                 catalog, above its limit of {MAX_CATALOG_BYTES} (docs/design.md, section \
                 9): no snapshot of the restored group would reach a new member",
                catalog.len()
            ));
        }
        Ok(())
    }

    /// The catalog the restored group starts with when `voters` found it: every election
    /// of the backup at its floor ([`RestorePlan::election_floor`]).
    pub(crate) fn catalog(&self, voters: &[NodeId]) -> BTreeMap<String, ElectionSpec> {
        self.backup
            .elections
            .iter()
            .map(|(name, e)| {
                let spec = ElectionSpec {
                    id: e.id,
                    options: e.options.clone(),
                    created_at: 1,
                    voters: voters.to_vec(),
                    learners: Vec::new(),
                    floor: Some(self.election_floor(e.id, e.term)),
                };
                (name.clone(), spec)
            })
            .collect()
    }

    /// The term the root is founded at: above every token the backup knows, by the margin.
    pub fn root_floor(&self) -> u64 {
        self.backup.term.saturating_add(self.margin)
    }

    /// The term named election `id` is founded at: above its recorded term by the margin
    /// (above its own floor if the answering node did not run it). Elections the restored
    /// group creates start above their own floor by the margin too.
    pub fn election_floor(&self, id: ElectionId, recorded: u64) -> u64 {
        recorded.max(term_floor(id)).saturating_add(self.margin)
    }

    /// The id the restored group's next election gets: above every id the lost group may
    /// have given after the backup.
    pub fn next_election_id(&self) -> ElectionId {
        self.backup
            .next_election_id
            .max(1)
            .saturating_add(ID_MARGIN)
    }
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
            taken_unix_ms: 1_000_000,
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
                    suspended: false,
                },
            )]),
        }
    }

    #[test]
    fn round_trips_and_refuses_what_it_cannot_restore_naming_the_field() {
        let b = backup();
        assert_eq!(Backup::from_json(&b.to_json()).unwrap(), b);
        let mut v = b.clone();
        v.version = 3;
        assert!(Backup::from_json(&v.to_json())
            .unwrap_err()
            .starts_with("version"));
        // Version 1 had no creation time: read, with none.
        let mut v = b.clone();
        v.version = 1;
        let text = v.to_json().replace("\"taken_unix_ms\": 1000000,", "");
        assert_eq!(Backup::from_json(&text).unwrap().taken_unix_ms, 0);
        let mut v = b.clone();
        v.next_election_id = 2;
        assert!(v.check().unwrap_err().starts_with("elections.a.id"));
        let mut v = b.clone();
        v.elections.get_mut("a").unwrap().term = 5;
        assert!(v.check().unwrap_err().starts_with("elections.a.term"));
        // A hand-edited id above the largest: its term floor would drop the high bits.
        let mut v = b.clone();
        v.next_election_id = MAX_ELECTION_ID + 2;
        assert!(v.check().unwrap_err().starts_with("next_election_id"));
        v.next_election_id = MAX_ELECTION_ID + 1;
        v.elections.get_mut("a").unwrap().id = 1 << 24;
        v.elections.get_mut("a").unwrap().term = 0;
        assert!(v.check().unwrap_err().starts_with("elections.a.id"));
        let mut v = b.clone();
        v.term = MAX_ROOT_TERM + 1;
        assert!(v.check().unwrap_err().starts_with("term"));
        assert!(Backup::from_json("{}")
            .unwrap_err()
            .contains("not a tenure backup"));
    }

    #[test]
    fn a_plan_is_a_new_group_above_the_backup_by_a_margin_that_grows_with_the_clock() {
        let b = backup();
        let g1 = GroupId::from_u128(1).unwrap();
        let g2 = GroupId::from_u128(2).unwrap();
        let p1 = RestorePlan::new(b.clone(), g1, 1_000_000 + 60_000).unwrap();
        assert_eq!(p1.margin, RESTORE_MARGIN + 60_000);
        assert_eq!(p1.origin, b.group);
        assert_eq!(p1.root_floor(), 41 + RESTORE_MARGIN + 60_000);
        assert_eq!(
            p1.election_floor(2, term_floor(2) + 7),
            term_floor(2) + 7 + p1.margin
        );
        assert_eq!(p1.election_floor(5, 0), term_floor(5) + p1.margin);
        assert_eq!(p1.next_election_id(), 3 + ID_MARGIN);
        // A later plan of the same backup starts above by the milliseconds between them.
        let p2 = RestorePlan::new(b.clone(), g2, 1_000_000 + 61_000).unwrap();
        assert_eq!(p2.root_floor() - p1.root_floor(), 1000);
        assert_eq!(RestorePlan::from_json(&p1.to_json()).unwrap(), p1);
        // A clock behind the backup's adds nothing, and takes nothing away.
        assert_eq!(
            RestorePlan::new(b.clone(), g1, 5).unwrap().margin,
            RESTORE_MARGIN
        );
        // What a plan refuses, naming the field.
        assert!(RestorePlan::new(b.clone(), b.group, 2_000_000)
            .unwrap_err()
            .starts_with("group"));
        let mut v = p1.clone();
        v.margin = 5;
        assert!(v.check().unwrap_err().starts_with("margin"));
        let mut v = p1.clone();
        v.margin = 1 << 40;
        assert!(v.check().unwrap_err().starts_with("margin"));
        let mut v = p1.clone();
        v.backup.elections.get_mut("a").unwrap().term = 5;
        assert!(v
            .check()
            .unwrap_err()
            .starts_with("backup.elections.a.term"));
        let mut v = b.clone();
        v.next_election_id = MAX_ELECTION_ID;
        assert!(RestorePlan::new(v, g1, 0)
            .unwrap_err()
            .starts_with("backup.next_election_id"));
        // A backup where a plan belongs says what to do.
        assert!(RestorePlan::from_json(&b.to_json())
            .unwrap_err()
            .contains("tenure-ctl restore-plan"));
        assert!(RestorePlan::from_json("[]")
            .unwrap_err()
            .contains("not a tenure restore plan"));
    }

    #[test]
    fn a_plan_whose_catalog_would_not_fit_a_snapshot_is_refused() {
        // A hand-made backup of 15,000 elections of 128-byte names: no group could
        // send its catalog to a new member.
        let mut b = backup();
        b.members.voters = vec![1, 2, 3, 4, 5];
        b.next_election_id = 20_000;
        b.elections = (1..=15_000)
            .map(|id| {
                let e = BackupElection {
                    id,
                    options: ElectionOptions::default(),
                    term: 0,
                    suspended: false,
                };
                (format!("{id:0>128}"), e)
            })
            .collect();
        let e = RestorePlan::new(b.clone(), GroupId::random(), 0).unwrap_err();
        assert!(
            e.starts_with("backup.elections: the 15000 elections"),
            "{e}"
        );
        assert!(e.contains(&format!("limit of {MAX_CATALOG_BYTES}")), "{e}");
        b.elections.retain(|_, e| e.id <= 12_000);
        assert!(RestorePlan::new(b, GroupId::random(), 0).is_ok());
    }

    #[test]
    fn digests_differ() {
        assert_ne!(digest(b"a"), digest(b"b"));
        assert_eq!(digest(b""), 0xcbf2_9ce4_8422_2325);
    }
}
