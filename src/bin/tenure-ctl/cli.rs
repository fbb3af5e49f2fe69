//! The operator tool: drives a running group through its nodes' admin endpoints, with the
//! operator certificate. Installed as `tenure-ctl` (`cargo install --path . --bin
//! tenure-ctl`); from a checkout, `cargo run --bin tenure-ctl --`.
//!
//! ```text
//! tenure-ctl --certs DIR --addr 127.0.0.1:7101,127.0.0.1:7102 status
//! tenure-ctl --certs DIR --addr ... transfer --to 2
//! tenure-ctl --certs DIR --addr ... members add 4 127.0.0.1:7004
//! tenure-ctl --certs DIR --addr ... elections create shard-0 --affinity 2,1 --priority 10
//! tenure-ctl --certs DIR --addr ... elections list
//! tenure-ctl --certs DIR --addr ... elections transfer shard-0 --to 3
//! tenure-ctl completions bash > ~/.local/share/bash-completion/completions/tenure-ctl
//! ```
//!
//! `--addr` takes the nodes' *admin* addresses (a worker's `--admin`, reported as `admin`
//! in its `started` event), not their raft addresses. Leader-only commands go to the
//! node that reports itself leader; give every node's address so it can be found. The
//! tool asks every node at once and acts as soon as the leader answers, so a stopped
//! node delays nothing; with no leader (an election under way) it asks again until one
//! is elected or `--timeout` has passed.
//!
//! Named elections (`elections ...`): `create` and `remove` change the catalog, which the
//! group's leader keeps, so they go where the membership commands go; `transfer NAME`
//! goes to the node that leads election NAME, found from every node's `leaderships`;
//! `list` reads the catalog of the most current node and each election's leader and
//! term from every node that answers. `status` adds, per node, how many named elections
//! it runs and leads (with their names when few, or with `status --names`).
//!
//! The program names itself [`NAME`] in its usage lines, its messages' prefix and the
//! completion scripts it prints (which complete that command name).
//!
//! Exit codes: 0 done; 1 the group refused or could not be reached (the message says
//! why); 2 bad arguments (clap's usage errors).

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use serde_json::{json, Value};
use tenure::admin::{Client, ClientError, Credentials, ErrorKind, Reply, Request, CONNECT_TIMEOUT};
use tenure::transport::tls::OperatorIdentity;
use tenure::{NodeId, PeerAddr, Role, Status};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

mod output;
mod parse;
mod plan;
use output::{
    explain, print_done, print_history, print_leaderships, print_members, print_status, write_whole,
};
use parse::{parse_addrs, parse_id, parse_peer_addr, parse_secs, Addrs};

mod connect;
use connect::{connect_all, connect_most};
mod elections;

const EXIT_CODES: &str = "\
Exit codes: 0 done; 1 the group refused or could not be reached (the message says why);
2 bad arguments.";

/// Drives a running tenure group through its nodes' admin endpoints, with the operator
/// certificate.
// (Its name, usage lines included, is set when it runs: see `command`.)
#[derive(Debug, Parser)]
#[command(
    after_help = EXIT_CODES,
    // As before clap: a flag given twice takes its last value (`--addr` adds up).
    args_override_self = true
)]
struct Cli {
    /// Folder with ca.pem, operator.pem and operator-key.pem
    ///
    /// `cargo run --example certs` writes them beside the node certificates (with
    /// --per-node, in DIR/operator).
    #[arg(long, value_name = "DIR", global = true)]
    certs: Option<PathBuf>,

    /// Admin addresses of the nodes, comma-separated
    ///
    /// The workers' --admin addresses (reported as `admin` in their `started` event),
    /// not their raft addresses; --addr may also be repeated. Leader-only commands go to
    /// the node that reports itself leader: give every node's address so it is found.
    #[arg(long = "addr", value_name = "ADDR[,ADDR...]", global = true, value_parser = parse_addrs)]
    addrs: Vec<Addrs>,

    /// Print JSON (one object) instead of text
    #[arg(long, global = true)]
    json: bool,

