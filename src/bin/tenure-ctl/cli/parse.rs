//! The parsers of `tenure-ctl`'s argument values: each refusal says what the value
//! should be.

use std::net::SocketAddr;
use std::time::Duration;

use tenure::{NodeId, PeerAddr};

/// One `--addr` value: its addresses (empty parts are skipped).
#[derive(Debug, Clone)]
pub(super) struct Addrs(pub(super) Vec<SocketAddr>);

pub(super) fn parse_addrs(s: &str) -> Result<Addrs, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| parse_addr(p.trim()))
        .collect::<Result<_, _>>()
        .map(Addrs)
}

pub(super) fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| format!("{s:?} is not IP:PORT"))
}

pub(super) fn parse_peer_addr(s: &str) -> Result<PeerAddr, String> {
    s.parse()
        .map_err(|e: tenure::transport::PeerAddrError| e.to_string())
}

pub(super) fn parse_id(s: &str) -> Result<NodeId, String> {
    match s.parse::<NodeId>() {
        Ok(0) | Err(_) => Err(format!("{s:?} is not a node id (1, 2, ...)")),
        Ok(id) => Ok(id),
    }
}

pub(super) fn parse_secs(s: &str) -> Result<Duration, String> {
    match s.parse::<u64>() {
        Ok(secs) if secs > 0 => Ok(Duration::from_secs(secs)),
        _ => Err(format!("{s:?} is not a number of seconds (1 or more)")),
    }
}
