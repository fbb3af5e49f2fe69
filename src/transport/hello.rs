//! The hello: what a node tells a peer about itself when it connects.
//!
//! Every connection's stream begins with a hello, before any frame. The plain hello is
//! 30 bytes, what every version of tenure sends and reads:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `TNR1` |
//! | 4 | standing: 0 starting, 1 founding, 2 joining, 3 member |
//! | 5 | flags: bit 0 *pristine* (a member with nothing since its founding) |
//! | 6..22 | group id (u128, big endian; 0: none yet) |
//! | 22..30 | the sender's current term (u64, big endian) |
//!
//! A hello that carries a founding nonce (`docs/design.md`, section 6) has the magic
//! `TNR2` instead, the same 30 bytes after it, and then an extension:
//!
//! | bytes | field |
//! |---|---|
//! | 0..30 | as above, magic `TNR2`; flags bit 1: a nonce follows |
//! | 30..32 | `n`, the extension's length after these two bytes (u16, big endian; at most [`MAX_EXTENSION`]) |
//! | next 16 | the nonce (u128, big endian, never 0) when flags bit 1 is set |
//! | next 16 | when flags bit 2 is set (a founding hello with a [`Floor`]): the root's founding term (u64) and the digest of the restored state (u64, 0: none), big endian |
//! | … | the rest of the `n` bytes: ignored (room for later fields) |
//!
//! The nonce of a *founding* hello is the sender's incarnation's (fresh, random, per
//! process start); the nonce of a *member*'s hello is the one the sender recorded for
//! the receiver when it founded with it. A node sends `TNR2` only when it has a nonce to
//! say, so a group founded by an older version keeps talking to older nodes; an older
//! node refuses a `TNR2` stream as a peer of an incompatible version.
//!
//! The receiver refuses a peer of another group, and a node that founds a group waits
//! until every first member has said hello (`docs/design.md`, section 6). A hello
//! describes the sender when it connected; a receiver reads it once per connection.

use std::collections::BTreeMap;

use crate::group_id::GroupId;
use crate::NodeId;

/// Bytes of a plain hello (magic `TNR1`), and of the fixed part every hello begins with.
pub const HELLO_LEN: usize = 30;

/// The most bytes a `TNR2` hello's extension may have (after its 2-byte length).
pub const MAX_EXTENSION: usize = 1024;

const MAGIC: &[u8; 4] = b"TNR1";
const MAGIC_EXTENDED: &[u8; 4] = b"TNR2";
const PRISTINE: u8 = 1;
const HAS_NONCE: u8 = 2;
const HAS_FLOOR: u8 = 4;

/// What a founding node founds with beyond the group id, when it founds from a term
/// floor or a backup (`docs/design.md`, section 6, "Disaster recovery"): every first
/// member must say the same, or none founds. The default: a plain founding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Floor {
    /// The root election's founding term (0 or 1: none).
    pub term: u64,
    /// A digest of the restored state ([`crate::backup`]); 0: nothing restored.
    pub restore: u64,
}

impl Floor {
    fn is_plain(&self) -> bool {
        self.term <= 1 && self.restore == 0
    }
}

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
    /// A founding node's incarnation nonce, or the nonce a member recorded for the
    /// receiver when it founded with it (`docs/design.md`, section 6); `None` otherwise.
    /// Set on a hello for all peers, a member's is `None`: the transport fills in each
    /// peer's ([`Hello::to_peer`]).
    pub nonce: Option<u128>,
    /// A founding hello's term floor and restored state; the default elsewhere.
    pub floor: Floor,
}

impl Default for Hello {
    fn default() -> Self {
        Hello {
            group: None,
            standing: Standing::Starting,
            nonce: None,
            floor: Floor::default(),
        }
    }
}

/// Why bytes are not a hello.
pub type HelloError = String;

