//! Length-prefixed protobuf frames.
//!
//! A frame is a 4-byte big-endian length `n` followed by `n` bytes: one
//! `raft::eraftpb::Message` in protobuf encoding. A stream carries frames back to back.
//!
//! # Limits
//!
//! The length is checked against a limit *before* anything is allocated, so a peer
//! cannot make a node allocate more than `max` bytes per frame. [`DEFAULT_MAX_FRAME`] is
//! 4 MiB: raft-rs packs at most `max_size_per_msg` (1 MiB in tenure) of entries into one
//! append, and a snapshot holds the group state and at most a thousand history records as
//! JSON (about 100 kB), so 4 MiB leaves four times the room legitimate messages need.
//!
//! A frame's bytes are not the whole cost of decoding it: an empty `entries` field is 2
//! bytes on the wire and an [`Entry`] in memory (a hundred bytes and more), so a frame of
//! empty entries decodes to 50 to 100 times its size. Before decoding, [`scan`] walks the
//! wire bytes along raft's schema (no allocation) and counts what decoding would make:
//! entries (at most `max_entries`, [`DEFAULT_MAX_ENTRIES`]), unknown fields (at most
//! [`MAX_UNKNOWN_FIELDS`]) and the ids of a snapshot's `ConfState` (at most
//! [`MAX_CONF_IDS`]); [`Shape::decoded_bytes`] is what the decoded message may take. The
//! QUIC transport reserves [`decode_bound`] of its inbound byte budget before it reads a
//! payload, so memory is bounded by the budget, not by what peers send.
//!
//! # Decoding untrusted bytes
//!
//! The protobuf 2.28 crate is listed under RUSTSEC-2024-0437 (stack overflow on deeply
//! nested crafted input). [`scan`] refuses groups (wire types 3 and 4: raft's schema has
//! none) and follows only the schema's nesting (Message > Snapshot > SnapshotMetadata >
//! ConfState, Message > Entry), so what reaches the decoder is never deeply nested; the
//! decoder's own recursion limit (100) stays as a second line. Still, we only decode
//! frames from peers that passed mutual TLS with a certificate of the cluster CA.
//!
//! Besides the async [`read_frame`], [`decode`] works on a byte slice without any IO
//! (for benchmarks and fuzzing).

use std::mem::size_of;

use bytes::{Bytes, BytesMut};
use protobuf::{CodedOutputStream, Message as _};
use raft::eraftpb::{Entry, Message};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes of the length prefix.
pub const LEN_PREFIX: usize = 4;

/// The default limit on a frame's payload (the bytes after the prefix): 4 MiB (see the
/// [module docs](self#limits) for why).
pub const DEFAULT_MAX_FRAME: usize = 4 * 1024 * 1024;

/// The default limit on the `entries` of one message: 65 536.
///
/// raft-rs fills an append with at most `max_size_per_msg` (1 MiB in tenure) of entries.
/// Every term adds an empty entry (4 to 8 bytes) and a history record (about 80 bytes),
/// drains and membership changes are JSON of 30 bytes and more, so 1 MiB of tenure's
/// entries is well under 40 000 of them; 65 536 leaves room, and bounds the decoded
/// entries of one message to [`ENTRY_COST`] × 65 536 (about 13 MiB).
pub const DEFAULT_MAX_ENTRIES: usize = 65_536;

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

/// Why a frame could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The frame's payload is longer than the limit. Inbound: the peer is broken or
    /// hostile, or it runs with a larger limit; the connection is closed. Outbound: the
    /// message is dropped. Fix: use the same limit on every node; raise it only if
    /// legitimate messages (snapshots) need it.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The payload length (announced, for inbound frames).
        len: usize,
        /// The limit in force.
        max: usize,
    },
    /// The message holds more `entries` than the limit (`max_entries`, by default
    /// [`DEFAULT_MAX_ENTRIES`]); found by [`scan`] before anything was decoded. Inbound:
    /// the peer is broken or hostile, or runs with a larger limit; the connection is
    /// closed. Outbound: the message is dropped. Fix: use the same limit on every node.
    #[error("message holds more than {max} entries (counted {count} before stopping)")]
    TooManyEntries {
        /// Entries counted when the scan stopped (`max + 1`: it stops at the first one
        /// over the limit).
        count: usize,
        /// The limit in force.
        max: usize,
    },
    /// The bytes are not a raft message, or the stream ended inside a frame. Cause: a
    /// broken or hostile peer, or a peer of an incompatible version. The connection is
    /// closed. Fix: run the same tenure version on every node.
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// Reading the stream failed (connection lost, stream reset). Not the peer's data's
    /// fault; the transport reconnects.
    #[error("frame I/O failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Encodes `msg` as one frame (prefix and payload). Fails with
