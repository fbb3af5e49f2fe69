//! Input from peers: every inbound message is judged by [`peer_input`] before it
//! reaches raft-rs (`docs/design.md`, section 7), then the restart quiet period and the
//! drained node's hold on `MsgTimeoutNow` apply (sections 3 and 4).

use raft::eraftpb::{Message, MessageType};
use slog::{debug, error, warn};

use super::{support, Driver};
use crate::peer_input::{self, Local, Verdict};
use crate::storage::RaftStore;
use crate::transport::{Inbound, NodeId, Standing};

impl<S: RaftStore> Driver<S> {
    /// Judges and steps one inbound item (a panic in raft-rs stops the driver).
    pub(super) fn on_inbound(&mut self, item: Inbound) {
        let during = match &item {
            Inbound::Message(m) => format!(
                "stepping {:?} from node {} (term {})",
                m.get_msg_type(),
                m.from,
                m.term
            ),
            Inbound::Election { election, message } => format!(
                "dropping a message of election {election} from node {}",
                message.from
            ),
            Inbound::Unreachable(peer) => format!("reporting node {peer} unreachable"),
            Inbound::Hello { from, .. } => format!("noting node {from}'s hello"),
        };
        self.guarded(|| during, |d| d.inbound_item(item));
    }

    pub(super) fn inbound_item(&mut self, item: Inbound) {
        match item {
            Inbound::Message(m) => {
                // Only what a correct peer may send, in a state where it may send it,
                // reaches raft-rs (docs/design.md, section 7).
                match peer_input::admit(&m, &self.local_view(m.from)) {
                    Verdict::Admit => {}
                    Verdict::Refuse(r) => {
                        if !matches!(
                            r,
                            peer_input::Refusal::BadSender | peer_input::Refusal::NotForThisNode
                        ) {
                            self.last_heard.insert(m.from, self.env.clock.now());
                        }
                        self.refused(r, &m);
                        return;
                    }
                    Verdict::Fatal(cause) => {
                        error!(self.env.logger, "stopping: this node lost entries it had acknowledged";
                               "from" => m.from, "type" => ?m.get_msg_type(), "term" => m.term,
                               "commit" => m.commit, "last_index" => self.root.raw.raft.raft_log.last_index(),
                               "detail" => %cause);
                        self.fail(cause);
                        return;
                    }
                }
                self.last_heard.insert(m.from, self.env.clock.now());
                let t = m.get_msg_type();
                if t == MessageType::MsgTimeoutNow && self.stands_down() {
                    // Drained nodes (and stalled ones) do not take over. The leader checked its own (newer)
                    // state before sending, so an undrain may just not be applied here
                    // yet: hold the message for a heartbeat before refusing it.
                    self.root.held_timeout_now = Some((m, self.env.clock.now()));
                    return;
                }
                if t == MessageType::MsgTimeoutNow {
                    // The leader hands over to us: the election it starts is a handover.
                    self.root.handover_term = Some(self.root.raw.raft.term + 1);
                }
                // A handover's vote request passes: the leader that asked for it (with
                // MsgTimeoutNow, in its own term) revoked its lease before asking.
                let handover_vote = t == MessageType::MsgRequestVote
                    && m.context.as_ref() == raft::CAMPAIGN_TRANSFER;
                if matches!(
                    t,
                    MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
                ) && !handover_vote
                    && self.env.clock.now() < self.quiet_until
                {
                    debug!(self.env.logger, "ignoring vote request during restart quiet period";
                           "from" => m.from, "type" => ?t, "term" => m.term);
                    return;
                }
                if let Err(e) = self.root.raw.step(m) {
                    debug!(self.env.logger, "raft rejected a message"; "error" => %e);
                }
            }
            Inbound::Election { election, message } if election == support::SUPPORT_STREAM => {
                self.on_support(message);
            }
            Inbound::Election { election, message } => {
                self.on_election_message(election, message);
            }
            Inbound::Unreachable(peer) => {
                self.root.raw.report_unreachable(peer);
                for ng in self.named.groups.values_mut() {
                    ng.g.raw.report_unreachable(peer);
                }
            }
            // Hellos matter before the group exists (founding) and at the transport
            // (groups are checked there); here only to stop quoting a founding nonce to
            // a first member that has a store now (docs/design.md, section 6).
            Inbound::Hello { from, hello } => {
                let member = matches!(hello.standing, Standing::Member { .. })
                    && hello.group.is_some()
                    && hello.group == self.state.group;
                if member && self.quotes.remove(&from).is_some() {
                    self.env.transport.set_quotes(self.quotes.clone());
                }
            }
        }
    }

    /// What [`peer_input::admit`] needs to know of this node, for a message from `from`.
    pub(super) fn local_view(&self, from: NodeId) -> Local {
        Local::of(&self.root.raw.raft, from)
    }

    /// Counts a refused peer message; warns about it at most once per reason every 10 s.
    pub(super) fn refused(&mut self, r: peer_input::Refusal, m: &Message) {
        self.env.metrics.peer_refused_one(r);
        let t = m.get_msg_type();
        match self.refusals.note(r, self.env.clock.now()) {
            Some(suppressed) => warn!(self.env.logger, "refused a message from a peer";
                "reason" => r.as_str(), "from" => m.from, "type" => ?t, "term" => m.term,
                "index" => m.index, "commit" => m.commit,
                "refused_since_last_warning" => suppressed),
            None => debug!(self.env.logger, "refused a message from a peer";
                "reason" => r.as_str(), "from" => m.from, "type" => ?t, "term" => m.term),
        }
    }
}
