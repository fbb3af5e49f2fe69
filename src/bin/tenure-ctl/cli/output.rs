//! What `tenure-ctl` prints: refusals as sentences, the result of a command, a node's
//! status, the membership and the leadership history.

use std::net::SocketAddr;

use tenure::admin::{ElectionEntry, ErrorKind, Leaderships, Reply, Request};
use tenure::{Membership, NodeId, Role, Status, TenureEnd, TenureRecord, TenureStart};

/// A refusal as a sentence, with what to do about it.
pub(super) fn explain(
    node: NodeId,
    request: &Request,
    reply: &tenure::admin::ErrorReply,
    given: usize,
) -> String {
    let what = describe(request);
    let mut s = format!("{what}: refused by node {node}: {}", reply.message);
    match (reply.kind, reply.leader_hint) {
        (ErrorKind::NotLeader, Some(l)) if given == 1 => s.push_str(&format!(
            "\n  give node {l}'s admin address with --addr (or every node's, comma-separated)"
        )),
        (ErrorKind::ChangeInFlight, _) => {
            s.push_str("\n  retry when `status` shows no change in flight");
        }
        (ErrorKind::LearnerBehind, _) => {
            s.push_str(
                "\n  the learner must be running and reachable; retry when it has caught up",
            );
        }
        (ErrorKind::TimedOut, _) => s.push_str("\n  it may still take effect; check `status`"),
        (ErrorKind::UnknownElection, _) => {
            s.push_str("\n  `elections list` shows the elections there are");
        }
        _ => {}
    }
    s
}

pub(super) fn describe(request: &Request) -> String {
    match request {
        Request::Status => "status".into(),
        Request::History => "history".into(),
        Request::Transfer { to: None } => "transfer".into(),
        Request::Transfer { to: Some(t) } => format!("transfer to node {t}"),
        Request::Drain { id } => format!("drain node {id}"),
        Request::Undrain { id } => format!("undrain node {id}"),
        Request::AddLearner { id, addr } => format!("add node {id} ({addr}) as a learner"),
        Request::Promote { id } => format!("promote node {id}"),
        Request::Remove { id } => format!("remove node {id}"),
        Request::Replace { old, new } => format!("replace node {old} by node {new}"),
        Request::Elections => "elections list".into(),
        Request::CreateElection { name, .. } => format!("create election {name:?}"),
        Request::RemoveElection { name } => format!("remove election {name:?}"),
        Request::SuspendElection { name } => format!("suspend election {name:?}"),
        Request::ResumeElection { name } => format!("resume election {name:?}"),
        Request::TransferElection { name, to: None } => format!("transfer election {name:?}"),
        Request::TransferElection { name, to: Some(t) } => {
            format!("transfer election {name:?} to node {t}")
        }
        Request::Leaderships => "leaderships".into(),
        Request::Backup => "backup".into(),
        _ => request.name().into(),
    }
}

pub(super) fn print_done(node: NodeId, request: &Request, reply: &Reply) {
    match reply {
        Reply::Transferred { leader } => println!("leadership moved to node {leader}"),
        Reply::Membership(m) => {
            let done = match request {
                Request::Drain { id } => format!("node {id} drained: it will not lead"),
                Request::Undrain { id } => format!("node {id} undrained: it may lead again"),
                Request::AddLearner { id, addr } => format!(
                    "node {id} added as a learner at {addr}; start it (joining) and promote it once it has caught up"
                ),
                Request::Promote { id } => format!("node {id} is a voter now"),
                Request::Remove { id } => format!("node {id} removed from the group"),
                Request::Replace { old, new } => format!("node {new} replaced node {old}"),
                other => format!("{} done", other.name()),
            };
            println!("{done} (by leader node {node})");
            print_members(node, m);
        }
        Reply::ElectionCreated(info) => println!(
            "election {} created: id {}, priority {}, affinity {} (by leader node {node})",
            info.name,
            info.id,
            info.options.priority,
            list(&info.options.affinity)
        ),
        Reply::ElectionRemoved {
            name,
            id,
            retired_above,
        } => println!(
            "election {name} removed (id {id}; every token it handed out is below {retired_above}: \
             a fence advanced to it refuses its leaders) (by leader node {node})"
        ),
        Reply::ElectionSuspended(info) if info.suspended => println!(
            "election {} suspended: no lease of it is held anywhere until it is resumed (by leader node {node})",
            info.name
        ),
        Reply::ElectionSuspended(info) => println!(
            "election {} resumed: its next lease is in a new term, above every earlier token (by leader node {node})",
            info.name
        ),
        Reply::ElectionTransferred { name, leader } => {
            println!("leadership of election {name} moved to node {leader}");
        }
        other => println!("{other:?}"),
    }
}

