//! Seeded fault schedules: what goes wrong, to whom, when, for how long.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use tenure::NodeId;

/// Whom a fault hits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// This node.
    Node(NodeId),
    /// Whoever leads when the fault starts (`or` if nobody does): the interesting victim.
    Leader {
        /// The node hit when no leader is known.
        or: NodeId,
    },
}

impl Target {
    fn resolve(self, leader: Option<NodeId>) -> NodeId {
        match self {
            Target::Node(n) => n,
            Target::Leader { or } => leader.unwrap_or(or),
        }
    }
}

/// One kind of fault.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultKind {
    /// A symmetric partition: `minority` cannot talk to the rest.
    Split {
        /// The smaller side.
        minority: Vec<NodeId>,
    },
    /// The target is cut off from everyone, both ways.
    Isolate(Target),
    /// Asymmetric: the target's messages to everyone are lost (`outbound`), or
    /// everyone's messages to it are.
    OneWay {
        /// Who.
        target: Target,
        /// Its outbound direction is cut (else its inbound).
        outbound: bool,
    },
    /// Two sides that cannot talk, and a bridge node that talks to both.
    Bridge {
        /// One side (the other side is everyone else but the bridge).
        side: Vec<NodeId>,
        /// The node that sees both sides.
        bridge: NodeId,
    },
    /// The target's host crashes; it restarts (same disk) when the fault ends.
    Crash(Target),
    /// Like `Crash`, but the process dies in the middle of its next write of a hard
    /// state (term, vote): that write never reaches the disk. It restarts when the fault
    /// ends (at the latest; it crashes then if no such write came).
    CrashMidWrite(Target),
    /// Like `CrashMidWrite`, but at its next write of log entries that carry a leadership
    /// record (the entry a new leader appends first): a follower dies between receiving
    /// the entry and having it on disk. Only a follower that acknowledged before its
    /// write (the `persist-after-send` mutation) lets the leader count it.
    CrashMidAppend(Target),
    /// The target's links are held: its messages, both ways, arrive when the fault ends.
    Pause(Target),
    /// Each packet to or from these nodes is lost with probability `rate`.
    Loss {
        /// Whose links.
        nodes: Vec<NodeId>,
        /// Drop probability.
        rate: f64,
    },
    /// Latency on these nodes' links goes up to `max` (packets reorder).
    Delay {
        /// Whose links.
        nodes: Vec<NodeId>,
        /// Highest latency.
        max: Duration,
    },
    /// The target's clock steps forward by `by` at once, monotonic and boot-time clock
    /// alike (the fault lasts no time): its next tick fires at once, and every period it
    /// was timing (its lease, its vote refusal, its restart quiet period) ends early.
    ClockJump {
        /// Whose clock.
        target: Target,
        /// How far.
        by: Duration,
    },
    /// The target's clock stands still for the fault's duration, then runs on from where
    /// it stood (the stalled span is never counted), while its process and network keep
    /// running: no ticks, no timers, and its lease checks read the stalled time.
    ClockStall {
        /// Whose clock.
        target: Target,
        /// Whether `CLOCK_BOOTTIME` counts the stall (a system suspend) or not (a
        /// hypervisor pause the guest never saw: both clocks stand still).
        counted_by_boottime: bool,
    },
    /// The target misbehaves with its own valid certificate (issue 35): while the fault
    /// lasts, every 100 ms it sends each peer, beside what its node sends, forged
    /// support requests (one of another incarnation offering 70,000 elections nobody
    /// runs, never confirmed, and one with a sequence number past 2^62; or one of a
    /// third incarnation offering nothing) and term-0 heartbeats of named elections
    /// (each refused, and none may wake a quiet election). Drawn by [`random_hostile`],
    /// from an RNG of its own.
    Hostile(Target),
    /// One direction of one link is cut: `from`'s packets to `to` are lost. Not drawn by
    /// [`Schedule::random`]: an op ([`OpKind::StalledHandover`]) places it.
    CutLink {
        /// Whose packets are lost.
        from: NodeId,
        /// On their way to whom.
        to: NodeId,
    },
}

/// A fault with its time.
#[derive(Debug, Clone)]
pub struct Fault {
    /// When it starts (simulated time from the start of the run).
    pub at: Duration,
    /// How long it lasts.
    pub duration: Duration,
    /// What it is.
    pub kind: FaultKind,
}

