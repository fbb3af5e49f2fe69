//! `cargo run --example ctl`: the operator tool `tenure-ctl` (src/bin/tenure-ctl) under
//! its old name. Flags, output and exit codes are the installed binary's; its usage
//! lines, message prefix and completion scripts say `ctl`.
//!
//! ```text
//! cargo run --example ctl -- --certs DIR --addr 127.0.0.1:7101,127.0.0.1:7102 status
//! cargo run --example ctl -- completions bash > ~/.local/share/bash-completion/completions/ctl
//! ```

#[path = "../src/bin/tenure-ctl/cli.rs"]
mod cli;

fn main() -> std::process::ExitCode {
    cli::main("ctl")
}
