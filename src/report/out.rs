//! Standard output and error for reports: a reader that stops reading (`idemlake status … |
//! head -1`, or `2>&1 | head`) must not turn a finished command into a panic (exit 101).
//! `println!` and `eprintln!` panic when a write fails; [`outln!`](crate::outln),
//! [`out!`](crate::out) and [`errln!`](crate::errln) write through [`write()`] and
//! [`write_err`], which never panic.
//!
//! - A closed pipe (`BrokenPipe`) ends that stream's output silently; the exit code stays the
//!   command's own (a window published before the reader went away is still reported by it).
//! - Any other failure to write standard output (a full disk under `> file`) is said once on
//!   standard error and makes the command fail: [`failed`] tells `main`, which then exits 1
//!   instead of 0, since what the command had to say was not written.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write found standard output closed or failing: later writes are skipped.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Set once a write to standard output failed otherwise than by a closed pipe.
static FAILED: AtomicBool = AtomicBool::new(false);

/// Set once a write found standard error closed or failing.
static ERR_CLOSED: AtomicBool = AtomicBool::new(false);

/// Write `args` to standard output (and a newline if `newline`); see the module
/// documentation for failures.
pub fn write(args: fmt::Arguments, newline: bool) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    let done = match newline {
        true => writeln!(out, "{args}"),
        false => write!(out, "{args}"),
    }
    .and_then(|()| out.flush());
    if let Err(e) = done
        && !CLOSED.swap(true, Ordering::Relaxed)
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        FAILED.store(true, Ordering::Relaxed);
        write_err(format_args!(
            "error: could not write to standard output ({e}); no more output follows"
        ));
    }
}

/// Write one line to standard error, never panicking: a closed or failing standard error
/// ends its output silently.
pub fn write_err(args: fmt::Arguments) {
    if ERR_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut err = std::io::stderr().lock();
    if writeln!(err, "{args}").and_then(|()| err.flush()).is_err() {
        ERR_CLOSED.store(true, Ordering::Relaxed);
    }
}

/// Whether writing standard output failed otherwise than by a closed pipe.
pub fn failed() -> bool {
    FAILED.load(Ordering::Relaxed)
}

/// `println!` for reports: see the module documentation.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::report::out::write(format_args!($($arg)*), true)
    };
}

/// `print!` for reports: see the module documentation.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::report::out::write(format_args!($($arg)*), false)
    };
}

/// `eprintln!` for diagnostics: see the module documentation.
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::report::out::write_err(format_args!($($arg)*))
    };
}