/// [`FrameError::TooLarge`] when the payload would exceed `max`.
pub fn encode(msg: &Message, max: usize) -> Result<Bytes, FrameError> {
    let mut buf = Vec::new();
    encode_into(msg, max, &mut buf)?;
    Ok(Bytes::from(buf))
}

/// Appends the frame of `msg` to `out` (see [`encode`]); on error `out` is unchanged.
/// Lets a sender put several frames in one buffer.
pub fn encode_into(msg: &Message, max: usize, out: &mut Vec<u8>) -> Result<(), FrameError> {
    // compute_size also caches nested sizes for write_to_with_cached_sizes.
    let len = msg.compute_size() as usize;
    let max = max.min(u32::MAX as usize);
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let start = out.len();
    out.reserve(LEN_PREFIX + len);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    let written = {
        // Appends after what `out` already holds.
        let mut os = CodedOutputStream::vec(out);
        msg.write_to_with_cached_sizes(&mut os)
            .and_then(|()| os.flush())
    };
    let problem = match written {
        Err(e) => format!("cannot encode message: {e}"),
        Ok(()) if out.len() == start + LEN_PREFIX + len => return Ok(()),
        Ok(()) => format!(
            "encoder wrote {} bytes, computed {len}",
            out.len() - start - LEN_PREFIX
        ),
    };
    out.truncate(start);
    Err(FrameError::Malformed(problem))
}

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
/// allocating, and counts what decoding it would make ([`Shape`]).
///
/// Fails with [`FrameError::TooManyEntries`] at the first entry over `max_entries`, and
/// with [`FrameError::Malformed`] on bytes that are not protobuf, on groups, on a known
/// field of the wrong wire type, on more than [`MAX_UNKNOWN_FIELDS`] unknown fields or
/// more than [`MAX_CONF_IDS`] ids in a snapshot. A payload it passes may still fail to
/// decode (for example invalid UTF-8 is not checked: raft has no string fields).
pub fn scan(payload: &[u8], max_entries: usize) -> Result<Shape, FrameError> {
    let mut s = Scan {
        shape: Shape::default(),
        max_entries,
    };
    s.fields(payload, message_field)?;
    Ok(s.shape)
}

/// Scans (see [`scan`]) and then decodes one payload (the bytes after the prefix).
pub fn parse_limited(payload: &[u8], max_entries: usize) -> Result<(Message, Shape), FrameError> {
    let shape = scan(payload, max_entries)?;
    let msg =
        Message::parse_from_bytes(payload).map_err(|e| FrameError::Malformed(e.to_string()))?;
    Ok((msg, shape))
}

/// Parses one payload with the default entries limit.
fn parse(payload: &[u8]) -> Result<Message, FrameError> {
    parse_limited(payload, DEFAULT_MAX_ENTRIES).map(|(m, _)| m)
}

/// Decodes the first frame in `buf` without IO.
///
/// Returns `Ok(None)` when `buf` does not yet hold a whole frame (read more and call
/// again), `Ok(Some((message, consumed)))` otherwise, where `consumed` is the frame's
/// length including the prefix. An announced length over `max` is
/// [`FrameError::TooLarge`] as soon as the prefix is complete; more than
/// [`DEFAULT_MAX_ENTRIES`] entries is [`FrameError::TooManyEntries`] (see [`scan`]).
pub fn decode(buf: &[u8], max: usize) -> Result<Option<(Message, usize)>, FrameError> {
    let Some(prefix) = buf.get(..LEN_PREFIX) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let Some(payload) = buf.get(LEN_PREFIX..LEN_PREFIX + len) else {
        return Ok(None);
    };
    Ok(Some((parse(payload)?, LEN_PREFIX + len)))
}

/// Reads one frame from `reader`.
///
/// `Ok(None)` when the stream ends cleanly between frames. A stream that ends inside a
/// frame is [`FrameError::Malformed`]; a length over `max` is [`FrameError::TooLarge`]
/// (nothing more is read); more than [`DEFAULT_MAX_ENTRIES`] entries is
/// [`FrameError::TooManyEntries`]. It has no deadline and no budget (the QUIC transport
/// reads its streams with both). Cancel-safe only between frames: dropping the future in the
/// middle of a frame loses the partial frame, so do not `select!` on it with other work
/// unless the stream is abandoned afterwards.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> Result<Option<Message>, FrameError> {
    let Some(len) = read_prefix(reader).await? else {
        return Ok(None);
    };
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let payload = read_payload(reader, len).await?;
    parse(&payload).map(Some)
}

