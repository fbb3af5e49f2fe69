//! The support stream on the wire. Requests and acks ride the transport as raft-rs
//! messages of the reserved election id [`SUPPORT_STREAM`] (so they share the
//! connection, its order, its frame limits and its authentication: `from` is the peer's
//! certificate), with what they carry in the message's context:
//!
//! * a request is a `MsgHeartbeat`: `index` = sequence number, `commit` = the sender's
//!   incarnation, context = version byte 1, the highest ack processed (u64 BE), the
//!   number of operations (u32 BE), then each operation: `1`, election id (u32 BE),
//!   term, last index, commit (u64 BE each), or `2`, election id;
//! * an ack is a `MsgHeartbeatResponse`: `index` = the request's sequence number,
//!   `commit` = the sender's incarnation, `log_term` = the incarnation of the request's
//!   sender, context = version byte 1, the number of ids (u32 BE), the ids (u32 BE) of the
//!   elections refused or dropped;
//! * a notice is a `MsgCheckQuorum`: `commit` = the sender's incarnation, context =
//!   version byte 1 and one byte of flags: bit 0 set = the sender's disk is stalled
//!   (`docs/design.md`, section 15: its peers hand it nothing). Unknown bits are ignored,
//!   so a later version may add some. Peers older than notices drop them as malformed,
//!   which costs them only the knowledge.
//!
//! Anything else (another type, a short or long context, an unknown operation) does not
//! decode; the driver counts and drops it.

use raft::eraftpb::{Message, MessageType};

use crate::election::{ElectionId, MAX_ELECTIONS, MAX_ELECTION_ID};

pub(crate) use crate::transport::SUPPORT_STREAM;

const VERSION: u8 = 1;
const ADD: u8 = 1;
const REMOVE: u8 = 2;
const ADD_LEN: usize = 1 + 4 + 8 * 3;
const REMOVE_LEN: usize = 1 + 4;

/// One operation of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Support election `id`, led by the sender in `term`, whose log ends at `last` with
    /// `commit` committed.
    Add {
        id: ElectionId,
        term: u64,
        last: u64,
        commit: u64,
    },
    /// Stop supporting `id`.
    Remove { id: ElectionId },
}

/// A support request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) incarnation: u64,
    pub(crate) seq: u64,
    /// The highest ack the sender processed.
    pub(crate) acked: u64,
    pub(crate) ops: Vec<Op>,
}

/// A support ack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ack {
    pub(crate) incarnation: u64,
    pub(crate) to_incarnation: u64,
    pub(crate) seq: u64,
    /// Elections refused or dropped, not yet seen by the request's sender.
    pub(crate) unheld: Vec<ElectionId>,
}

/// A notice: what the sender says of itself, sent when it changes and repeated while it
/// lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Notice {
    pub(crate) incarnation: u64,
    /// The sender's disk is stalled: it takes over nothing until it says otherwise (or
    /// stops repeating it).
    pub(crate) disk_stalled: bool,
}

const DISK_STALLED: u8 = 1;

/// What arrived on the support stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded {
    Request(Request),
    Ack(Ack),
    Notice(Notice),
}

/// Sequence numbers and acknowledged sequence numbers at or above this do not decode: a
/// correct stream starts at 1 and sends a request per heartbeat (2^62 of them take
/// longer than the age of the universe), and a bound leaves `seq + 1` room to never
/// overflow.
pub(crate) const SEQ_LIMIT: u64 = 1 << 62;

/// Why a support message did not decode.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) &'static str);

/// A support request (`docs/design.md`, section 12) from `from` to `to`, of stream
/// incarnation `incarnation` and sequence number `seq`, offering each election in
/// `offers` in term 1 with an empty log, in the stream's own wire format; with the
/// stream's id, for [`Transport::send_election`](crate::transport::Transport::send_election).
/// For tests of hostile members (the simulation's `Hostile` fault,
/// `tests/faults/hostile_worker.rs`): a correct node's stream never sends what this makes.
#[cfg(feature = "testing")]
pub fn forged_support_request(
    from: u64,
    to: u64,
    incarnation: u64,
    seq: u64,
    offers: &[ElectionId],
) -> (u32, Message) {
    let ops = offers
        .iter()
        .map(|&id| Op::Add {
            id,
            term: 1,
            last: 0,
            commit: 0,
        })
        .collect();
    let request = Request {
        incarnation,
        seq,
        acked: 0,
        ops,
    };
    (
        crate::transport::SUPPORT_STREAM,
        request.to_message(from, to),
    )
}

