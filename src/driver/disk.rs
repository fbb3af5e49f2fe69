//! A stalled disk (`docs/design.md`, section 15): a synced write slower than the bound
//! makes this node stand down, as a drained one does, until probe writes are fast again.
//! The writer ([`super::writer`]) times the writes and runs the probes; the driver
//! reports what changed and stands down meanwhile.

use slog::{info, warn};

use super::Driver;
use crate::status::DiskHealth;
use crate::storage::RaftStore;

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
        let Some(health) = self.env.writer.disk_changed() else {
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
}
