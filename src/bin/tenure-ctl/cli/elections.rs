//! `elections list` and `elections transfer NAME`: the commands about named elections
//! that do not go to the group's leader (`create` and `remove` do, as the membership
//! commands: `leader_command`).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde_json::json;
use tenure::admin::{Client, ClientError, ElectionEntry, ErrorKind, Request};
use tenure::transport::tls::OperatorIdentity;
use tenure::{NodeId, Role};

use super::output::print_elections;
use super::{connect_most, join_all, report, Args, Failure, ASK_AGAIN};

/// How long one look at who leads waits for each node's answer (a paused node answers
/// nothing; the look is repeated every `ASK_AGAIN` until the client timeout).
const LEADERSHIPS_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// `elections list`: the catalog of the most current node that answers (the group's
/// leader, else the one that applied the most), each election's leader and term as the
/// node that knows the highest term of it says.
pub(super) async fn list(
    args: &Args,
    clients: &[(SocketAddr, Result<Client, ClientError>)],
) -> Result<(), Failure> {
    let connected: Vec<&Client> = clients
        .iter()
        .filter_map(|(_, c)| c.as_ref().ok())
        .collect();
    if connected.is_empty() {
        let errors: Vec<String> = clients
            .iter()
            .filter_map(|(_, c)| c.as_ref().err().map(ToString::to_string))
            .collect();
        return Err(Failure::new(format!(
            "no node could be reached: {}",
            errors.join("; ")
        )));
    }
    let answers = join_all(connected.iter().map(|c| async move {
        let (status, elections) = tokio::join!(c.status(), c.elections());
        (*c, status, elections)
    }))
    .await;
    let mut first_error = None;
    let mut best: Option<(&Client, (bool, u64), Vec<ElectionEntry>)> = None;
    // Per name, the highest term any node knows and the leader it names in it.
    let mut views: BTreeMap<String, (u64, Option<NodeId>)> = BTreeMap::new();
    for (client, status, elections) in answers {
        let entries = match elections {
            Ok(e) => e,
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        for e in &entries {
            let v = views.entry(e.name.clone()).or_insert((0, None));
            if e.term > v.0 || (e.term == v.0 && v.1.is_none()) {
                *v = (e.term, e.leader);
            }
        }
        let rank = match &status {
            Ok(s) if matches!(s.role, Role::Removed | Role::Joining | Role::Founding) => (false, 0),
            Ok(s) => (s.role == Role::Leader, s.applied),
            Err(_) => (false, 0),
        };
        if best.as_ref().is_none_or(|(_, r, _)| rank > *r) {
            best = Some((client, rank, entries));
        }
    }
    let Some((client, _, mut entries)) = best else {
        let e = first_error.expect("a node answered or failed");
        return Err(Failure::client(&e));
    };
    for e in &mut entries {
        if let Some((term, leader)) = views.get(&e.name) {
            (e.term, e.leader) = (*term, *leader);
        }
    }
    if args.json {
        println!(
            "{}",
            json!({"node": client.node_id(), "elections": entries})
        );
    } else {
        print_elections(client.node_id(), &entries);
    }
    Ok(())
}

/// `elections transfer NAME`: sent to the node that leads election NAME (the highest
/// term, should two say so), found from every node's `leaderships`, asking again while
/// none leads it (an election may be under way) until `--timeout`.
pub(super) async fn transfer(
    args: &Args,
    identity: &OperatorIdentity,
    name: &str,
    request: &Request,
) -> Result<(), Failure> {
    // The leader is the one node needed: a stopped node does not hold the transfer up
    // for the whole connect timeout (it did, 5 s, whenever a node was stalled).
    let clients = connect_most(args, identity).await;
    let connected: Vec<&Client> = clients
        .iter()
        .filter_map(|(_, c)| c.as_ref().ok())
        .collect();
    let unreached: Vec<String> = clients
        .iter()
        .filter_map(|(_, c)| c.as_ref().err().map(ToString::to_string))
        .collect();
    let Some(first) = connected.first().copied() else {
        let errors: Vec<String> = clients
            .iter()
            .filter_map(|(_, c)| c.as_ref().err().map(ToString::to_string))
            .collect();
        return Err(Failure::new(format!(
            "no node could be reached: {}",
            errors.join("; ")
        )));
    };
    if args.addrs.len() == 1 {
        // One address: send it as it is; a refusal names the election's leader.
        let result = first.request(request).await;
        return report(args, first, request, result);
    }
    let client_of = |id: NodeId| connected.iter().copied().find(|c| c.node_id() == id);
    let deadline = tokio::time::Instant::now() + args.timeout;
    loop {
        // A node that connected but is paused would hold every look up for the whole
        // client timeout: each look waits at most LEADERSHIPS_WAIT for each node.
        let leaderships = join_all(connected.iter().map(|c| async move {
            tokio::time::timeout(LEADERSHIPS_WAIT, c.leaderships())
                .await
                .unwrap_or_else(|_| {
                    Err(ClientError::TimedOut {
                        addr: c.addr(),
                        what: "its leaderships".into(),
                        timeout: LEADERSHIPS_WAIT,
                    })
                })
        }))
        .await;
        let leader = leaderships
            .iter()
            .filter_map(|l| l.as_ref().ok())
            .filter_map(|l| {
                let led = l.led.iter().find(|e| e.name == name)?;
                Some((led.term, l.node))
            })
            .max()
            .and_then(|(_, node)| client_of(node));
        // Nobody leads it: the first node's own answer says why (no such election, or
        // the leader it knows of), or that there is none yet.
        let target = leader.unwrap_or(first);
        let result = target.request(request).await;
        let hint = match &result {
            Err(ClientError::Node { reply, .. }) if reply.kind == ErrorKind::NotLeader => {
                reply.leader_hint
            }
            _ => return report(args, target, request, result),
        };
        if let Some(l) = hint.filter(|l| client_of(*l).is_none()) {
            let mut s = format!(
                "no node among {} reports leading election {name:?}; they name node {l}, ",
                args.addrs.len()
            );
            if unreached.is_empty() {
                s.push_str("whose admin address was not given");
            } else {
                s.push_str(&format!(
                    "whose admin address was not given or could not be reached ({})",
                    unreached.join("; ")
                ));
            }
            return Err(Failure::new(s));
        }
        // Leadership may have moved since: follow the hint once.
        if let Some(next) = hint
            .and_then(client_of)
            .filter(|c| c.node_id() != target.node_id())
        {
            let result = next.request(request).await;
            let moved_again = matches!(
                &result,
                Err(ClientError::Node { reply, .. }) if reply.kind == ErrorKind::NotLeader
            );
            if !moved_again {
                return report(args, next, request, result);
            }
        }
        if tokio::time::Instant::now() + ASK_AGAIN >= deadline {
            let n = args.addrs.len();
            let mut s = format!(
                "no node among {n} led election {name:?} within {} s",
                args.timeout.as_secs()
            );
            if let Some(l) = hint {
                s.push_str(&format!("; they name node {l}"));
            }
            s.push_str("; retry, or check `elections list`");
            return Err(Failure::new(s));
        }
        tokio::time::sleep(ASK_AGAIN).await;
    }
}
