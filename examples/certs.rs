//! Writes a cluster CA, one certificate per node for nodes 1..=N, and one operator
//! certificate for the operator tool (`tenure-ctl`); and,
//! for rotation, renews one node's certificate, makes a new CA, and bundles CAs.
//!
//! ```text
//! cargo run --example certs -- --nodes 5 --out /tmp/certs              # one folder
//! cargo run --example certs -- --nodes 5 --out /tmp/certs --per-node   # one per holder
//! cargo run --example certs -- renew --node 3 --ca /tmp/certs/ca --out /tmp/certs/node-3
//! cargo run --example certs -- new-ca --out /tmp/certs/ca-2
//! cargo run --example certs -- bundle --ca /tmp/certs/ca/ca.pem --ca /tmp/certs/ca-2/ca.pem \
//!     --out /tmp/certs/node-3/ca.pem
//! ```
//!
//! Give each node `ca.pem`, `node-<id>.pem` and `node-<id>-key.pem`; give the operator
//! `ca.pem`, `operator.pem` and `operator-key.pem`; keep `ca-key.pem` off the nodes
//! (whoever holds it can mint any node id). With `--per-node` the files are already
//! sorted that way: `ca/` (the CA key: keep it apart), `node-<id>/` (copy each to its
//! node, point `--certs` at it) and `operator/`. Node certificates live 90 days unless
//! `--days` says otherwise; a running node picks up renewed files by itself (README,
//! "Rotating certificates"). Exit codes: 0 done, 1 the files could not be written, 2
//! bad arguments.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tenure::transport::tls::{
    node_cert_file, node_dir, node_key_file, node_server_name, renew_node_cert,
    renew_operator_cert, write_ca, write_ca_bundle, write_cluster_certs_per_node_valid_for,
    write_cluster_certs_valid_for, CA_CERT_FILE, CA_DIR, CA_KEY_FILE, MAX_NODE_VALIDITY_DAYS,
    NODE_VALIDITY_DAYS, OPERATOR_CERT_FILE, OPERATOR_DIR, OPERATOR_KEY_FILE, OPERATOR_NAME,
};

/// The largest group worth making certificates for in one go (raft groups are 3..7).
const MAX_NODES: u64 = 1000;

const EXIT_CODES: &str = "\
Exit codes: 0 done; 1 the files could not be written; 2 bad arguments.";

/// Writes a cluster CA, a certificate for each of the nodes 1..=N and an operator
/// certificate for the admin tool (ctl); `renew`, `new-ca` and `bundle` rotate them.
#[derive(Debug, Parser)]
#[command(
    name = "certs",
    bin_name = "certs",
    after_help = EXIT_CODES,
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
struct Args {
    /// How many nodes: certificates for ids 1..=N
    #[arg(long, value_name = "N", required = true, value_parser = clap::value_parser!(u64).range(1..=MAX_NODES))]
    nodes: Option<u64>,

    /// Directory to write into (created if missing; existing certificate files are never
    /// overwritten)
    #[arg(long, value_name = "DIR", required = true)]
    out: Option<PathBuf>,

    /// How long the node certificates stay valid, in days
    #[arg(long, value_name = "N", default_value_t = NODE_VALIDITY_DAYS, value_parser = days())]
    days: u64,

    /// One folder per holder, so that no node holds the CA key
    ///
    ///   DIR/ca/         ca.pem ca-key.pem   (keep apart: it mints node ids)
    ///   DIR/node-<id>/  ca.pem node-<id>.pem node-<id>-key.pem
    ///   DIR/operator/   ca.pem operator.pem operator-key.pem
    ///
    /// Copy DIR/node-<id> to node <id> and start it with --certs on that folder.
    #[arg(long, verbatim_doc_comment)]
    per_node: bool,

    #[command(subcommand)]
    rotate: Option<Rotate>,
}

