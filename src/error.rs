//! Error kinds and their exit codes.
//!
//! Every failure is classified by *whose* problem it is, like DataFusion separates plan errors
//! (the user's SQL) from execution errors: the kind decides the process exit code documented in
//! the README and SPEC. Invariant: an `Input` error is only ever raised before any data is read
//! and before anything is written — except two kinds of mistake that can only surface mid-run,
//! where retrying cannot fix them and nothing is published: a storage configuration error (no
//! or rejected credentials, a missing bucket; a target table made append-only by another tool,
//! whose refusal comes at the commit; see `storage`), and a source file that
//! contradicts the source's layout or schema (a value its column's type cannot hold, a header
//! in another order: see `pipeline::landing`), found as the window's scan opens or reads it.

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
    /// A `[checks]` check with `severity = "error"` failed on the window's rows (or `check`
    /// found published windows that violate one). Exit 6. Nothing published.
    Rejected,
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
            ErrorKind::Rejected => 6,
        }
    }

    /// The kind whose exit code is `code` (`None` for 0 or an unknown code).
    pub fn from_exit_code(code: u8) -> Option<ErrorKind> {
        [
            ErrorKind::Runtime,
            ErrorKind::Input,
            ErrorKind::Mismatch,
            ErrorKind::Divergence,
            ErrorKind::Unverified,
            ErrorKind::Rejected,
        ]
        .into_iter()
        .find(|k| k.exit_code() == code)
    }

    /// The kind's name, as reports outside idemlake (OpenLineage events) give the exit class.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Runtime => "runtime",
            ErrorKind::Input => "input",
            ErrorKind::Mismatch => "mismatch",
            ErrorKind::Divergence => "divergence",
            ErrorKind::Unverified => "unverified",
            ErrorKind::Rejected => "rejected",
        }
    }
}

/// An idemlake error: a kind, a human message that names the problem, and the library error
/// it came from (if any) as its [`std::error::Error::source`].
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    #[source]
    source: Option<Cause>,
    /// A runtime failure (exit 1) that the same command on the same inputs meets again (rows
    /// outside the window, a value that does not cast): `retryable: false`.
    permanent: bool,
}

/// The library error behind an [`Error`].
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    #[error(transparent)]
    DataFusion(Box<datafusion::error::DataFusionError>),
    #[error(transparent)]
    Delta(Box<deltalake::DeltaTableError>),
    #[error(transparent)]
    Arrow(Box<arrow::error::ArrowError>),
    #[error(transparent)]
    ObjectStore(Box<object_store::Error>),
    #[error(transparent)]
    Io(std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

mod storage;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        let (kind, message) = Self::classified(kind, message.into());
        Self {
            kind,
            message,
            source: None,
            permanent: false,
        }
    }
    /// A runtime failure that is the storage configuration's (credentials, a missing
    /// bucket; see `storage`) becomes an input error with its plain sentence.
    fn classified(kind: ErrorKind, message: String) -> (ErrorKind, String) {
        if kind != ErrorKind::Runtime {
            return (kind, message);
        }
        match storage::configuration_problem(&message).or_else(|| storage::table_problem(&message))
        {
            Some(sentence) => {
                tracing::debug!("storage configuration error: {message}");
                (ErrorKind::Input, sentence)
            }
            None => match storage::unreachable_endpoint(&message) {
                Some(hint) => (kind, format!("{hint}: {message}")),
                None => (kind, message),
            },
        }
    }
    pub fn input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Input, message)
    }
    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Runtime, message)
    }
    pub fn rejected(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Rejected, message)
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
    fn caused(kind: ErrorKind, cause: Cause) -> Self {
        let (kind, message) = Self::classified(kind, cause.to_string());
        Self {
            kind,
            message,
            source: Some(cause),
            permanent: false,
        }
    }
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    /// The same error, marked as one a retry on the same inputs meets again (see
    /// [`Error::retryable`]); its kind and exit code are unchanged.
    pub fn permanent(self) -> Self {
        Self {
            permanent: true,
            ..self
        }
    }
    /// Whether re-running the same command can succeed (SPEC: `retryable`): a runtime
    /// failure not known to be permanent, or a failure after the commit (exit 5).
    pub fn retryable(&self) -> bool {
        match self.kind {
            ErrorKind::Runtime => !self.permanent,
            ErrorKind::Unverified => true,
            _ => false,
        }
    }
    /// The exit code of this error: decided by its kind alone ([`ErrorKind::exit_code`]).
    pub fn exit_code(&self) -> u8 {
        self.kind.exit_code()
    }
    /// Whether the window was published before this error (its commit landed): only
    /// [`ErrorKind::Unverified`] errors say so.
    pub fn published(&self) -> bool {
        self.kind == ErrorKind::Unverified
    }
    /// Prefix the message with what was being done, keeping the kind and the source.
    pub fn context(self, what: impl fmt::Display) -> Self {
        Self {
            message: format!("{what}: {}", self.message),
            ..self
        }
    }
    /// The same error, reclassified as the user's mistake.
    fn into_input(self) -> Self {
        Self {
            kind: ErrorKind::Input,
            ..self
        }
    }
}

