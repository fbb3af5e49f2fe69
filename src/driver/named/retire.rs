//! Removing a named election (`docs/design.md`, section 11, "Removal"): the root's entry
//! starts it here, the election's own retirement entry ends it.

use raft::StateRole;
use slog::{debug, info};
use tokio::time::Instant;

use super::super::support::Wake;
use super::super::Driver;
use super::RETIRE_ENTRY;
use crate::election::ElectionId;
use crate::error::LostReason;
use crate::storage::{RaftStore, StorageError};

impl<S: RaftStore> Driver<S> {
    /// The root removed election `id` (`name`): this node revokes its lease at once,
    /// answers everyone waiting, and from now on grants no lease in it; the group keeps
    /// running until its own log carries the retirement (its leader proposes it), so that
    /// once that entry is committed no lease of the election can exist anywhere
    /// (docs/design.md, section 11, "Removal"). Returns whether the group runs here (if
    /// not, its store is deleted at once).
    pub(in crate::driver) fn begin_retire(
        &mut self,
        name: &str,
        id: ElectionId,
    ) -> Result<bool, StorageError> {
        let Some(ng) = self.named.groups.get_mut(&id) else {
            self.close_election(name, id)?;
            return Ok(false);
        };
        ng.retiring = true;
        self.wake_leader(id, Wake::Closing);
        let Some(ng) = self.named.groups.get_mut(&id) else {
            return Ok(false);
        };
        ng.g.end_for_users(&self.env, LostReason::Removed, name);
        info!(self.env.logger, "election retiring"; "election" => name, "id" => id);
        ng.g.publish_stopped();
        self.named.by_name.remove(name);
        self.named.view_dirty = true;
        self.named.changes += 1;
        Ok(true)
    }

    /// Retiring elections: a leader proposes the retirement entry (once per term); a
    /// group that applied it closes (a leader after two heartbeats, so its followers hear
    /// the commit), and a removal this node waits for is answered.
    pub(super) fn progress_retirements(
        &mut self,
        now: Instant,
        visited: &[ElectionId],
    ) -> Result<(), StorageError> {
        let linger = self.env.timing.heartbeat_interval() * 2;
        let mut done = Vec::new();
        // Retiring elections are awake (woken when the retirement began) and busy on
        // every tick: among the elections this turn visited.
        for id in visited {
            let Some(ng) = self.named.groups.get_mut(id) else {
                continue;
            };
            if !ng.retiring {
                continue;
            }
            let raft = &ng.g.raw.raft;
            let leading = raft.state == StateRole::Leader;
            if let Some(at) = ng.retired_at {
                if let Some((r, removed, _)) = self.named.removing.remove(id) {
                    let _ = r.send(Ok(removed));
                }
                if !leading || now.saturating_duration_since(at) >= linger {
                    done.push((ng.g.name.as_deref().unwrap_or("").to_string(), *id));
                }
                continue;
            }
            if leading && ng.retire_proposed != Some(raft.term) {
                let term = raft.term;
                ng.g.touch(&self.env);
                match ng.g.raw.propose(vec![], RETIRE_ENTRY.to_vec()) {
                    Ok(()) => ng.retire_proposed = Some(term),
                    Err(e) => debug!(self.env.logger, "retirement not proposed yet"; "error" => %e),
                }
            }
        }
        for (name, id) in done {
            self.close_election(&name, id)?;
        }
        Ok(())
    }
}
