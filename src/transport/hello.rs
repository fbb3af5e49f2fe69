//! The hello: what a node tells a peer about itself when it connects.
//!
//! Every connection's stream begins with a fixed 30-byte hello, before any frame:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `TNR1` |
//! | 4 | standing: 0 starting, 1 founding, 2 joining, 3 member |
//! | 5 | flags: bit 0 *pristine* (a member with nothing since its founding) |
//! | 6..22 | group id (u128, big endian; 0: none yet) |
//! | 22..30 | the sender's current term (u64, big endian) |
//!
//! The receiver refuses a peer of another group, and a node that founds a group waits
//! until every first member has said hello (`docs/design.md`, section 6). A hello
//! describes the sender when it connected; a receiver reads it once per connection.

use crate::group_id::GroupId;

/// Bytes of an encoded hello.
pub const HELLO_LEN: usize = 30;

const MAGIC: &[u8; 4] = b"TNR1";

/// What a node's store says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// The node has not said yet (its transport started before its store was read).
    Starting,
    /// The node has no store of the group yet and waits to found it.
    Founding,
    /// The node has no store of the group yet and waits to be added to it.
    Joining,
    /// The node holds a store of the group.
    Member {
        /// Its current term.
        term: u64,
        /// Nothing happened since the group was founded: term at most 1, no vote, no
        /// entry beyond the founding snapshot. A node that ever voted, campaigned or
        /// accepted an entry is not pristine, durably.
        pristine: bool,
    },
}

/// A node's hello (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The group the node belongs to or founds; `None` while joining (it learns the group
    /// from the leader) or starting.
    pub group: Option<GroupId>,
    /// What its store says.
    pub standing: Standing,
}

impl Default for Hello {
    fn default() -> Self {
        Hello {
            group: None,
            standing: Standing::Starting,
        }
    }
}

impl Hello {
    /// The 30 bytes on the wire.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut out = [0u8; HELLO_LEN];
        out[..4].copy_from_slice(MAGIC);
        let (kind, flags, term) = match self.standing {
            Standing::Starting => (0, 0, 0),
            Standing::Founding => (1, 0, 0),
            Standing::Joining => (2, 0, 0),
            Standing::Member { term, pristine } => (3, u8::from(pristine), term),
        };
        out[4] = kind;
        out[5] = flags;
        out[6..22].copy_from_slice(&self.group.map_or(0, GroupId::as_u128).to_be_bytes());
        out[22..30].copy_from_slice(&term.to_be_bytes());
        out
    }

    /// Reads the 30 bytes; an error says what is wrong with them.
    pub fn decode(bytes: &[u8; HELLO_LEN]) -> Result<Hello, String> {
        if &bytes[..4] != MAGIC {
            return Err(format!(
                "the stream does not begin with a tenure hello (first bytes {:02x?}): a peer of \
                 an incompatible tenure version, or not tenure",
                &bytes[..4]
            ));
        }
        let group = GroupId::from_u128(u128::from_be_bytes(
            bytes[6..22].try_into().expect("16 bytes"),
        ));
        let term = u64::from_be_bytes(bytes[22..30].try_into().expect("8 bytes"));
        let standing = match bytes[4] {
            0 => Standing::Starting,
            1 => Standing::Founding,
            2 => Standing::Joining,
            3 => Standing::Member {
                term,
                pristine: bytes[5] & 1 == 1,
            },
            other => return Err(format!("unknown standing {other} in the peer's hello")),
        };
        Ok(Hello { group, standing })
    }

    /// A member's hello: pristine when nothing happened since founding.
    pub fn member(group: Option<GroupId>, term: u64, vote: u64, last_index: u64) -> Hello {
        Hello {
            group,
            standing: Standing::Member {
                term,
                pristine: term <= 1 && vote == 0 && last_index <= 1,
            },
        }
    }
}

impl std::fmt::Display for Hello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.standing {
            Standing::Starting => write!(f, "starting")?,
            Standing::Founding => write!(f, "founding")?,
            Standing::Joining => write!(f, "joining")?,
            Standing::Member {
                term,
                pristine: true,
            } => write!(f, "a member at term {term}, pristine since founding")?,
            Standing::Member { term, .. } => write!(f, "a member at term {term}")?,
        }
        match self.group {
            Some(g) => write!(f, " of group {g}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let g = GroupId::random();
        for hello in [
            Hello::default(),
            Hello {
                group: Some(g),
                standing: Standing::Founding,
            },
            Hello {
                group: None,
                standing: Standing::Joining,
            },
            Hello::member(Some(g), 1, 0, 1),
            Hello::member(Some(g), 7, 3, 50),
        ] {
            assert_eq!(Hello::decode(&hello.encode()).unwrap(), hello);
        }
        assert_eq!(
            Hello::member(Some(g), 1, 0, 1).standing,
            Standing::Member {
                term: 1,
                pristine: true
            }
        );
        for (term, vote, last) in [(2, 0, 1), (1, 2, 1), (1, 0, 2)] {
            assert!(matches!(
                Hello::member(Some(g), term, vote, last).standing,
                Standing::Member {
                    pristine: false,
                    ..
                }
            ));
        }
    }

    #[test]
    fn refuses_what_is_not_a_hello() {
        let mut b = Hello::default().encode();
        b[0] = b'X';
        assert!(Hello::decode(&b).unwrap_err().contains("hello"));
        let mut b = Hello::default().encode();
        b[4] = 9;
        assert!(Hello::decode(&b).unwrap_err().contains("standing"));
    }
}