/// A run's faults; every one has ended by `heal_at`.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    /// The faults, by start time.
    pub faults: Vec<Fault>,
    /// When the last fault ends (everything is healed and every node runs).
    pub heal_at: Duration,
}

impl FaultKind {
    /// The nodes the fault involves, resolved when it starts. For a bridge: one side,
    /// then the bridge last.
    pub fn nodes(&self, _ids: &[NodeId], leader: Option<NodeId>) -> Vec<NodeId> {
        match self {
            FaultKind::Split { minority } => minority.clone(),
            FaultKind::Isolate(t)
            | FaultKind::Crash(t)
            | FaultKind::CrashMidWrite(t)
            | FaultKind::CrashMidAppend(t)
            | FaultKind::Pause(t)
            | FaultKind::Hostile(t)
            | FaultKind::OneWay { target: t, .. } => vec![t.resolve(leader)],
            FaultKind::Bridge { side, bridge } => {
                let mut v = side.clone();
                v.push(*bridge);
                v
            }
            FaultKind::Loss { nodes, .. } | FaultKind::Delay { nodes, .. } => nodes.clone(),
            FaultKind::ClockJump { target, .. } | FaultKind::ClockStall { target, .. } => {
                vec![target.resolve(leader)]
            }
            FaultKind::CutLink { from, to } => vec![*from, *to],
        }
    }

    /// Whether the fault is one of a node's clock (no network or process fault).
    pub fn is_clock(&self) -> bool {
        matches!(
            self,
            FaultKind::ClockJump { .. } | FaultKind::ClockStall { .. }
        )
    }

    /// The directed links (from, to) the fault cuts, for the partition kinds.
    pub fn cut_links(&self, ids: &[NodeId], nodes: &[NodeId]) -> Vec<(NodeId, NodeId)> {
        let both = |a: &[NodeId], b: &[NodeId]| {
            let mut v = Vec::new();
            for x in a {
                for y in b {
                    v.push((*x, *y));
                    v.push((*y, *x));
                }
            }
            v
        };
        let rest = |side: &[NodeId]| -> Vec<NodeId> {
            ids.iter().copied().filter(|i| !side.contains(i)).collect()
        };
        match self {
            FaultKind::Split { .. } | FaultKind::Isolate(_) => both(nodes, &rest(nodes)),
            FaultKind::OneWay { outbound, .. } => {
                let x = nodes[0];
                rest(nodes)
                    .into_iter()
                    .map(|o| if *outbound { (x, o) } else { (o, x) })
                    .collect()
            }
            FaultKind::Bridge { .. } => {
                let (side, bridge) = nodes.split_at(nodes.len() - 1);
                let other: Vec<NodeId> =
                    rest(side).into_iter().filter(|o| *o != bridge[0]).collect();
                both(side, &other)
            }
            FaultKind::CutLink { from, to } => vec![(*from, *to)],
            _ => Vec::new(),
        }
    }

