//! [`FencingToken`]: the Raft term a leader acts under, checked by resources.

use std::fmt;

/// The fencing token of a tenure: the Raft term in which its holder led.
///
/// Tokens are ordered like terms. At most one node leads in a term, so **equal tokens
/// mean the same tenure** (the same node, possibly over several leases of that term), and
/// a higher token means a later tenure. A resource that remembers the highest token it
/// accepted and rejects anything lower can never be written by a leader that was
/// replaced, however long it stalled (see [`crate::fence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The token of a tenure in Raft term `term`. Leases hand tokens out; a resource
    /// makes one from what it stored ([`crate::fence`]).
    pub const fn new(term: u64) -> FencingToken {
        FencingToken(term)
    }

    /// The Raft term: the token's value, and the only way to read it.
    pub const fn term(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
