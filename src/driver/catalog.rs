//! The catalog of named elections, as the driver changes it (`docs/design.md`, section
//! 11, "The catalog"): create and remove calls (root leader only), the answers when their
//! entries apply, the elections the configuration declares.

use tokio::sync::oneshot;
use tokio::time::Instant;

use raft::StateRole;
use slog::{debug, info};

use super::Driver;
use crate::election::{term_floor, ElectionError, ElectionInfo, ElectionOptions, Removed};
use crate::state::{CatalogChange, ElectionSpec, GroupState, Request};
use crate::storage::{RaftStore, StorageError};
use crate::token::FencingToken;

/// How many declared elections the root leader creates per second.
const DECLARE_PER_SECOND: usize = 200;

/// How often the root leader looks for declared elections to create: each look creates
/// a tenth of a second's worth, so a second's elections do not campaign in one burst
/// (at 200 in one turn, the peers' outbound queues overflowed and dropped the support
/// stream's messages with the rest).
const DECLARE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// The root leader creates declared elections only while fewer than this are awake on
/// it (not quiet, as the gauges last counted them) or proposed and not yet created: new
/// elections campaign, elect and stay awake for an election timeout before they go
/// quiet, and a wave on top of a backlog is how five workers on two cores went from
/// creating to never settling (section 12, "Overload is metastable").
const DECLARE_WHILE_AWAKE_BELOW: usize = 300;

/// Declared elections created per second however many are awake, so creation never
/// stops altogether.
const DECLARE_TRICKLE: usize = 10;

/// A caller waiting for a catalog entry it proposed to apply.
pub(super) struct PendingCatalog {
    pub(super) nonce: u64,
    pub(super) deadline: Instant,
    pub(super) reply: CatalogReply,
}

pub(super) enum CatalogReply {
    Create(oneshot::Sender<Result<ElectionInfo, ElectionError>>),
    Remove(oneshot::Sender<Result<Removed, ElectionError>>),
    Suspend(super::named::SuspendReply),
}

impl CatalogReply {
    /// Answers the caller with `e`.
    pub(super) fn fail(self, e: ElectionError) {
        match self {
            CatalogReply::Create(r) | CatalogReply::Suspend(r) => {
                let _ = r.send(Err(e));
            }
            CatalogReply::Remove(r) => {
                let _ = r.send(Err(e));
            }
        }
    }
}

impl<S: RaftStore> Driver<S> {
    /// The catalog as this node applied it.
    pub(super) fn catalog(&self) -> Vec<ElectionInfo> {
        self.state
            .elections
            .iter()
            .map(|(name, spec)| self.election_info(name, spec))
            .collect()
    }

    /// Election `name` (catalog entry `spec`) as the catalog holds it.
    pub(super) fn election_info(&self, name: &str, spec: &ElectionSpec) -> ElectionInfo {
        ElectionInfo {
            name: name.to_string(),
            id: spec.id,
            options: spec.options.clone(),
            created_at: spec.created_at,
            suspended: self.state.suspended.contains(&spec.id),
        }
    }

    /// A backup of the replicated state as this node applied it, with the highest term
    /// of the root and of each named election it runs (`crate::backup`).
    pub(super) fn backup(&self) -> Result<crate::backup::Backup, String> {
        let raft = &self.root.raw.raft;
        let group = self
            .state
            .group
            .ok_or("this node's store records no group id (founded before groups had ids)")?;
        let elections = self
            .state
            .elections
            .iter()
            .map(|(name, spec)| {
                // A restored election not run here starts at its floor: no lower.
                let term = self
                    .named
                    .groups
                    .get(&spec.id)
                    .map_or(0, |ng| ng.g.raw.raft.term)
                    .max(spec.floor.unwrap_or(0));
                let e = crate::backup::BackupElection {
                    id: spec.id,
                    options: spec.options.clone(),
                    term,
                    suspended: self.state.suspended.contains(&spec.id),
                };
                (name.clone(), e)
            })
            .collect();
        Ok(crate::backup::Backup {
            version: crate::backup::BACKUP_VERSION,
            group,
            taken_unix_ms: self.env.clock.unix_ms(),
            taken_by: self.env.id,
            taken_from_leader: raft.state == StateRole::Leader,
            term: raft.term,
            members: self.membership(),
            history: self.state.history.records(),
            next_election_id: self.state.next_election_id.max(1),
            elections,
        })
    }

