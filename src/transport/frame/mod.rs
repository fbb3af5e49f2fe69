//! Length-prefixed protobuf frames.
//!
//! A frame is a 4-byte big-endian length `n` followed by `n` bytes, its payload. A
//! stream carries frames back to back. A payload is one of two kinds:
//!
//! | kind | payload (`n` bytes) | made by | read by |
//! |---|---|---|---|
//! | root frame (election 0) | one `raft::eraftpb::Message` in protobuf encoding | [`encode`], [`encode_into`], [`encode_election_into`] with election 0 | every function here |
//! | election frame (election `e` ≥ 1) | the byte [`ELECTION_MARK`] (`0x00`), `e` as 4 bytes big endian, then one `raft::eraftpb::Message` in protobuf encoding ([`ELECTION_HEADER`] = 5 bytes before the message) | [`encode_election_into`] | [`parse_election_limited`], [`decode_election`], [`read_election_frame`], [`scan`] |
//!
//! The length prefix counts the whole payload (for an election frame, the 5 header
//! bytes too), and every limit below applies to it. A root frame is byte for byte what
//! it was before elections existed. The two cannot be confused: a protobuf message
//! begins with a field key, and a key byte `0x00` is field number 0, which protobuf does
//! not allow, so no root payload begins with `0x00` (an empty message is an empty
//! payload). A payload `0x00` followed by fewer than 4 bytes, or naming election 0 (the
//! root's messages travel as root frames), is [`FrameError::Malformed`].
//!
//! **Compatibility.** A peer of an older version reads an election frame as a root
//! frame whose first field is number 0: it closes the connection as malformed
//! (`close_code::MALFORMED`, counted `frames_malformed`) on the first election frame it
//! gets. Send election frames only to peers known to read them. The root-only readers
//! of this version ([`decode`], [`read_frame`], [`parse_limited`]) refuse an election
//! frame the same way (malformed), rather than drop its election id.
//!
//! # Limits
//!
//! The length is checked against a limit *before* anything is allocated, so a peer
//! cannot make a node allocate more than `max` bytes per frame. [`DEFAULT_MAX_FRAME`] is
//! 4 MiB: raft-rs packs at most `max_size_per_msg` (1 MiB in tenure) of entries into one
//! append, and a snapshot holds the group state as JSON, which the catalog's limit
//! ([`MAX_CATALOG_BYTES`](crate::election::MAX_CATALOG_BYTES), 3 MiB) and the history's
//! ([`MAX_HISTORY_RETENTION`](crate::config::MAX_HISTORY_RETENTION) records) keep within
//! it (`docs/design.md`, section 9).
//!
//! A frame's bytes are not the whole cost of decoding it: an empty `entries` field is 2
//! bytes on the wire and an [`Entry`] in memory (a hundred bytes and more), so a frame of
//! empty entries decodes to 50 to 100 times its size. Before decoding, [`scan`] walks the
//! wire bytes along raft's schema (no allocation; for an election frame, the message
//! after the 5-byte header) and counts what decoding would make:
//! entries (at most `max_entries`, [`DEFAULT_MAX_ENTRIES`]), unknown fields (at most
//! [`MAX_UNKNOWN_FIELDS`]) and the ids of a snapshot's `ConfState` (at most
//! [`MAX_CONF_IDS`]); [`Shape::decoded_bytes`] is what the decoded message may take. The
//! QUIC transport reserves [`decode_bound`] of its inbound byte budget before it reads a
//! payload, so memory is bounded by the budget, not by what peers send. The limits are
//! per frame, whatever election it belongs to: an election frame's header only adds 5
//! bytes to the payload, which [`decode_bound`] and [`Shape::decoded_bytes`] count with
//! the rest (a little more than the message needs).
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
//! Besides the async [`read_frame`] and [`read_election_frame`], [`decode`] and
//! [`decode_election`] work on a byte slice without any IO (for benchmarks and fuzzing).
//!
//! This file holds the limits, encoding and decoding; the wire scan ([`scan`], [`Shape`],
//! [`decode_bound`] and what each decoded part costs) is in `scan.rs`.

mod scan;

use bytes::{Bytes, BytesMut};
use protobuf::{CodedOutputStream, Message as _};
use raft::eraftpb::Message;
use tokio::io::{AsyncRead, AsyncReadExt};

#[cfg(doc)]
use raft::eraftpb::Entry;

pub use scan::{
    decode_bound, scan, Shape, ENTRY_COST, MAX_CONF_IDS, MAX_UNKNOWN_FIELDS, UNKNOWN_FIELD_COST,
};

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