impl Request {
    /// The request as a message from `from` to `to`.
    pub(crate) fn to_message(&self, from: u64, to: u64) -> Message {
        let mut ctx = Vec::with_capacity(13 + self.ops.len() * ADD_LEN);
        ctx.push(VERSION);
        ctx.extend_from_slice(&self.acked.to_be_bytes());
        ctx.extend_from_slice(&(self.ops.len() as u32).to_be_bytes());
        for op in &self.ops {
            match *op {
                Op::Add {
                    id,
                    term,
                    last,
                    commit,
                } => {
                    ctx.push(ADD);
                    ctx.extend_from_slice(&id.to_be_bytes());
                    ctx.extend_from_slice(&term.to_be_bytes());
                    ctx.extend_from_slice(&last.to_be_bytes());
                    ctx.extend_from_slice(&commit.to_be_bytes());
                }
                Op::Remove { id } => {
                    ctx.push(REMOVE);
                    ctx.extend_from_slice(&id.to_be_bytes());
                }
            }
        }
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.from = from;
        m.to = to;
        m.index = self.seq;
        m.commit = self.incarnation;
        m.context = ctx.into();
        m
    }
}

impl Ack {
    /// The ack as a message from `from` to `to`.
    pub(crate) fn to_message(&self, from: u64, to: u64) -> Message {
        let mut ctx = Vec::with_capacity(5 + self.unheld.len() * 4);
        ctx.push(VERSION);
        ctx.extend_from_slice(&(self.unheld.len() as u32).to_be_bytes());
        for id in &self.unheld {
            ctx.extend_from_slice(&id.to_be_bytes());
        }
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeatResponse);
        m.from = from;
        m.to = to;
        m.index = self.seq;
        m.commit = self.incarnation;
        m.log_term = self.to_incarnation;
        m.context = ctx.into();
        m
    }
}

impl Notice {
    /// The notice as a message from `from` to `to`.
    pub(crate) fn to_message(self, from: u64, to: u64) -> Message {
        let flags = if self.disk_stalled { DISK_STALLED } else { 0 };
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgCheckQuorum);
        m.from = from;
        m.to = to;
        m.commit = self.incarnation;
        m.context = vec![VERSION, flags].into();
        m
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        if self.0.len() < N {
            return Err(Malformed("the context ends early"));
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        Ok(head.try_into().expect("split at N"))
    }
    fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_be_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_be_bytes(self.take()?))
    }
}