    /// How long one command may take, in seconds
    #[arg(long, value_name = "SECS", global = true, default_value = "30", value_parser = parse_secs)]
    timeout: Duration,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Role, term, leader, members, quorum health, lease of each node
    Status {
        /// List the names of the named elections each node leads (by default only when
        /// a node leads few)
        #[arg(long)]
        names: bool,
    },
    /// The replicated leadership history
    History,
    /// Hand leadership over (to ID, or the most up-to-date follower)
    Transfer {
        /// The node to hand over to
        #[arg(long, value_name = "ID", value_parser = parse_id)]
        to: Option<NodeId>,
    },
    /// Keep node ID from leading (if it leads, it hands over at once)
    Drain {
        #[arg(value_name = "ID", value_parser = parse_id)]
        id: NodeId,
    },
    /// Let drained node ID lead again
    Undrain {
        #[arg(value_name = "ID", value_parser = parse_id)]
        id: NodeId,
    },
    /// Change the membership: add, promote, remove, replace
    #[command(subcommand)]
    Members(Members),
    /// Named elections: list, create, remove, transfer
    #[command(subcommand)]
    Elections(Elections),
    /// Write a backup of the group's replicated state (membership, drains, history,
    /// election catalog, highest terms) to FILE, taken from the leader if one answers:
    /// after every member lost its data, `restore-plan` makes it into the plan a worker's
    /// `--restore PLAN` founds the group again from, with tokens above every old one
    Backup {
        /// The file to write (JSON; replaced whole, never left half written)
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Make the restore plan of backup FILE (a new group id, floors above its terms by a
    /// margin that grows with the time since the backup) and write it to PLAN: what every
    /// first member's `--restore PLAN` founds (needs no --certs or --addr; asks no node)
    RestorePlan {
        /// The backup (`backup --out FILE`)
        #[arg(long, value_name = "FILE")]
        backup: PathBuf,
        /// The plan to write (JSON; replaced whole, never left half written)
        #[arg(long, value_name = "PLAN")]
        out: PathBuf,
    },
    /// Print a completion script for SHELL on stdout (needs no --certs or --addr)
    Completions {
        /// The shell to complete in
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
enum Members {
    /// Add node ID, raft address ADDR, as a learner
    Add {
        #[arg(value_name = "ID", value_parser = parse_id)]
        id: NodeId,
        /// The new node's raft address (not its admin address): IP:PORT (an IPv6
        /// address in brackets) or NAME:PORT (a DNS name, which every member resolves
        /// again on each reconnect)
        #[arg(value_name = "ADDR", value_parser = parse_peer_addr)]
        addr: PeerAddr,
    },
    /// Make learner ID a voter (once it has caught up)
    Promote {
        #[arg(value_name = "ID", value_parser = parse_id)]
        id: NodeId,
    },
    /// Remove node ID from the group
    Remove {
        #[arg(value_name = "ID", value_parser = parse_id)]
        id: NodeId,
    },
    /// Replace voter OLD by learner NEW in one joint change
    Replace {
        #[arg(value_name = "OLD", value_parser = parse_id)]
        old: NodeId,
        #[arg(value_name = "NEW", value_parser = parse_id)]
        new: NodeId,
    },
}

#[derive(Debug, Subcommand)]
enum Elections {
    /// The catalog: each election's id, leader, term and options
    List,
    /// Create election NAME (the group's leader keeps the catalog)
    Create {
        /// 1 to 128 characters of A-Z, a-z, 0-9, '.', '_' and '-'
        #[arg(value_name = "NAME")]
        name: String,
        /// Preferred leaders, in order, comma-separated
        #[arg(long, value_name = "ID[,ID...]", value_delimiter = ',', value_parser = parse_id)]
        affinity: Vec<NodeId>,
        /// Which elections move first when the balancer moves some (0-255, lower first;
        /// default 128)
        #[arg(long, value_name = "P")]
        priority: Option<u8>,
    },
    /// Remove election NAME: its leader's lease is revoked, its tokens retired
    Remove {
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Suspend election NAME: no lease of it is held anywhere until it is resumed
    Suspend {
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Resume election NAME: its next lease is in a new term
    Resume {
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Hand election NAME's leadership over (to ID, or the most up-to-date follower)
    Transfer {
        #[arg(value_name = "NAME")]
        name: String,
        /// The node to hand over to
        #[arg(long, value_name = "ID", value_parser = parse_id)]
        to: Option<NodeId>,
    },
}

/// What a group command needs, once the arguments are checked.
struct Args {
    certs: PathBuf,
    addrs: Vec<SocketAddr>,
    json: bool,
    timeout: Duration,
    request: Request,
    /// `status --names`: list the names of the elections each node leads.
    names: bool,
    /// `backup --out FILE`.
    backup_out: Option<PathBuf>,
}

/// A command that asks no node.
enum Offline {
    Completions(clap_complete::Shell),
    RestorePlan { backup: PathBuf, out: PathBuf },
}

/// The request a command sends, or the command that asks no node.
fn request_of(command: Command) -> Result<Request, Offline> {
    Ok(match command {
        Command::Status { .. } => Request::Status,
        Command::History => Request::History,
        Command::Transfer { to } => Request::Transfer { to },
        Command::Drain { id } => Request::Drain { id },
        Command::Undrain { id } => Request::Undrain { id },
        Command::Members(Members::Add { id, addr }) => Request::AddLearner { id, addr },
        Command::Members(Members::Promote { id }) => Request::Promote { id },
        Command::Members(Members::Remove { id }) => Request::Remove { id },
        Command::Members(Members::Replace { old, new }) => Request::Replace { old, new },
        Command::Elections(Elections::List) => Request::Elections,
        Command::Elections(Elections::Create {
            name,
            affinity,
            priority,
        }) => Request::CreateElection {
            name,
            affinity,
            priority,
        },
        Command::Elections(Elections::Remove { name }) => Request::RemoveElection { name },
        Command::Elections(Elections::Suspend { name }) => Request::SuspendElection { name },
        Command::Elections(Elections::Resume { name }) => Request::ResumeElection { name },
        Command::Elections(Elections::Transfer { name, to }) => {
            Request::TransferElection { name, to }
        }
        Command::Backup { .. } => Request::Backup,
        Command::Completions { shell } => return Err(Offline::Completions(shell)),
        Command::RestorePlan { backup, out } => return Err(Offline::RestorePlan { backup, out }),
    })
}

/// The program's name, in its usage lines, help, errors and completion scripts.
pub(crate) const NAME: &str = "tenure-ctl";

/// The command line, its usage lines written out.
fn command() -> clap::Command {
    let name = NAME;
    Cli::command()
        .name(name)
        .bin_name(name)
        .override_usage(format!(
            "{name} --certs DIR --addr ADDR[,ADDR...] [--json] [--timeout SECS] <COMMAND>\n       \
         {name} restore-plan --backup FILE --out PLAN\n       \
         {name} completions <SHELL>"
        ))
}

/// Runs the tool with the process's arguments; the exit code.
pub(crate) fn main() -> ExitCode {
    // Help goes to stdout with exit code 0; a usage error to stderr with exit code 2.
    let mut cmd = command();
    let cli = match Cli::from_arg_matches(&cmd.clone().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.format(&mut cmd).exit(),
    };
    let usage_error = |message: &str| -> ! {
        command()
            .error(clap::error::ErrorKind::MissingRequiredArgument, message)
            .exit()
    };
    let names = matches!(cli.command, Command::Status { names: true });
    let backup_out = match &cli.command {
        Command::Backup { out } => Some(out.clone()),
        _ => None,
    };
    let request = match request_of(cli.command) {
        Ok(request) => request,
        Err(Offline::Completions(shell)) => return print_completions(shell),
        Err(Offline::RestorePlan { backup, out }) => {
            return plan::restore_plan(cli.json, &backup, &out)
        }
    };
    let Some(certs) = cli.certs else {
        usage_error("--certs DIR is required: the folder with the operator certificate")
    };
    let addrs: Vec<SocketAddr> = cli.addrs.into_iter().flat_map(|a| a.0).collect();
    if addrs.is_empty() {
        usage_error("--addr is required: the nodes' admin addresses, comma-separated")
    }
    let args = Args {
        certs,
        addrs,
        json: cli.json,
        timeout: cli.timeout,
        request,
        names,
        backup_out,
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{NAME}: cannot start the tokio runtime: {e}");
            return ExitCode::from(1);
        }
    };
    rt.block_on(run(args))
}

/// Prints the completion script of [`NAME`] for `shell` (a closed pipe, as with `| head`,
/// is no error).
fn print_completions(shell: clap_complete::Shell) -> ExitCode {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command(), NAME, &mut script);
    match std::io::stdout().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("{NAME}: cannot write the completion script: {e}");
            ExitCode::from(1)
        }
        _ => ExitCode::SUCCESS,
    }
}

/// What went wrong, for the exit message (and `--json`).
struct Failure {
    message: String,
    json: Value,
}

impl Failure {
    fn new(message: impl Into<String>) -> Self {
        let message = message.into();
        Failure {
            json: json!({"error": {"kind": "ctl", "message": message}}),
            message,
        }
    }

    fn client(e: &ClientError) -> Self {
        let mut f = Failure::new(e.to_string());
        if let Some(reply) = e.reply() {
            f.json = json!({"error": reply});
        } else {
            f.json = json!({"error": {"kind": "unreachable", "message": e.to_string()}});
        }
        f
    }
}

async fn run(args: Args) -> ExitCode {
    let result = match OperatorIdentity::from_dir(&args.certs) {
        Err(e) => Err(Failure::new(format!(
            "cannot load the operator certificate: {e}"
        ))),
        Ok(identity) => {
            for w in identity.warnings() {
                eprintln!("{NAME}: warning: {w}");
            }
            execute(&args, &identity).await
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if args.json {
                println!("{}", f.json);
            }
            eprintln!("{NAME}: {}", f.message);
            ExitCode::from(1)
        }
    }
}

/// Runs futures concurrently (on this task) and collects their outputs in order.
async fn join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outs: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, out) in futs.iter_mut().zip(outs.iter_mut()) {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outs.into_iter().flatten().collect()
}

async fn execute(args: &Args, identity: &OperatorIdentity) -> Result<(), Failure> {
    match &args.request {
        Request::Status => status_all(args, &connect_all(args, identity).await).await,
        Request::History => {
            let found = ask_all(args, identity, Ask::Once).await;
            let client = found.most_current()?;
            let records = client.history().await.map_err(|e| Failure::client(&e))?;
            if args.json {
                println!("{}", json!({"node": client.node_id(), "history": records}));
            } else {
                print_history(client.node_id(), &records);
            }
            Ok(())
        }
        Request::Backup => {
            let found = ask_all(args, identity, Ask::Once).await;
            let client = found.most_current()?;
            let backup = client.backup().await.map_err(|e| Failure::client(&e))?;
            let out = args
                .backup_out
                .as_deref()
                .unwrap_or(Path::new("backup.json"));
            write_whole(out, backup.to_json().as_bytes())
                .map_err(|e| Failure::new(format!("cannot write {}: {e}", out.display())))?;
            if args.json {
                println!(
                    "{}",
                    json!({"node": client.node_id(), "file": out.display().to_string(),
                           "group": backup.group.to_string(), "term": backup.term,
                           "from_leader": backup.taken_from_leader,
                           "elections": backup.elections.len()})
                );
            } else {
                println!(
                    "backup of group {} from node {}{}: root term {}, {} voters, {} named \
                     elections, written to {}",
                    backup.group,
                    backup.taken_by,
                    if backup.taken_from_leader {
                        " (the leader)"
                    } else {
                        " (not the leader)"
                    },
                    backup.term,
                    backup.members.voters.len(),
                    backup.elections.len(),
                    out.display()
                );
            }
            Ok(())
        }
        Request::Elections => elections::list(args, &connect_all(args, identity).await).await,
        Request::TransferElection { name, .. } => {
            elections::transfer(args, identity, name, &args.request).await
        }
        request => leader_command(args, identity, request).await,
    }
}

/// What one node's asker reports, as it arrives.
enum Report {
    /// The node at `args.addrs[i]` answered `status` (again, when asked to keep asking).
    Status(usize, Arc<Client>, Status),
    /// It could not be reached, or stopped answering: final for that address. The client
    /// is there when the connection was made and the status failed.
    Failed(usize, Option<Arc<Client>>, ClientError),
}

/// How long [`ask_all`] goes on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// Until a node says it leads, or every node answered once or failed.
    Once,
    /// Until a node says it leads (asking the others again every [`ASK_AGAIN`]: an
    /// election may be under way), or the picture is complete and says no leader will be
    /// found, or the timeout.
    UntilLeader,
}

/// How often [`Ask::UntilLeader`] asks a node that does not lead for its status again.
const ASK_AGAIN: Duration = Duration::from_millis(100);

/// What the nodes said, by address index (the order of `--addr`).
struct Found {
    given: usize,
    answers: BTreeMap<usize, (Arc<Client>, Status)>,
    failed: BTreeMap<usize, (Option<Arc<Client>>, ClientError)>,
}

impl Found {
    /// Every address answered or failed.
    fn settled(&self) -> bool {
        self.answers.len() + self.failed.len() == self.given
    }

