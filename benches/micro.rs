//! Criterion micro-benchmarks of the hot pure code: framing a raft message for the wire
//! and back, and persisting one Ready.
//!
//! ```text
//! cargo bench --bench micro
//! cargo bench --bench micro -- --warm-up-time 0.2 --measurement-time 0.5   # CI
//! cargo bench --bench micro -- frame                                       # one group
//! ```
//!
//! * `frame/*`: [`tenure::transport::frame::encode`] and `decode` of a heartbeat (with a
//!   ReadIndex context, as tenure's lease renewal sends it) and of an append of one entry
//!   (tenure's log holds only the leader's empty entries and membership changes).
//! * `ready/*`: [`RaftStore::write`] of a hard state and one entry, the Ready a follower
//!   persists for each append: on RocksDB (one synced `WriteBatch`, so this is mostly the
//!   disk's fsync) and on the in-memory store.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use raft::eraftpb::{ConfState, Entry, HardState, Message, MessageType};
use tenure::storage::{MemStore, RaftStore, ReadyWrite, RocksStore};
use tenure::transport::frame::{decode, encode, DEFAULT_MAX_FRAME};

fn heartbeat() -> Message {
    let mut m = Message {
        from: 1,
        to: 2,
        term: 7,
        commit: 42,
        context: 1234u64.to_be_bytes().to_vec().into(),
        ..Default::default()
    };
    m.set_msg_type(MessageType::MsgHeartbeat);
    m
}

fn append() -> Message {
    let mut m = Message {
        from: 1,
        to: 2,
        term: 7,
        log_term: 7,
        index: 42,
        commit: 42,
        ..Default::default()
    };
    m.set_msg_type(MessageType::MsgAppend);
    m.entries.push(Entry {
        term: 7,
        index: 43,
        ..Default::default()
    });
    m
}

fn frames(c: &mut Criterion) {
    let mut g = c.benchmark_group("frame");
    for (name, msg) in [("heartbeat", heartbeat()), ("append_1", append())] {
        let frame = encode(&msg, DEFAULT_MAX_FRAME).expect("encode");
        g.throughput(Throughput::Bytes(frame.len() as u64));
        g.bench_function(format!("encode/{name}"), |b| {
            b.iter(|| encode(black_box(&msg), DEFAULT_MAX_FRAME).expect("encode"));
        });
        g.bench_function(format!("decode/{name}"), |b| {
            b.iter(|| decode(black_box(&frame), DEFAULT_MAX_FRAME).expect("decode"));
        });
    }
    g.finish();
}

/// Times `store.write` of a hard state + one entry; compacts the log outside the timed
/// part now and then, so the store does not grow without bound.
fn write_ready<S: RaftStore>(store: &S, next: &mut u64, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        *next += 1;
        let w = ReadyWrite {
            entries: vec![Entry {
                term: 1,
                index: *next,
                ..Default::default()
            }],
            hard_state: Some(HardState {
                term: 1,
                vote: 1,
                commit: *next,
                ..Default::default()
            }),
            ..Default::default()
        };
        let t = Instant::now();
        store.write(black_box(w)).expect("write");
        total += t.elapsed();
        if (*next).is_multiple_of(4096) {
            store
                .compact(*next - 1, store.conf_state(), Vec::new())
                .expect("compact");
        }
    }
    total
}

fn ready(c: &mut Criterion) {
    let conf = ConfState {
        voters: vec![1, 2, 3, 4, 5],
        ..Default::default()
    };
    let mut g = c.benchmark_group("ready");
    // The default temporary folder, on the same disk the workers' data folders use.
    let dir = tempfile::tempdir().expect("temp dir");
    let rocks = RocksStore::create(dir.path().join("rocks"), 1, conf.clone()).expect("rocks");
    let mut next = 0;
    g.bench_function("rocksdb_fsync/hard_state+1_entry", |b| {
        b.iter_custom(|iters| write_ready(&rocks, &mut next, iters));
    });
    let mem = MemStore::new(conf);
    let mut next = 0;
    g.bench_function("mem/hard_state+1_entry", |b| {
        b.iter_custom(|iters| write_ready(&mem, &mut next, iters));
    });
    g.finish();
}

criterion_group!(benches, frames, ready);
criterion_main!(benches);
