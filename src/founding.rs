//! Founding a group, once: a node with an empty store and [`Config::found`] founds only
//! when every first member says it is founding too, holds a pristine store of the
//! group, or holds a store of the group that was founded counting on this very
//! incarnation's founding hello (it quotes this process's nonce). The argument is in
//! `docs/design.md`, section 6; [`judge`] is the rule, and [`wait_to_found`] waits for
//! it.
//!
//! [`Config::found`]: crate::Config::found

use std::collections::BTreeMap;
use std::time::Duration;

use slog::{info, warn, Logger};
use tokio::sync::{mpsc, watch};

use crate::config::Config;
use crate::driver::Command;
use crate::group_id::GroupId;
use crate::history::History;
use crate::state::GroupState;
use crate::status::{Leadership, Role, Status};
use crate::transport::{Floor, Hello, Inbound, Inbox, NodeId, Standing, Transport};

/// What the hellos heard so far allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every other first member is founding this group, holds a pristine store of it, or
    /// holds a store of it founded counting on this incarnation's hello.
    Found,
    /// Not yet: `missing` have not said hello; `blocking` said something that does not
    /// allow founding (with what, for the log).
    Wait {
        missing: Vec<NodeId>,
        blocking: Vec<(NodeId, String)>,
    },
    /// A member holds a store of this group that has moved on since founding, and was not
    /// founded counting on this incarnation (it quotes another nonce, or none): the group
    /// counts on something an earlier incarnation of this node did, so this node's empty
    /// store means it lost its data.
    LostData { peer: NodeId, term: u64 },
}

