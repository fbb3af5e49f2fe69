//! RocksDB storage: the contract every store keeps, crashes, restores, a clean stop.
//!
//! One test binary per topic (`cargo test --test storage`), one module per file:
//!
//! | module | what it tests |
//! |---|---|
//! | [`conformance`] | the storage contract, on RocksDB and the memory store |
//! | [`crash`] | a writer killed at random moments (a child process of this binary) |
//! | [`faultfs`] | the fault filesystem: held writes, power losses, stalls, failed syncs (root) |
//! | [`faultfs_disk`] | the fault filesystem's disk without FUSE: buffered writes, torn losses, undone renames |
//! | [`lost_ack`] | no acknowledged write lost when a node restarts |
//! | [`recovery`] | disaster recovery: restores from a backup |
//! | [`shutdown`] | a clean stop closes the store |

mod conformance;
mod crash;
mod faultfs;
mod faultfs_disk;
mod lost_ack;
mod recovery;
mod shutdown;