    /// The node that says it leads (the highest term, should two say so).
    fn leader(&self) -> Option<&Arc<Client>> {
        self.answers
            .values()
            .filter(|(_, s)| s.role == Role::Leader)
            .max_by_key(|(_, s)| s.term)
            .map(|(c, _)| c)
    }

    /// The leader the answering nodes name (the first in `--addr` order that names one).
    fn hint(&self) -> Option<NodeId> {
        self.answers.values().find_map(|(_, s)| s.leader)
    }

    /// The client connected to node `id`, if its address was given and it answered.
    fn client_of(&self, id: NodeId) -> Option<&Arc<Client>> {
        self.answers
            .values()
            .map(|(c, _)| c)
            .find(|c| c.node_id() == id)
    }

    /// The first connection made, in `--addr` order, whether or not it answered.
    fn first_connected(&self) -> Option<&Arc<Client>> {
        let answered = self.answers.iter().map(|(i, (c, _))| (*i, c));
        let failed = self
            .failed
            .iter()
            .filter_map(|(i, (c, _))| c.as_ref().map(|c| (*i, c)));
        answered
            .chain(failed)
            .min_by_key(|(i, _)| *i)
            .map(|(_, c)| c)
    }

    /// Why each address that failed did.
    fn errors(&self) -> String {
        let errors: Vec<String> = self.failed.values().map(|(_, e)| e.to_string()).collect();
        errors.join("; ")
    }

