//! Error kinds and their exit codes.
//!
//! Every failure is classified by *whose* problem it is, like DataFusion separates plan errors
//! (the user's SQL) from execution errors: the kind decides the process exit code documented in
//! the README and SPEC. Invariant: an `Input` error is only ever raised before any data is read
//! and before anything is written.

use std::fmt;

/// What kind of failure happened; decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Runtime failure: storage, execution, commit conflict after retries. Exit 1.
    Runtime,
    /// Invalid input: usage, task file, SQL, lint, window. Exit 2. Nothing read or written.
    Input,
    /// Reconciliation divergence with `on_mismatch = "fail"`. Exit 3. Nothing published.
    Mismatch,
    /// `verify` outputs differ or `audit` found damage. Exit 4. Read-only.
    Divergence,
    /// The window's commit landed (it is published), but a check after the commit failed
    /// (read-back, merge counts). Exit 5. The report says `published: true` and the version.
    Unverified,
}

impl ErrorKind {
    /// The process exit code for this kind (SPEC "Exit codes").
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorKind::Runtime => 1,
            ErrorKind::Input => 2,
            ErrorKind::Mismatch => 3,
            ErrorKind::Divergence => 4,
            ErrorKind::Unverified => 5,
        }
    }
}

/// An idemlake error: a kind plus a human message that names the problem.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
    pub fn input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Input, message)
    }
    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Runtime, message)
    }
    pub fn mismatch(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Mismatch, message)
    }
    pub fn divergence(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Divergence, message)
    }
    pub fn unverified(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unverified, message)
    }
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    /// Prefix the message with what was being done, keeping the kind.
    pub fn context(self, what: impl fmt::Display) -> Self {
        Self {
            kind: self.kind,
            message: format!("{what}: {}", self.message),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<datafusion::error::DataFusionError> for Error {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        Error::runtime(e.to_string())
    }
}

impl From<deltalake::DeltaTableError> for Error {
    fn from(e: deltalake::DeltaTableError) -> Self {
        Error::runtime(e.to_string())
    }
}

impl From<arrow::error::ArrowError> for Error {
    fn from(e: arrow::error::ArrowError) -> Self {
        Error::runtime(e.to_string())
    }
}

impl From<object_store::Error> for Error {
    fn from(e: object_store::Error) -> Self {
        Error::runtime(e.to_string())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::runtime(e.to_string())
    }
}

/// Extension to attach context to any error convertible into [`Error`].
pub trait ResultExt<T> {
    /// Convert the error and prefix it with `what`.
    fn context(self, what: impl fmt::Display) -> Result<T>;
    /// Convert the error into an `Input` error (the user's mistake), prefixed with `what`.
    fn input_err(self, what: impl fmt::Display) -> Result<T>;
}

impl<T, E: Into<Error>> ResultExt<T> for std::result::Result<T, E> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| e.into().context(what))
    }
    fn input_err(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| {
            let e: Error = e.into();
            Error::input(format!("{what}: {}", e.message))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_spec() {
        assert_eq!(ErrorKind::Runtime.exit_code(), 1);
        assert_eq!(ErrorKind::Input.exit_code(), 2);
        assert_eq!(ErrorKind::Mismatch.exit_code(), 3);
        assert_eq!(ErrorKind::Divergence.exit_code(), 4);
        assert_eq!(ErrorKind::Unverified.exit_code(), 5);
    }

    #[test]
    fn input_err_reclassifies_and_keeps_message() {
        let r: std::result::Result<(), std::io::Error> = Err(std::io::Error::other("boom"));
        let e = r.input_err("reading x").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Input);
        assert_eq!(e.message(), "reading x: boom");
    }
}