    fn catalog_leader_check(&self) -> Result<(), ElectionError> {
        let raft = &self.root.raw.raft;
        if raft.state == StateRole::Leader && self.is_voter(self.env.id) {
            Ok(())
        } else {
            Err(ElectionError::NotLeader {
                leader_hint: (raft.leader_id != 0).then_some(raft.leader_id),
            })
        }
    }

    pub(super) fn propose_catalog(&mut self, data: Vec<u8>, nonce: u64, reply: CatalogReply) {
        if let Err(e) = self.catalog_leader_check() {
            reply.fail(e);
            return;
        }
        match self.root.raw.propose(vec![], data) {
            Ok(()) => self.named.pending.push(PendingCatalog {
                nonce,
                deadline: self.env.clock.now() + self.env.timing.election_timeout() * 4,
                reply,
            }),
            Err(e) => {
                debug!(self.env.logger, "catalog change not proposed"; "error" => %e);
                reply.fail(ElectionError::NotLeader { leader_hint: None });
            }
        }
    }

    pub(super) fn next_request(&mut self) -> Request {
        let nonce = self.named.next_nonce;
        self.named.next_nonce += 1;
        Request {
            node: self.env.id,
            nonce,
        }
    }

    /// Proposes the creation of election `name` (root leader only).
    pub(super) fn create_election(
        &mut self,
        name: &str,
        options: ElectionOptions,
        reply: oneshot::Sender<Result<ElectionInfo, ElectionError>>,
    ) {
        if let Err(e) = crate::election::check_name(name) {
            let _ = reply.send(Err(e));
            return;
        }
        if self.state.elections.contains_key(name) {
            let _ = reply.send(Err(ElectionError::Exists(name.into())));
            return;
        }
        let req = self.next_request();
        let data = GroupState::create_entry(name, &options, req);
        self.propose_catalog(data, req.nonce, CatalogReply::Create(reply));
    }

    /// Proposes the removal of election `name` (root leader only).
    pub(super) fn remove_election(
        &mut self,
        name: &str,
        reply: oneshot::Sender<Result<Removed, ElectionError>>,
    ) {
        let Some(spec) = self.state.elections.get(name) else {
            let _ = reply.send(Err(ElectionError::NotFound(name.into())));
            return;
        };
        let id = spec.id;
        let req = self.next_request();
        let data = GroupState::remove_entry(name, id, req);
        self.propose_catalog(data, req.nonce, CatalogReply::Remove(reply));
    }

    /// A catalog entry applied at root `index`: found or remove the election here, and
    /// answer the caller if this node proposed it.
    pub(super) fn catalog_applied(&mut self, change: CatalogChange) -> Result<(), StorageError> {
        let (req, answer): (Request, Box<dyn FnOnce(CatalogReply)>) = match change {
            CatalogChange::NotCatalog => return Ok(()),
            CatalogChange::Created { name, spec, req } => {
                info!(self.env.logger, "election created"; "election" => &name, "id" => spec.id);
                self.open_election(&name, &spec)?;
                let info = ElectionInfo {
                    name,
                    id: spec.id,
                    options: spec.options,
                    created_at: spec.created_at,
                    suspended: false,
                };
                (
                    req,
                    Box::new(move |r| match r {
                        CatalogReply::Create(r) => {
                            let _ = r.send(Ok(info));
                        }
                        other => other.fail(ElectionError::Exists(info.name)),
                    }),
                )
            }
            CatalogChange::Removed { name, id, req } => {
                let removed = Removed {
                    id,
                    retired_above: FencingToken::new(term_floor(id.saturating_add(1))),
                };
                // The election retires through its own log (`named.rs`, `begin_retire`):
                // the caller is answered once the retirement is committed there, when no
                // lease of it can exist any more. Without a group here, at once.
                if self.begin_retire(&name, id)? {
                    if req.node == self.env.id {
                        if let Some(i) =
                            self.named.pending.iter().position(|p| p.nonce == req.nonce)
                        {
                            let p = self.named.pending.swap_remove(i);
                            if let CatalogReply::Remove(r) = p.reply {
                                let deadline =
                                    self.env.clock.now() + self.env.timing.election_timeout() * 10;
                                self.named.removing.insert(id, (r, removed, deadline));
                            }
                        }
                    }
                    return Ok(());
                }
                (
                    req,
                    Box::new(move |r| match r {
                        CatalogReply::Remove(r) => {
                            let _ = r.send(Ok(removed));
                        }
                        other => other.fail(ElectionError::Removed(name)),
                    }),
                )
            }
            CatalogChange::Suspended {
                name,
                id,
                suspended,
                req,
                index,
            } => {
                info!(self.env.logger, "catalog applied a suspension"; "election" => &name,
                      "id" => id, "suspended" => suspended);
                // Answered once the election's own log carries it (`suspend.rs`).
                let waiting = if req.node == self.env.id {
                    let at = self.named.pending.iter().position(|p| p.nonce == req.nonce);
                    at.map(|i| self.named.pending.swap_remove(i))
                } else {
                    None
                };
                self.suspension_applied(id, suspended, index, waiting);
                return Ok(());
            }
            CatalogChange::Refused { req, error } => (req, Box::new(move |r| r.fail(error))),
        };
        if req.node == self.env.id {
            if let Some(i) = self.named.pending.iter().position(|p| p.nonce == req.nonce) {
                answer(self.named.pending.swap_remove(i).reply);
            }
        }
        Ok(())
    }

