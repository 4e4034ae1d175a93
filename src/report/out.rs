//! Standard output for reports: a reader that stops reading (`idemlake status … | head -1`)
//! must not turn a finished command into a panic (exit 101). `println!` panics when a write
//! fails; [`outln!`](crate::outln) and [`out!`](crate::out) write through [`write()`], which
//! stops writing once the pipe is closed and leaves the exit code to the command's outcome
//! (a window published before the reader went away stays reported by its exit code).

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write found standard output closed: later writes are skipped.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Write `args` to standard output (and a newline if `newline`). A closed pipe ends all
/// later output silently; any other failure is said once on standard error.
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
        eprintln!("warning: could not write to standard output ({e}); no more output follows");
    }
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