/// The byte an election frame's payload begins with (see the [module docs](self)): a
/// protobuf key byte `0x00` would be field number 0, so no root payload begins with it.
pub const ELECTION_MARK: u8 = 0x00;

/// Bytes of an election frame's header: [`ELECTION_MARK`] and the election id (4 bytes,
/// big endian). The message follows.
pub const ELECTION_HEADER: usize = 5;

/// Encodes `msg` as one root frame (prefix and payload). Fails with
/// [`FrameError::TooLarge`] when the payload would exceed `max`.
pub fn encode(msg: &Message, max: usize) -> Result<Bytes, FrameError> {
    let mut buf = Vec::new();
    encode_into(msg, max, &mut buf)?;
    Ok(Bytes::from(buf))
}

/// Appends the root frame of `msg` to `out` (see [`encode`]); on error `out` is
/// unchanged. Lets a sender put several frames in one buffer.
pub fn encode_into(msg: &Message, max: usize, out: &mut Vec<u8>) -> Result<(), FrameError> {
    encode_election_into(0, msg, max, out)
}

/// Encodes `msg` of election `election` as one frame: an election frame, or a root
/// frame for election 0 (see [`encode_election_into`]).
pub fn encode_election(election: u32, msg: &Message, max: usize) -> Result<Bytes, FrameError> {
    let mut buf = Vec::new();
    encode_election_into(election, msg, max, &mut buf)?;
    Ok(Bytes::from(buf))
}

/// Appends the frame of `msg` of election `election` to `out`: for election 0 the root
/// frame ([`encode_into`], byte for byte), for any other an election frame (the
/// [`ELECTION_HEADER`], then the message; see the [module docs](self)). The payload,
/// header included, must not exceed `max` ([`FrameError::TooLarge`]). On error `out` is
/// unchanged.
pub fn encode_election_into(
    election: u32,
    msg: &Message,
    max: usize,
    out: &mut Vec<u8>,
) -> Result<(), FrameError> {
    let header = if election == 0 { 0 } else { ELECTION_HEADER };
    // compute_size also caches nested sizes for write_to_with_cached_sizes.
    let body = msg.compute_size() as usize;
    let len = header + body;
    let max = max.min(u32::MAX as usize);
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let start = out.len();
    out.reserve(LEN_PREFIX + len);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    if header > 0 {
        out.push(ELECTION_MARK);
        out.extend_from_slice(&election.to_be_bytes());
    }
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
            "encoder wrote {} bytes, computed {body}",
            out.len() - start - LEN_PREFIX - header
        ),
    };
    out.truncate(start);
    Err(FrameError::Malformed(problem))
}

/// Splits a payload (the bytes after the prefix) into its election id (0 for a root
/// frame) and the message's bytes. Checks only the header: a payload that begins with
/// [`ELECTION_MARK`] but holds fewer than [`ELECTION_HEADER`] bytes, or names election 0,
/// is [`FrameError::Malformed`]; anything else not beginning with the mark is a root
/// payload, returned whole.
pub fn split_payload(payload: &[u8]) -> Result<(u32, &[u8]), FrameError> {
    match payload {
        [ELECTION_MARK, rest @ ..] => {
            let Some((id, message)) = rest.split_first_chunk::<4>() else {
                return Err(FrameError::Malformed(format!(
                    "election frame cut off inside its header ({} of {ELECTION_HEADER} bytes)",
                    payload.len()
                )));
            };
            match u32::from_be_bytes(*id) {
                0 => Err(FrameError::Malformed(
                    "election frame names election 0 (the root's messages travel as root \
                     frames, without the header)"
                        .into(),
                )),
                election => Ok((election, message)),
            }
        }
        _ => Ok((0, payload)),
    }
}

/// Scans (see [`scan`]) and then decodes one payload of either kind (the bytes after the
/// prefix): its election id (0 for a root frame), the message and its [`Shape`].
pub fn parse_election_limited(
    payload: &[u8],
    max_entries: usize,
) -> Result<(u32, Message, Shape), FrameError> {
    let (election, body) = split_payload(payload)?;
    let shape = scan::scan_message(body, max_entries)?;
    let msg = Message::parse_from_bytes(body).map_err(|e| FrameError::Malformed(e.to_string()))?;
    Ok((election, msg, shape))
}

/// Scans (see [`scan`]) and then decodes one root payload (the bytes after the prefix).
/// An election frame is [`FrameError::Malformed`] (read it with
/// [`parse_election_limited`]).
pub fn parse_limited(payload: &[u8], max_entries: usize) -> Result<(Message, Shape), FrameError> {
    root_only(payload)?;
    parse_election_limited(payload, max_entries).map(|(_, m, s)| (m, s))
}

