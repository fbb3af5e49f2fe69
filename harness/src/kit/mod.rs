//! The test kit: what `local_group`, the benchmarks and the tests share to run worker
//! processes (`tenure-worker`) and judge what they print.
//!
//! | module | what it holds |
//! |---|---|
//! | [`command`] | [`WorkerCommand`](command::WorkerCommand): the worker's command line, built (flags, founding or joining, certificates, data folder, timing, ledger, admin, metrics, extra arguments) |
//! | [`event`] | [`Event`](event::Event): one JSON line a worker printed, parsed; [`read_events`](event::read_events) reads a worker's stdout into them |
//! | [`children`] | [`Children`](children::Children): the worker processes by node id: signals, kills, reaping, a graceful stop; killed when dropped |
//! | [`binary`] | the crate's programs (`tenure-worker`, `tenure-ctl`) and examples: found beside the running test or bench, built with a nested `cargo build` when needed |
//! | [`judge`] | a group's worker events judged by the [`checker`], election by election, and its failovers measured |
//! | [`checker`] | the history checker (the harness's): judges a run's events against tenure's guarantees |
//!
//! The launchers built on it: `examples/local_group` (tokio, the live view),
//! `benches/support/mod.rs` (the process benchmarks), the harness's [`procs`](crate::procs)
//! (worker processes in tests) and [`netns`](crate::netns) (workers in network
//! namespaces).

pub mod binary;
/// The history checker, as the kit's users have always named it.
pub use crate::checker;
pub mod children;
pub mod command;
pub mod event;
pub mod judge;
