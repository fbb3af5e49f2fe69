//! The handle of one named election on a node ([`Election`]); the types it speaks in are
//! in [`crate::election`].

use std::fmt;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use crate::election::ElectionError;
use crate::error::{NodeStopped, TransferError};
use crate::history::TenureRecord;
use crate::lease::Lease;
use crate::status::Leadership;
use crate::transport::NodeId;

/// A handle of one named election on this node (see [`Node::election`](crate::Node::election)):
/// the same shape as the node-level API of the root election.
#[derive(Clone)]
pub struct Election {
    pub(crate) name: Arc<str>,
    pub(crate) commands: mpsc::Sender<crate::driver::Command>,
    pub(crate) watch: watch::Receiver<Leadership>,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish()
    }
}

impl Election {
    /// The election's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Watches this election's leadership on this node (`election` names it).
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<Leadership> {
        self.watch.clone()
    }

    /// This election's leadership as this node sees it now.
    #[must_use]
    pub fn leadership(&self) -> Leadership {
        self.watch.borrow().clone()
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> crate::driver::Command,
    ) -> Result<T, ElectionError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .await
            .map_err(|_| NodeStopped::shutdown("node stopped"))?;
        rx.await
            .map_err(|_| ElectionError::Stopped(NodeStopped::shutdown("node stopped")))
    }

    /// Waits until this node holds a confirmed lease of this election, and returns it.
    /// The lease's token is this election's term.
    ///
    /// # Errors
    /// [`ElectionError::Removed`] if the election is removed meanwhile,
    /// [`ElectionError::Stopped`] if the node stops.
    pub async fn lease(&self) -> Result<Lease, ElectionError> {
        let name = Arc::clone(&self.name);
        self.ask(|reply| crate::driver::Command::ElectionLease { name, reply })
            .await?
    }

    /// Hands this election's leadership over (this node must lead it), as
    /// [`Node::transfer_leadership`](crate::Node::transfer_leadership) does for the root.
    ///
    /// # Errors
    /// What the root's transfer fails with; [`TransferError::Stopped`] if the election
    /// does not exist here.
    pub async fn transfer_leadership(&self, to: Option<NodeId>) -> Result<NodeId, TransferError> {
        let name = Arc::clone(&self.name);
        match self
            .ask(|reply| crate::driver::Command::ElectionTransfer { name, to, reply })
            .await
        {
            Ok(r) => r,
            Err(e) => Err(TransferError::Stopped(NodeStopped::shutdown(
                &e.to_string(),
            ))),
        }
    }

    /// This election's replicated tenure history as this node has applied it.
    ///
    /// # Errors
    /// [`ElectionError::NotFound`] if the election does not exist here.
    pub async fn history(&self) -> Result<Vec<TenureRecord>, ElectionError> {
        let name = Arc::clone(&self.name);
        self.ask(|reply| crate::driver::Command::ElectionHistory { name, reply })
            .await?
    }
}
