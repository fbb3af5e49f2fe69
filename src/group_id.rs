//! [`GroupId`]: which group a store, a node and a peer belong to.
//!
//! A group id is drawn once, when a group is founded ([`GroupId::random`], or
//! `tenure-worker --new-group-id`), and given to every first member with
//! [`ConfigBuilder::found`](crate::ConfigBuilder::found). It is kept in the group's
//! replicated state, so every store of the group holds it, and every node tells its
//! peers in the first bytes of each connection. A data folder of another group, or a
//! peer of another group, is refused with an error naming both ids (see
//! `docs/design.md`, section 6).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A group's identity: 128 random bits, written as 32 lowercase hex digits.
///
/// ```
/// use tenure::GroupId;
/// let g: GroupId = "4f3a9c0e5b7d21f86a0c3e9d1b2f4a57".parse().unwrap();
/// assert_eq!(g.to_string(), "4f3a9c0e5b7d21f86a0c3e9d1b2f4a57");
/// assert!("not hex".parse::<GroupId>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct GroupId(u128);

impl GroupId {
    /// A fresh id from the operating system's random source.
    pub fn random() -> GroupId {
        loop {
            let id = rand::random::<u128>();
            if id != 0 {
                return GroupId(id);
            }
        }
    }

    /// The id with these 128 bits (tests; 0 is not an id).
    pub fn from_u128(bits: u128) -> Option<GroupId> {
        (bits != 0).then_some(GroupId(bits))
    }

    /// The 128 bits.
    pub fn as_u128(self) -> u128 {
        self.0
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GroupId({self})")
    }
}

/// A string that is not a group id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a group id: expected 32 hex digits (e.g. from `tenure-worker --new-group-id`)")]
pub struct GroupIdError {
    /// What was given.
    pub input: String,
}

impl FromStr for GroupId {
    type Err = GroupIdError;

    fn from_str(s: &str) -> Result<GroupId, GroupIdError> {
        let err = || GroupIdError {
            input: s.to_string(),
        };
        let hex = s.trim();
        if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(err());
        }
        let bits = u128::from_str_radix(hex, 16).map_err(|_| err())?;
        GroupId::from_u128(bits).ok_or_else(err)
    }
}

impl From<GroupId> for String {
    fn from(g: GroupId) -> String {
        g.to_string()
    }
}

impl TryFrom<String> for GroupId {
    type Error = GroupIdError;
    fn try_from(s: String) -> Result<GroupId, GroupIdError> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_text_and_json() {
        let g = GroupId::random();
        assert_eq!(g.to_string().len(), 32);
        assert_eq!(g.to_string().parse::<GroupId>().unwrap(), g);
        let json = serde_json::to_string(&g).unwrap();
        assert_eq!(serde_json::from_str::<GroupId>(&json).unwrap(), g);
    }

    #[test]
    fn rejects_what_is_not_an_id() {
        for bad in [
            "",
            "00000000000000000000000000000000",
            "4f3a",
            "4f3a9c0e5b7d21f86a0c3e9d1b2f4a5z",
            "4f3a9c0e5b7d21f86a0c3e9d1b2f4a571",
            "+f3a9c0e5b7d21f86a0c3e9d1b2f4a57",
        ] {
            assert!(bad.parse::<GroupId>().is_err(), "{bad:?}");
        }
        assert!(serde_json::from_str::<GroupId>("\"zz\"").is_err());
    }
}
