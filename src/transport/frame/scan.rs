//! The wire scan: before a payload is decoded, [`scan`] walks its protobuf bytes along
//! raft's schema, without allocating, and counts what decoding would make ([`Shape`]):
//! entries, unknown fields, the ids of a snapshot's `ConfState`. What that may take in
//! memory ([`Shape::decoded_bytes`], [`decode_bound`]) is what the QUIC transport
//! reserves of its inbound budget. See the [frame docs](super#limits) for why.

use std::mem::size_of;

use raft::eraftpb::{Entry, Message};

use super::FrameError;

#[cfg(doc)]
use super::DEFAULT_MAX_ENTRIES;

/// Memory one decoded entry may take: twice `size_of::<Entry>()` (the entries vector
/// grows by doubling). Its `data` and `context` are copies of payload bytes, counted with
/// the payload.
pub const ENTRY_COST: usize = 2 * size_of::<Entry>();

/// The most unknown fields (at every level) a message may carry. raft-rs 0.7 messages
/// have none; a few are allowed so that a newer peer that adds a field is not cut off.
/// Each decoded unknown field takes up to [`UNKNOWN_FIELD_COST`] (the decoder keeps them
/// in a hash map).
pub const MAX_UNKNOWN_FIELDS: usize = 64;

/// Memory one decoded unknown field may take, at most (its bytes are counted with the
/// payload).
pub const UNKNOWN_FIELD_COST: usize = 512;

/// The most node ids a snapshot's `ConfState` may list, its four lists together (a group
/// has 3 to 7 voters; certificates are made for at most 1000 nodes). Each takes up to 16
/// bytes decoded (a `u64`, vectors growing by doubling).
pub const MAX_CONF_IDS: usize = 4096;

const CONF_ID_COST: usize = 16;
const MESSAGE_COST: usize = size_of::<Message>();

/// What decoding a payload makes, counted by [`scan`] from its wire bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// `entries` of the message.
    pub entries: usize,
    /// Fields raft's schema does not know, at every level.
    pub unknown_fields: usize,
    /// Node ids listed in the snapshot's `ConfState` (all four lists).
    pub conf_ids: usize,
}

impl Shape {
    /// The memory the decoded message of a `payload_len`-byte payload may take, at most:
    /// the payload's bytes (every `data`, `context` and unknown field is a copy of some of
    /// them), the message itself, and the entries, unknown fields and ids it holds.
    pub fn decoded_bytes(&self, payload_len: usize) -> usize {
        payload_len
            .saturating_add(MESSAGE_COST)
            .saturating_add(self.entries.saturating_mul(ENTRY_COST))
            .saturating_add(self.unknown_fields.saturating_mul(UNKNOWN_FIELD_COST))
            .saturating_add(self.conf_ids.saturating_mul(CONF_ID_COST))
    }
}

/// The most memory a payload of `len` bytes can take decoded once [`scan`] passed it
/// with `max_entries`: [`Shape::decoded_bytes`] of the worst shape that fits in `len`
/// bytes (an entry or an unknown field takes at least 2 bytes on the wire, a packed id
/// at least 1). What the QUIC transport reserves of its budget before reading a payload.
pub fn decode_bound(len: usize, max_entries: usize) -> usize {
    Shape {
        entries: (len / 2).min(max_entries),
        unknown_fields: (len / 2).min(MAX_UNKNOWN_FIELDS),
        conf_ids: len.min(MAX_CONF_IDS),
    }
    .decoded_bytes(len)
}

/// A cursor over protobuf wire bytes.
struct Wire<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Protobuf wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

impl<'a> Wire<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Wire { buf, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(format!("varint cut off at byte {}", self.pos));
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!(
            "varint longer than 10 bytes before byte {}",
            self.pos
        ))
    }

    /// The next field's number and wire type.
    fn key(&mut self) -> Result<(u64, u8), String> {
        let k = self.varint()?;
        let (field, wire) = (k >> 3, (k & 7) as u8);
        if field == 0 {
            return Err("field number 0".into());
        }
        Ok((field, wire))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        let Some(end) = end else {
            return Err(format!(
                "field of {n} bytes at byte {} runs past the end ({} bytes)",
                self.pos,
                self.buf.len()
            ));
        };
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn len_delimited(&mut self) -> Result<&'a [u8], String> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| format!("length {n} does not fit"))?;
        self.take(n)
    }

    /// Skips a value of wire type `wire` (groups are refused: raft's schema has none).
    fn skip(&mut self, field: u64, wire: u8) -> Result<(), String> {
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            LEN => self.len_delimited().map(drop),
            FIXED32 => self.take(4).map(drop),
            3 | 4 => Err(format!("field {field} is a group (wire type {wire})")),
            w => Err(format!("field {field} has invalid wire type {w}")),
        }
    }
}