impl Hello {
    /// The bytes on the wire: the 30-byte plain hello without a nonce, the extended one
    /// with it.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, mut flags, term) = match self.standing {
            Standing::Starting => (0, 0, 0),
            Standing::Founding => (1, 0, 0),
            Standing::Joining => (2, 0, 0),
            Standing::Member { term, pristine } => (3, if pristine { PRISTINE } else { 0 }, term),
        };
        let nonce = self.nonce.filter(|n| *n != 0);
        if nonce.is_some() {
            flags |= HAS_NONCE;
        }
        let floor =
            (self.standing == Standing::Founding && !self.floor.is_plain()).then_some(self.floor);
        if floor.is_some() {
            flags |= HAS_FLOOR;
        }
        let extended = nonce.is_some() || floor.is_some();
        let mut out = Vec::with_capacity(HELLO_LEN + 34);
        out.extend_from_slice(if extended { MAGIC_EXTENDED } else { MAGIC });
        out.push(kind);
        out.push(flags);
        out.extend_from_slice(&self.group.map_or(0, GroupId::as_u128).to_be_bytes());
        out.extend_from_slice(&term.to_be_bytes());
        if extended {
            let n = 16 * (u16::from(nonce.is_some()) + u16::from(floor.is_some()));
            out.extend_from_slice(&n.to_be_bytes());
            if let Some(nonce) = nonce {
                out.extend_from_slice(&nonce.to_be_bytes());
            }
            if let Some(f) = floor {
                out.extend_from_slice(&f.term.to_be_bytes());
                out.extend_from_slice(&f.restore.to_be_bytes());
            }
        }
        out
    }

    /// Whether the fixed part `head` announces an extension (magic `TNR2`): then 2
    /// length bytes and that many extension bytes follow. An error if `head` does not
    /// begin with a hello's magic at all.
    pub fn extended(head: &[u8; HELLO_LEN]) -> Result<bool, HelloError> {
        match &head[..4] {
            m if m == MAGIC => Ok(false),
            m if m == MAGIC_EXTENDED => Ok(true),
            other => Err(format!(
                "the stream does not begin with a tenure hello (first bytes {other:02x?}): a peer \
                 of an incompatible tenure version, or not tenure"
            )),
        }
    }

    /// The length an extension says it has, from its 2 length bytes; an error above
    /// [`MAX_EXTENSION`].
    pub fn extension_len(len: [u8; 2]) -> Result<usize, HelloError> {
        let n = usize::from(u16::from_be_bytes(len));
        if n > MAX_EXTENSION {
            return Err(format!(
                "the peer's hello announces an extension of {n} bytes, more than the \
                 {MAX_EXTENSION} a hello may have"
            ));
        }
        Ok(n)
    }

    /// Reads a whole hello: the 30 bytes of a plain one, or the fixed part, the length
    /// and the extension of an extended one (nothing more). An error says what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Hello, HelloError> {
        let head: &[u8; HELLO_LEN] = bytes
            .get(..HELLO_LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| format!("a hello of {} bytes, fewer than {HELLO_LEN}", bytes.len()))?;
        let extended = Hello::extended(head)?;
        let group = GroupId::from_u128(u128::from_be_bytes(
            head[6..22].try_into().expect("16 bytes"),
        ));
        let term = u64::from_be_bytes(head[22..30].try_into().expect("8 bytes"));
        let flags = head[5];
        let standing = match head[4] {
            0 => Standing::Starting,
            1 => Standing::Founding,
            2 => Standing::Joining,
            3 => Standing::Member {
                term,
                pristine: flags & PRISTINE != 0,
            },
            other => return Err(format!("unknown standing {other} in the peer's hello")),
        };
        let rest = &bytes[HELLO_LEN..];
        let mut nonce = None;
        let mut floor = Floor::default();
        if extended {
            let len: [u8; 2] = rest
                .get(..2)
                .and_then(|b| b.try_into().ok())
                .ok_or("an extended hello without its extension's length")?;
            let n = Hello::extension_len(len)?;
            let ext = &rest[2..];
            if ext.len() != n {
                return Err(format!(
                    "the hello's extension says {n} bytes, {} follow",
                    ext.len()
                ));
            }
            let mut at = 0;
            if flags & HAS_NONCE != 0 {
                let raw: [u8; 16] = ext
                    .get(..16)
                    .and_then(|b| b.try_into().ok())
                    .ok_or("the hello says a nonce follows, but its extension is too short")?;
                let value = u128::from_be_bytes(raw);
                if value == 0 {
                    return Err("the hello's nonce is 0".into());
                }
                nonce = Some(value);
                at = 16;
            }
            if flags & HAS_FLOOR != 0 {
                let raw: [u8; 16] = ext
                    .get(at..at + 16)
                    .and_then(|b| b.try_into().ok())
                    .ok_or("the hello says a term floor follows, but its extension is too short")?;
                floor = Floor {
                    term: u64::from_be_bytes(raw[..8].try_into().expect("8 bytes")),
                    restore: u64::from_be_bytes(raw[8..].try_into().expect("8 bytes")),
                };
            }
        } else if !rest.is_empty() {
            return Err(format!(
                "a plain hello followed by {} more bytes",
                rest.len()
            ));
        }
        Ok(Hello {
            group,
            standing,
            nonce,
            floor,
        })
    }

    /// A member's hello: pristine when nothing happened since founding (at term 1).
    pub fn member(group: Option<GroupId>, term: u64, vote: u64, last_index: u64) -> Hello {
        Hello::member_founded_at(group, term, vote, last_index, 1)
    }

    /// A member's hello, for a group founded at term `founded_at` (a term floor):
    /// pristine while the term is still at most that, with no vote and nothing beyond the
    /// founding snapshot.
    pub fn member_founded_at(
        group: Option<GroupId>,
        term: u64,
        vote: u64,
        last_index: u64,
        founded_at: u64,
    ) -> Hello {
        Hello {
            group,
            standing: Standing::Member {
                term,
                pristine: term <= founded_at.max(1) && vote == 0 && last_index <= 1,
            },
            nonce: None,
            floor: Floor::default(),
        }
    }

    /// What this node says to `peer`: a member's hello quotes the nonce it recorded for
    /// `peer` when it founded with it (`quotes`, see [`Transport::set_quotes`]); any other
    /// hello is the same for every peer.
    ///
    /// [`Transport::set_quotes`]: super::Transport::set_quotes
    pub fn to_peer(&self, peer: NodeId, quotes: &BTreeMap<NodeId, u128>) -> Hello {
        match self.standing {
            Standing::Member { .. } => Hello {
                nonce: quotes.get(&peer).copied(),
                ..*self
            },
            _ => *self,
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
        if let Some(g) = self.group {
            write!(f, " of group {g}")?;
        }
        if self.standing == Standing::Founding && !self.floor.is_plain() {
            write!(
                f,
                " from term floor {} (restored state {:016x})",
                self.floor.term, self.floor.restore
            )?;
        }
        match (self.standing, self.nonce) {
            (Standing::Founding, Some(n)) => write!(f, " (incarnation nonce {n:032x})"),
            (Standing::Member { .. }, Some(n)) => {
                write!(f, " (founded with the receiver's hello of nonce {n:032x})")
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn founding(g: GroupId, nonce: Option<u128>) -> Hello {
        Hello {
            group: Some(g),
            standing: Standing::Founding,
            nonce,
            floor: Floor::default(),
        }
    }

    #[test]
    fn round_trips() {
        let g = GroupId::random();
        let quoting = Hello {
            nonce: Some(u128::MAX - 5),
            ..Hello::member(Some(g), 7, 3, 50)
        };
        for hello in [
            Hello::default(),
            founding(g, None),
            founding(g, Some(0x0123_4567_89ab_cdef_0011_2233_4455_6677)),
            Hello {
                group: None,
                standing: Standing::Joining,
                ..Hello::default()
            },
            Hello {
                floor: Floor {
                    term: 1 << 20,
                    restore: 77,
                },
                ..founding(g, Some(3))
            },
            Hello {
                floor: Floor {
                    term: 41,
                    restore: 0,
                },
                ..founding(g, None)
            },
            Hello::member(Some(g), 1, 0, 1),
            Hello::member(Some(g), 7, 3, 50),
            quoting,
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

    /// The wire, byte for byte: a hello without a nonce is the 30 bytes every version
    /// reads (magic `TNR1`); one with a nonce is `TNR2`, the same fixed part, a 2-byte
    /// length and the nonce.
    #[test]
    fn the_wire_format() {
        let g = GroupId::from_u128(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10).unwrap();
        let plain = Hello::member(Some(g), 0x1122, 0, 1).encode();
        let mut expected = b"TNR1".to_vec();
        expected.extend_from_slice(&[3, 0]);
        expected.extend_from_slice(&g.as_u128().to_be_bytes());
        expected.extend_from_slice(&0x1122u64.to_be_bytes());
        assert_eq!(plain, expected);
        assert_eq!(plain.len(), HELLO_LEN);

        let nonce = 0xfeed_0000_0000_0000_0000_0000_0000_beefu128;
        let ext = founding(g, Some(nonce)).encode();
        let mut expected = b"TNR2".to_vec();
        expected.extend_from_slice(&[1, HAS_NONCE]);
        expected.extend_from_slice(&g.as_u128().to_be_bytes());
        expected.extend_from_slice(&0u64.to_be_bytes());
        expected.extend_from_slice(&16u16.to_be_bytes());
        expected.extend_from_slice(&nonce.to_be_bytes());
        assert_eq!(ext, expected);
        let head: [u8; HELLO_LEN] = ext[..HELLO_LEN].try_into().unwrap();
        assert!(Hello::extended(&head).unwrap());
        assert_eq!(Hello::extension_len([ext[30], ext[31]]).unwrap(), 16);

        // An old node's hello (written before nonces existed) reads as it always did.
        let old = founding(g, None).encode();
        assert_eq!(old.len(), HELLO_LEN);
        assert_eq!(Hello::decode(&old).unwrap(), founding(g, None));

        // A later version's longer extension: the fields this version knows are read,
        // the rest ignored.
        let mut longer = ext.clone();
        longer[30..32].copy_from_slice(&20u16.to_be_bytes());
        longer.extend_from_slice(&[9, 9, 9, 9]);
        assert_eq!(Hello::decode(&longer).unwrap(), founding(g, Some(nonce)));
    }

    #[test]
    fn a_member_quotes_to_each_peer_the_nonce_it_recorded_for_it() {
        let g = GroupId::random();
        let quotes = BTreeMap::from([(4, 44u128), (5, 55)]);
        let member = Hello::member(Some(g), 3, 1, 9);
        assert_eq!(member.to_peer(4, &quotes).nonce, Some(44));
        assert_eq!(member.to_peer(5, &quotes).nonce, Some(55));
        assert_eq!(member.to_peer(2, &quotes).nonce, None);
        // A founding hello says its own nonce to everyone.
        let f = founding(g, Some(7));
        assert_eq!(f.to_peer(4, &quotes), f);
    }

    #[test]
    fn refuses_what_is_not_a_hello() {
        let mut b = Hello::default().encode();
        b[0] = b'X';
        assert!(Hello::decode(&b).unwrap_err().contains("hello"));
        let mut b = Hello::default().encode();
        b[4] = 9;
        assert!(Hello::decode(&b).unwrap_err().contains("standing"));
        let g = GroupId::random();
        let ext = founding(g, Some(5)).encode();
        // Cut short, or announcing more than a hello may have.
        assert!(Hello::decode(&ext[..40]).unwrap_err().contains("extension"));
        assert!(Hello::extension_len(2000u16.to_be_bytes())
            .unwrap_err()
            .contains("1024"));
        // A nonce of 0 is never sent.
        let mut zero = ext.clone();
        zero[32..48].fill(0);
        assert!(Hello::decode(&zero).unwrap_err().contains("nonce"));
        assert_eq!(founding(g, Some(0)).encode().len(), HELLO_LEN);
    }
}
