//! Named elections: the catalog, quiet elections, leader tasks.
//!
//! One test binary per topic (`cargo test --test named`), one module per file:
//!
//! | module | what it tests |
//! |---|---|
//! | [`elections`] | named elections end to end |
//! | [`quiet`] | quiet elections and their paced wakes |
//! | [`leader_task`] | leader tasks of named elections |

mod elections;
mod leader_task;
mod quiet;