/// What a known field of raft's schema is.
enum Kind {
    Scalar(u8),
    /// An enum with values `0..=max`; the decoder keeps other values as unknown fields.
    Enum(u64),
    Entry,
    Snapshot,
    Metadata,
    ConfState,
    Ids,
}

/// The scan of one message of the schema.
struct Scan {
    shape: Shape,
    max_entries: usize,
}

impl Scan {
    fn unknown(&mut self) -> Result<(), FrameError> {
        self.shape.unknown_fields += 1;
        if self.shape.unknown_fields > MAX_UNKNOWN_FIELDS {
            return Err(FrameError::Malformed(format!(
                "more than {MAX_UNKNOWN_FIELDS} fields or enum values raft's schema does not know"
            )));
        }
        Ok(())
    }

    fn fields(&mut self, buf: &[u8], schema: fn(u64) -> Option<Kind>) -> Result<(), FrameError> {
        let bad = FrameError::Malformed;
        let mut w = Wire::new(buf);
        while !w.done() {
            let (field, wire) = w.key().map_err(bad)?;
            let Some(kind) = schema(field) else {
                self.unknown()?;
                w.skip(field, wire).map_err(bad)?;
                continue;
            };
            let want = match kind {
                Kind::Scalar(t) => t,
                Kind::Enum(_) => VARINT,
                Kind::Ids if wire == VARINT => VARINT,
                _ => LEN,
            };
            if wire != want {
                return Err(bad(format!(
                    "field {field} has wire type {wire}, the schema says {want}"
                )));
            }
            match kind {
                Kind::Scalar(_) => w.skip(field, wire).map_err(bad)?,
                Kind::Enum(max) => {
                    if w.varint().map_err(bad)? > max {
                        self.unknown()?;
                    }
                }
                Kind::Entry => {
                    self.shape.entries += 1;
                    if self.shape.entries > self.max_entries {
                        return Err(FrameError::TooManyEntries {
                            count: self.shape.entries,
                            max: self.max_entries,
                        });
                    }
                    let sub = w.len_delimited().map_err(bad)?;
                    self.fields(sub, entry_field)?;
                }
                Kind::Snapshot => {
                    let sub = w.len_delimited().map_err(bad)?;
                    self.fields(sub, snapshot_field)?;
                }
                Kind::Metadata => {
                    let sub = w.len_delimited().map_err(bad)?;
                    self.fields(sub, metadata_field)?;
                }
                Kind::ConfState => {
                    let sub = w.len_delimited().map_err(bad)?;
                    self.fields(sub, conf_state_field)?;
                }
                Kind::Ids => {
                    let n = if wire == VARINT {
                        w.varint().map_err(bad)?;
                        1
                    } else {
                        let packed = w.len_delimited().map_err(bad)?;
                        let mut p = Wire::new(packed);
                        let mut n = 0;
                        while !p.done() {
                            p.varint().map_err(bad)?;
                            n += 1;
                        }
                        n
                    };
                    self.shape.conf_ids += n;
                    if self.shape.conf_ids > MAX_CONF_IDS {
                        return Err(bad(format!(
                            "snapshot lists more than {MAX_CONF_IDS} node ids"
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

fn message_field(f: u64) -> Option<Kind> {
    match f {
        1 => Some(Kind::Enum(18)), // MessageType: MsgHup ..= MsgRequestPreVoteResponse
        2..=6 | 8 | 10 | 11 | 13..=16 => Some(Kind::Scalar(VARINT)),
        7 => Some(Kind::Entry),
        9 => Some(Kind::Snapshot),
        12 => Some(Kind::Scalar(LEN)),
        _ => None,
    }
}

fn entry_field(f: u64) -> Option<Kind> {
    match f {
        1 => Some(Kind::Enum(2)), // EntryType: EntryNormal ..= EntryConfChangeV2
        2 | 3 | 5 => Some(Kind::Scalar(VARINT)),
        4 | 6 => Some(Kind::Scalar(LEN)),
        _ => None,
    }
}

fn snapshot_field(f: u64) -> Option<Kind> {
    match f {
        1 => Some(Kind::Scalar(LEN)),
        2 => Some(Kind::Metadata),
        _ => None,
    }
}

fn metadata_field(f: u64) -> Option<Kind> {
    match f {
        1 => Some(Kind::ConfState),
        2 | 3 => Some(Kind::Scalar(VARINT)),
        _ => None,
    }
}

fn conf_state_field(f: u64) -> Option<Kind> {
    match f {
        1..=4 => Some(Kind::Ids),
        5 => Some(Kind::Scalar(VARINT)),
        _ => None,
    }
}

/// Walks a payload's wire bytes along raft's `Message` schema without decoding or
/// allocating, and counts what decoding it would make ([`Shape`]). A payload of either
/// kind (see the [frame docs](super)): of an election frame, the message after its
/// 5-byte header is scanned, with the same limits (they are per frame).
///
/// Fails with [`FrameError::TooManyEntries`] at the first entry over `max_entries`, and
/// with [`FrameError::Malformed`] on bytes that are not protobuf, on groups, on a known
/// field of the wrong wire type, on more than [`MAX_UNKNOWN_FIELDS`] unknown fields or
/// more than [`MAX_CONF_IDS`] ids in a snapshot. A payload it passes may still fail to
/// decode (for example invalid UTF-8 is not checked: raft has no string fields). An
/// election header that is cut off or names election 0 is [`FrameError::Malformed`]
/// too.
pub fn scan(payload: &[u8], max_entries: usize) -> Result<Shape, FrameError> {
    let (_, message) = super::split_payload(payload)?;
    scan_message(message, max_entries)
}

/// [`scan`] of a message's bytes (no election header).
pub(super) fn scan_message(message: &[u8], max_entries: usize) -> Result<Shape, FrameError> {
    let mut s = Scan {
        shape: Shape::default(),
        max_entries,
    };
    s.fields(message, message_field)?;
    Ok(s.shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::frame::{
        decode, encode, parse_limited, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_FRAME, LEN_PREFIX,
    };
    use protobuf::ProtobufEnum;
    use raft::eraftpb::MessageType;

    /// Random messages of every shape raft-rs sends, drawn from `seed`.
    fn random_message(x: &mut u64) -> Message {
        let mut next = || {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            *x
        };
        let mut m = Message {
            from: next() % 8,
            to: next() % 8,
            term: next() % 1000,
            log_term: next() % 1000,
            index: next(),
            commit: next() % 100_000,
            commit_term: next() % 5,
            reject: next() % 2 == 0,
            reject_hint: next() % 50,
            request_snapshot: next() % 3,
            priority: (next() % 7) as i64 - 3,
            ..Default::default()
        };
        m.set_msg_type(MessageType::from_i32((next() % 19) as i32).unwrap());
        if next() % 3 == 0 {
            m.context = vec![1u8; (next() % 40) as usize].into();
        }
        for _ in 0..next() % 20 {
            let mut e = Entry {
                term: next() % 1000,
                index: next(),
                data: vec![2u8; (next() % 100) as usize].into(),
                context: vec![3u8; (next() % 3) as usize].into(),
                ..Default::default()
            };
            e.set_entry_type(raft::eraftpb::EntryType::from_i32((next() % 3) as i32).unwrap());
            m.entries.push(e);
        }
        if next() % 4 == 0 {
            let snap = m.mut_snapshot();
            snap.data = vec![4u8; (next() % 500) as usize].into();
            let meta = snap.mut_metadata();
            meta.index = next();
            meta.term = next() % 1000;
            let cs = meta.mut_conf_state();
            cs.voters = (1..=(next() % 7)).collect();
            cs.learners = (10..(10 + next() % 3)).collect();
            cs.voters_outgoing = (1..(next() % 4)).collect();
            cs.auto_leave = next() % 2 == 0;
        }
        m
    }

    #[test]
    fn scan_counts_what_the_decoder_makes_and_the_bound_covers_it() {
        let mut x = 0x2545_f491_4f6c_dd1d;
        for _ in 0..2000 {
            let m = random_message(&mut x);
            let frame = encode(&m, DEFAULT_MAX_FRAME).unwrap();
            let payload = &frame[LEN_PREFIX..];
            let shape = scan(payload, DEFAULT_MAX_ENTRIES).unwrap();
            assert_eq!(shape.entries, m.entries.len());
            assert_eq!(shape.unknown_fields, 0);
            let cs = m.get_snapshot().get_metadata().get_conf_state();
            assert_eq!(
                shape.conf_ids,
                cs.voters.len()
                    + cs.learners.len()
                    + cs.voters_outgoing.len()
                    + cs.learners_next.len()
            );
            assert!(
                shape.decoded_bytes(payload.len())
                    <= decode_bound(payload.len(), DEFAULT_MAX_ENTRIES)
            );
            let (back, _) = parse_limited(payload, DEFAULT_MAX_ENTRIES).unwrap();
            assert_eq!(back, m);
        }
    }

    #[test]
    fn scan_stops_at_the_first_entry_over_the_limit() {
        let payload = [0x3au8, 0x00].repeat(1000);
        assert_eq!(scan(&payload, 1000).unwrap().entries, 1000);
        assert!(matches!(
            scan(&payload, 999),
            Err(FrameError::TooManyEntries {
                count: 1000,
                max: 999
            })
        ));
        let mut framed = (payload.len() as u32).to_be_bytes().to_vec();
        framed.extend_from_slice(&payload);
        let e = decode(&[framed.clone(), framed].concat(), DEFAULT_MAX_FRAME)
            .unwrap()
            .unwrap();
        assert_eq!(e.0.entries.len(), 1000);
    }

    #[test]
    fn unknown_fields_groups_bad_enums_and_wrong_wire_types_are_bounded_or_refused() {
        // 64 unknown varint fields (field 100) pass, 65 do not.
        let unknown = |n: usize| [0xa0u8, 0x06, 0x01].repeat(n);
        assert_eq!(scan(&unknown(64), 10).unwrap().unknown_fields, 64);
        assert!(matches!(
            scan(&unknown(65), 10),
            Err(FrameError::Malformed(_))
        ));
        // An enum value outside the schema is kept by the decoder as an unknown field.
        assert_eq!(scan(&[0x08, 0x63], 10).unwrap().unknown_fields, 1);
        // Groups are refused, known or not.
        assert!(matches!(
            scan(&[0xa3, 0x06], 10),
            Err(FrameError::Malformed(_))
        ));
        // `term` (a varint) sent as bytes.
        assert!(matches!(
            scan(&[0x22, 0x01, 0x00], 10),
            Err(FrameError::Malformed(_))
        ));
        // Cut off inside a field, a length past the end, a varint of 11 bytes.
        for bad in [
            &[0x3a][..],
            &[0x3a, 0x05, 0x00],
            &[
                0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
        ] {
            assert!(
                matches!(scan(bad, 10), Err(FrameError::Malformed(_))),
                "{bad:?}"
            );
        }
        // A snapshot listing 4097 ids (packed) is refused, 4096 pass.
        let snapshot = |ids: usize| {
            let cs = [vec![0x0a, 0x80, 0x20][..].to_vec(), vec![0x01; ids]].concat(); // voters, packed
            let cs = if ids == 4096 {
                cs
            } else {
                [vec![0x0a, 0x81, 0x20], vec![0x01; ids]].concat()
            };
            let meta = [vec![0x0a], varint(cs.len()), cs].concat();
            let snap = [vec![0x12], varint(meta.len()), meta].concat();
            [vec![0x4a], varint(snap.len()), snap].concat()
        };
        assert_eq!(scan(&snapshot(4096), 10).unwrap().conf_ids, 4096);
        assert!(matches!(
            scan(&snapshot(4097), 10),
            Err(FrameError::Malformed(_))
        ));
    }

    fn varint(mut n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }
}