/// What rotates certificates while the group runs (README, "Rotating certificates").
#[derive(Debug, Subcommand)]
enum Rotate {
    /// Issues one node (or the operator) a new certificate and key from an existing CA,
    /// replacing its files (a node loads them within seconds, without a restart)
    Renew {
        /// The node to renew
        #[arg(long, value_name = "ID", required_unless_present = "operator", conflicts_with = "operator", value_parser = clap::value_parser!(u64).range(1..))]
        node: Option<u64>,
        /// Renew the operator certificate (operator.pem, operator-key.pem) instead
        #[arg(long)]
        operator: bool,
        /// The CA's folder (ca.pem, ca-key.pem), e.g. DIR/ca
        #[arg(long, value_name = "DIR")]
        ca: PathBuf,
        /// The folder to write node-<ID>.pem and node-<ID>-key.pem (or the operator's
        /// files) into (default: the CA's folder, as in the one-folder layout). Its ca.pem,
        /// if any, must trust the new certificate, or nothing is replaced
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// How long the certificate stays valid, in days
        #[arg(long, value_name = "N", default_value_t = NODE_VALIDITY_DAYS, value_parser = days())]
        days: u64,
    },
    /// Makes a new CA (ca.pem, ca-key.pem) in a new folder, to move the group to
    #[command(name = "new-ca")]
    NewCa {
        /// The folder for the new CA (created; an existing CA there is never overwritten)
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Writes the CA certificates of several files into one CA file (ca.pem) that trusts
    /// all of them, replacing it: a node's ca.pem while the group moves to a new CA
    Bundle {
        /// A CA certificate file (a ca.pem); give --ca once per CA
        #[arg(long, value_name = "FILE", required = true)]
        ca: Vec<PathBuf>,
        /// The CA file to write (replaced as a whole; e.g. DIR/node-3/ca.pem)
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

/// Parses a certificate life in days.
fn days() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(1..=MAX_NODE_VALIDITY_DAYS)
}

fn main() -> ExitCode {
    // Help goes to stdout with exit code 0; a usage error to stderr with exit code 2.
    let args = Args::parse();
    if let Some(rotate) = &args.rotate {
        return match run_rotate(rotate) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("certs: {e}");
                ExitCode::from(1)
            }
        };
    }
    // Both are required when no subcommand is given (clap checked it).
    let (Some(nodes), Some(dir)) = (args.nodes, args.out.clone()) else {
        return ExitCode::from(2);
    };
    if args.per_node {
        return write_per_node(&dir, nodes, args.days);
    }
    if let Err(e) = write_cluster_certs_valid_for(&dir, 1..=nodes, args.days) {
        eprintln!("certs: {e}");
        return ExitCode::from(1);
    }
    let days = args.days;
    println!("wrote to {}:", dir.display());
    println!("  {CA_CERT_FILE:<22} cluster CA certificate (every node)");
    println!("  {CA_KEY_FILE:<22} cluster CA private key, mode 0600 (keep it off the nodes)");
    for id in 1..=nodes {
        println!(
            "  {:<22} node {id} certificate ({}), valid {days} days",
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

fn run_rotate(rotate: &Rotate) -> Result<(), tenure::transport::tls::TlsError> {
    match rotate {
        Rotate::Renew {
            node,
            operator,
            ca,
            out,
            days,
        } => {
            let out = out.as_ref().unwrap_or(ca);
            let (cert, key) = match node {
                Some(node) if !operator => {
                    let files = renew_node_cert(ca, *node, out, *days)?;
                    let name = node_server_name(*node);
                    println!("renewed node {node} ({name}), valid {days} days:");
                    files
                }
                _ => {
                    let files = renew_operator_cert(ca, out)?;
                    println!("renewed the operator certificate ({OPERATOR_NAME}):");
                    files
                }
            };
            println!("  {}", cert.display());
            println!("  {} (mode 0600)", key.display());
            if out.join(CA_CERT_FILE).exists() {
                println!(
                    "  checked against {} as a node checks it (a node loads its files at \
                     its next look, 5 s, or on SIGHUP)",
                    out.join(CA_CERT_FILE).display()
                );
            }
        }
        Rotate::NewCa { out } => {
            write_ca(out)?;
            println!("wrote a new CA to {}:", out.display());
            println!("  {CA_CERT_FILE:<12} the new CA certificate");
            println!("  {CA_KEY_FILE:<12} its private key, mode 0600 (keep it off the nodes)");
            println!(
                "next: bundle it with the CA in use into every node's and the operator's ca.pem"
            );
        }
        Rotate::Bundle { ca, out } => {
            let n = write_ca_bundle(ca, out)?;
            println!("wrote {} trusting {n} CAs", out.display());
        }
    }
    Ok(())
}

fn write_per_node(dir: &std::path::Path, nodes: u64, days: u64) -> ExitCode {
    if let Err(e) = write_cluster_certs_per_node_valid_for(dir, 1..=nodes, days) {
        eprintln!("certs: {e}");
        return ExitCode::from(1);
    }
    println!("wrote to {}, one folder per holder:", dir.display());
    println!(
        "  {:<12} {CA_CERT_FILE}, {CA_KEY_FILE} (mode 0600): the cluster CA; keep this folder \
         off the nodes (it mints node ids)",
        format!("{CA_DIR}/")
    );
    for id in 1..=nodes {
        println!(
            "  {:<12} {CA_CERT_FILE}, {}, {} (mode 0600): node {id} ({}) only, valid {days} days",
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
