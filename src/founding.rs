//! Founding a group, once: a node with an empty store and [`Config::found`] founds only
//! when every first member says it is founding too, or holds a pristine store of the
//! group. The argument is in `docs/design.md`, section 6; [`judge`] is the rule, and
//! [`wait_to_found`] waits for it.
//!
//! [`Config::found`]: crate::Config::found

use std::collections::BTreeMap;
use std::time::Duration;

use slog::{info, warn, Logger};
use tokio::sync::{mpsc, watch};

use crate::driver::Command;
use crate::group_id::GroupId;
use crate::status::{Leadership, Role, Status};
use crate::transport::{Hello, Inbound, Inbox, NodeId, Standing, Transport};

/// What the hellos heard so far allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every other first member is founding this group or holds a pristine store of it.
    Found,
    /// Not yet: `missing` have not said hello; `blocking` said something that does not
    /// allow founding (with what, for the log).
    Wait {
        missing: Vec<NodeId>,
        blocking: Vec<(NodeId, String)>,
    },
    /// A member holds a store of this group that has moved on since founding: the group
    /// exists, so this node's empty store means it lost its data.
    LostData { peer: NodeId, term: u64 },
}

/// The founding rule for node `me` founding `group` with first members `members`.
pub(crate) fn judge(
    me: NodeId,
    group: GroupId,
    members: &[NodeId],
    heard: &BTreeMap<NodeId, Hello>,
) -> Verdict {
    let mut missing = Vec::new();
    let mut blocking = Vec::new();
    for &m in members.iter().filter(|m| **m != me) {
        let Some(hello) = heard.get(&m) else {
            missing.push(m);
            continue;
        };
        let ours = hello.group == Some(group);
        match hello.standing {
            Standing::Starting => missing.push(m),
            Standing::Founding if ours => {}
            Standing::Member { pristine: true, .. } if ours => {}
            Standing::Member {
                term,
                pristine: false,
            } if ours => return Verdict::LostData { peer: m, term },
            _ => blocking.push((m, hello.to_string())),
        }
    }
    if missing.is_empty() && blocking.is_empty() {
        Verdict::Found
    } else {
        Verdict::Wait { missing, blocking }
    }
}

/// How often a waiting founder says whom it waits for.
const REPORT_EVERY: Duration = Duration::from_secs(5);

/// Why founding did not happen.
pub(crate) enum NotFounded {
    /// The node was asked to stop (or every handle was dropped) while it waited; the
    /// commands kept are dropped (their callers learn that the node stopped).
    Stopped,
    /// A member's store has moved on: this node lost its data. The message says so.
    LostData(String),
}

