//! RocksDB storage: the contract every store keeps, crashes, restores, a clean stop.
//!
//! One test binary per topic (`cargo test --test storage`), one module per file:
//!
//! | module | what it tests |
//! |---|---|
//! | [`conformance`] | the storage contract, on RocksDB and the memory store |
//! | [`crash`] | a writer killed at random moments (a child process of this binary) |
//! | [`lost_ack`] | no acknowledged write lost when a node restarts |
//! | [`recovery`] | disaster recovery: restores from a backup |
//! | [`shutdown`] | a clean stop closes the store |

mod conformance;
mod crash;
mod lost_ack;
mod recovery;
mod shutdown;