    /// One line for the timeline.
    pub fn describe(&self, nodes: &[NodeId], start: bool) -> String {
        let list = |v: &[NodeId]| {
            v.iter()
                .map(|n| format!("n{n}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let what = match self {
            FaultKind::Split { .. } => format!("partition: {{{}}} | rest", list(nodes)),
            FaultKind::Isolate(_) => format!("isolate {}", list(nodes)),
            FaultKind::OneWay { outbound, .. } => format!(
                "one-way: {} {}",
                list(nodes),
                if *outbound {
                    "cannot send"
                } else {
                    "cannot receive"
                }
            ),
            FaultKind::Bridge { .. } => {
                let (side, bridge) = nodes.split_at(nodes.len() - 1);
                format!("bridge n{} between {{{}}} | rest", bridge[0], list(side))
            }
            FaultKind::Crash(_) => format!("crash {}", list(nodes)),
            FaultKind::CrashMidWrite(_) => {
                format!("crash {} at its next hard-state write", list(nodes))
            }
            FaultKind::CrashMidAppend(_) => {
                format!(
                    "crash {} at its next write of a leadership record",
                    list(nodes)
                )
            }
            FaultKind::Pause(_) => format!("pause (hold links of) {}", list(nodes)),
            FaultKind::Hostile(_) => format!("{} floods its peers' support streams", list(nodes)),
            FaultKind::Loss { rate, .. } => {
                format!("loss {:.0}% on {}", rate * 100.0, list(nodes))
            }
            FaultKind::Delay { max, .. } => format!("delay ≤{max:?} on {}", list(nodes)),
            FaultKind::ClockJump { by, .. } => {
                format!("clock of {} steps forward {by:?}", list(nodes))
            }
            FaultKind::ClockStall {
                counted_by_boottime,
                ..
            } => format!(
                "clock of {} stands still ({})",
                list(nodes),
                if *counted_by_boottime {
                    "a suspend: CLOCK_BOOTTIME counts it"
                } else {
                    "a pause neither clock counts"
                }
            ),
            FaultKind::CutLink { from, to } => format!("n{from}'s packets to n{to} are lost"),
        };
        if start {
            what
        } else {
            format!("end of {what}")
        }
    }

    /// A short name, for statistics.
    pub fn name(&self) -> &'static str {
        match self {
            FaultKind::Split { .. } => "partition",
            FaultKind::Isolate(_) => "isolate",
            FaultKind::OneWay { .. } => "one-way",
            FaultKind::Bridge { .. } => "bridge",
            FaultKind::Crash(_) => "crash+restart",
            FaultKind::CrashMidWrite(_) => "crash mid-write",
            FaultKind::CrashMidAppend(_) => "crash mid-append",
            FaultKind::Pause(_) => "pause",
            FaultKind::Hostile(_) => "hostile member",
            FaultKind::Loss { .. } => "loss",
            FaultKind::Delay { .. } => "delay",
            FaultKind::ClockJump { .. } => "clock jump",
            FaultKind::ClockStall {
                counted_by_boottime: true,
                ..
            } => "clock stall (suspend)",
            FaultKind::ClockStall { .. } => "clock stall (pause)",
            FaultKind::CutLink { .. } => "cut link",
        }
    }
}

/// How random schedules are drawn.
#[derive(Debug, Clone, Copy)]
pub struct ScheduleShape {
    /// No fault before this (the first election).
    pub warmup: Duration,
    /// Faults start within this window after the warmup; all end by its end.
    pub window: Duration,
    /// Fewest and most faults.
    pub faults: (usize, usize),
    /// Shortest and longest fault.
    pub length: (Duration, Duration),
    /// Shortest and longest forward step of a clock.
    pub clock_jump: (Duration, Duration),
}

impl Schedule {
    /// A random schedule for the group `ids`.
    pub fn random(rng: &mut StdRng, ids: &[NodeId], shape: ScheduleShape) -> Schedule {
        let heal_at = shape.warmup + shape.window;
        let count = rng.gen_range(shape.faults.0..=shape.faults.1);
        let mut faults: Vec<Fault> = (0..count)
            .map(|_| {
                let at = shape.warmup
                    + Duration::from_millis(
                        rng.gen_range(0..shape.window.as_millis() as u64 * 3 / 4),
                    );
                let len = Duration::from_millis(rng.gen_range(
                    shape.length.0.as_millis() as u64..=shape.length.1.as_millis() as u64,
                ));
                let kind = random_kind(rng, ids);
                // Some crashes are quick restarts: back within a few milliseconds, well
                // inside the lease it helped renew before it died.
                let len = match kind {
                    FaultKind::Crash(_)
                    | FaultKind::CrashMidWrite(_)
                    | FaultKind::CrashMidAppend(_)
                        if rng.gen_bool(0.5) =>
                    {
                        Duration::from_millis(rng.gen_range(1..=60))
                    }
                    _ => len,
                };
                let duration = len.min(heal_at - at);
                Fault { at, duration, kind }
            })
            .collect();
        // A bridge node that restarts while it bridges: the quorum that renews the
        // leader's lease runs through it, and the other side is waiting for a vote.
        let bridges: Vec<(Duration, Duration, NodeId)> = faults
            .iter()
            .filter_map(|f| match f.kind {
                FaultKind::Bridge { bridge, .. } => Some((f.at, f.duration, bridge)),
                _ => None,
            })
            .collect();
        for (at, duration, bridge) in bridges {
            if !rng.gen_bool(0.5) || duration < Duration::from_millis(150) {
                continue;
            }
            let at = at + Duration::from_millis(rng.gen_range(100..duration.as_millis() as u64));
            let down = Duration::from_millis(rng.gen_range(1..=40));
            faults.push(Fault {
                at,
                duration: down.min(heal_at.saturating_sub(at)),
                kind: FaultKind::Crash(Target::Node(bridge)),
            });
        }
        // Clock faults come last, so that they leave every other draw of the seed alone.
        faults.extend(random_clock_faults(rng, ids, shape));
        faults.sort_by_key(|f| f.at);
        Schedule { faults, heal_at }
    }
}

/// About as many clock faults as faults of any other kind: a forward step in a bit over
/// a third of the schedules, a stall in as many (half of them suspends that
/// `CLOCK_BOOTTIME` counts), each on the leader more often than not.
fn random_clock_faults(rng: &mut StdRng, ids: &[NodeId], shape: ScheduleShape) -> Vec<Fault> {
    let heal_at = shape.warmup + shape.window;
    let start = |rng: &mut StdRng| {
        shape.warmup
            + Duration::from_millis(rng.gen_range(0..shape.window.as_millis() as u64 * 3 / 4))
    };
    let ms = |(lo, hi): (Duration, Duration)| (lo.as_millis() as u64, hi.as_millis() as u64);
    let mut faults = Vec::new();
    if rng.gen_bool(0.35) {
        let at = start(rng);
        let (lo, hi) = ms(shape.clock_jump);
        faults.push(Fault {
            at,
            duration: Duration::ZERO,
            kind: FaultKind::ClockJump {
                target: random_target(rng, ids),
                by: Duration::from_millis(rng.gen_range(lo..=hi)),
            },
        });
    }
    if rng.gen_bool(0.35) {
        let at = start(rng);
        let (lo, hi) = ms(shape.length);
        let len = Duration::from_millis(rng.gen_range(lo..=hi));
        faults.push(Fault {
            at,
            duration: len.min(heal_at - at),
            kind: FaultKind::ClockStall {
                target: random_target(rng, ids),
                counted_by_boottime: rng.gen_bool(0.5),
            },
        });
    }
    faults
}

/// A hostile member ([`FaultKind::Hostile`]) in a share `chance` of the schedules, for
/// 300–900 ms: the leader more often than not (its followers hold the most for it).
/// Drawn from an RNG of its own, so the other faults and ops of a seed stay what they
/// were.
pub fn random_hostile(
    rng: &mut StdRng,
    ids: &[NodeId],
    shape: ScheduleShape,
    chance: f64,
) -> Option<Fault> {
    if !rng.gen_bool(chance) {
        return None;
    }
    let heal_at = shape.warmup + shape.window;
    let at = shape.warmup
        + Duration::from_millis(rng.gen_range(0..shape.window.as_millis() as u64 * 3 / 4));
    let len = Duration::from_millis(rng.gen_range(300..=900));
    Some(Fault {
        at,
        duration: len.min(heal_at - at),
        kind: FaultKind::Hostile(random_target(rng, ids)),
    })
}

fn random_target(rng: &mut StdRng, ids: &[NodeId]) -> Target {
    let any = *ids.choose(rng).expect("nodes");
    if rng.gen_bool(0.6) {
        Target::Leader { or: any }
    } else {
        Target::Node(any)
    }
}

fn random_kind(rng: &mut StdRng, ids: &[NodeId]) -> FaultKind {
    let n = ids.len();
    let some = |rng: &mut StdRng, k: usize| {
        let mut v: Vec<NodeId> = ids.choose_multiple(rng, k).copied().collect();
        v.sort_unstable();
        v
    };
    loop {
        return match rng.gen_range(0..9) {
            0 => {
                let k = rng.gen_range(1..=n / 2);
                FaultKind::Split {
                    minority: some(rng, k),
                }
            }
            1 => FaultKind::Isolate(random_target(rng, ids)),
            2 => FaultKind::OneWay {
                target: random_target(rng, ids),
                outbound: rng.gen_bool(0.5),
            },
            3 => {
                if n < 5 {
                    continue;
                }
                // 5 nodes: {a, b} | bridge | {c, d}.
                let mut v = some(rng, n);
                v.shuffle(rng);
                let bridge = v[0];
                let mut side: Vec<NodeId> = v[1..1 + (n - 1) / 2].to_vec();
                side.sort_unstable();
                FaultKind::Bridge { side, bridge }
            }
            4 => FaultKind::Crash(random_target(rng, ids)),
            5 => FaultKind::Pause(random_target(rng, ids)),
            8 => {
                // Half of them at the write of appended entries; its victim is any node
                // (a leader's follower is the one whose acknowledgement counts).
                if rng.gen_bool(0.5) {
                    FaultKind::CrashMidWrite(random_target(rng, ids))
                } else {
                    FaultKind::CrashMidAppend(Target::Node(*ids.choose(rng).expect("nodes")))
                }
            }
            6 => {
                let k = rng.gen_range(1..=n);
                FaultKind::Loss {
                    nodes: some(rng, k),
                    rate: [0.05, 0.1, 0.2, 0.4][rng.gen_range(0..4)],
                }
            }
            _ => {
                let k = rng.gen_range(1..=n);
                FaultKind::Delay {
                    nodes: some(rng, k),
                    max: Duration::from_millis(rng.gen_range(10..=80)),
                }
            }
        };
    }
}

/// What an operator does during a run, among the faults: hand leadership over, drain and
/// undrain. Drawn from an RNG of their own ([`random_ops`]), so that a seed's faults stay
/// what they were without them.
#[derive(Debug, Clone, PartialEq)]
pub enum OpKind {
    /// Whoever leads when the op starts hands over (`Node::transfer_leadership`).
    Transfer {
        /// To whom.
        to: TransferTo,
    },
    /// The leader drains the node when the op starts; it is undrained when the op ends
    /// (retried until a leader has applied it).
    Drain(Target),
    /// The handover of the report this op reproduces (docs/design.md, section 4): the
    /// node `to` stalls (its links are held, as under SIGSTOP) and, `after` that, the
    /// leader hands over to it; the transfer times out; after `stall` the node wakes and
    /// handles what it was sent (the leader's heartbeats, then `MsgTimeoutNow`), while
    /// its packets to the old leader are lost for `cut`.
    StalledHandover {
        /// The node that stalls (the next one if it leads).
        to: NodeId,
        /// From the stall to the handover: long enough for a heartbeat to be held first
        /// (the simulated node's timers run while it stalls, so it becomes a
        /// pre-candidate, and only its leader's heartbeat makes it follow again).
        after: Duration,
        /// How long it stalls.
        stall: Duration,
        /// How long its packets to the old leader are lost after it wakes.
        cut: Duration,
    },
    /// A spare host (a new node id, on an empty disk, started with `Config::join` once
    /// it was added) is added as a learner and swapped in for voter `old` in one joint
    /// change (`Node::replace_member`); `old` may be down, cut off or the leader itself,
    /// and is stopped for good a little after the change (a machine that was down stays
    /// down). Every call is retried until it is carried out (a change the group refused
    /// because it is in flight, the learner is behind, no quorum is reachable, the
    /// leader moved or died), then the leader's membership is checked.
    Replace {
        /// The voter that leaves.
        old: Voter,
        /// Faults the op places at its own steps.
        faults: OpFaults,
    },
    /// Voter `who` is removed (`Node::remove_member`), its machine is stopped for good,
    /// and comes back under a new node id on an empty disk: joined, added as a learner
    /// and promoted (`Node::add_learner`, `Node::promote`), each call retried as for
    /// [`OpKind::Replace`].
    Rejoin {
        /// The voter removed.
        who: Voter,
        /// Faults the op places at its own steps.
        faults: OpFaults,
    },
    /// Named election `name` is created (`Node::create_election`) through the root
    /// leader; a `NotLeader` answer is asked again of the node it names, a lost or
    /// timed-out call of whoever leads (`Exists` then says an earlier attempt took
    /// effect).
    CreateElection(&'static str),
    /// Named election `name` is removed (`Node::remove_election`), asked as a create is;
    /// as the call returns, its fence is retired to `Removed::retired_above`.
    RemoveElection(&'static str),
    /// Named election `name` is suspended (`Node::suspend_election`), asked as a create
    /// is, and resumed `hold` after the op starts (`Node::resume_election`, asked until it
    /// is carried out, at the heal too; the suspension is not asked again once the resume
    /// is due).
    Suspend {
        /// Which election.
        name: &'static str,
        /// From the suspension's first call to the resumption's.
        hold: Duration,
    },
    /// Whoever leads named election `name` hands it over
    /// (`Election::transfer_leadership`).
    ElectionTransfer {
        /// Which election.
        name: &'static str,
        /// To whom.
        to: TransferTo,
    },
}

/// Whom a membership change takes out of the group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Voter {
    /// Whoever leads when the op starts (a leader that removes itself hands over once
    /// the change is applied).
    Leader,
    /// This node.
    Node(NodeId),
    /// The node that fault `i` of the schedule stalls (crashed, paused, cut off): a voter
    /// that is down or unreachable while it is replaced or removed.
    VictimOf(usize),
}

/// Faults a membership op places itself, at its own steps (each one ends by the
/// schedule's heal, and is left out if it would start after it).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct OpFaults {
    /// `.0` after the learner was added, its links are held for `.1` (a learner that
    /// stalls while it catches up: promoting or swapping it in is refused until it has).
    pub pause_learner: Option<(Duration, Duration)>,
    /// `.0` after the decisive change was asked of the leader (the replace, or the
    /// remove), that leader crashes; it restarts `.1` later: a leader that dies in the
    /// middle of the change (in a joint configuration, or with the change uncommitted).
    pub crash_leader: Option<(Duration, Duration)>,
}

/// The target of a transfer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TransferTo {
    /// The most up-to-date follower (`transfer_leadership(None)`).
    Best,
    /// This node (the next one if it leads).
    Node(NodeId),
    /// The node that fault `i` of the schedule stalls (paused, isolated, crashed, cut off
    /// one way): a handover to a node that cannot take over, whose `MsgTimeoutNow` may
    /// be handled late.
    VictimOf(usize),
}

