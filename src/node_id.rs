//! How tenure names a member of a group: [`NodeId`].
//!
//! Its own module, below everything that names nodes: the TLS layer ([`crate::tls`],
//! whose certificates name nodes by id), the transports, the driver.

/// A node's identity in the group: the raft-rs peer id. Never 0.
pub type NodeId = u64;
