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

/// Taken in turn by the two tests here that load the whole machine: the netns suite's
/// schedules (ten worker processes and, as root, their fault filesystems served by this
/// process) and the hostile worker's attack, whose lease bounds
/// assume the other is not running beside it on two cores (clean-clone CI runs failed
/// there, the root's lease expiring while attacked).
static WHOLE_MACHINE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