/// The founding rule for node `me`, whose incarnation said `nonce` in its founding
/// hellos, founding `group` from `floor` with first members `members`.
pub(crate) fn judge(
    me: NodeId,
    nonce: u128,
    floor: Floor,
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
            Standing::Founding if ours && hello.floor == floor => {}
            Standing::Founding if ours => blocking.push((
                m,
                format!(
                    "{hello}, but this node founds from term floor {} (restored state {:016x}): \
                     give every first member the same term floor and backup",
                    floor.term, floor.restore
                ),
            )),
            Standing::Member {
                pristine: true,
                term,
            } if ours && term == floor.term.max(1) => {}
            Standing::Member { pristine: true, .. } if ours => blocking.push((
                m,
                format!(
                    "{hello}, founded at another term than this node's floor {}: give every \
                     first member the same term floor and backup",
                    floor.term.max(1)
                ),
            )),
            // Founded counting on this very incarnation's hello (nothing else of it).
            Standing::Member {
                pristine: false, ..
            } if ours && hello.nonce == Some(nonce) => {}
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

/// What a founder records, with its founding, of the hellos it founded on: the nonce of
/// every first member that was founding (`docs/design.md`, section 6). Its hellos as a
/// member quote each peer its own, so that a slow founder learns that the group counted
/// on its very hello.
pub(crate) fn founded_with(
    heard: &BTreeMap<NodeId, Hello>,
    group: GroupId,
) -> BTreeMap<NodeId, u128> {
    heard
        .iter()
        .filter(|(_, h)| h.standing == Standing::Founding && h.group == Some(group))
        .filter_map(|(id, h)| Some((*id, h.nonce?)))
        .collect()
}

/// A fresh incarnation nonce, never 0: 128 bits from the thread's cryptographic RNG
/// (seeded by the OS), or from `seed` (the simulation's node incarnations, so that it
/// replays).
pub(crate) fn incarnation_nonce(seed: Option<u64>) -> u128 {
    crate::election_rng::draw::<u128>(seed, crate::election_rng::Draw::FoundingNonce).max(1)
}

/// What a node founds with: the replicated state of its founding snapshot, the root's
/// founding term, and what its founding hellos say of both (every first member must say
/// the same). Without a floor or a backup: [`GroupState::bootstrap`] at term 1.
pub(crate) fn founding_plan(config: &Config, group: GroupId) -> (GroupState, u64, Floor) {
    let mut state = GroupState::bootstrap(group, config.peers.clone());
    let mut term = config.term_floor.max(1);
    let mut restore = 0;
    if let Some(p) = &config.restore {
        let b = &p.backup;
        term = term.max(p.root_floor());
        let voters = config.member_ids();
        state.drained = b
            .members
            .drained
            .iter()
            .copied()
            .filter(|d| voters.contains(d))
            .collect();
        state.history = History::from_records(b.history.clone());
        state.next_election_id = p.next_election_id();
        state.restore_margin = p.margin;
        state.elections = p.catalog(&voters);
        state.suspended = b
            .elections
            .values()
            .filter(|e| e.suspended)
            .map(|e| e.id)
            .collect();
        // The addresses come from each node's configuration: not part of the digest.
        let mut restored = state.clone();
        restored.addrs.clear();
        restore = crate::backup::digest(&restored.to_snapshot()).max(1);
    }
    let floor = Floor {
        term: if term > 1 { term } else { 0 },
        restore,
    };
    (state, term, floor)
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

/// What founding leaves for the driver.
pub(crate) struct Founded {
    /// Commands that came while the node waited, in order.
    pub kept: Vec<Command>,
    /// The nonces of the first members that were founding ([`founded_with`]): to be
    /// recorded with the founding.
    pub with: BTreeMap<NodeId, u128>,
}

/// Waits until [`judge`] says `Found`. This incarnation's founding hellos carry a fresh
/// nonce. Meanwhile raft messages are dropped (raft-rs retransmits), status requests
/// are answered, a shutdown or kill ends the wait, and every other command is kept for
/// the driver (returned in order).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn wait_to_found(
    me: NodeId,
    group: GroupId,
    floor: Floor,
    members: &[NodeId],
    transport: &dyn Transport,
    inbound: &mut Inbox,
    commands: &mut mpsc::Receiver<Command>,
    leadership: &watch::Sender<Leadership>,
    logger: &Logger,
    seed: Option<u64>,
) -> Result<Founded, NotFounded> {
    let nonce = incarnation_nonce(seed);
    transport.set_hello(Hello {
        group: Some(group),
        standing: Standing::Founding,
        nonce: Some(nonce),
        floor,
    });
    leadership.send_replace(Leadership {
        term: 0,
        leader: None,
        role: Role::Founding,
        leased: false,
        election: None,
        suspended: false,
    });
    info!(logger, "founding the group: waiting until every first member has said hello";
          "group" => %group, "members" => ?members);
    let mut heard: BTreeMap<NodeId, Hello> = BTreeMap::new();
    let mut kept = Vec::new();
    let mut report = tokio::time::interval(REPORT_EVERY);
    report.tick().await;
    loop {
        match judge(me, nonce, floor, group, members, &heard) {
            Verdict::Found => {
                let late: Vec<NodeId> = heard
                    .iter()
                    .filter(|(_, h)| {
                        matches!(
                            h.standing,
                            Standing::Member {
                                pristine: false,
                                ..
                            }
                        )
                    })
                    .map(|(id, _)| *id)
                    .collect();
                if late.is_empty() {
                    info!(logger, "founding the group: every first member is founding or pristine";
                          "group" => %group);
                } else {
                    info!(logger, "founding the group: the members that moved on founded it \
                                   counting on this node's founding hello";
                          "group" => %group, "moved_on" => ?late);
                }
                return Ok(Founded {
                    kept,
                    with: founded_with(&heard, group),
                });
            }
            Verdict::LostData { peer, term } => {
                let why = format!(
                    "node {me} has no store, but group {group} already exists (node {peer} is at \
                     term {term}): this node lost its data folder, and a member that forgot its \
                     vote and log must not return as a voter (the group was not founded \
                     counting on this process's founding hello; a founder restarted after the \
                     others founded without it is in the same place). Replace it by a new \
                     node id that joins the group (README: a replacement machine)"
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
                if let Verdict::Wait { missing, blocking } = judge(me, nonce, floor, group, members, &heard) {
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

    const MINE: u128 = 0x5eed_0000_0000_0000_0000_0000_0000_0001;

    fn founding(g: GroupId) -> Hello {
        Hello {
            group: Some(g),
            standing: Standing::Founding,
            ..Hello::default()
        }
    }

    fn quoting(hello: Hello, nonce: u128) -> Hello {
        Hello {
            nonce: Some(nonce),
            ..hello
        }
    }

    #[test]
    fn founds_only_when_every_other_member_is_founding_or_pristine() {
        let g = GroupId::random();
        let mut heard = BTreeMap::new();
        assert_eq!(
            judge(1, MINE, Floor::default(), g, &[1, 2, 3], &heard),
            Verdict::Wait {
                missing: vec![2, 3],
                blocking: vec![]
            }
        );
        heard.insert(2, founding(g));
        heard.insert(3, Hello::default());
        assert!(
            matches!(judge(1, MINE, Floor::default(), g, &[1, 2, 3], &heard), Verdict::Wait { missing, .. } if missing == vec![3])
        );
        heard.insert(3, Hello::member(Some(g), 1, 0, 1));
        assert_eq!(
            judge(1, MINE, Floor::default(), g, &[1, 2, 3], &heard),
            Verdict::Found
        );
        // A group of one founds at once.
        assert_eq!(
            judge(1, MINE, Floor::default(), g, &[1], &BTreeMap::new()),
            Verdict::Found
        );
    }

    #[test]
    fn a_member_that_moved_on_means_this_node_lost_its_data() {
        let g = GroupId::random();
        let mut heard = BTreeMap::new();
        heard.insert(2, founding(g));
        heard.insert(3, Hello::member(Some(g), 7, 2, 40));
        assert_eq!(
            judge(1, MINE, Floor::default(), g, &[1, 2, 3], &heard),
            Verdict::LostData { peer: 3, term: 7 }
        );
        // Even a member that only voted once is not pristine.
        heard.insert(3, Hello::member(Some(g), 2, 2, 1));
        assert!(matches!(
            judge(1, MINE, Floor::default(), g, &[1, 2, 3], &heard),
            Verdict::LostData { peer: 3, .. }
        ));
    }

    /// The race of slow founders: the others heard this incarnation's founding hello,
    /// founded and moved on. Members that quote this incarnation's nonce allow founding;
    /// one quoting another nonce (an earlier incarnation's), or none, is lost data, even
    /// beside members that quote it.
    #[test]
    fn members_that_founded_counting_on_this_incarnation_allow_founding() {
        let g = GroupId::random();
        let moved_on = Hello::member(Some(g), 2, 3, 2);
        let mut heard = BTreeMap::new();
        heard.insert(2, quoting(moved_on, MINE));
        heard.insert(3, quoting(moved_on, MINE));
        heard.insert(4, founding(g));
        assert_eq!(
            judge(1, MINE, Floor::default(), g, &[1, 2, 3, 4, 5], &heard),
            Verdict::Wait {
                missing: vec![5],
                blocking: vec![]
            }
        );
        heard.insert(5, Hello::member(Some(g), 1, 0, 1));
        assert_eq!(
            judge(1, MINE, Floor::default(), g, &[1, 2, 3, 4, 5], &heard),
            Verdict::Found
        );
        // A pristine member may quote or not: it blocks nothing either way.
        heard.insert(5, quoting(Hello::member(Some(g), 1, 0, 1), 99));
        assert_eq!(
            judge(1, MINE, Floor::default(), g, &[1, 2, 3, 4, 5], &heard),
            Verdict::Found
        );

        // The nonce of an earlier incarnation: that one may have voted.
        heard.insert(3, quoting(moved_on, MINE + 1));
        assert_eq!(
            judge(1, MINE, Floor::default(), g, &[1, 2, 3, 4, 5], &heard),
            Verdict::LostData { peer: 3, term: 2 }
        );
        // No quote at all (the group was founded before this incarnation said hello).
        heard.insert(3, moved_on);
        assert!(matches!(
            judge(1, MINE, Floor::default(), g, &[1, 2, 3, 4, 5], &heard),
            Verdict::LostData { peer: 3, .. }
        ));
        // A quote of this nonce by a member of another group counts for nothing.
        let other = GroupId::random();
        heard.insert(3, quoting(Hello::member(Some(other), 2, 3, 2), MINE));
        assert!(matches!(
            judge(1, MINE, Floor::default(), g, &[1, 2, 3, 4, 5], &heard),
            Verdict::Wait { blocking, .. } if blocking.len() == 1 && blocking[0].0 == 3
        ));
    }

    /// Founders from a term floor or a backup must all say the same floor, and a
    /// pristine member must have been founded at it: otherwise nobody founds.
    #[test]
    fn founders_must_agree_on_the_term_floor() {
        let g = GroupId::random();
        let floor = Floor {
            term: 1 << 20,
            restore: 9,
        };
        let mut heard = BTreeMap::new();
        heard.insert(
            2,
            Hello {
                floor,
                ..founding(g)
            },
        );
        heard.insert(3, founding(g));
        let Verdict::Wait { missing, blocking } = judge(1, MINE, floor, g, &[1, 2, 3], &heard)
        else {
            panic!("must wait");
        };
        assert!(missing.is_empty());
        assert_eq!(blocking.len(), 1);
        assert_eq!(blocking[0].0, 3);
        assert!(
            blocking[0].1.contains("same term floor"),
            "{}",
            blocking[0].1
        );
        heard.insert(3, Hello::member_founded_at(Some(g), 1 << 20, 0, 1, 1 << 20));
        assert_eq!(judge(1, MINE, floor, g, &[1, 2, 3], &heard), Verdict::Found);
        // A pristine member founded at term 1 does not match the floor.
        heard.insert(3, Hello::member(Some(g), 1, 0, 1));
        assert!(matches!(
            judge(1, MINE, floor, g, &[1, 2, 3], &heard),
            Verdict::Wait { blocking, .. } if blocking.len() == 1
        ));
        // Without a floor, a founder with one blocks too.
        assert!(matches!(
            judge(1, MINE, Floor::default(), g, &[1, 2], &heard),
            Verdict::Wait { blocking, .. } if blocking.len() == 1
        ));
    }

    #[test]
    fn a_founder_records_the_nonces_of_the_members_that_were_founding() {
        let g = GroupId::random();
        let mut heard = BTreeMap::new();
        heard.insert(2, quoting(founding(g), 22));
        heard.insert(3, quoting(Hello::member(Some(g), 2, 3, 2), MINE));
        heard.insert(4, founding(g)); // an older version: no nonce
        heard.insert(5, quoting(founding(GroupId::random()), 55));
        assert_eq!(founded_with(&heard, g), BTreeMap::from([(2, 22)]));
        assert_ne!(incarnation_nonce(None), incarnation_nonce(None));
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
                ..Hello::default()
            },
        );
        heard.insert(4, Hello::member(Some(other), 9, 1, 30));
        let Verdict::Wait { missing, blocking } =
            judge(1, MINE, Floor::default(), g, &[1, 2, 3, 4], &heard)
        else {
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