    /// The node whose history is most current: the leader, else the member that has
    /// applied the most (a removed node's history stops at its removal), else any node
    /// connected to.
    fn most_current(&self) -> Result<&Arc<Client>, Failure> {
        self.answers
            .values()
            .filter(|(_, s)| !matches!(s.role, Role::Removed | Role::Joining | Role::Founding))
            .max_by_key(|(_, s)| (s.role == Role::Leader, s.applied))
            .map(|(c, _)| c)
            .or_else(|| self.first_connected())
            .ok_or_else(|| self.unreachable())
    }

    fn unreachable(&self) -> Failure {
        Failure::new(format!("no node could be reached: {}", self.errors()))
    }
}

/// Connects to node `i` and asks for its status, once or until told to stop, reporting
/// each answer on `tx`.
async fn ask_one(
    i: usize,
    addr: SocketAddr,
    credentials: Credentials,
    timeout: Duration,
    ask: Ask,
    tx: mpsc::UnboundedSender<Report>,
) {
    let wait = timeout.min(CONNECT_TIMEOUT);
    let client = match tokio::time::timeout(wait, Client::connect(addr, credentials, None)).await {
        Ok(Ok(mut c)) => {
            c.set_timeout(timeout);
            Arc::new(c)
        }
        Ok(Err(e)) => return drop(tx.send(Report::Failed(i, None, e))),
        Err(_) => {
            let e = ClientError::TimedOut {
                addr,
                what: "no TLS handshake; is a node's admin endpoint listening there?".into(),
                timeout: wait,
            };
            return drop(tx.send(Report::Failed(i, None, e)));
        }
    };
    loop {
        match client.status().await {
            Ok(s) => {
                if tx.send(Report::Status(i, client.clone(), s)).is_err() {
                    return;
                }
            }
            Err(e) => return drop(tx.send(Report::Failed(i, Some(client), e))),
        }
        if ask == Ask::Once {
            return;
        }
        tokio::time::sleep(ASK_AGAIN).await;
    }
}

/// Asks every node for its status at once and returns as soon as one says it leads (see
/// [`Ask`] for when else). A stopped node delays nothing: its asker is dropped unheard.
async fn ask_all(args: &Args, identity: &OperatorIdentity, ask: Ask) -> Found {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut askers = JoinSet::new();
    for (i, addr) in args.addrs.iter().enumerate() {
        let credentials = Credentials::from(identity);
        askers.spawn(ask_one(
            i,
            *addr,
            credentials,
            args.timeout,
            ask,
            tx.clone(),
        ));
    }
    drop(tx);
    let mut found = Found {
        given: args.addrs.len(),
        answers: BTreeMap::new(),
        failed: BTreeMap::new(),
    };
    let deadline = tokio::time::Instant::now() + args.timeout;
    loop {
        if found.leader().is_some() || (found.settled() && found.complete(ask)) {
            break;
        }
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Report::Status(i, c, s))) => {
                found.answers.insert(i, (c, s));
            }
            Ok(Some(Report::Failed(i, c, e))) => {
                found.answers.remove(&i);
                found.failed.insert(i, (c, e));
            }
            // Every asker is done (none keeps asking), or the time is up.
            Ok(None) | Err(_) => break,
        }
    }
    // Dropping the join set stops the askers still waiting.
    drop(askers);
    found
}