/// An op with its time.
#[derive(Debug, Clone)]
pub struct Op {
    /// When it starts (simulated time from the start of the run).
    pub at: Duration,
    /// How long a drain lasts (a transfer takes what it takes).
    pub duration: Duration,
    /// What it is.
    pub kind: OpKind,
}

impl OpKind {
    /// A short name, for statistics.
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Transfer {
                to: TransferTo::VictimOf(_),
            } => "transfer to a stalled node",
            OpKind::Transfer { .. } => "transfer",
            OpKind::Drain(_) => "drain",
            OpKind::StalledHandover { .. } => "handover to a node that stalls",
            OpKind::Replace { .. } => "replace a voter by a spare",
            OpKind::Rejoin { .. } => "remove a voter, add it back under a new id",
            OpKind::CreateElection(_) => "create an election",
            OpKind::RemoveElection(_) => "remove an election",
            OpKind::ElectionTransfer {
                to: TransferTo::VictimOf(_),
                ..
            } => "transfer an election to a stalled node",
            OpKind::ElectionTransfer { .. } => "transfer an election",
            OpKind::Suspend { .. } => "suspend an election, resume it",
        }
    }

    /// Whether the op changes the membership.
    pub fn is_membership(&self) -> bool {
        matches!(self, OpKind::Replace { .. } | OpKind::Rejoin { .. })
    }
}

