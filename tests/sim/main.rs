//! The deterministic simulation and the history checker it judges with.
//!
//! One test binary per topic (`cargo test --test sim`), one module per file:
//!
//! | module | what it tests |
//! |---|---|
//! | [`seeded`] | seeded fault and operator schedules, and their replays |
//! | [`clock`] | clock faults: steps, slews and suspends |
//! | [`det_tls`] | the simulation's deterministic TLS: same seed, same bytes |
//! | [`checker`] | the history checker on small hand-made histories |

mod checker;
mod clock;
mod det_tls;
mod seeded;
