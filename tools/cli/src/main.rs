//! `fairshare`: the operator and manager CLI.
//!
//! It talks to the system only through NATS, like every other participant: it appends policy
//! and inventory events, sends submit and cancel requests, and reads the event log.

mod commands;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fairshare_runtime::nats::Identity;

/// Operate a fairshare installation.
///
/// Commands that read or write the log connect to NATS (`--nats-url`, or FAIRSHARE_NATS_URL);
/// `auth init`, `simulate`, `budget check`, `inventory check` and `streams
/// --write-definitions` do not.
#[derive(Debug, Parser)]
#[command(name = "fairshare", version, about, long_about)]
struct Cli {
    /// NATS server to connect to.
    #[arg(
        long,
        global = true,
        env = "FAIRSHARE_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    nats_url: String,
    /// NATS credentials file (JWT; none: connect without authentication).
    #[arg(
        long,
        global = true,
        env = "FAIRSHARE_NATS_CREDS",
        conflicts_with = "nats_nkey"
    )]
    nats_creds: Option<PathBuf>,
    /// Nkey seed file, for a server configured by `fairshare auth init` (the operator's is
    /// `<dir>/operator.nk`).
    #[arg(long, global = true, env = "FAIRSHARE_NATS_NKEY")]
    nats_nkey: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Budget trees: validate a file, compare it with the tree in force, apply it.
    #[command(subcommand)]
    Budget(commands::policy::BudgetCommand),
    /// Cluster inventory: validate a file and register its nodes.
    #[command(subcommand)]
    Inventory(commands::policy::InventoryCommand),
    /// Nodes: list them, cordon and uncordon, remove drained ones, schedule maintenance.
    #[command(subcommand)]
    Node(commands::nodes::NodeCommand),
    /// Submit a job (request/reply, or durable intake with --intake). Exit status 0: accepted
    /// (or queued in intake); 1: rejected, an invalid value, no connection, or no submission
    /// service listening (nothing submitted); 2: usage error; 3: the outcome is not known (no
    /// answer in time, a reply that does not decode, or the log did not confirm the write):
    /// retry with the `--key` printed, which never makes a second job.
    Submit(commands::submit::SubmitArgs),
    /// Cancel a job.
    Cancel(commands::submit::CancelArgs),
    /// Why a job waits (or where it runs).
    Explain(commands::explain::ExplainArgs),
    /// A cluster's live jobs: waiting ones in the order the next decision cycle meets them,
    /// with why each waits, then preempted ones waiting for their requeue, then placed and
    /// running ones.
    Queue(commands::queue::QueueArgs),
    /// Per allocation: share, window usage against allocated time and its ratio, the share of
    /// owed GPU time delivered, GPUs its allocated jobs run and wait for.
    Status(commands::status::StatusArgs),
    /// Print events from the log, decoded, as they arrive.
    Tail(commands::tail::TailArgs),
    /// Which instance decides for each cluster: the decision and preemption services' leases
    /// (a second instance stands by until the holder's lease is let go or runs out).
    Leases(commands::leases::LeasesArgs),
    /// Re-derive every placement, preemption order and usage snapshot in a cluster's log from
    /// the log prefix each names; print what differs (exit status 1 if anything does, 2 if
    /// nothing could be audited: no events of the cluster, the log unreadable, a bad flag).
    ///
    /// Give the preemption flags the service ran with (--grace, --checkpoint-interval,
    /// --hysteresis-per-mille, --max-min-runtime, --packing, or their FAIRSHARE_* variables),
    /// or its orders will not re-derive.
    Audit(commands::audit::AuditArgs),
    /// Run the trace-driven simulator (`fairshare-sim`) with these arguments: `simulate
    /// trace --trace FILE --nodes N`, `simulate scenario --list`, `simulate --help` (these need
    /// no NATS; `simulate load FILE` writes a simulated log into a fresh server).
    #[command(disable_help_flag = true)]
    Simulate(commands::simulate::SimulateArgs),
    /// Per-service NATS identities: one nkey per role and the server's permissions.
    #[command(subcommand)]
    Auth(AuthCommand),
    /// Create or update the JetStream streams (services do this at start too), and print
    /// where the event log ends.
    Streams {
        /// Replicas of streams it creates: 1 on one server, 3 on a 3-node cluster (an existing
        /// stream keeps its replicas).
        #[arg(
            long,
            alias = "stream-replicas",
            env = "FAIRSHARE_STREAM_REPLICAS",
            default_value_t = 1
        )]
        replicas: usize,
        /// Do not connect: write each stream's and the intake consumer's definition as JSON
        /// into this directory, for `nats stream add --config` and `nats consumer add
        /// --config` (deploy/nats/jetstream/ holds a copy).
        #[arg(long, value_name = "DIR")]
        write_definitions: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum AuthCommand {
    /// Write an nkey seed file per role (submission, accounting, decision, preemption,
    /// launcher, operator; seeds already there are kept) and `auth.conf`, the
    /// `authorization` block to append to the nats-server config. Each process then connects
    /// with `--nats-nkey <dir>/<role>.nk`; a launcher cannot publish decisions or budgets.
    Init {
        /// Directory for the seeds and `auth.conf`.
        #[arg(long, default_value = ".run/auth")]
        dir: PathBuf,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let ran = run(cli).await.map(|status| {
        // Output held until every change was written, and then not writable: the command did
        // its work, and ends as a closed pipe (or a full disk) ends it.
        match fairshare_runtime::output::held_output_failed() {
            Some(failed) => ExitCode::from(u8::try_from(failed).unwrap_or(1)),
            None => status,
        }
    });
    ran.unwrap_or_else(|e| {
        // Refusals (a rejected submission, an invalid file) are answers, not crashes: print
        // the chain of causes without a backtrace.
        eprintln!("error: {}", causes(&e));
        if e.is::<commands::submit::RetryWithKey>()
            || e.is::<commands::submit::CancelUnconfirmed>()
            || commands::not_changed::outcome_unknown(&e)
        {
            ExitCode::from(commands::submit::RetryWithKey::EXIT_CODE)
        } else if e.is::<commands::audit::NotAudited>() {
            ExitCode::from(commands::audit::NotAudited::EXIT_CODE)
        } else {
            ExitCode::FAILURE
        }
    })
}

/// `e` and its causes, joined by ": ", leaving out a cause whose words the message before it
/// already holds (many errors quote their source in their own message, and `{:#}` would then
/// print it twice).
fn causes(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let words = cause.to_string();
        if text.contains(&words) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&words);
    }
    text
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let identity = Identity::from_files(cli.nats_creds.as_deref(), cli.nats_nkey.as_deref());
    let connect = || commands::Connection::new(&cli.nats_url, identity);
    let done = match cli.command {
        Command::Budget(cmd) => commands::policy::budget(cmd, connect).await,
        Command::Inventory(cmd) => commands::policy::inventory(cmd, connect).await,
        Command::Submit(args) => commands::submit::submit(args, &connect().await?).await,
        Command::Cancel(args) => commands::submit::cancel(args, &connect().await?).await,
        Command::Explain(args) => commands::explain::explain(args, &connect().await?).await,
        Command::Queue(args) => commands::queue::queue(args, &connect().await?).await,
        Command::Status(args) => commands::status::status(args, &connect().await?).await,
        Command::Tail(args) => commands::tail::tail(args, &connect().await?).await,
        Command::Leases(args) => commands::leases::leases(args, &connect().await?).await,
        Command::Node(cmd) => commands::nodes::node(cmd, &connect().await?).await,
        Command::Audit(args) => match connect().await {
            Ok(connection) => commands::audit::audit(args, &connection).await,
            Err(e) => Err(e.context(commands::audit::NotAudited)),
        },
        // The simulator's own exit status is this command's.
        Command::Simulate(args) => {
            let mut connection = vec![("FAIRSHARE_NATS_URL", cli.nats_url.clone().into())];
            if let Some(creds) = &cli.nats_creds {
                connection.push(("FAIRSHARE_NATS_CREDS", creds.clone().into()));
            }
            if let Some(nkey) = &cli.nats_nkey {
                connection.push(("FAIRSHARE_NATS_NKEY", nkey.clone().into()));
            }
            return commands::simulate::simulate(args, &connection).map(ExitCode::from);
        }
        Command::Auth(AuthCommand::Init { dir }) => {
            fairshare_runtime::auth::init(&dir)?;
            fairshare_runtime::outln!(
                "wrote a seed per role and {}",
                fairshare_runtime::auth::server_block_path(&dir).display()
            );
            Ok(())
        }
        Command::Streams {
            replicas,
            write_definitions: Some(dir),
        } => commands::definitions::write(&dir, replicas),
        Command::Streams {
            replicas,
            write_definitions: None,
        } => {
            let conn = connect().await?;
            fairshare_runtime::nats::ensure_streams(&conn.js, replicas).await?;
            let mut events = conn
                .js
                .get_stream(fairshare_events::streams::EVENTS_STREAM)
                .await?;
            let last = events.info().await?.state.last_sequence;
            fairshare_runtime::outln!("streams ready; the event log ends at sequence {last}");
            Ok(())
        }
    };
    done.map(|()| ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::causes;

    /// An error that quotes its source in its own message, as many do.
    #[derive(Debug)]
    struct Quoting(std::io::Error);

    impl std::fmt::Display for Quoting {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "invalid budget tree: {}", self.0)
        }
    }

    impl std::error::Error for Quoting {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn negative_numbers_and_times_reach_the_checks_as_values() {
        use clap::Parser;
        // A negative priority is a priority; negative GPUs get the service's own refusal,
        // not "unexpected argument '-1'".
        let submit = super::Cli::try_parse_from([
            "fairshare",
            "submit",
            "--cluster",
            "c",
            "--allocation",
            "a",
            "--gpus",
            "-1",
            "--nodes",
            "-2",
            "--min-runtime",
            "0",
            "--priority",
            "-3",
        ]);
        assert!(submit.is_ok(), "{:?}", submit.err());
        let window = super::Cli::try_parse_from([
            "fairshare",
            "node",
            "maintenance",
            "--cluster",
            "c",
            "n1",
            "--start",
            "-1h",
            "--end",
            "+1h",
        ]);
        assert!(window.is_ok(), "{:?}", window.err());
        // A negative duration or limit is refused for what it is, not as an unknown option.
        let refusal = |args: &[&str]| {
            let mut all = vec!["fairshare"];
            all.extend_from_slice(args);
            super::Cli::try_parse_from(all)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let base = ["submit", "--cluster", "c", "--allocation", "a"];
        for (flag, value) in [("--min-runtime", "-5"), ("--time-limit", "-1h")] {
            let mut args = base.to_vec();
            if flag != "--min-runtime" {
                args.extend(["--min-runtime", "0"]);
            }
            args.extend([flag, value]);
            let e = refusal(&args);
            assert!(e.contains("is negative: give 0 or more"), "{flag}: {e}");
        }
        let e = refusal(&["queue", "--cluster", "c", "--limit", "-1"]);
        assert!(e.contains("invalid value '-1' for '--limit"), "{e}");
    }

    #[test]
    fn a_cause_already_quoted_is_printed_once() {
        let io = std::io::Error::other("name \"bad name\" is not valid");
        let e = anyhow::Error::from(Quoting(io)).context("budget.toml refused");
        assert_eq!(
            causes(&e),
            "budget.toml refused: invalid budget tree: name \"bad name\" is not valid"
        );
        let plain = anyhow::anyhow!("outer").context("top");
        assert_eq!(causes(&plain), "top: outer");
    }
}