/// Refuses an election payload where a root one is expected (the readers of root frames
/// do not drop an election id silently).
fn root_only(payload: &[u8]) -> Result<(), FrameError> {
    match split_payload(payload)? {
        (0, _) => Ok(()),
        (e, _) => Err(FrameError::Malformed(format!(
            "an election frame (election {e}) where a root frame was expected"
        ))),
    }
}

/// Parses one payload of either kind with the default entries limit.
fn parse(payload: &[u8]) -> Result<(u32, Message), FrameError> {
    parse_election_limited(payload, DEFAULT_MAX_ENTRIES).map(|(e, m, _)| (e, m))
}

/// The payload of the first frame in `buf`, once it holds all of it, and the frame's
/// length.
fn first_payload(buf: &[u8], max: usize) -> Result<Option<(&[u8], usize)>, FrameError> {
    let Some(prefix) = buf.get(..LEN_PREFIX) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    Ok(buf
        .get(LEN_PREFIX..LEN_PREFIX + len)
        .map(|payload| (payload, LEN_PREFIX + len)))
}

/// Decodes the first frame in `buf`, a root frame, without IO.
///
/// Returns `Ok(None)` when `buf` does not yet hold a whole frame (read more and call
/// again), `Ok(Some((message, consumed)))` otherwise, where `consumed` is the frame's
/// length including the prefix. An announced length over `max` is
/// [`FrameError::TooLarge`] as soon as the prefix is complete; more than
/// [`DEFAULT_MAX_ENTRIES`] entries is [`FrameError::TooManyEntries`] (see [`scan`]); an
/// election frame is [`FrameError::Malformed`] (see [`decode_election`]).
pub fn decode(buf: &[u8], max: usize) -> Result<Option<(Message, usize)>, FrameError> {
    let Some((payload, used)) = first_payload(buf, max)? else {
        return Ok(None);
    };
    root_only(payload)?;
    Ok(Some((parse(payload)?.1, used)))
}

/// Decodes the first frame in `buf`, of either kind, without IO: as [`decode`], with
/// the frame's election id (0 for a root frame):
/// `Ok(Some((election, message, consumed)))`.
pub fn decode_election(
    buf: &[u8],
    max: usize,
) -> Result<Option<(u32, Message, usize)>, FrameError> {
    let Some((payload, used)) = first_payload(buf, max)? else {
        return Ok(None);
    };
    let (election, msg) = parse(payload)?;
    Ok(Some((election, msg, used)))
}

/// Reads one root frame from `reader`.
///
/// `Ok(None)` when the stream ends cleanly between frames. A stream that ends inside a
/// frame is [`FrameError::Malformed`]; a length over `max` is [`FrameError::TooLarge`]
/// (nothing more is read); more than [`DEFAULT_MAX_ENTRIES`] entries is
/// [`FrameError::TooManyEntries`]; an election frame is [`FrameError::Malformed`] (see
/// [`read_election_frame`]). It has no deadline and no budget (the QUIC transport
/// reads its streams with both). Cancel-safe only between frames: dropping the future in the
/// middle of a frame loses the partial frame, so do not `select!` on it with other work
/// unless the stream is abandoned afterwards.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> Result<Option<Message>, FrameError> {
    let Some(payload) = read_whole_payload(reader, max).await? else {
        return Ok(None);
    };
    root_only(&payload)?;
    parse(&payload).map(|(_, m)| Some(m))
}

/// Reads one frame of either kind from `reader`: as [`read_frame`], with the frame's
/// election id (0 for a root frame).
pub async fn read_election_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> Result<Option<(u32, Message)>, FrameError> {
    let Some(payload) = read_whole_payload(reader, max).await? else {
        return Ok(None);
    };
    parse(&payload).map(Some)
}

