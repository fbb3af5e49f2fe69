//! A node's membership calls: adding, promoting, removing and replacing members,
//! draining (`docs/design.md`, sections 4 and 6).

use super::*;

impl Node {
    /// Adds node `id`, listening at `addr` (an IP address or a name, which every member
    /// resolves again on each reconnect), as a learner: it receives the log (first a
    /// snapshot of the group) but does not vote until [`promote`](Node::promote)d. Start
    /// the new node with [`Config::join`]. Call on the leader; resolves once the change
    /// is applied here.
    pub async fn add_learner(
        &self,
        id: NodeId,
        addr: impl Into<PeerAddr>,
    ) -> Result<Membership, MembershipError> {
        self.change(MemberChange::AddLearner(id, addr.into())).await
    }

    /// Makes learner `id` a voter, once it has caught up with the log.
    pub async fn promote(&self, id: NodeId) -> Result<Membership, MembershipError> {
        self.change(MemberChange::Promote(id)).await
    }

    /// Removes `id` from the group. Removing the leader itself is allowed: once the change
    /// is applied it hands leadership to the most up-to-date remaining voter. Refused when
    /// the remaining voters reachable now would not form a quorum of the new group.
    pub async fn remove_member(&self, id: NodeId) -> Result<Membership, MembershipError> {
        self.change(MemberChange::Remove(id)).await
    }

    /// Replaces voter `old` (typically a dead node) by learner `new` in one joint-consensus
    /// change: `new` becomes a voter and `old` leaves atomically. Resolves once the group
    /// has left the joint configuration.
    pub async fn replace_member(
        &self,
        old: NodeId,
        new: NodeId,
    ) -> Result<Membership, MembershipError> {
        self.replace(old, new, false).await
    }

    /// Drains (`true`) or undrains member `id`. A drained node never campaigns and, if it
    /// leads, hands leadership over at once. The setting is replicated through the log,
    /// so it holds on every node and survives restarts.
    ///
    /// Resolves once the leader has applied it; the other nodes apply it with the next
    /// heartbeat. Draining the last voter that may lead is refused. A drained node does
    /// not campaign while a leader may come from elsewhere; once it has known no leader
    /// for twice the longest election timeout it campaigns as a last resort (its log may
    /// be the only up-to-date one left, and an undrain needs a leader) and hands over as
    /// soon as it wins. Keep at least two voters undrained.
    pub async fn set_drained(
        &self,
        id: NodeId,
        drained: bool,
    ) -> Result<Membership, MembershipError> {
        self.change(MemberChange::Drain(id, drained)).await
    }

    /// A joint change with an explicit leave (the group stays joint until a leader leaves
    /// it): for tests of a crash in the middle of a joint change.
    #[doc(hidden)]
    #[cfg(feature = "testing")]
    pub async fn replace_member_explicit(
        &self,
        old: NodeId,
        new: NodeId,
    ) -> Result<Membership, MembershipError> {
        self.replace(old, new, true).await
    }

    pub(super) async fn replace(
        &self,
        old: NodeId,
        new: NodeId,
        explicit: bool,
    ) -> Result<Membership, MembershipError> {
        self.change(MemberChange::Replace { old, new, explicit })
            .await
    }

    /// Sends the driver the command `make` builds around a reply channel, and waits for
    /// the answer.
    pub(super) async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, NodeStopped> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(make(tx)).await.map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())
    }

    pub(super) async fn change(&self, change: MemberChange) -> Result<Membership, MembershipError> {
        self.ask(|reply| Command::ChangeMembers { change, reply })
            .await?
    }
}
