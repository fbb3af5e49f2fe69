//! Writes a cluster CA, one certificate per node for nodes 1..=N, and one operator
//! certificate for the operator tool (`tenure-ctl`, or `cargo run --example ctl`).
//!
//! ```text
//! cargo run --example certs -- --nodes 5 --out /tmp/certs              # one folder
//! cargo run --example certs -- --nodes 5 --out /tmp/certs --per-node   # one per holder
//! ```
//!
//! Give each node `ca.pem`, `node-<id>.pem` and `node-<id>-key.pem`; give the operator
//! `ca.pem`, `operator.pem` and `operator-key.pem`; keep `ca-key.pem` off the nodes
//! (whoever holds it can mint any node id). With `--per-node` the files are already
//! sorted that way: `ca/` (the CA key: keep it apart), `node-<id>/` (copy each to its
//! node, point `--certs` at it) and `operator/`. Exit codes: 0 done, 1 the files could
//! not be written, 2 bad arguments.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tenure::transport::tls::{
    node_cert_file, node_dir, node_key_file, node_server_name, write_cluster_certs,
    write_cluster_certs_per_node, CA_CERT_FILE, CA_DIR, CA_KEY_FILE, OPERATOR_CERT_FILE,
    OPERATOR_DIR, OPERATOR_KEY_FILE, OPERATOR_NAME,
};

/// The largest group worth making certificates for in one go (raft groups are 3..7).
const MAX_NODES: u64 = 1000;

const EXIT_CODES: &str = "\
Exit codes: 0 done; 1 the files could not be written; 2 bad arguments.";

/// Writes a cluster CA, a certificate for each of the nodes 1..=N and an operator
/// certificate for the admin tool (ctl).
#[derive(Debug, Parser)]
#[command(name = "certs", bin_name = "certs", after_help = EXIT_CODES)]
struct Args {
    /// How many nodes: certificates for ids 1..=N
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_NODES))]
    nodes: u64,

    /// Directory to write into (created if missing; existing certificate files are never
    /// overwritten)
    #[arg(long, value_name = "DIR")]
    out: PathBuf,

    /// One folder per holder, so that no node holds the CA key
    ///
    ///   DIR/ca/         ca.pem ca-key.pem   (keep apart: it mints node ids)
    ///   DIR/node-<id>/  ca.pem node-<id>.pem node-<id>-key.pem
    ///   DIR/operator/   ca.pem operator.pem operator-key.pem
    ///
    /// Copy DIR/node-<id> to node <id> and start it with --certs on that folder.
    #[arg(long, verbatim_doc_comment)]
    per_node: bool,
}

fn main() -> ExitCode {
    // Help goes to stdout with exit code 0; a usage error to stderr with exit code 2.
    let args = Args::parse();
    if args.per_node {
        return write_per_node(&args);
    }
    if let Err(e) = write_cluster_certs(&args.out, 1..=args.nodes) {
        eprintln!("certs: {e}");
        return ExitCode::from(1);
    }
    let dir = &args.out;
    println!("wrote to {}:", dir.display());
    println!("  {CA_CERT_FILE:<22} cluster CA certificate (every node)");
    println!("  {CA_KEY_FILE:<22} cluster CA private key, mode 0600 (keep it off the nodes)");
    for id in 1..=args.nodes {
        println!(
            "  {:<22} node {id} certificate ({})",
            node_cert_file(id),
            node_server_name(id)
        );
        println!(
            "  {:<22} node {id} private key, mode 0600",
            node_key_file(id)
        );
    }
    println!(
        "  {OPERATOR_CERT_FILE:<22} operator certificate ({OPERATOR_NAME}; the admin tool, not a node)"
    );
    println!("  {OPERATOR_KEY_FILE:<22} operator private key, mode 0600");
    ExitCode::SUCCESS
}

fn write_per_node(args: &Args) -> ExitCode {
    if let Err(e) = write_cluster_certs_per_node(&args.out, 1..=args.nodes) {
        eprintln!("certs: {e}");
        return ExitCode::from(1);
    }
    let dir = &args.out;
    println!("wrote to {}, one folder per holder:", dir.display());
    println!(
        "  {:<12} {CA_CERT_FILE}, {CA_KEY_FILE} (mode 0600): the cluster CA; keep this folder \
         off the nodes (it mints node ids)",
        format!("{CA_DIR}/")
    );
    for id in 1..=args.nodes {
        println!(
            "  {:<12} {CA_CERT_FILE}, {}, {} (mode 0600): node {id} ({}) only",
            format!("{}/", node_dir(id)),
            node_cert_file(id),
            node_key_file(id),
            node_server_name(id)
        );
    }
    println!(
        "  {:<12} {CA_CERT_FILE}, {OPERATOR_CERT_FILE}, {OPERATOR_KEY_FILE} (mode 0600): the \
         admin tool ({OPERATOR_NAME})",
        format!("{OPERATOR_DIR}/")
    );
    ExitCode::SUCCESS
}