impl Found {
    /// Whether, every address having answered or failed, asking on is pointless.
    fn complete(&self, ask: Ask) -> bool {
        match ask {
            Ask::Once => true,
            // Every node answered and none leads: settled for now, unless they name a
            // leader among them (which will say so when asked again). A node that did
            // not answer may be the stopped leader whose followers elect another.
            Ask::UntilLeader => {
                self.failed.is_empty() && self.hint().is_none_or(|l| self.client_of(l).is_none())
            }
        }
    }
}

/// Sends a leader-only command to the leader among the nodes (the only one, if there is
/// only one), following a NotLeader hint once.
async fn leader_command(
    args: &Args,
    identity: &OperatorIdentity,
    request: &Request,
) -> Result<(), Failure> {
    if args.addrs.len() == 1 {
        // One address: send it the command as it is; a follower's refusal names the
        // leader, and `explain` says to give its address.
        let (_, client) = connect_all(args, identity)
            .await
            .pop()
            .expect("one address given");
        let client = client.map_err(|e| Failure::new(format!("no node could be reached: {e}")))?;
        let result = client.request(request).await;
        return report(args, &client, request, result);
    }
    let found = ask_all(args, identity, Ask::UntilLeader).await;
    let mut target: &Client = match found.leader() {
        Some(c) => c,
        None if found.answers.is_empty() => match found.first_connected() {
            // Connected, but no status came back: the command's own answer says why.
            Some(c) => c,
            None => return Err(found.unreachable()),
        },
        None => return Err(found.no_leader(args)),
    };
    let mut result = target.request(request).await;
    // Leadership may have moved between the status and the command: follow the hint
    // once, when that node's address was given.
    if let Err(ClientError::Node { reply, .. }) = &result {
        if reply.kind == ErrorKind::NotLeader {
            if let Some(next) = reply.leader_hint.and_then(|l| found.client_of(l)) {
                target = next;
                result = target.request(request).await;
            }
        }
    }
    report(args, target, request, result)
}