/// Between `count.0` and `count.1` ops for a run of `schedule` on `ids`, in the window of
/// `shape`, ending by the schedule's heal. Half of the transfers go to the victim of a
/// fault that stalls a node (pause, isolation, crash, one-way cut), while it is stalled.
pub fn random_ops(
    rng: &mut StdRng,
    ids: &[NodeId],
    schedule: &Schedule,
    shape: ScheduleShape,
    count: (usize, usize),
) -> Vec<Op> {
    let stalling: Vec<usize> = schedule
        .faults
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            matches!(
                f.kind,
                FaultKind::Pause(_)
                    | FaultKind::Isolate(_)
                    | FaultKind::Crash(_)
                    | FaultKind::OneWay { .. }
            ) && f.duration >= Duration::from_millis(20)
        })
        .map(|(i, _)| i)
        .collect();
    let n = rng.gen_range(count.0..=count.1);
    let window_ms = shape.window.as_millis() as u64 * 3 / 4;
    let mut ops: Vec<Op> = (0..n)
        .map(|_| {
            let mut at = shape.warmup + Duration::from_millis(rng.gen_range(0..window_ms));
            let kind = if rng.gen_bool(0.7) {
                let to = match rng.gen_range(0..12) {
                    10..=11 => {
                        let stall = Duration::from_millis(rng.gen_range(200..=600));
                        let cut = Duration::from_millis(rng.gen_range(100..=300));
                        return Op {
                            duration: (stall + cut).min(schedule.heal_at.saturating_sub(at)),
                            at,
                            kind: OpKind::StalledHandover {
                                to: *ids.choose(rng).expect("nodes"),
                                after: Duration::from_millis(rng.gen_range(35..=100)),
                                stall,
                                cut,
                            },
                        };
                    }
                    0..=1 => TransferTo::Best,
                    2..=4 => TransferTo::Node(*ids.choose(rng).expect("nodes")),
                    _ => match stalling.choose(rng) {
                        Some(i) => {
                            // While the fault holds its victim.
                            let f = &schedule.faults[*i];
                            let into = rng.gen_range(0..f.duration.as_millis() as u64 / 2);
                            at = f.at + Duration::from_millis(into);
                            TransferTo::VictimOf(*i)
                        }
                        None => TransferTo::Node(*ids.choose(rng).expect("nodes")),
                    },
                };
                OpKind::Transfer { to }
            } else {
                OpKind::Drain(random_target(rng, ids))
            };
            let len = Duration::from_millis(rng.gen_range(100..=900));
            let duration = len.min(schedule.heal_at.saturating_sub(at));
            Op { at, duration, kind }
        })
        .collect();
    ops.sort_by_key(|o| o.at);
    ops
}

