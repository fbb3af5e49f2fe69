//! Faults on worker processes: network namespaces (root), stalled disks, a hostile worker.
//!
//! One test binary per topic (`cargo test --test faults`), one module per file:
//!
//! | module | what it tests |
//! |---|---|
//! | [`netns`] | the netns suite: fault schedules on worker processes (root) |
//! | [`disk_stall`] | a disk that stalls |
//! | [`hostile_worker`] | a worker with a valid certificate that abuses the group |

mod disk_stall;
mod hostile_worker;
mod netns;
