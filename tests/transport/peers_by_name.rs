//! Whole nodes whose peers are named (`localhost:PORT`, resolved by the system): they
//! found a group and elect a leader, and a node added by name (`add_learner(4,
//! "localhost:PORT")`) joins it, its name replicated in the membership.

use std::collections::BTreeMap;
use std::time::Duration;

use tenure::{Config, GroupId, Node, NodeId, PeerAddr, Role, Timing};

const WAIT: Duration = Duration::from_secs(20);

fn free_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind a free UDP port");
    s.local_addr().expect("local addr").port()
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_named_localhost_elect_and_a_learner_added_by_name_joins() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    tenure::transport::tls::write_cluster_certs(&certs, 1..=4).unwrap();
    let names: BTreeMap<NodeId, String> = (1..=4)
        .map(|id| (id, format!("localhost:{}", free_port())))
        .collect();
    let group = GroupId::random();
    let config = |id: NodeId, peers: &[NodeId]| {
        let b = Config::builder(id)
            .peers(peers.iter().map(|p| (*p, names[p].as_str())))
            .data_dir(dir.path().join(format!("data-{id}")))
            .tls_dir(&certs)
            .timing(Timing::from_millis(10, 30, 150, 250));
        if id == 4 {
            b.join(true).build()
        } else {
            b.found(group).build()
        }
    };
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        let c = config(id, &[1, 2, 3]);
        assert!(c.peers.values().all(PeerAddr::is_name));
        nodes.insert(id, Node::start(c).await.expect("start"));
    }
    let leader = {
        let mut leader = None;
        wait_until("the named nodes agree on a leader", || {
            let views: Vec<_> = nodes.values().map(Node::leadership).collect();
            leader = views[0].leader;
            leader.is_some() && views.iter().all(|v| v.leader == leader)
        })
        .await;
        leader.unwrap()
    };
    nodes.insert(
        4,
        Node::start(config(4, &[1, 2, 3, 4]))
            .await
            .expect("start 4"),
    );
    let m = nodes[&leader]
        .add_learner(4, names[&4].parse::<PeerAddr>().unwrap())
        .await
        .expect("add node 4 by name");
    assert_eq!(m.addrs.get(&4), Some(&names[&4]), "{m:?}");
    wait_until("node 4 becomes a learner", || {
        nodes[&4].leadership().role == Role::Learner
    })
    .await;
    wait_until("node 4 hears of the leader", || {
        nodes[&4].leadership().leader == Some(leader)
    })
    .await;
    let status = nodes[&4].status().await.unwrap();
    assert_eq!(status.members.addrs.get(&4), Some(&names[&4]), "{status:?}");
    for n in nodes.values() {
        n.shutdown().await.unwrap();
    }
}
