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
use std::sync::atomic::{AtomicI32, Ordering};

/// Exit status of a process whose reader went away: 128 + SIGPIPE, as a shell reports it.
const CLOSED_PIPE: i32 = 141;

/// Output held back while a [`Held`] guard lives (`None`: written at once).
static HELD: Mutex<Option<String>> = Mutex::new(None);

/// The exit status held output could not be written out with (0: none failed).
static HELD_FAILED: AtomicI32 = AtomicI32::new(0);

/// Holds standard output back until the guard is dropped, then writes it all. Guards do not
/// nest: an inner one writes nothing of its own. Unlike [`write()`], a failure to write it out
/// does not end the process (the command may be returning an error, which must still be
/// reported): it is kept for [`held_output_failed`].
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
        if !text.is_empty()
            && let Err(status) = write_out(&mut std::io::stdout().lock(), &text)
        {
            HELD_FAILED.store(status, Ordering::SeqCst);
        }
    }
}

/// The exit status a command that otherwise succeeded should end with because its held output
/// could not be written out ([`Held`]): 141 for a reader gone, 1 otherwise.
pub fn held_output_failed() -> Option<i32> {
    Some(HELD_FAILED.load(Ordering::SeqCst)).filter(|status| *status != 0)
}

/// Writes `text` to `out`; on failure, says why on standard error unless the reader is gone,
/// and returns the exit status to end with.
fn write_out(out: &mut impl Write, text: &str) -> Result<(), i32> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| {
            if e.kind() == ErrorKind::BrokenPipe {
                CLOSED_PIPE
            } else {
                eprintln!("error: cannot write to standard output: {e}");
                1
            }
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that is gone, or a disk that is full.
    struct Failing(ErrorKind);

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(self.0.into())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn held_output_that_cannot_be_written_gives_the_status_without_ending_the_process() {
        assert_eq!(
            write_out(&mut Failing(ErrorKind::BrokenPipe), "a\n"),
            Err(CLOSED_PIPE)
        );
        assert_eq!(
            write_out(&mut Failing(ErrorKind::StorageFull), "a\n"),
            Err(1)
        );
        let mut written = Vec::new();
        assert_eq!(write_out(&mut written, "a\nb\n"), Ok(()));
        assert_eq!(written, b"a\nb\n");
    }

    #[test]
    fn output_is_held_until_the_outer_guard_goes() {
        let outer = hold();
        let inner = hold();
        write(format_args!("one"), true);
        drop(inner);
        write(format_args!("two"), false);
        let held = HELD
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        assert_eq!(held.as_deref(), Some("one\ntwo"));
        // Emptied so that dropping the guard writes nothing into the test's output.
        if let Some(text) = HELD
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_mut()
        {
            text.clear();
        }
        drop(outer);
        assert!(
            HELD.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_none()
        );
        assert_eq!(held_output_failed(), None);
    }
}