/// With probability `chance`, one membership change for a run of `schedule` on `ids`:
/// half of them a replace, half a remove followed by an add under a new id. The voter
/// that leaves is the leader, a node a fault stalls while it is replaced (the op starts
/// inside that fault), or any node; half of the others start inside a fault too (a
/// partition, crash or pause); a third pause the learner while it catches up, a third
/// crash the leader in the middle of the change. Drawn after [`random_ops`] from the
/// same RNG, so a seed's transfers and drains stay what they were.
pub fn random_member_ops(
    rng: &mut StdRng,
    ids: &[NodeId],
    schedule: &Schedule,
    shape: ScheduleShape,
    chance: f64,
) -> Vec<Op> {
    if !rng.gen_bool(chance) {
        return Vec::new();
    }
    let long = |f: &Fault| f.duration >= Duration::from_millis(20);
    // Faults that leave a voter down or unreachable (its victim is the one replaced).
    let down: Vec<usize> = schedule
        .faults
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            long(f)
                && matches!(
                    f.kind,
                    FaultKind::Pause(_)
                        | FaultKind::Isolate(_)
                        | FaultKind::Crash(_)
                        | FaultKind::OneWay { .. }
                )
        })
        .map(|(i, _)| i)
        .collect();
    // Faults a change may run into.
    let during: Vec<usize> = schedule
        .faults
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            long(f) && !f.kind.is_clock() && !matches!(f.kind, FaultKind::Delay { .. })
        })
        .map(|(i, _)| i)
        .collect();
    let ms = |rng: &mut StdRng, lo: u64, hi: u64| Duration::from_millis(rng.gen_range(lo..=hi));
    let window_ms = shape.window.as_millis() as u64 * 3 / 4;
    let mut at = shape.warmup + Duration::from_millis(rng.gen_range(0..window_ms));
    let inside = |rng: &mut StdRng, i: usize| {
        let f = &schedule.faults[i];
        f.at + Duration::from_millis(rng.gen_range(0..f.duration.as_millis() as u64 / 2))
    };
    let whom = match rng.gen_range(0..3) {
        0 => Voter::Leader,
        1 => match down.choose(rng).copied() {
            Some(i) => {
                at = inside(rng, i);
                Voter::VictimOf(i)
            }
            None => Voter::Node(*ids.choose(rng).expect("nodes")),
        },
        _ => Voter::Node(*ids.choose(rng).expect("nodes")),
    };
    if !matches!(whom, Voter::VictimOf(_)) && rng.gen_bool(0.5) {
        if let Some(i) = during.choose(rng).copied() {
            at = inside(rng, i);
        }
    }
    let pause_learner = rng
        .gen_bool(0.35)
        .then(|| (ms(rng, 0, 50), ms(rng, 100, 600)));
    let crash_leader = rng.gen_bool(0.35).then(|| {
        let after = ms(rng, 0, 20);
        let down = if rng.gen_bool(0.5) {
            ms(rng, 1, 60)
        } else {
            ms(rng, 100, 500)
        };
        (after, down)
    });
    let faults = OpFaults {
        pause_learner,
        crash_leader,
    };
    let kind = if rng.gen_bool(0.5) {
        OpKind::Replace { old: whom, faults }
    } else {
        OpKind::Rejoin { who: whom, faults }
    };
    vec![Op {
        at,
        duration: Duration::ZERO,
        kind,
    }]
}