/// At most this many names a node leads are listed by `status` without `--names`.
const FEW: usize = 8;

/// The named elections a node runs and leads, under its `status` lines (nothing for a
/// node that runs none).
pub(super) fn print_leaderships(l: &Leaderships, names: bool) {
    if let Some(line) = leaderships_line(l, names) {
        println!("{line}");
    }
}

/// The line [`print_leaderships`] prints: the names led when `names` or when few.
fn leaderships_line(l: &Leaderships, names: bool) -> Option<String> {
    if l.elections == 0 && l.led.is_empty() {
        return None;
    }
    let mut s = format!(
        "  named elections: leads {} of {}, lease held of {}",
        l.led.len(),
        l.elections,
        l.leased()
    );
    if l.leaderless > 0 {
        s.push_str(&format!(", {} without a known leader", l.leaderless));
    }
    if l.suspended > 0 {
        s.push_str(&format!(", {} suspended", l.suspended));
    }
    if !l.led.is_empty() {
        if names || l.led.len() <= FEW {
            let led: Vec<String> = l
                .led
                .iter()
                .map(|e| {
                    format!(
                        "{} (term {}{})",
                        e.name,
                        e.term,
                        if e.leased { "" } else { ", no lease" }
                    )
                })
                .collect();
            s.push_str(&format!(": {}", led.join(", ")));
        } else {
            s.push_str(" (names with status --names)");
        }
    }
    Some(s)
}

/// The catalog as a table.
pub(super) fn print_elections(node: NodeId, entries: &[ElectionEntry]) {
    let suspended = entries.iter().filter(|e| e.suspended).count();
    println!(
        "named elections (catalog as node {node} has applied it): {}{}",
        entries.len(),
        if suspended > 0 {
            format!(", {suspended} suspended")
        } else {
            String::new()
        }
    );
    if entries.is_empty() {
        println!("  (none)");
        return;
    }
    let w = entries
        .iter()
        .map(|e| e.name.len())
        .max()
        .unwrap_or(0)
        .max(4);
    println!(
        "  {:<w$}  {:>7}  {:>6}  {:>20}  {:>8}  affinity",
        "name", "id", "leader", "term", "priority"
    );
    for e in entries {
        let leader = e.leader.map_or_else(|| "-".to_string(), |l| l.to_string());
        println!(
            "  {:<w$}  {:>7}  {:>6}  {:>20}  {:>8}  {}{}",
            e.name,
            e.id,
            leader,
            e.term,
            e.options.priority,
            list(&e.options.affinity),
            if e.suspended { "  SUSPENDED" } else { "" }
        );
    }
}

