//! Three nodes in one process over the in-process network, each on a real RocksDB store
//! wrapped by [`StallStore`], whose gate holds or fails its writes on command. Shared by
//! `tests/faults/disk_stall.rs` and `benches/stall.rs`.

use std::net::SocketAddr;
use std::sync::Arc;

use raft::eraftpb::ConfState;
use tenure::storage::RocksStore;
use tenure::transport::mem::MemNetwork;
use tenure::{Config, ElectionError, ElectionOptions, Node, NodeId, Timing};

use crate::faultfs::{DirSync, FaultFs};
use crate::stall_store::{Gate, StallStore};

/// The group's nodes.
pub const IDS: [NodeId; 3] = [1, 2, 3];

/// The longest [`until`] waits.
pub const UNTIL: std::time::Duration = std::time::Duration::from_secs(20);

/// Polls `f` every 5 ms until it gives a value, for at most [`UNTIL`].
pub async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + UNTIL;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {UNTIL:?} waiting for: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// 10 ms ticks, 30 ms heartbeats, election timeouts 150–250 ms.
/// The disk stall bound: a third of the election timeout (the default would be half),
/// so that a write held behind a slow probe still returns within an election timeout.
pub const STALL_BOUND: std::time::Duration = std::time::Duration::from_millis(50);

/// 10 ms ticks, 30 ms heartbeats, election timeouts 150–250 ms.
pub fn timing() -> Timing {
    Timing::from_millis(10, 30, 150, 250)
}

/// Three nodes on an in-memory network, each on a RocksDB store whose writes a test can
/// hold at its gate.
pub struct Group {
    /// The network between them.
    pub net: MemNetwork,
    /// Each node's RocksDB folder.
    pub dirs: Vec<tempfile::TempDir>,
    /// The nodes, by id − 1; `None` while one is down.
    pub nodes: Vec<Option<Node>>,
    /// Each node's gate: shut, its writes wait.
    pub gates: Vec<Arc<Gate>>,
    /// Each node's fault filesystem, when the group runs on them
    /// ([`Group::start_on_fault_fs`]): the store's folder is on it, and its stalls and
    /// failed syncs reach RocksDB itself, under the gate.
    pub disks: Vec<Option<Arc<FaultFs>>>,
}

impl Drop for Group {
    /// A failed test must not leave writes held: the runtime waits for them as it ends.
    fn drop(&mut self) {
        for gate in &self.gates {
            gate.open();
        }
        // Held writes answered, then the mounts detached before the folders go.
        for disk in self.disks.iter_mut().filter_map(Option::take) {
            disk.end_stall();
            if let Ok(disk) = Arc::try_unwrap(disk) {
                let _ = disk.unmount();
            }
        }
    }
}

impl Group {
    /// Starts the three nodes, founding a group, with every gate open.
    pub async fn start() -> Group {
        Group::start_on(false).await
    }

    /// The same, each node's store on a fault filesystem of its own (root: see
    /// [`crate::faultfs::skip_test`]).
    pub async fn start_on_fault_fs() -> Group {
        Group::start_on(true).await
    }

    async fn start_on(fault_fs: bool) -> Group {
        let mut g = Group {
            net: MemNetwork::new(),
            dirs: IDS
                .iter()
                .map(|_| tempfile::tempdir().expect("a temporary folder"))
                .collect(),
            nodes: IDS.iter().map(|_| None).collect(),
            gates: IDS.iter().map(|_| Arc::new(Gate::default())).collect(),
            disks: IDS.iter().map(|_| None).collect(),
        };
        if fault_fs {
            for (i, dir) in g.dirs.iter().enumerate() {
                let disk = FaultFs::mount(dir.path(), DirSync::Immediate)
                    .unwrap_or_else(|e| panic!("n{}'s fault filesystem: {e}", i + 1));
                g.disks[i] = Some(Arc::new(disk));
            }
        }
        for id in IDS {
            g.start_node(id).await;
        }
        g
    }