/// The names of the named elections a run uses: the first [`INITIAL_ELECTIONS`] are
/// created at the start, the rest only by ops; creates and removes draw from all of them,
/// so a removed name comes back (as a new incarnation, with a new id).
pub static ELECTION_NAMES: std::sync::LazyLock<Vec<&'static str>> =
    std::sync::LazyLock::new(|| {
        let initial = (0..INITIAL_ELECTIONS).map(|i| format!("e{i:03}"));
        let later = (0..4).map(|i| format!("x{i}"));
        initial
            .chain(later)
            .map(|n| &*Box::leak(n.into_boxed_str()))
            .collect()
    });

/// With chance `chance`, one or two suspensions of an election of the start, each resumed
/// 50 to 800 ms later, in the window of `shape` before the schedule's heal (operator ops:
/// `docs/design.md`, section 11, "Suspending an election").
pub fn random_suspend_ops(rng: &mut StdRng, shape: ScheduleShape, chance: f64) -> Vec<Op> {
    if !rng.gen_bool(chance) {
        return Vec::new();
    }
    let window_ms = shape.window.as_millis() as u64 * 3 / 4;
    (0..rng.gen_range(1..=2))
        .map(|_| Op {
            at: shape.warmup + Duration::from_millis(rng.gen_range(0..window_ms)),
            duration: Duration::ZERO,
            kind: OpKind::Suspend {
                name: ELECTION_NAMES[rng.gen_range(0..INITIAL_ELECTIONS)],
                hold: Duration::from_millis(rng.gen_range(50..=800)),
            },
        })
        .collect()
}