pub(super) fn list(ids: &[NodeId]) -> String {
    if ids.is_empty() {
        "-".into()
    } else {
        ids.iter()
            .map(std::string::ToString::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

pub(super) fn print_status(addr: SocketAddr, s: &Status) {
    let leader = match s.leader {
        Some(l) if l == s.id => "itself".to_string(),
        Some(l) => format!("node {l}"),
        None => "none known".to_string(),
    };
    println!(
        "node {} ({addr}): {}, term {}, leader {leader}, lease {}",
        s.id,
        s.role.as_str(),
        s.term,
        if s.leased { "held" } else { "not held" }
    );
    let voters = s.members.voters.len() as u64;
    // Quorum health means different things by role: the leader counts the voters it
    // hears from; a follower or learner can only say whether it hears a leader.
    let health = match s.role {
        Role::Leader => format!(
            "quorum {} ({} of {voters} voters reachable)",
            if s.quorum_healthy {
                "healthy"
            } else {
                "NOT healthy"
            },
            s.peers_reachable
        ),
        Role::Joining => "not a member yet: waiting to be added (members add)".into(),
        Role::Founding => {
            "founding the group: waiting until every first member has said hello".into()
        }
        Role::Removed => "removed from the group (it neither votes nor campaigns: stop it)".into(),
        _ if s.quorum_healthy => "hears its leader".into(),
        _ => "hears no leader".into(),
    };
    println!(
        "  {health}, commit {}, applied {}{}",
        s.commit,
        s.applied,
        if s.change_in_flight {
            ", membership change in flight"
        } else {
            ""
        }
    );
    if s.disk_stalled {
        println!("  DISK STALLED: leads nothing and campaigns in nothing until its probe writes are fast");
    }
    if !s.peers_disk_stalled.is_empty() {
        println!(
            "  peers whose disk is stalled (handed nothing): {}",
            list(&s.peers_disk_stalled)
        );
    }
}

pub(super) fn print_members(seen_by: NodeId, m: &Membership) {
    println!(
        "members (as node {seen_by} sees them): voters {}; learners {}; drained {}{}",
        list(&m.voters),
        list(&m.learners),
        list(&m.drained),
        if m.outgoing.is_empty() {
            String::new()
        } else {
            format!("; joint change from voters {}", list(&m.outgoing))
        }
    );
    if !m.addrs.is_empty() {
        let addrs: Vec<String> = m.addrs.iter().map(|(id, a)| format!("{id}={a}")).collect();
        println!("  raft addresses: {}", addrs.join(" "));
    }
}

pub(super) fn print_history(node: NodeId, records: &[TenureRecord]) {
    println!("leadership history (as node {node} has applied it), oldest first:");
    println!(
        "  {:>6}  {:>6}  {:<24}  {:<9}  ended",
        "term", "leader", "began (UTC)", "by"
    );
    for (i, r) in records.iter().enumerate() {
        let by = match (r.resumed, r.started_by) {
            (true, _) => "resume",
            (false, TenureStart::Election) => "election",
            (false, TenureStart::Handover) => "handover",
        };
        // A tenure the next one's resumption ended was not lost: its leader stepped down.
        let resumed_next = records.get(i + 1).is_some_and(|n| n.resumed);
        let ended = match (resumed_next, r.ended) {
            (true, _) => "resumed",
            (false, None) => "-",
            (false, Some(TenureEnd::HandedOver)) => "handed over",
            (false, Some(TenureEnd::Lost)) => "lost",
        };
        let note = if r.suspended { "  (suspended)" } else { "" };
        println!(
            "  {:>6}  {:>6}  {:<24}  {:<9}  {ended}{note}",
            r.term,
            r.leader,
            utc(r.began_unix_ms),
            by
        );
    }
    if records.is_empty() {
        println!("  (empty)");
    }
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS.mmm`.
pub(super) fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// Writes `bytes` to `path` whole: a temporary file beside it, synced, then renamed over.
pub(crate) fn write_whole(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure::admin::LedElection;

    fn leading(n: usize) -> Leaderships {
        Leaderships {
            node: 2,
            elections: 20,
            leaderless: 1,
            suspended: 0,
            led: (0..n)
                .map(|i| LedElection {
                    name: format!("e{i}"),
                    term: (1 << 40) + i as u64,
                    leased: i != 0,
                })
                .collect(),
        }
    }

    #[test]
    fn leaderships_name_few_elections_and_many_only_when_asked() {
        assert_eq!(leaderships_line(&Leaderships::default(), true), None);
        assert_eq!(
            leaderships_line(&leading(2), false).unwrap(),
            "  named elections: leads 2 of 20, lease held of 1, 1 without a known leader: \
             e0 (term 1099511627776, no lease), e1 (term 1099511627777)"
        );
        let many = leading(FEW + 1);
        assert_eq!(
            leaderships_line(&many, false).unwrap(),
            "  named elections: leads 9 of 20, lease held of 8, 1 without a known leader \
             (names with status --names)"
        );
        let named = leaderships_line(&many, true).unwrap();
        assert!(
            named.contains(": e0 (term") && named.contains("e8 (term"),
            "{named}"
        );
    }
}