/// Prints what `target` answered to `request`, or makes the failure of it.
fn report(
    args: &Args,
    target: &Client,
    request: &Request,
    result: Result<Reply, ClientError>,
) -> Result<(), Failure> {
    match result {
        Ok(reply) => {
            if args.json {
                println!("{}", json!({"node": target.node_id(), "ok": reply}));
            } else {
                print_done(target.node_id(), request, &reply);
            }
            Ok(())
        }
        Err(e) => {
            let mut f = Failure::client(&e);
            if let ClientError::Node { reply, .. } = &e {
                f.message = explain(target.node_id(), request, reply, args.addrs.len());
            }
            Err(f)
        }
    }
}

impl Found {
    /// Why no leader was found: the picture was complete and says none leads (or the
    /// one named was not given), or the time ran out.
    fn no_leader(&self, args: &Args) -> Failure {
        let n = self.given;
        let hint = self.hint();
        if self.settled() && self.complete(Ask::UntilLeader) {
            return Failure::new(match hint {
                Some(l) => format!(
                    "no node among {n} reports itself leader; they name node {l}, whose admin address was not given"
                ),
                None => format!(
                    "no node among {n} leads right now (no quorum, or an election is under way); retry, or check `status`"
                ),
            });
        }
        let mut s = format!(
            "no node among {n} reported itself leader within {} s",
            args.timeout.as_secs()
        );
        if let Some(l) = hint {
            s.push_str(&format!("; they name node {l}"));
        }
        if !self.failed.is_empty() {
            s.push_str(&format!("; {}", self.errors()));
        }
        let silent: Vec<String> = (0..n)
            .filter(|i| !self.answers.contains_key(i) && !self.failed.contains_key(i))
            .map(|i| args.addrs[i].to_string())
            .collect();
        if !silent.is_empty() {
            s.push_str(&format!("; no answer yet from {}", silent.join(", ")));
        }
        s.push_str("; retry, or check `status`");
        Failure::new(s)
    }
}

