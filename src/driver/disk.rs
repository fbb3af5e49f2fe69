//! A stalled disk (`docs/design.md`, section 15): a synced write slower than the bound
//! makes this node stand down, as a drained one does, until probe writes are fast again.
//! The writer ([`super::writer`]) times the writes and runs the probes; the driver
//! reports what changed and stands down meanwhile, and tells its peers, which hand it
//! nothing while it lasts (a notice on the support stream, `support/wire.rs`).

use slog::{info, warn};

use super::support::wire::{Notice, SUPPORT_STREAM};
use super::Driver;
use crate::status::DiskHealth;
use crate::storage::RaftStore;
use crate::transport::NodeId;

impl<S: RaftStore> Driver<S> {
    /// Whether this node stands down: it hands over every election it leads, takes
    /// over none and offers nothing, because it is drained or its disk is stalled.
    pub(super) fn stands_down(&self) -> bool {
        self.state.is_drained(self.env.id) || self.disk_stalled()
    }

    /// Whether the disk is stalled and the node steps aside for it.
    pub(super) fn disk_stalled(&self) -> bool {
        self.env.disk_stalled()
    }

    /// Once a turn: the probes of a stalled disk, and what changed said (the log, the
    /// metrics, [`crate::Node::disk`]).
    pub(super) fn tend_disk(&mut self) {
        if let Err(e) = self
            .env
            .writer
            .tend(&self.root.store, self.env.timing.heartbeat_interval())
        {
            self.storage_failed(e);
            return;
        }
        let changed = self.env.writer.disk_changed();
        self.tell_peers(changed.is_some());
        let Some(health) = changed else {
            return;
        };
        let was = self.disk.borrow().is_stalled();
        match &health {
            DiskHealth::Stalled {
                operation,
                took,
                bound,
                ..
            } if !was => {
                warn!(self.env.logger, "disk stall: a synced write took longer than the bound; \
                       handing over every election this node leads and campaigning in none \
                       until probe writes are fast";
                      "operation" => operation, "took_ms" => took.as_millis() as u64,
                      "bound_ms" => bound.as_millis() as u64,
                      "probes_to_recover" => DiskHealth::PROBES_TO_RECOVER);
                self.env.metrics.disk_stalled(true);
                self.disk_since = Some(std::time::Instant::now());
            }
            DiskHealth::Healthy if was => {
                let stalled_ms = self
                    .disk_since
                    .take()
                    .map_or(0, |t| t.elapsed().as_millis() as u64);
                info!(self.env.logger, "disk recovered: probe writes are fast again; \
                       campaigning again";
                      "stalled_ms" => stalled_ms,
                      "probes" => DiskHealth::PROBES_TO_RECOVER);
                self.env.metrics.disk_stalled(false);
            }
            _ => {}
        }
        self.disk.send_replace(health);
    }

    /// Tells every peer whether this node's disk is stalled: when that `changed`, and
    /// every heartbeat interval while it lasts (a peer believes it for a while,
    /// [`stall_notice_holds`]).
    fn tell_peers(&mut self, changed: bool) {
        let stalled = self.disk_stalled();
        let now = self.env.clock.now();
        let due = stalled
            && self.stall_told.is_none_or(|t| {
                now.saturating_duration_since(t) >= self.env.timing.heartbeat_interval()
            });
        if !changed && !due {
            return;
        }
        self.stall_told = stalled.then_some(now);
        let notice = Notice {
            incarnation: self.support.incarnation(),
            disk_stalled: stalled,
        };
        let me = self.env.id;
        for (id, _) in self.root.raw.raft.prs().iter() {
            if *id != me {
                self.env
                    .transport
                    .send_election(SUPPORT_STREAM, notice.to_message(me, *id));
            }
        }
    }

    /// Peer `from` says whether its disk is stalled. A stalled peer is handed nothing
    /// (the balancer's healthy set and every handover's choice of target leave it out)
    /// for [`stall_notice_holds`] after each such notice: it repeats it every heartbeat
    /// interval while it lasts, and says when it ends.
    pub(super) fn on_notice(&mut self, from: NodeId, notice: Notice) {
        let now = self.env.clock.now();
        let mut peers = self.env.stalled_peers.borrow_mut();
        let was = peers.get(&from).is_some_and(|until| now < *until);
        if notice.disk_stalled {
            peers.insert(
                from,
                now + stall_notice_holds(self.env.timing.election_timeout()),
            );
            if !was {
                info!(self.env.logger, "a peer's disk is stalled: handing it nothing until it recovers";
                      "peer" => from);
            }
        } else if peers.remove(&from).is_some() && was {
            info!(self.env.logger, "a peer's disk recovered"; "peer" => from);
        }
    }

    /// The peers whose disk is stalled, as they last said ([`crate::Status`]).
    pub(super) fn stalled_peers(&self) -> Vec<NodeId> {
        let now = self.env.clock.now();
        self.env
            .stalled_peers
            .borrow()
            .iter()
            .filter(|(_, until)| now < **until)
            .map(|(id, _)| *id)
            .collect()
    }
}

/// How long a peer's word that its disk is stalled holds: twice the election timeout, at
/// least a second. It repeats it every heartbeat interval, but a driver stuck in a slow
/// write repeats it only between writes; holding it longer than needed costs only a
/// recovered peer whose "recovered" was lost some time before it is handed anything.
fn stall_notice_holds(election_timeout: std::time::Duration) -> std::time::Duration {
    (election_timeout * 2).max(std::time::Duration::from_secs(1))
}
