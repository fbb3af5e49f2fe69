//! `tenure-worker`, a worker process that embeds tenure and prints its election events as
//! JSON lines: the program the deploy files install, the netns suite and the benches run,
//! and `local_group` runs five of (README, "Deploying").
//!
//! ```text
//! cargo install --locked --path . --bin tenure-worker
//! cargo run --example certs -- --nodes 3 --out /tmp/certs --per-node
//! tenure-worker --id 1 --listen 127.0.0.1:7001 \
//!     --peers 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003 \
//!     --data-dir /tmp/w1 --certs /tmp/certs/node-1 --admin 127.0.0.1:7101
//! tenure-ctl --certs /tmp/certs/operator --addr 127.0.0.1:7101 status
//! ```
//!
//! Each worker reads only `ca.pem`, `node-<id>.pem` and `node-<id>-key.pem` from its
//! `--certs` folder: with `--per-node` that folder holds nothing else, and the CA key
//! stays in `/tmp/certs/ca` (README, "Certificates and keys"). A single folder of every
//! file (`certs` without `--per-node`) works too, for a group on one machine.
//!
//! Its command line, events and exit codes are a contract: `tenure-worker --help` lists
//! them.
//!
//! | file | holds |
//! |---|---|
//! | `cli.rs` | the command line, its help and defaults |
//! | `run.rs` | a run: the node, the root election's events, signals, the stop and its exit code |
//! | `named.rs` | the named elections' events (`--elections N`) and the confirm load |
//! | `settle.rs` | settlement under the fence (`--ledger`), and `--bench-confirms` |
//! | `ledger.rs` | the settlement ledger, SQLite or (`ledger_pg.rs`, the `postgres` feature) PostgreSQL (`local_group` and the tests seed and check it) |

mod cli;
mod ledger;
mod named;
mod run;
mod settle;

use clap::Parser;

fn main() {
    // Help goes to stdout with exit code 0; a usage error to stderr with exit code 2.
    let parsed = match cli::WorkerCli::parse().mode() {
        cli::Mode::NewGroupId => {
            println!("{}", tenure::GroupId::random());
            return;
        }
        cli::Mode::Run(args) => *args,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("worker: cannot start the tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = rt.block_on(run::run(parsed));
    std::process::exit(code);
}