async fn status_all(
    args: &Args,
    clients: &[(SocketAddr, Result<Client, ClientError>)],
) -> Result<(), Failure> {
    let answers = join_all(clients.iter().map(|(addr, c)| async move {
        let r = match c {
            // A node of an older version does not know `leaderships`: leave it out.
            Ok(c) => match tokio::join!(c.status(), c.leaderships()) {
                (Ok(s), l) => Ok((s, l.ok())),
                (Err(e), _) => Err(e.to_string()),
            },
            Err(e) => Err(e.to_string()),
        };
        (*addr, r)
    }))
    .await;
    let answered = answers.iter().filter(|(_, r)| r.is_ok()).count();
    if args.json {
        let nodes: Vec<Value> = answers
            .iter()
            .map(|(addr, r)| match r {
                Ok((s, None)) => json!({"addr": addr, "status": s}),
                Ok((s, Some(l))) => json!({"addr": addr, "status": s, "leaderships": l}),
                Err(e) => json!({"addr": addr, "error": e}),
            })
            .collect();
        println!("{}", json!({ "nodes": nodes }));
    } else {
        for (addr, r) in &answers {
            match r {
                Ok((s, l)) => {
                    print_status(*addr, s);
                    if let Some(l) = l {
                        print_leaderships(l, args.names);
                    }
                }
                Err(e) => println!("no answer from {addr}: {e}"),
            }
        }
        let statuses: Vec<&Status> = answers
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok().map(|(s, _)| s))
            .collect();
        if let Some(s) = statuses
            .iter()
            .filter(|s| s.role == Role::Leader)
            .max_by_key(|s| s.term)
            .or(statuses.first())
        {
            print_members(s.id, &s.members);
        }
    }
    if answered == 0 {
        return Err(Failure::new(format!(
            "none of the {} nodes answered (see above)",
            answers.len()
        )));
    }
    Ok(())
}
