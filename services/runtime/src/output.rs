//! Standard output for the command-line binaries (`fairshare`, `fairshare-sim`). A reader that
//! goes away (`fairshare tail | head`) ends the process quietly, with the status a closed pipe
//! gives other Unix tools (141), instead of the panic and backtrace `println!` gives when the
//! Rust runtime ignores SIGPIPE. For binaries only: it exits the process.

use std::fmt::Arguments;
use std::io::{ErrorKind, Write};

/// Exit status of a process whose reader went away: 128 + SIGPIPE, as a shell reports it.
const CLOSED_PIPE: i32 = 141;

/// Writes `args` to standard output, then a newline if `newline`.
pub fn write(args: Arguments<'_>, newline: bool) {
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