/// Reads the prefix and the payload of one frame (`None`: the stream ended between
/// frames).
async fn read_whole_payload<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> Result<Option<BytesMut>, FrameError> {
    let Some(len) = read_prefix(reader).await? else {
        return Ok(None);
    };
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    read_payload(reader, len).await.map(Some)
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

    /// A root frame made the way it was before elections existed: the length, then the
    /// message's protobuf bytes.
    fn old_root_frame(m: &Message) -> Vec<u8> {
        let body = m.write_to_bytes().unwrap();
        [(body.len() as u32).to_be_bytes().to_vec(), body].concat()
    }

    /// An election frame built by hand from the documented layout.
    fn election_frame_by_hand(election: u32, m: &Message) -> Vec<u8> {
        let payload = [
            vec![0x00],
            election.to_be_bytes().to_vec(),
            m.write_to_bytes().unwrap(),
        ]
        .concat();
        [(payload.len() as u32).to_be_bytes().to_vec(), payload].concat()
    }

    #[test]
    fn root_frames_are_byte_for_byte_what_they_were() {
        for m in [sample(), Message::default()] {
            let old = old_root_frame(&m);
            assert_eq!(&encode(&m, DEFAULT_MAX_FRAME).unwrap()[..], &old[..]);
            let mut out = Vec::new();
            encode_into(&m, DEFAULT_MAX_FRAME, &mut out).unwrap();
            assert_eq!(out, old);
            out.clear();
            encode_election_into(0, &m, DEFAULT_MAX_FRAME, &mut out).unwrap();
            assert_eq!(out, old, "election 0 is a root frame");
            assert_eq!(
                decode_election(&old, DEFAULT_MAX_FRAME).unwrap().unwrap(),
                (0, m.clone(), old.len())
            );
        }
    }

    #[tokio::test]
    async fn election_frames_round_trip_with_their_id() {
        let m = sample();
        for election in [1, 2, 0x0102_0304, u32::MAX] {
            let frame = encode_election(election, &m, DEFAULT_MAX_FRAME).unwrap();
            assert_eq!(&frame[..], &election_frame_by_hand(election, &m)[..]);
            let body_len = m.compute_size() as usize;
            assert_eq!(frame.len(), LEN_PREFIX + ELECTION_HEADER + body_len);
            assert_eq!(
                decode_election(&frame, DEFAULT_MAX_FRAME).unwrap().unwrap(),
                (election, m.clone(), frame.len())
            );
            let (e, back, shape) =
                parse_election_limited(&frame[LEN_PREFIX..], DEFAULT_MAX_ENTRIES).unwrap();
            assert_eq!((e, &back, shape.entries), (election, &m, 1));
            let mut r = &frame[..];
            assert_eq!(
                read_election_frame(&mut r, DEFAULT_MAX_FRAME)
                    .await
                    .unwrap(),
                Some((election, m.clone()))
            );
            // An empty message of an election is its 5-byte header alone.
            let empty = encode_election(election, &Message::default(), 16).unwrap();
            assert_eq!(empty.len(), LEN_PREFIX + ELECTION_HEADER);
            assert_eq!(
                decode_election(&empty, 16).unwrap().unwrap(),
                (election, Message::default(), empty.len())
            );
        }
    }

    #[tokio::test]
    async fn root_and_election_frames_mix_on_one_stream() {
        let mut buf = Vec::new();
        let mut want = Vec::new();
        for (i, election) in [0u32, 5, 0, u32::MAX, 1].into_iter().enumerate() {
            let mut m = sample();
            m.term = i as u64;
            encode_election_into(election, &m, DEFAULT_MAX_FRAME, &mut buf).unwrap();
            want.push((election, m));
        }
        let mut r = &buf[..];
        for w in want {
            assert_eq!(
                read_election_frame(&mut r, DEFAULT_MAX_FRAME)
                    .await
                    .unwrap(),
                Some(w)
            );
        }
        assert_eq!(
            read_election_frame(&mut r, DEFAULT_MAX_FRAME)
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn root_readers_refuse_election_frames_as_malformed() {
        let frame = encode_election(9, &sample(), DEFAULT_MAX_FRAME).unwrap();
        let is_election_error = |r: Result<(), FrameError>| matches!(r, Err(FrameError::Malformed(ref s)) if s.contains("election 9"));
        assert!(is_election_error(
            decode(&frame, DEFAULT_MAX_FRAME).map(drop)
        ));
        assert!(is_election_error(
            parse_limited(&frame[LEN_PREFIX..], DEFAULT_MAX_ENTRIES).map(drop)
        ));
        let mut r = &frame[..];
        assert!(is_election_error(
            read_frame(&mut r, DEFAULT_MAX_FRAME).await.map(drop)
        ));
    }

    #[test]
    fn the_size_limit_counts_the_election_header() {
        let m = sample();
        let body = m.compute_size() as usize;
        let max = ELECTION_HEADER + body;
        assert!(encode_election(3, &m, max).is_ok());
        let mut out = vec![7];
        match encode_election_into(3, &m, max - 1, &mut out) {
            Err(FrameError::TooLarge { len, max: l }) => assert_eq!((len, l), (max, max - 1)),
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert_eq!(out, [7], "a failed encode leaves the buffer as it was");
        // The root frame of the same message fits in `body`.
        assert!(encode(&m, body).is_ok());
        // Inbound, the prefix is checked against the limit before anything else.
        let frame = encode_election(3, &m, max).unwrap();
        assert!(matches!(
            decode_election(&frame, max - 1),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn a_cut_off_election_header_is_malformed() {
        for header in [&[0x00][..], &[0x00, 0, 0], &[0x00, 0, 0, 1]] {
            let mut frame = (header.len() as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(header);
            let cut_off = |r: Result<(), FrameError>| matches!(r, Err(FrameError::Malformed(ref s)) if s.contains("header"));
            assert!(cut_off(split_payload(header).map(drop)), "{header:?}");
            assert!(cut_off(scan(header, DEFAULT_MAX_ENTRIES).map(drop)));
            assert!(cut_off(
                decode_election(&frame, DEFAULT_MAX_FRAME).map(drop)
            ));
            assert!(cut_off(decode(&frame, DEFAULT_MAX_FRAME).map(drop)));
            let mut r = &frame[..];
            assert!(cut_off(
                read_election_frame(&mut r, DEFAULT_MAX_FRAME)
                    .await
                    .map(drop)
            ));
        }
        // Truncated inside the prefix or the payload: incomplete, as for root frames.
        let frame = encode_election(4, &sample(), DEFAULT_MAX_FRAME).unwrap();
        for cut in 1..frame.len() {
            assert!(decode_election(&frame[..cut], DEFAULT_MAX_FRAME)
                .unwrap()
                .is_none());
        }
    }

    #[test]
    fn election_zero_inside_an_envelope_is_malformed() {
        let frame = election_frame_by_hand(0, &sample());
        let zero = |r: Result<(), FrameError>| matches!(r, Err(FrameError::Malformed(ref s)) if s.contains("election 0"));
        assert!(zero(split_payload(&frame[LEN_PREFIX..]).map(drop)));
        assert!(zero(
            parse_election_limited(&frame[LEN_PREFIX..], DEFAULT_MAX_ENTRIES).map(drop)
        ));
        assert!(zero(
            scan(&frame[LEN_PREFIX..], DEFAULT_MAX_ENTRIES).map(drop)
        ));
        assert!(zero(decode_election(&frame, DEFAULT_MAX_FRAME).map(drop)));
    }

    #[test]
    fn the_entries_limit_holds_inside_an_envelope() {
        let mut m = sample();
        m.entries = vec![Entry::default(); 10].into();
        let frame = encode_election(6, &m, DEFAULT_MAX_FRAME).unwrap();
        let payload = &frame[LEN_PREFIX..];
        assert_eq!(scan(payload, 10).unwrap().entries, 10);
        assert!(matches!(
            scan(payload, 9),
            Err(FrameError::TooManyEntries { count: 10, max: 9 })
        ));
        assert!(matches!(
            parse_election_limited(payload, 9),
            Err(FrameError::TooManyEntries { count: 10, max: 9 })
        ));
        // Garbage after a valid header is malformed, as in a root frame.
        let mut bad = payload[..ELECTION_HEADER].to_vec();
        bad.extend_from_slice(&[0x0f, 0xff, 0xff]);
        assert!(matches!(
            parse_election_limited(&bad, DEFAULT_MAX_ENTRIES),
            Err(FrameError::Malformed(_))
        ));
    }

    #[test]
    fn scan_and_the_decode_bound_cover_an_envelope() {
        let mut m = sample();
        m.entries = vec![Entry::default(); 300].into();
        let root = encode(&m, DEFAULT_MAX_FRAME).unwrap();
        let election = encode_election(u32::MAX, &m, DEFAULT_MAX_FRAME).unwrap();
        let (root, election) = (&root[LEN_PREFIX..], &election[LEN_PREFIX..]);
        let shape = scan(election, DEFAULT_MAX_ENTRIES).unwrap();
        assert_eq!(shape, scan(root, DEFAULT_MAX_ENTRIES).unwrap());
        assert_eq!(shape.entries, 300);
        let (_, _, parsed) = parse_election_limited(election, DEFAULT_MAX_ENTRIES).unwrap();
        assert_eq!(parsed, shape);
        assert!(
            shape.decoded_bytes(election.len())
                <= decode_bound(election.len(), DEFAULT_MAX_ENTRIES)
        );
        // The worst envelope of a given length: a header, then empty entries only.
        let worst = [
            election[..ELECTION_HEADER].to_vec(),
            [0x3au8, 0x00].repeat(1000),
        ]
        .concat();
        let shape = scan(&worst, DEFAULT_MAX_ENTRIES).unwrap();
        assert_eq!(shape.entries, 1000);
        assert!(shape.decoded_bytes(worst.len()) <= decode_bound(worst.len(), DEFAULT_MAX_ENTRIES));
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
