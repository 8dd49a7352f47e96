//! Service binaries run as child processes by tests that kill them with SIGKILL: nothing the
//! process was doing finishes, which an aborted in-process task cannot show.

use std::ffi::OsStr;
use std::process::{Child, Command, Stdio};

/// The arguments that point a service at `url` with a sled checkpoint in `dir` written every
/// `every_entries` entries (or 20 ms), so a kill can land inside a write; then `extra`.
pub fn checkpointed(
    url: &str,
    dir: &std::path::Path,
    every_entries: u32,
    extra: &[&str],
) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = vec!["--nats-url".into(), url.into()];
    args.extend(["--checkpoint-dir".into(), dir.into()]);
    args.extend([
        "--checkpoint-events".into(),
        every_entries.to_string().into(),
        "--checkpoint-every".into(),
        "20ms".into(),
    ]);
    args.extend(extra.iter().map(Into::into));
    args
}

/// Starts the service binary `bin` with `args` and none of the caller's `FAIRSHARE_*`
/// settings, its stderr piped (for [`kill_and_read_stderr`]), uncoloured, at the default log
/// level.
pub fn spawn_service<I, S>(bin: &str, args: I) -> Child
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut command = Command::new(bin);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("FAIRSHARE_") {
            command.env_remove(name);
        }
    }
    match command
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => panic!("cannot start {bin}: {e}"),
    }
}

/// Kills `child` with SIGKILL (if it still runs) and returns what it wrote on stderr, without
/// terminal colour codes. The child must have been spawned with stderr piped.
pub fn kill_and_read_stderr(mut child: Child) -> String {
    let _ = child.kill();
    match child.wait_with_output() {
        Ok(out) => strip_ansi(&String::from_utf8_lossy(&out.stderr)),
        Err(e) => format!("(stderr unreadable: {e})"),
    }
}

/// `text` without ANSI escape sequences (`ESC [ ... m`), as a logger may colour its fields.
pub fn strip_ansi(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

/// Asserts that the last of `logs` (one per start of a service, in order; the last ran until
/// the end, so it caught up and said so) resumed from a checkpoint, and returns how many
/// starts after the first said they did (earlier ones may be killed before they say).
pub fn assert_restarts_resumed(logs: &[String]) -> usize {
    let last = logs.last().map_or("", String::as_str);
    assert_eq!(
        resumed_starts(std::slice::from_ref(&last.to_owned())),
        1,
        "the last start resumed from a checkpoint: {last}"
    );
    resumed_starts(logs.get(1..).unwrap_or_default())
}

/// Calls `check` every 100 ms until it gives `Ok`, for at most `within`; panics with its last
/// `Err` (what is still missing) otherwise.
pub async fn eventually<T, F, Fut>(within: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match check().await {
            Ok(done) => return done,
            Err(missing) if tokio::time::Instant::now() >= deadline => {
                panic!("after {within:?}: {missing}")
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
}

/// How many of `logs` (one per start of a service, in order) report a start that resumed
/// from a checkpoint: a `resumed_from=N` field with N past 0.
pub fn resumed_starts(logs: &[String]) -> usize {
    logs.iter()
        .filter(|l| {
            l.split("resumed_from=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .is_some_and(|n| n != "0")
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_codes_are_stripped_and_resumed_starts_counted() {
        let coloured = "\u{1b}[3mresumed_from\u{1b}[0m\u{1b}[2m=\u{1b}[0m42 applied=3";
        assert_eq!(strip_ansi(coloured), "resumed_from=42 applied=3");
        let logs = [
            "x resumed_from=0 y".to_owned(),
            strip_ansi(coloured),
            "no such field".to_owned(),
        ];
        assert_eq!(resumed_starts(&logs), 1);
    }
}