/// Whose mistake a DataFusion error is. What DataFusion rejects while parsing, planning or
/// type-checking the task's SQL (syntax, unknown names, types that do not fit, unsupported
/// SQL) is the user's, exit 2, wherever it is detected — also when a window is planned on
/// its own at run time; no row has been read then. A failure while rows are processed (a
/// value that does not cast, a division by zero, I/O, resources) is a runtime failure: rows
/// were read (SPEC: exit 2 means no data read).
fn datafusion_kind(e: &datafusion::error::DataFusionError) -> ErrorKind {
    use datafusion::error::DataFusionError as D;
    match e.find_root() {
        D::SQL(..) | D::Plan(..) | D::SchemaError(..) | D::NotImplemented(..) => ErrorKind::Input,
        _ => ErrorKind::Runtime,
    }
}

/// A text source's value its column's type cannot hold, as arrow's JSON reader reports it
/// (`"abc"` in a number column, `13` in a string column; child errors come prefixed with
/// `whilst decoding field …`), and a text zone's integer column holding something that is not
/// a number (read as a decimal, `landing::exact`): the same file fails the same way however
/// often the window is retried, so it is the user's to fix (exit 2, nothing published); the
/// plain sentence for it. A JSON file cut short fails otherwise ("Truncated record"), and stays
/// retryable; so does arrow's CSV "Error while parsing value" (a CSV file cut inside its last
/// value gives it too). A CSV integer column cut to a bare `-` is the one cut file refused.
fn unreadable_value(e: &datafusion::error::DataFusionError) -> Option<String> {
    use arrow::error::ArrowError as A;
    let datafusion::error::DataFusionError::ArrowError(a, _) = e.find_root() else {
        return None;
    };
    let what = match a.as_ref() {
        A::JsonError(m) if m.contains("expected ") && m.contains(" got ") => m.clone(),
        A::JsonError(m) if m.contains("failed to parse ") => m.clone(),
        A::ParseError(m) if m.starts_with("can't parse the string value") => {
            // Integer columns of text zones are read as decimals (`landing::exact`).
            m.replace(" to decimal", " as an integer")
        }
        A::ParseError(m) if m.starts_with("parse decimal overflow") => {
            format!("{m}: an integer of more than 20 digits")
        }
        _ => return None,
    };
    Some(format!(
        "a file of the source holds a value its column's type cannot hold ({what}); the column's type is the source's (a landing zone's: its first file's, or its last with schema_from = \"last\"); retrying cannot change it, so nothing was published — rewrite the file, or make the first file hold the wider type"
    ))
}

/// Whether a DataFusion error is one of the query's arithmetic on the rows it read (a value
/// that does not cast, a division by zero, an overflow): the same inputs fail the same way,
/// so a retry cannot help (found by trying: `CAST(l_shipmode AS INT)` failed with
/// `retryable: true` on every attempt).
fn deterministic(e: &datafusion::error::DataFusionError) -> bool {
    use arrow::error::ArrowError as A;
    matches!(
        e.find_root(),
        datafusion::error::DataFusionError::ArrowError(a, _)
            if matches!(a.as_ref(), A::CastError(_) | A::DivideByZero | A::ArithmeticOverflow(_))
    )
}

impl From<datafusion::error::DataFusionError> for Error {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        // The user's mistake found by idemlake's own code inside DataFusion's (a landing
        // zone's file that does not fit its layout or schema): that error, as it was.
        if let datafusion::error::DataFusionError::External(inner) = e.find_root()
            && let Some(ours) = inner.downcast_ref::<Error>()
            && ours.kind == ErrorKind::Input
        {
            return Error::input(ours.message.clone());
        }
        if let Some(sentence) = unreadable_value(&e) {
            return Error::input(sentence);
        }
        let kind = datafusion_kind(&e);
        let permanent = deterministic(&e);
        let e = Error::caused(kind, Cause::DataFusion(Box::new(e)));
        if permanent { e.permanent() } else { e }
    }
}

impl From<deltalake::DeltaTableError> for Error {
    fn from(e: deltalake::DeltaTableError) -> Self {
        Error::caused(ErrorKind::Runtime, Cause::Delta(Box::new(e)))
    }
}

impl From<arrow::error::ArrowError> for Error {
    fn from(e: arrow::error::ArrowError) -> Self {
        Error::caused(ErrorKind::Runtime, Cause::Arrow(Box::new(e)))
    }
}

impl From<object_store::Error> for Error {
    fn from(e: object_store::Error) -> Self {
        Error::caused(ErrorKind::Runtime, Cause::ObjectStore(Box::new(e)))
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::caused(ErrorKind::Runtime, Cause::Io(e))
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
        self.map_err(|e| e.into().context(what).into_input())
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
        assert_eq!(ErrorKind::Rejected.exit_code(), 6);
    }

