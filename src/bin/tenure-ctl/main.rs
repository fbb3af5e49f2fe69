//! `tenure-ctl`, the operator tool: drives a running group through its nodes' admin
//! endpoints, with the operator certificate (README, "Operating a group").
//!
//! ```text
//! cargo install --locked --path . --bin tenure-ctl
//! tenure-ctl --certs certs/operator --addr 10.0.0.1:7101,10.0.0.2:7101,10.0.0.3:7101 status
//! ```

mod cli;

fn main() -> std::process::ExitCode {
    cli::main("tenure-ctl")
}
