//! `restore-plan`: turns a backup into the one restore plan every first member of the
//! restored group is given (README, "Disaster recovery"). It reads and writes files only:
//! no group is asked.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;
use tenure::backup::{Backup, RestorePlan};

use super::output::write_whole;

/// Makes a plan of the backup in `backup`, writes it to `out` and says what it founds.
pub(crate) fn restore_plan(json: bool, backup: &Path, out: &Path) -> ExitCode {
    let plan = std::fs::read_to_string(backup)
        .map_err(|e| format!("cannot read {}: {e}", backup.display()))
        .and_then(|text| Backup::from_json(&text).map_err(|e| format!("{}: {e}", backup.display())))
        .and_then(RestorePlan::make);
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("{}: restore-plan: {e}", super::NAME);
            return ExitCode::from(1);
        }
    };
    if let Err(e) = write_whole(out, plan.to_json().as_bytes()) {
        eprintln!("{}: cannot write {}: {e}", super::NAME, out.display());
        return ExitCode::from(1);
    }
    if json {
        println!(
            "{}",
            json!({"out": out, "group": plan.group.to_string(), "origin": plan.origin.to_string(),
                   "root_floor": plan.root_floor(), "margin": plan.margin,
                   "next_election_id": plan.next_election_id(),
                   "elections": plan.backup.elections.len()})
        );
    } else {
        println!(
            "restore plan written to {}: new group {} (from {}); its root starts at term {}, \
             every election {} terms above its recorded term, new election ids from {}.\n\
             Start every first member ({:?}) on an empty folder with --restore {} \
             (and --found {} where a unit file pins the group). One plan, one group: make \
             a new plan for every restore.",
            out.display(),
            plan.group,
            plan.origin,
            plan.root_floor(),
            plan.margin,
            plan.next_election_id(),
            plan.backup.members.voters,
            out.display(),
            plan.group,
        );
    }
    ExitCode::SUCCESS
}