/// Reads a frame's length prefix: `Ok(None)` when the stream ends cleanly before it,
/// [`FrameError::Malformed`] when it ends inside it. Allocates nothing. The first half
/// of [`read_frame`], for readers that decide what to do before reading the payload
/// (the QUIC transport reserves budget and starts a deadline).
pub async fn read_prefix<R: AsyncRead + Unpin>(
    reader: &mut R,
) -> Result<Option<usize>, FrameError> {
    let mut prefix = [0u8; LEN_PREFIX];
    let mut filled = 0;
    while filled < LEN_PREFIX {
        match reader.read(&mut prefix[filled..]).await? {
            0 if filled == 0 => return Ok(None),
            0 => {
                return Err(FrameError::Malformed(format!(
                    "stream ended inside a length prefix ({filled} of {LEN_PREFIX} bytes)"
                )))
            }
            n => filled += n,
        }
    }
    Ok(Some(u32::from_be_bytes(prefix) as usize))
}

/// Reads a payload of `len` bytes (the second half of [`read_frame`]); a stream that
/// ends before is [`FrameError::Malformed`]. Allocates `len` bytes: check `len` first.
pub async fn read_payload<R: AsyncRead + Unpin>(
    reader: &mut R,
    len: usize,
) -> Result<BytesMut, FrameError> {
    let mut payload = BytesMut::with_capacity(len);
    while payload.len() < len {
        let want = len - payload.len();
        let n = (&mut *reader)
            .take(want as u64)
            .read_buf(&mut payload)
            .await?;
        if n == 0 {
            return Err(FrameError::Malformed(format!(
                "stream ended inside a frame ({} of {len} bytes)",
                payload.len()
            )));
        }
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use protobuf::ProtobufEnum;
    use raft::eraftpb::{Entry, MessageType};

    fn sample() -> Message {
        let entry = Entry {
            term: 7,
            index: 42,
            data: Bytes::from_static(b"hello"),
            ..Default::default()
        };
        let mut m = Message {
            from: 2,
            to: 3,
            term: 7,
            index: 41,
            log_term: 6,
            commit: 40,
            ..Default::default()
        };
        m.set_msg_type(MessageType::MsgAppend);
        m.entries.push(entry);
        m
    }

    #[test]
    fn round_trip_through_encode_and_decode() {
        let m = sample();
        let frame = encode(&m, DEFAULT_MAX_FRAME).unwrap();
        let (back, used) = decode(&frame, DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert_eq!(back, m);
        assert_eq!(used, frame.len());
    }

    #[test]
    fn empty_message_is_a_zero_length_frame() {
        let frame = encode(&Message::default(), 16).unwrap();
        assert_eq!(&frame[..], &[0, 0, 0, 0]);
        let (back, used) = decode(&frame, 16).unwrap().unwrap();
        assert_eq!(back, Message::default());
        assert_eq!(used, 4);
    }

    #[tokio::test]
    async fn read_frame_reads_frames_back_to_back_then_none() {
        let m = sample();
        let mut mm = sample();
        mm.term = 8;
        let mut buf = Vec::new();
        encode_into(&m, DEFAULT_MAX_FRAME, &mut buf).unwrap();
        encode_into(&mm, DEFAULT_MAX_FRAME, &mut buf).unwrap();
        let mut r = &buf[..];
        assert_eq!(
            read_frame(&mut r, DEFAULT_MAX_FRAME).await.unwrap(),
            Some(m)
        );
        assert_eq!(
            read_frame(&mut r, DEFAULT_MAX_FRAME).await.unwrap(),
            Some(mm)
        );
        assert_eq!(read_frame(&mut r, DEFAULT_MAX_FRAME).await.unwrap(), None);
    }

    #[test]
    fn too_large_is_refused_on_encode() {
        let m = sample();
        let len = encode(&m, DEFAULT_MAX_FRAME).unwrap().len() - LEN_PREFIX;
        match encode(&m, len - 1) {
            Err(FrameError::TooLarge { len: l, max }) => assert_eq!((l, max), (len, len - 1)),
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert!(encode(&m, len).is_ok());
        let mut out = vec![1, 2, 3];
        assert!(encode_into(&m, len - 1, &mut out).is_err());
        assert_eq!(
            out,
            [1, 2, 3],
            "a failed encode leaves the buffer as it was"
        );
    }

    #[tokio::test]
    async fn too_large_is_refused_on_decode_before_reading_the_payload() {
        // Announces 4 GiB - 1 with no payload behind it: must fail on the prefix alone.
        let buf = [0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            decode(&buf, 1024),
            Err(FrameError::TooLarge {
                len: 0xffff_ffff,
                max: 1024
            })
        ));
        let mut r = &buf[..];
        assert!(matches!(
            read_frame(&mut r, 1024).await,
            Err(FrameError::TooLarge {
                len: 0xffff_ffff,
                max: 1024
            })
        ));
    }

    #[tokio::test]
    async fn truncated_frames_are_incomplete_for_decode_and_malformed_for_read() {
        let frame = encode(&sample(), DEFAULT_MAX_FRAME).unwrap();
        for cut in 1..frame.len() {
            let part = &frame[..cut];
            assert!(
                decode(part, DEFAULT_MAX_FRAME).unwrap().is_none(),
                "cut {cut}"
            );
            let mut r = part;
            assert!(
                matches!(
                    read_frame(&mut r, DEFAULT_MAX_FRAME).await,
                    Err(FrameError::Malformed(_))
                ),
                "cut {cut}"
            );
        }
    }

    #[tokio::test]
    async fn garbage_is_malformed_and_never_panics() {
        // A payload that is not protobuf: a field tag with wire type 7 (invalid).
        let garbage = [0, 0, 0, 3, 0x0f, 0xff, 0xff];
        assert!(matches!(
            decode(&garbage, 64),
            Err(FrameError::Malformed(_))
        ));
        let mut r = &garbage[..];
        assert!(matches!(
            read_frame(&mut r, 64).await,
            Err(FrameError::Malformed(_))
        ));

        // Pseudo-random payloads of every length up to 300: decode must return, not panic.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..300usize {
            let mut buf = (len as u32).to_be_bytes().to_vec();
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.push(x as u8);
            }
            let _ = decode(&buf, DEFAULT_MAX_FRAME);
        }
    }

    #[test]
    fn deeply_nested_groups_fail_without_overflowing_the_stack() {
        // 1 MiB of "start group" tags of an unknown field (field 100, wire type 3: varint
        // 0xa3 0x06): the shape of RUSTSEC-2024-0437.
        let payload: Vec<u8> = [0xa3u8, 0x06].repeat(1 << 19);
        let mut buf = (payload.len() as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(&payload);
        assert!(matches!(
            decode(&buf, DEFAULT_MAX_FRAME),
            Err(FrameError::Malformed(_))
        ));

        // The raft schema has no recursive message type, so nesting through known fields
        // is bounded by the schema (Message > Snapshot > SnapshotMetadata > ConfState).
    }

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

    #[test]
    fn the_largest_append_tenure_sends_fits_the_default_limits() {
        // raft-rs packs entries into an append up to max_size_per_msg (1 MiB in tenure,
        // src/node.rs), always at least one. The worst shape for the entry count: each term
        // adds an empty entry and a history record (about 80 bytes of JSON).
        let record = Entry {
            term: 1_000_000,
            index: 1 << 40,
            data: vec![b'x'; 80].into(),
            ..Default::default()
        };
        let empty = Entry {
            term: 1_000_000,
            index: 1 << 40,
            ..Default::default()
        };
        let mut m = Message {
            from: 1,
            to: 2,
            term: 1_000_000,
            index: 1 << 40,
            log_term: 1_000_000,
            commit: 1 << 40,
            ..Default::default()
        };
        m.set_msg_type(MessageType::MsgAppend);
        let mut size = 0u64;
        while size < 1 << 20 {
            for e in [&empty, &record] {
                size += u64::from(e.compute_size());
                m.entries.push(e.clone());
            }
        }
        assert!(
            m.entries.len() < DEFAULT_MAX_ENTRIES,
            "{} entries",
            m.entries.len()
        );
        let frame = encode(&m, DEFAULT_MAX_FRAME).expect("fits the frame limit");
        let (back, shape) = parse_limited(&frame[LEN_PREFIX..], DEFAULT_MAX_ENTRIES).unwrap();
        assert_eq!(back.entries.len(), shape.entries);
        // A snapshot of the group state and 1000 history records (JSON, ~100 kB) too.
        let mut snap = Message::default();
        snap.set_msg_type(MessageType::MsgSnapshot);
        snap.mut_snapshot().data = vec![b'x'; 1000 * 120].into();
        encode(&snap, DEFAULT_MAX_FRAME).expect("a snapshot fits");
    }
}
