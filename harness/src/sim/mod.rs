//! The deterministic simulation's world (`tests/sim/seeded.rs`, `tests/sim/clock.rs`): real
//! nodes on turmoil's simulated hosts, time and network.
//!
//! | module | what it holds |
//! |---|---|
//! | [`world`] | the simulated group: hosts, nodes, faults applied, events and writes recorded |
//! | [`schedule`] | a seed's schedule of operations and faults |
//! | [`udp`] | quinn's UDP socket on turmoil's network, with the faults a schedule sets |
//! | [`det_tls`] | a rustls provider whose randomness comes from the seed, and fixed certificates |

pub mod det_tls;
pub mod schedule;
pub mod udp;
pub mod world;

// What the world's modules name as their siblings.
use crate::{checker, torn_store};