    #[test]
    fn input_err_reclassifies_and_keeps_message() {
        let r: std::result::Result<(), std::io::Error> = Err(std::io::Error::other("boom"));
        let e = r.input_err("reading x").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Input);
        assert_eq!(e.message(), "reading x: boom");
    }

    #[test]
    fn sql_mistakes_are_input_wherever_datafusion_finds_them() {
        use datafusion::error::DataFusionError as D;
        let plan = Error::from(D::Plan("no such column".into()));
        assert_eq!(plan.kind(), ErrorKind::Input);
        // A value that fails while rows are processed: rows were read, so not exit 2.
        let zero = Error::from(D::ArrowError(
            Box::new(arrow::error::ArrowError::DivideByZero),
            None,
        ));
        assert_eq!(zero.kind(), ErrorKind::Runtime);
        // Wrapped in context by DataFusion: still the user's.
        let wrapped = Error::from(D::Context(
            "while executing".into(),
            Box::new(D::SchemaError(
                Box::new(datafusion::common::SchemaError::FieldNotFound {
                    field: Box::new(datafusion::common::Column::from_name("x")),
                    valid_fields: vec![],
                }),
                Box::new(None),
            )),
        ));
        assert_eq!(wrapped.kind(), ErrorKind::Input);
        let io = Error::from(D::IoError(std::io::Error::other("disk")));
        assert_eq!(io.kind(), ErrorKind::Runtime);
        assert_eq!(
            Error::from(D::Execution("x".into())).kind(),
            ErrorKind::Runtime
        );
    }

    #[test]
    fn library_errors_are_the_source_and_survive_context() {
        use std::error::Error as _;
        let e = Error::from(std::io::Error::other("boom")).context("reading x");
        assert_eq!(e.message(), "reading x: boom");
        assert_eq!(e.source().map(|s| s.to_string()).as_deref(), Some("boom"));
        assert!(!e.published());
        assert!(Error::unverified("read-back").published());
    }

    /// Defect (issue 37): missing AWS credentials surfaced as a raw instance-metadata 403,
    /// and rejected ones as S3's XML, both exit 1 (retryable). They are the configuration's
    /// mistake: exit 2, one plain sentence naming the variables, however deep the storage
    /// error was wrapped.
    #[test]
    fn missing_or_rejected_aws_credentials_are_configuration_errors() {
        let imds_denied = "cannot open the target table: Kernel error: Error interacting with object store: Generic S3 error: Error performing PUT http://169.254.169.254/latest/api/token in 1.1ms - Server returned non-2xx status code: 403 Forbidden: resolve_deny: denied destination";
        let imds_refused = "Generic S3 error: Error performing PUT http://127.0.0.1:1/latest/api/token in 103ms, after 1 retries, max_retries: 1, retry_timeout: 3s  - HTTP error: error sending request";
        let bad_key = "cannot open the target table: Kernel error: Error interacting with object store: The operation lacked the necessary privileges to complete for path p/_delta_log/_last_checkpoint: Error performing GET http://127.0.0.1:8333/idemlake/p/_delta_log/_last_checkpoint in 2.8ms - Server returned non-2xx status code: 403 Forbidden: <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InvalidAccessKeyId</Code><Message>The access key ID you provided does not exist in our records.</Message><BucketName>idemlake</BucketName></Error>";
        let bad_secret = bad_key.replace("InvalidAccessKeyId", "SignatureDoesNotMatch");
        for raw in [imds_denied, imds_refused, bad_key, &bad_secret] {
            for e in [
                Error::runtime(raw),
                Error::from(std::io::Error::other(raw.to_string())).context("source `x`"),
            ] {
                assert_eq!(e.kind(), ErrorKind::Input, "{raw}");
                let m = e.message();
                assert!(m.contains("AWS_ACCESS_KEY_ID"), "{m}");
                assert!(m.contains("AWS_SECRET_ACCESS_KEY"), "{m}");
                assert!(!m.contains("<Error>") && !m.contains("api/token"), "{m}");
                assert_eq!(m.lines().count(), 1, "{m}");
            }
        }
        let denied = Error::from(object_store::Error::PermissionDenied {
            path: "lake/t/_delta_log/00000000000000000000.json".into(),
            source: "403 Forbidden: AccessDenied".into(),
        });
        assert_eq!(denied.kind(), ErrorKind::Input);
        assert!(denied.message().contains("AWS_ACCESS_KEY_ID"));
        let no_bucket = Error::runtime(
            "Generic S3 error: Error performing list request: 404 Not Found: <?xml version=\"1.0\"?>\n<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message><BucketName>no-such-bucket</BucketName></Error>",
        );
        assert_eq!(no_bucket.kind(), ErrorKind::Input);
        assert!(
            no_bucket.message().contains("no-such-bucket"),
            "{}",
            no_bucket.message()
        );
        // A storage failure of the moment stays retryable.
        let slow =
            Error::runtime("Generic S3 error: 503 Service Unavailable: <Code>SlowDown</Code>");
        assert_eq!(slow.kind(), ErrorKind::Runtime);
    }
}