/// Decodes a message of the support stream.
pub(crate) fn decode(m: &Message) -> Result<Decoded, Malformed> {
    let mut r = Reader(&m.context);
    if r.u8()? != VERSION {
        return Err(Malformed("unknown version"));
    }
    // An election appears once per request or ack; more than every possible election
    // twice over is not a request of a correct peer (and bounds what is allocated).
    let limit = 2 * MAX_ELECTIONS;
    match m.get_msg_type() {
        MessageType::MsgHeartbeat => {
            let acked = r.u64()?;
            if m.index >= SEQ_LIMIT || acked >= SEQ_LIMIT {
                return Err(Malformed("a sequence number past 2^62"));
            }
            let n = r.u32()? as usize;
            if n > limit || n * REMOVE_LEN > r.0.len() {
                return Err(Malformed("more operations than the context holds"));
            }
            let mut ops = Vec::with_capacity(n);
            for _ in 0..n {
                let op = match r.u8()? {
                    ADD => Op::Add {
                        id: r.u32()?,
                        term: r.u64()?,
                        last: r.u64()?,
                        commit: r.u64()?,
                    },
                    REMOVE => Op::Remove { id: r.u32()? },
                    _ => return Err(Malformed("unknown operation")),
                };
                let (Op::Add { id, .. } | Op::Remove { id }) = op;
                if id > MAX_ELECTION_ID {
                    return Err(Malformed("an election id above the maximum"));
                }
                ops.push(op);
            }
            if !r.0.is_empty() {
                return Err(Malformed("bytes after the last operation"));
            }
            Ok(Decoded::Request(Request {
                incarnation: m.commit,
                seq: m.index,
                acked,
                ops,
            }))
        }
        MessageType::MsgHeartbeatResponse => {
            let n = r.u32()? as usize;
            if n > limit || n * 4 != r.0.len() {
                return Err(Malformed("the id count does not match the context"));
            }
            if m.index >= SEQ_LIMIT {
                return Err(Malformed("a sequence number past 2^62"));
            }
            let mut unheld = Vec::with_capacity(n);
            for _ in 0..n {
                let id = r.u32()?;
                if id > MAX_ELECTION_ID {
                    return Err(Malformed("an election id above the maximum"));
                }
                unheld.push(id);
            }
            Ok(Decoded::Ack(Ack {
                incarnation: m.commit,
                to_incarnation: m.log_term,
                seq: m.index,
                unheld,
            }))
        }
        MessageType::MsgCheckQuorum => {
            let flags = r.u8()?;
            if !r.0.is_empty() {
                return Err(Malformed("bytes after a notice's flags"));
            }
            Ok(Decoded::Notice(Notice {
                incarnation: m.commit,
                disk_stalled: flags & DISK_STALLED != 0,
            }))
        }
        _ => Err(Malformed("not a request, an ack or a notice")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_acks_round_trip() {
        let req = Request {
            incarnation: 0xfeed,
            seq: 9,
            acked: 7,
            ops: vec![
                Op::Add {
                    id: 3,
                    term: 5 << 40,
                    last: 12,
                    commit: 11,
                },
                Op::Remove { id: 4 },
            ],
        };
        let m = req.to_message(1, 2);
        assert_eq!((m.from, m.to), (1, 2));
        assert_eq!(decode(&m), Ok(Decoded::Request(req)));
        let ack = Ack {
            incarnation: 3,
            to_incarnation: 0xfeed,
            seq: 9,
            unheld: vec![4, 5],
        };
        assert_eq!(decode(&ack.to_message(2, 1)), Ok(Decoded::Ack(ack)));
        for disk_stalled in [true, false] {
            let notice = Notice {
                incarnation: 4,
                disk_stalled,
            };
            assert_eq!(
                decode(&notice.to_message(2, 1)),
                Ok(Decoded::Notice(notice))
            );
        }
    }

    #[test]
    fn a_notice_ignores_flags_it_does_not_know_and_refuses_a_bad_length() {
        let good = Notice {
            incarnation: 1,
            disk_stalled: false,
        }
        .to_message(1, 2);
        let mut later = good.clone();
        later.context = vec![VERSION, 0b110].into();
        assert_eq!(
            decode(&later),
            Ok(Decoded::Notice(Notice {
                incarnation: 1,
                disk_stalled: false
            }))
        );
        for ctx in [vec![], vec![VERSION], vec![VERSION, 1, 0], vec![2, 1]] {
            let mut m = good.clone();
            m.context = ctx.clone().into();
            assert!(decode(&m).is_err(), "{ctx:?}");
        }
    }

    #[test]
    fn malformed_contexts_are_refused_not_panicked_on() {
        let req = Request {
            incarnation: 1,
            seq: 1,
            acked: 0,
            ops: vec![Op::Remove { id: 1 }],
        };
        let good = req.to_message(1, 2);
        for cut in 0..good.context.len() {
            let mut m = good.clone();
            m.context = good.context[..cut].to_vec().into();
            assert!(decode(&m).is_err(), "cut at {cut}");
        }
        let mut long = good.clone();
        let mut ctx = good.context.to_vec();
        ctx.push(0);
        long.context = ctx.into();
        assert!(decode(&long).is_err());
        // A count of u32::MAX operations does not allocate them.
        let mut huge = good.clone();
        let mut ctx = vec![VERSION];
        ctx.extend_from_slice(&0u64.to_be_bytes());
        ctx.extend_from_slice(&u32::MAX.to_be_bytes());
        huge.context = ctx.into();
        assert!(decode(&huge).is_err());
        let mut other = good;
        other.set_msg_type(MessageType::MsgAppend);
        assert!(decode(&other).is_err());
    }

    /// Numbers a correct peer never sends: a sequence number whose successor could
    /// overflow, an election id no catalog can hold.
    #[test]
    fn sequence_numbers_and_ids_out_of_range_are_refused() {
        let req = |seq, acked, id| Request {
            incarnation: 1,
            seq,
            acked,
            ops: vec![Op::Remove { id }],
        };
        let ack = |seq, id| Ack {
            incarnation: 1,
            to_incarnation: 3,
            seq,
            unheld: vec![id],
        };
        let ok = |m: Message| decode(&m).map(|_| ()).map_err(|e| e.0);
        assert_eq!(
            ok(req(SEQ_LIMIT - 1, 0, MAX_ELECTION_ID).to_message(1, 2)),
            Ok(())
        );
        assert_eq!(
            ok(ack(SEQ_LIMIT - 1, MAX_ELECTION_ID).to_message(1, 2)),
            Ok(())
        );
        let past = Err("a sequence number past 2^62");
        assert_eq!(ok(req(u64::MAX, 0, 1).to_message(1, 2)), past);
        assert_eq!(ok(req(SEQ_LIMIT, 0, 1).to_message(1, 2)), past);
        assert_eq!(ok(req(5, SEQ_LIMIT, 1).to_message(1, 2)), past);
        assert_eq!(ok(ack(u64::MAX, 1).to_message(1, 2)), past);
        let id = Err("an election id above the maximum");
        assert_eq!(ok(req(1, 0, MAX_ELECTION_ID + 1).to_message(1, 2)), id);
        assert_eq!(ok(ack(1, u32::MAX).to_message(1, 2)), id);
    }
}
