//! What the QUIC transport's tests share (`tests/transport/quic.rs`,
//! `tests/transport/names.rs`): a logger, a polling wait, messages and identities.

use std::time::{Duration, Instant};

use raft::eraftpb::Message;
use slog::{o, Drain, Logger};
use tenure::transport::tls::{ClusterCa, TlsIdentity};
use tenure::transport::NodeId;

/// The transports' logs on stderr with `TENURE_TEST_LOG` set, else nowhere.
pub fn logger() -> Logger {
    if std::env::var_os("TENURE_TEST_LOG").is_some() {
        let decorator = slog_term::PlainSyncDecorator::new(std::io::stderr());
        let drain = slog_term::FullFormat::new(decorator).build().fuse();
        Logger::root(drain, o!())
    } else {
        Logger::root(slog::Discard, o!())
    }
}

/// Polls `cond` every 5 ms until it holds; panics naming `what` after `timeout`.
pub async fn wait_for(mut cond: impl FnMut() -> bool, what: &str, timeout: Duration) {
    let start = Instant::now();
    loop {
        if cond() {
            return;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A message of `term` from `from` to `to`.
pub fn msg(from: NodeId, to: NodeId, term: u64) -> Message {
    Message {
        from,
        to,
        term,
        ..Default::default()
    }
}

/// Node `id`'s identity, issued by `ca`.
pub fn identity(ca: &ClusterCa, id: NodeId) -> TlsIdentity {
    let node = ca.issue_node(id).unwrap();
    TlsIdentity::from_pem(ca.cert_pem(), &node.cert_pem, &node.key_pem).unwrap()
}
