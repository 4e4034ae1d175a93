//! Storage failures that are the configuration's, not the moment's: no AWS credentials
//! found, credentials S3 rejects or that lack permission, a bucket that does not exist.
//! Retrying cannot fix them, so they are input errors (exit 2, not retryable) with one plain
//! sentence naming what to set, instead of the raw HTTP exchange.
//!
//! They are recognised by text, because delta-rs, its kernel and DataFusion pass object
//! store errors on as strings: S3's error codes, object_store's messages for 401/403, and
//! the instance-metadata endpoint's token path (object_store asks it when no credentials
//! are set in the environment).

/// S3 error codes saying the credentials themselves are wrong or expired.
const REJECTED: [&str; 7] = [
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidClientTokenId",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "AuthorizationHeaderMalformed",
];

/// The sentence replacing `text` when it reports a configuration problem of storage.
pub(super) fn configuration_problem(text: &str) -> Option<String> {
    let imds = text.contains("/latest/api/token")
        || text.contains("/latest/meta-data/iam")
        || text.contains("169.254.169.254");
    if imds {
        return Some(
            "no AWS credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
             (with AWS_SESSION_TOKEN for temporary ones), or AWS_WEB_IDENTITY_TOKEN_FILE with \
             AWS_ROLE_ARN, or run where the instance metadata service provides a role (it did \
             not answer with credentials)"
                .to_string(),
        );
    }
    if let Some(code) = REJECTED.iter().find(|c| text.contains(*c)) {
        return Some(format!(
            "S3 rejected the credentials ({code}): check AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN if they are temporary)"
        ));
    }
    if text.contains("NoSuchBucket") {
        let bucket = between(text, "<BucketName>", "</BucketName>")
            .map(|b| format!(" `{b}`"))
            .unwrap_or_default();
        return Some(format!(
            "the S3 bucket{bucket} does not exist (NoSuchBucket): check the bucket in the \
             location (a source's `uri`, `--lake`, IDEMLAKE_LAKE or `[lake] uri` in idemlake.toml) and AWS_ENDPOINT_URL"
        ));
    }
    let denied = text.contains("AccessDenied")
        || text.contains("lacked the necessary privileges")
        || text.contains("lacked valid authentication credentials");
    if denied {
        return Some(
            "S3 denied access (403): the credentials in AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY are wrong or lack permission for this bucket and prefix"
                .to_string(),
        );
    }
    None
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let len = text[start..].find(close)?;
    Some(&text[start..start + len])
}

/// The sentence replacing `text` when a commit was refused by a property of the target table
/// another tool set, which no retry changes: `delta.appendOnly` refuses the `remove` actions a
/// window's replacement (or a merge's rewrite) commits.
pub(super) fn table_problem(text: &str) -> Option<String> {
    text.contains("Delta table is append-only").then(|| {
        "the target table is append-only (its property delta.appendOnly is true, set by another \
         tool): replacing a window removes its files, which such a table refuses, so no retry \
         can publish it; nothing was published — unset the property (delta.appendOnly = false) \
         or publish into another table"
            .to_string()
    })
}

/// For a message saying an S3 request got no answer, which endpoint that was
/// (`AWS_ENDPOINT_URL`), when one is configured: the failure stays a runtime one (retryable).
pub(super) fn unreachable_endpoint(message: &str) -> Option<String> {
    let s3 = message.contains("S3 error") || message.contains("s3://");
    let said = [
        "Connection refused",
        "dns error",
        "error sending request",
        "connect error",
    ];
    if !s3 || !said.iter().any(|w| message.contains(w)) || message.contains("AWS_ENDPOINT_URL") {
        return None;
    }
    let endpoint = std::env::var("AWS_ENDPOINT_URL")
        .or_else(|_| std::env::var("AWS_ENDPOINT"))
        .ok()?;
    Some(format!(
        "the S3 endpoint did not answer (AWS_ENDPOINT_URL = {endpoint})"
    ))
}