/// How many of [`ELECTION_NAMES`] every run creates at the start (issue 15: at least 100
/// beside the root, so that quiet elections and the support stream carry many names).
pub const INITIAL_ELECTIONS: usize = 100;

/// Between `count.0` and `count.1` ops on named elections, in the window of `shape`
/// before the schedule's heal, under the schedule's faults: removes (each followed, six
/// times in ten, by a create of the same name: the name's next incarnation), creates,
/// and transfers of an election by its leader (to the best follower, to a named node, or
/// to the victim of a fault that stalls a node, while it is stalled).
pub fn random_election_ops(
    rng: &mut StdRng,
    ids: &[NodeId],
    schedule: &Schedule,
    shape: ScheduleShape,
    count: (usize, usize),
) -> Vec<Op> {
    let stalling: Vec<usize> = schedule
        .faults
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            matches!(
                f.kind,
                FaultKind::Pause(_)
                    | FaultKind::Isolate(_)
                    | FaultKind::Crash(_)
                    | FaultKind::OneWay { .. }
                    | FaultKind::ClockStall { .. }
            ) && f.duration >= Duration::from_millis(20)
        })
        .map(|(i, _)| i)
        .collect();
    let window_ms = shape.window.as_millis() as u64 * 3 / 4;
    let n = rng.gen_range(count.0..=count.1);
    let mut ops = Vec::new();
    for _ in 0..n {
        let at = shape.warmup + Duration::from_millis(rng.gen_range(0..window_ms));
        let name = *ELECTION_NAMES.choose(rng).expect("names");
        let op = |at: Duration, kind: OpKind| Op {
            at,
            duration: Duration::ZERO,
            kind,
        };
        match rng.gen_range(0..20) {
            0..=6 => {
                ops.push(op(at, OpKind::RemoveElection(name)));
                if rng.gen_bool(0.6) {
                    let later = at + Duration::from_millis(rng.gen_range(50..=500));
                    ops.push(op(later, OpKind::CreateElection(name)));
                }
            }
            7..=10 => ops.push(op(at, OpKind::CreateElection(name))),
            _ => {
                let name = ELECTION_NAMES[rng.gen_range(0..INITIAL_ELECTIONS)];
                let (at, to) = match rng.gen_range(0..10) {
                    0..=2 => (at, TransferTo::Best),
                    3..=5 => (at, TransferTo::Node(*ids.choose(rng).expect("nodes"))),
                    _ => match stalling.choose(rng) {
                        Some(i) => {
                            let f = &schedule.faults[*i];
                            let into = rng.gen_range(0..f.duration.as_millis() as u64 / 2);
                            (f.at + Duration::from_millis(into), TransferTo::VictimOf(*i))
                        }
                        None => (at, TransferTo::Node(*ids.choose(rng).expect("nodes"))),
                    },
                };
                ops.push(op(at, OpKind::ElectionTransfer { name, to }));
            }
        }
    }
    ops.sort_by_key(|o| o.at);
    ops
}
