//! The test kit: what `local_group`, the benchmarks and the tests share to run worker
//! processes (`tenure-worker`) and judge what they print.
//!
//! | module | what it holds |
//! |---|---|
//! | [`command`] | [`WorkerCommand`](command::WorkerCommand): the worker's command line, built (flags, founding or joining, certificates, data folder, timing, ledger, admin, metrics, extra arguments) |
//! | [`event`] | [`Event`](event::Event): one JSON line a worker printed, parsed; [`read_events`](event::read_events) reads a worker's stdout into them |
//! | [`children`] | [`Children`](children::Children): the worker processes by node id: signals, kills, reaping, a graceful stop; killed when dropped |
//! | [`binary`] | the example binaries (the worker, `ctl`, ...): found beside the running test or bench, built with a nested `cargo build --example` when needed |
//! | [`checker`] | the history checker (`tests/support/checker.rs`): judges a run's events against tenure's guarantees |
//!
//! The launchers built on it: `examples/local_group.rs` (tokio, the live view),
//! `benches/support/mod.rs` (the process benchmarks), `tests/support/procs.rs` (worker
//! processes in tests) and `tests/support/netns.rs` (workers in network namespaces).
//!
//! It is a module, not a crate: `examples/local_group.rs` and `benches/support/mod.rs`
//! include it by path (`#[path = ".../tests/support/kit/mod.rs"] mod kit;`), the tests
//! through `tests/support/mod.rs`, so `cargo test`, `cargo bench` and `cargo run
//! --example` need nothing else. Each user takes a part of it.

#![allow(dead_code)]

pub(crate) mod binary;
#[path = "../checker.rs"]
pub(crate) mod checker;
pub(crate) mod children;
pub(crate) mod command;
pub(crate) mod event;