    /// Answers the catalog calls whose entries were not applied in time, and removals
    /// whose retirement was not committed in time.
    pub(super) fn expire_catalog_calls(&mut self, now: Instant) {
        let late: Vec<_> = self
            .named
            .removing
            .iter()
            .filter(|(_, (_, _, deadline))| now >= *deadline)
            .map(|(id, _)| *id)
            .collect();
        let ms = self.env.timing.election_timeout().as_millis() as u64 * 10;
        for id in late {
            if let Some((r, _, _)) = self.named.removing.remove(&id) {
                let _ = r.send(Err(ElectionError::TimedOut(ms)));
            }
        }
        let (late, pending): (Vec<_>, Vec<_>) = std::mem::take(&mut self.named.pending)
            .into_iter()
            .partition(|p| now >= p.deadline);
        self.named.pending = pending;
        let ms = self.env.timing.election_timeout().as_millis() as u64 * 4;
        for p in late {
            p.reply.fail(ElectionError::TimedOut(ms));
        }
    }

    /// The root leader creates the elections the configuration declares, once a second
    /// until the catalog holds them (a name that exists is left as it is), at most
    /// [`DECLARE_PER_SECOND`] a time and fewer while many of its elections are awake
    /// ([`DECLARE_WHILE_AWAKE_BELOW`]): thousands of declared elections come up in waves,
    /// each going quiet while the next one elects, instead of all campaigning and
    /// settling at once.
    pub(super) fn ensure_declared(&mut self, now: Instant) {
        if self.named.declared.is_empty()
            || self.root.lease.is_none()
            || self
                .named
                .last_declared_check
                .is_some_and(|t| now.saturating_duration_since(t) < DECLARE_EVERY)
        {
            return;
        }
        self.named.last_declared_check = Some(now);
        if !self.declared_missing() {
            return; // all created (cached by the catalog's size)
        }
        // Awake now: the elections a turn must look at (a superset of the awake ones).
        let awake = self.env.hot.borrow().len();
        let per_look = |n: usize| n.div_ceil(10);
        let want = DECLARE_WHILE_AWAKE_BELOW
            .saturating_sub(awake + self.named.pending.len())
            .clamp(per_look(DECLARE_TRICKLE), per_look(DECLARE_PER_SECOND));
        // From where the last look stopped (the list does not change; names it passed
        // were created or exist), round to the start once.
        let n = self.named.declared.len();
        let from = self.named.declared_cursor % n.max(1);
        let mut missing: Vec<(String, ElectionOptions)> = Vec::new();
        let mut seen = 0;
        for i in (from..n).chain(0..from) {
            if missing.len() >= want {
                break;
            }
            seen = i + 1;
            let (name, options) = &self.named.declared[i];
            if !self.state.elections.contains_key(name) {
                missing.push((name.clone(), options.clone()));
            }
        }
        self.named.declared_cursor = seen;
        if !missing.is_empty() {
            debug!(self.env.logger, "creating the declared elections"; "missing" => missing.len());
        }
        for (name, options) in missing {
            let (tx, _rx) = oneshot::channel();
            self.create_election(&name, options, tx);
        }
    }
}
