//! Standard output for the command-line binaries (`fairshare`, `fairshare-sim`). A reader that
//! goes away (`fairshare tail | head`) ends the process quietly, with the status a closed pipe
//! gives other Unix tools (141), instead of the panic and backtrace `println!` gives when the
//! Rust runtime ignores SIGPIPE. For binaries only: it exits the process.
//!
//! A command that writes several changes to the log holds its output back ([`hold`]) until
//! it has made them all: a reader gone after the first line (`fairshare node cordon a b c |
//! grep -q cordoned`) or a full disk must not stop it half-way, with some nodes changed and
//! the rest not.

use std::fmt::Arguments;
use std::io::{ErrorKind, Write};
use std::sync::Mutex;

/// Exit status of a process whose reader went away: 128 + SIGPIPE, as a shell reports it.
const CLOSED_PIPE: i32 = 141;

/// Output held back while a [`Held`] guard lives (`None`: written at once).
static HELD: Mutex<Option<String>> = Mutex::new(None);

/// Holds standard output back until the guard is dropped, then writes it all (and exits as
/// [`write`] does if it cannot). Guards do not nest: an inner one writes nothing of its own.
#[must_use = "output is held only while the guard lives"]
pub struct Held {
    /// Whether this guard started the holding (and so writes it out).
    outer: bool,
}

/// Starts holding standard output back (see [`Held`]).
pub fn hold() -> Held {
    let mut held = HELD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let outer = held.is_none();
    if outer {
        *held = Some(String::new());
    }
    Held { outer }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.outer {
            return;
        }
        let text = HELD
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .unwrap_or_default();
        if !text.is_empty() {
            write(format_args!("{text}"), false);
        }
    }
}

/// Writes `args` to standard output, then a newline if `newline`.
pub fn write(args: Arguments<'_>, newline: bool) {
    {
        let mut held = HELD
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(text) = held.as_mut() {
            use std::fmt::Write as _;
            let _ = text.write_fmt(args);
            if newline {
                text.push('\n');
            }
            return;
        }
    }
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| {
        if newline {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    if let Err(e) = written {
        if e.kind() == ErrorKind::BrokenPipe {
            std::process::exit(CLOSED_PIPE);
        }
        eprintln!("error: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

/// `println!` for command-line binaries (see [`crate::output`]).
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write(format_args!($($arg)*), true)
    };
}

/// `print!` for command-line binaries (see [`crate::output`]).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write(format_args!($($arg)*), false)
    };
}
