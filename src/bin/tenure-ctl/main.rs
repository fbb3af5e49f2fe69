//! `tenure-ctl`, the operator tool: drives a running group through its nodes' admin
//! endpoints, with the operator certificate (README, "Operating a group").
//!
//! ```text
//! cargo install --locked --path . --bin tenure-ctl
//! tenure-ctl --certs certs/operator --addr 10.0.0.1:7101,10.0.0.2:7101,10.0.0.3:7101 status
//! ```
//!
//! | file | holds |
//! |---|---|
//! | `cli.rs` | the command line and each command |
//! | `cli/connect.rs` | reaching the admin endpoints: all of them, or enough to find the leader |
//! | `cli/elections.rs` | `elections list` and `elections transfer`, which do not go to the leader |
//! | `cli/plan.rs` | `restore-plan`: a backup made into the plan every first member is given |
//! | `cli/parse.rs` | the argument values' parsers, each refusal saying what was expected |
//! | `cli/output.rs` | what it prints: refusals as sentences, results, statuses, histories |

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