    /// Starts node `id` on its folder: a new store the first time, the one it left after.
    pub async fn start_node(&mut self, id: NodeId) {
        let i = id as usize - 1;
        let path = match &self.disks[i] {
            Some(disk) => disk.path().join("raft"),
            None => self.dirs[i].path().join("raft"),
        };
        let store = if path.exists() {
            RocksStore::open(&path).unwrap_or_else(|e| panic!("n{id}'s store reopens: {e}"))
        } else {
            RocksStore::create(&path, id, ConfState::default()).expect("a RocksDB store")
        };
        let peers = IDS.map(|p| (p, SocketAddr::from(([127, 0, 0, 1], 7000 + p as u16))));
        let group = tenure::GroupId::from_u128(0xd15c_57a1).expect("not 0");
        let config = Config::builder(id)
            .peers(peers)
            .timing(timing())
            .disk_stall_bound(STALL_BOUND)
            .found(group)
            .build();
        let (transport, inbound) = self.net.endpoint(id);
        let node = Node::start_with(
            config,
            StallStore::new(store, Arc::clone(&self.gates[i])),
            Arc::new(transport),
            inbound,
        )
        .await
        .unwrap_or_else(|e| panic!("n{id} does not start: {e}"));
        self.nodes[i] = Some(node);
    }

    /// Node `id` (panics if it is down).
    pub fn node(&self, id: NodeId) -> &Node {
        self.nodes[id as usize - 1]
            .as_ref()
            .expect("the node is up")
    }

    /// The nodes that are up.
    pub fn up(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().flatten()
    }

    /// A node that holds the root's lease (the lowest id if two say so: a stuck node's
    /// word may lag).
    pub fn root_holder(&self) -> Option<NodeId> {
        self.up().find(|n| n.leadership().leased).map(Node::id)
    }

    /// A node other than `not` that holds the root's lease.
    pub fn root_holder_besides(&self, not: NodeId) -> Option<NodeId> {
        self.up()
            .find(|n| n.id() != not && n.leadership().leased)
            .map(Node::id)
    }

    /// A node that holds `name`'s lease.
    pub fn holder(&self, name: &str) -> Option<NodeId> {
        self.up()
            .find(|n| n.election(name).leadership().leased)
            .map(Node::id)
    }

    /// A node other than `not` that holds `name`'s lease.
    pub fn holder_besides(&self, name: &str, not: NodeId) -> Option<NodeId> {
        self.up()
            .find(|n| n.id() != not && n.election(name).leadership().leased)
            .map(Node::id)
    }

    /// The root's leader `s`, once it has created `names` with affinity for itself and
    /// leads its share of them (the balancer lets an affinity hold a node's share plus
    /// one: the others lead the rest), every one leased; and the names it leads.
    pub async fn leader_with_share(&self, names: &[String]) -> (NodeId, Vec<String>) {
        let s = until("a root leader with its lease", || self.root_holder()).await;
        for name in names {
            // The root may move while the names are created (a loaded machine delays a
            // heartbeat past an election timeout; a CI run failed here with NotLeader):
            // the name is then created through the new leader, still with affinity for
            // `s`, which the balancer and the callers' transfers bring back to it.
            let mut tries = 0;
            loop {
                let leader = until("a root leader with its lease", || self.root_holder()).await;
                match self
                    .node(leader)
                    .create_election(name, ElectionOptions::new().affinity([s]))
                    .await
                {
                    Ok(_) => break,
                    // An earlier try that timed out was committed after all.
                    Err(ElectionError::Exists(_)) if tries > 0 => break,
                    Err(ElectionError::NotLeader { .. } | ElectionError::TimedOut(_))
                        if tries < 20 =>
                    {
                        tries += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                    Err(e) => panic!("create {name} through n{leader}: {e}"),
                }
            }
        }
        let share = names.len() / IDS.len();
        let led = until(
            &format!("n{s} leads {share} named elections, all leased"),
            || self.led_by(s, names, share),
        )
        .await;
        (s, led)
    }

    /// The elections of `names` that `s` leads, once every one of them has a leaseholder
    /// and `s` leads at least `share` (the balancer lets an affinity hold a node's share
    /// plus one); `None` before.
    pub fn led_by(&self, s: NodeId, names: &[String], share: usize) -> Option<Vec<String>> {
        let mut led = Vec::new();
        for name in names {
            let holder = self.holder(name)?;
            if holder == s {
                led.push(name.clone());
            }
        }
        (led.len() >= share).then_some(led)
    }
}