/// Waits until [`judge`] says `Found`. Meanwhile raft messages are dropped (raft-rs
/// retransmits), status requests are answered, a shutdown or kill ends the wait, and
/// every other command is kept for the driver (returned in order).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn wait_to_found(
    me: NodeId,
    group: GroupId,
    members: &[NodeId],
    transport: &dyn Transport,
    inbound: &mut Inbox,
    commands: &mut mpsc::Receiver<Command>,
    leadership: &watch::Sender<Leadership>,
    logger: &Logger,
) -> Result<Vec<Command>, NotFounded> {
    transport.set_hello(Hello {
        group: Some(group),
        standing: Standing::Founding,
    });
    leadership.send_replace(Leadership {
        term: 0,
        leader: None,
        role: Role::Founding,
        leased: false,
        election: None,
    });
    info!(logger, "founding the group: waiting until every first member has said hello";
          "group" => %group, "members" => ?members);
    let mut heard: BTreeMap<NodeId, Hello> = BTreeMap::new();
    let mut kept = Vec::new();
    let mut report = tokio::time::interval(REPORT_EVERY);
    report.tick().await;
    loop {
        match judge(me, group, members, &heard) {
            Verdict::Found => {
                info!(logger, "founding the group: every first member is founding or pristine";
                      "group" => %group);
                return Ok(kept);
            }
            Verdict::LostData { peer, term } => {
                let why = format!(
                    "node {me} has no store, but group {group} already exists (node {peer} is at \
                     term {term}): this node lost its data folder, and a member that forgot its \
                     vote and log must not return as a voter. Replace it by a new node id that \
                     joins the group (README: a replacement machine)"
                );
                warn!(logger, "refusing to found the group"; "why" => &why);
                return Err(NotFounded::LostData(why));
            }
            Verdict::Wait { .. } => {}
        }
        tokio::select! {
            biased;
            cmd = commands.recv() => match cmd {
                None => return Err(NotFounded::Stopped),
                Some(Command::Shutdown { reply }) => {
                    let _ = reply.send(());
                    return Err(NotFounded::Stopped);
                }
                Some(Command::Kill { reply }) => {
                    let _ = reply.send(());
                    return Err(NotFounded::Stopped);
                }
                Some(Command::Status { reply }) => {
                    let _ = reply.send(Status::founding(me));
                }
                Some(other) => kept.push(other),
            },
            item = inbound.recv() => match item {
                Some(Inbound::Hello { from, hello }) => {
                    heard.insert(from, hello);
                }
                Some(_) => {}
                None => return Err(NotFounded::Stopped),
            },
            _ = report.tick() => {
                if let Verdict::Wait { missing, blocking } = judge(me, group, members, &heard) {
                    let blocking: Vec<String> =
                        blocking.iter().map(|(n, h)| format!("node {n}: {h}")).collect();
                    warn!(logger, "founding the group: still waiting";
                          "group" => %group, "not_heard_from" => ?missing, "not_founding" => ?blocking);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn founding(g: GroupId) -> Hello {
        Hello {
            group: Some(g),
            standing: Standing::Founding,
        }
    }

    #[test]
    fn founds_only_when_every_other_member_is_founding_or_pristine() {
        let g = GroupId::random();
        let mut heard = BTreeMap::new();
        assert_eq!(
            judge(1, g, &[1, 2, 3], &heard),
            Verdict::Wait {
                missing: vec![2, 3],
                blocking: vec![]
            }
        );
        heard.insert(2, founding(g));
        heard.insert(3, Hello::default());
        assert!(
            matches!(judge(1, g, &[1, 2, 3], &heard), Verdict::Wait { missing, .. } if missing == vec![3])
        );
        heard.insert(3, Hello::member(Some(g), 1, 0, 1));
        assert_eq!(judge(1, g, &[1, 2, 3], &heard), Verdict::Found);
        // A group of one founds at once.
        assert_eq!(judge(1, g, &[1], &BTreeMap::new()), Verdict::Found);
    }

    #[test]
    fn a_member_that_moved_on_means_this_node_lost_its_data() {
        let g = GroupId::random();
        let mut heard = BTreeMap::new();
        heard.insert(2, founding(g));
        heard.insert(3, Hello::member(Some(g), 7, 2, 40));
        assert_eq!(
            judge(1, g, &[1, 2, 3], &heard),
            Verdict::LostData { peer: 3, term: 7 }
        );
        // Even a member that only voted once is not pristine.
        heard.insert(3, Hello::member(Some(g), 2, 2, 1));
        assert!(matches!(
            judge(1, g, &[1, 2, 3], &heard),
            Verdict::LostData { peer: 3, .. }
        ));
    }

    #[test]
    fn other_groups_and_joiners_block_without_deciding() {
        let g = GroupId::random();
        let other = GroupId::random();
        let mut heard = BTreeMap::new();
        heard.insert(2, founding(other));
        heard.insert(
            3,
            Hello {
                group: None,
                standing: Standing::Joining,
            },
        );
        heard.insert(4, Hello::member(Some(other), 9, 1, 30));
        let Verdict::Wait { missing, blocking } = judge(1, g, &[1, 2, 3, 4], &heard) else {
            panic!("must wait");
        };
        assert!(missing.is_empty());
        assert_eq!(
            blocking.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![2, 3, 4]
        );
        assert!(blocking[0].1.contains(&other.to_string()));
    }
}
