//! Storage: one object store per location, shared by DataFusion sources and Delta tables;
//! the independent checks and the read-back get clients of their own instead
//! ([`own_store_for`]: counted, without the log cache, kept by no one else).
//!
//! Local paths need nothing. `s3://bucket/…` locations get an S3 client configured only from
//! the standard `AWS_*` environment (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ALLOW_HTTP`, …) — nothing
//! provider-specific, path-style addressing unless `AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true`.
//! Delta commits are put-if-absent (`If-None-Match: *`); before the first commit to a bucket,
//! a probe checks that the server really refuses to overwrite, because a server that ignores
//! the header would let two writers both create the same log version (a lost commit). The
//! probe's outcome is recorded in the table (`_idemlake/conditional-put.json`, with the
//! endpoint): later processes trust it for `IDEMLAKE_S3_PROBE_MAX_AGE_SECS` on that endpoint.
//! Delta log files read from S3 are kept for the process (`logcache`); requests are counted
//! (`count`).
//! Invariant: credentials are never formatted into messages; errors are passed through
//! `cli::redact` before printing anyway.

pub mod identity;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig};
use url::Url;

use crate::error::{Error, Result};

/// The bucket-level URL (`s3://bucket/`) of an object-store location, or `None` for local ones.
pub fn bucket_url(url: &Url) -> Option<Url> {
    match url.scheme() {
        "s3" | "s3a" => Url::parse(&format!("{}://{}/", url.scheme(), url.host_str()?)).ok(),
        _ => None,
    }
}

fn stores() -> &'static Mutex<HashMap<String, Arc<dyn ObjectStore>>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<dyn ObjectStore>>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

/// The (cached) store for the bucket of `url`, rooted at the bucket.
pub fn store_for(url: &Url) -> Result<Option<(Url, Arc<dyn ObjectStore>)>> {
    let Some(bucket) = bucket_url(url) else {
        return Ok(None);
    };
    let mut map = stores().lock().expect("not poisoned");
    if let Some(s) = map.get(bucket.as_str()) {
        return Ok(Some((bucket, s.clone())));
    }
    let counted = counted_client(&bucket)?;
    let store: Arc<dyn ObjectStore> = if crate::config::get().log_cache {
        Arc::new(wrap::Wrapped(logcache::LogCache::new(counted)))
    } else {
        counted
    };
    map.insert(bucket.to_string(), store.clone());
    Ok(Some((bucket, store)))
}

/// A store for the bucket of `url` shared with nothing: a new S3 client, counted (the `-v`
/// summary stays complete) but without the log cache, and not kept for anyone else (the
/// independent checks' and the read-back's own route); `None` for local locations.
pub fn own_store_for(url: &Url) -> Result<Option<(Url, Arc<dyn ObjectStore>)>> {
    let Some(bucket) = bucket_url(url) else {
        return Ok(None);
    };
    let store = counted_client(&bucket)?;
    Ok(Some((bucket, store)))
}

/// [`own_store_for`] with a Delta log cache of its own (the read-back's): empty when built,
/// filled only by this client's reads from storage, shared with nothing — delta-rs's load
/// through it then reads each log file once, as the task's does through the process's
/// store. `IDEMLAKE_LOG_CACHE=0` leaves it out.
pub fn own_cached_store_for(url: &Url) -> Result<Option<(Url, Arc<dyn ObjectStore>)>> {
    let Some((bucket, store)) = own_store_for(url)? else {
        return Ok(None);
    };
    let store: Arc<dyn ObjectStore> = if crate::config::get().log_cache {
        Arc::new(wrap::Wrapped(logcache::LogCache::new(store)))
    } else {
        store
    };
    Ok(Some((bucket, store)))
}

/// A new S3 client for `bucket` from the `AWS_*` environment, its requests counted.
fn counted_client(bucket: &Url) -> Result<Arc<dyn ObjectStore>> {
    plain_http_allowed()?;
    let s3: Arc<dyn ObjectStore> = Arc::new(
        AmazonS3Builder::from_env()
            .with_url(bucket.as_str())
            .with_retry(retry_config()?)
            .build()
            .map_err(|e| configuration_error(bucket, &e))?,
    );
    Ok(Arc::new(wrap::Wrapped(count::Counted(s3))))
}

/// An `http://` endpoint is refused by the S3 client unless `AWS_ALLOW_HTTP` is true (it says
/// only "builder error", retryable): the user's setting to fix, named (exit 2).
fn plain_http_allowed() -> Result<()> {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").or_else(|_| std::env::var("AWS_ENDPOINT"));
    let Ok(endpoint) = endpoint else {
        return Ok(());
    };
    let allowed =
        std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if endpoint.trim().to_ascii_lowercase().starts_with("http://") && !allowed {
        return Err(Error::input(format!(
            "AWS_ENDPOINT_URL is {endpoint}, plain HTTP, which the S3 client refuses unless AWS_ALLOW_HTTP=true is set: set it (a local or test server), or use an https:// endpoint"
        )));
    }
    Ok(())
}

/// Why an S3 client for `bucket` could not be built, in a sentence naming the variable to set
/// when one of the key pair is missing (object_store says `Missing SecretAccessKey`).
fn configuration_error(bucket: &Url, e: &object_store::Error) -> Error {
    let text = e.to_string();
    let missing = [
        (
            "Missing SecretAccessKey",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ACCESS_KEY_ID",
        ),
        (
            "Missing AccessKeyId",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
        ),
    ]
    .into_iter()
    .find(|(said, _, _)| text.contains(said));
    match missing {
        Some((_, unset, set)) => Error::input(format!(
            "cannot configure S3 access for {bucket}: {set} is set but {unset} is not; set both, or neither to use the instance's or profile's credentials"
        )),
        None => Error::input(format!("cannot configure S3 access for {bucket}: {text}")),
    }
}

/// Retries of failed storage requests: object_store's defaults (10 retries within 180 s),
/// or `IDEMLAKE_S3_MAX_RETRIES` / `IDEMLAKE_S3_RETRY_TIMEOUT_SECS`.
fn retry_config() -> Result<RetryConfig> {
    let mut cfg = RetryConfig::default();
    let config = crate::config::get();
    if let Some(n) = config.s3_max_retries {
        cfg.max_retries = n as usize;
    }
    if let Some(s) = config.s3_retry_timeout_secs {
        cfg.retry_timeout = std::time::Duration::from_secs(s);
    }
    Ok(cfg)
}

/// Buckets proven in this process to refuse a second put-if-absent.
fn proven() -> &'static Mutex<HashMap<String, ()>> {
    static PROVEN: OnceLock<Mutex<HashMap<String, ()>>> = OnceLock::new();
    PROVEN.get_or_init(Default::default)
}

fn is_proven(bucket: &Url) -> bool {
    proven()
        .lock()
        .expect("not poisoned")
        .contains_key(bucket.as_str())
}

/// Where a table keeps the proof that its endpoint honours conditional PUT.
const PROBE_RECORD: &str = "_idemlake/conditional-put.json";

/// `name` under the table at `url` (its path within the bucket).
fn table_key(url: &Url, name: &str) -> Path {
    let prefix = url.path().trim_matches('/');
    Path::from(format!(
        "{}{}{name}",
        prefix,
        if prefix.is_empty() { "" } else { "/" }
    ))
}

/// The endpoint S3 requests for `bucket` go to (the configured one, or AWS's for the region),
/// as recorded with a probe: a proof holds for the server it was made on.
fn endpoint_of(bucket: &Url) -> String {
    use object_store::aws::AmazonS3ConfigKey as Key;
    let b = AmazonS3Builder::from_env().with_url(bucket.as_str());
    match b.get_config_value(&Key::Endpoint) {
        Some(e) => e.trim_end_matches('/').to_string(),
        None => format!(
            "aws:{}",
            b.get_config_value(&Key::Region)
                .unwrap_or_else(|| "us-east-1".into())
        ),
    }
}

/// What a probe left in the table's `_idemlake/` area.
#[derive(serde::Serialize, serde::Deserialize)]
struct ProbeRecord {
    endpoint: String,
    proven_at: String,
    proven_by: String,
}

/// Read the table's probe record; if it was made on this endpoint within
/// `IDEMLAKE_S3_PROBE_MAX_AGE_SECS`, the bucket counts as proven for this process (one GET,
/// made while the table loads, instead of a probe's three requests in every process).
pub async fn recall_probe(url: &Url) {
    let Ok(Some((bucket, store))) = store_for(url) else {
        return;
    };
    let max_age = crate::config::get().s3_probe_max_age_secs;
    if max_age == 0 || is_proven(&bucket) {
        return;
    }
    let record = match store.get(&table_key(url, PROBE_RECORD)).await {
        Ok(r) => match r.bytes().await {
            Ok(b) => serde_json::from_slice::<ProbeRecord>(&b).ok(),
            Err(_) => None,
        },
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => {
            tracing::debug!("cannot read the conditional-PUT record: {e}");
            None
        }
    };
    let Some(record) = record else { return };
    let endpoint = endpoint_of(&bucket);
    let age = record
        .proven_at
        .parse::<jiff::Timestamp>()
        .ok()
        .map(|at| jiff::Timestamp::now().as_second() - at.as_second());
    match age {
        Some(age) if record.endpoint == endpoint && (0..max_age as i64).contains(&age) => {
            tracing::debug!(
                endpoint,
                age,
                "conditional PUT proven by the table's record"
            );
            proven()
                .lock()
                .expect("not poisoned")
                .insert(bucket.to_string(), ());
        }
        _ => tracing::debug!(
            recorded = record.endpoint,
            endpoint,
            ?age,
            "the conditional-PUT record is stale or for another endpoint: probing again"
        ),
    }
}

/// Check that the server refuses a second put-if-absent of the same key, before the first
/// commit: once per bucket in a process, and not at all while the table's record of an
/// earlier probe on the same endpoint is fresh (see [`recall_probe`]). A probe that passes
/// writes that record.
pub async fn probe_conditional_put(url: &Url) -> Result<()> {
    let Some((bucket, store)) = store_for(url)? else {
        return Ok(());
    };
    if is_proven(&bucket) {
        return Ok(());
    }
    let key = table_key(url, &format!("_idemlake_probe/{}", uuid::Uuid::new_v4()));
    let create = || PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    store
        .put_opts(&key, PutPayload::from_static(b"1"), create())
        .await
        .map_err(|e| Error::runtime(format!("S3 probe write to {bucket} failed: {e}")))?;
    let second = store
        .put_opts(&key, PutPayload::from_static(b"2"), create())
        .await;
    let _ = store.delete(&key).await;
    match second {
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) => {
            proven()
                .lock()
                .expect("not poisoned")
                .insert(bucket.to_string(), ());
            let record = ProbeRecord {
                endpoint: endpoint_of(&bucket),
                proven_at: jiff::Timestamp::now().to_string(),
                proven_by: format!("idemlake {}", env!("CARGO_PKG_VERSION")),
            };
            let body = serde_json::to_vec_pretty(&record).expect("serialisable");
            if let Err(e) = store
                .put(&table_key(url, PROBE_RECORD), PutPayload::from(body))
                .await
            {
                tracing::warn!("conditional PUT is honoured, but recording that failed: {e}");
            }
            Ok(())
        }
        Ok(_) => Err(Error::runtime(format!(
            "the S3 server for {bucket} ignores conditional PUT (If-None-Match: *): two writers could both create the same Delta log version and one commit would be lost. Use a server that honours it (AWS S3, MinIO, SeaweedFS >= 4.18, Cloudflare R2); nothing was written"
        ))),
        Err(e) => Err(Error::runtime(format!("S3 probe of {bucket} failed: {e}"))),
    }
}

pub mod count;
pub mod logcache;
pub mod wrap;

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 37: the independent checks and the read-back read S3 through a client of their
    /// own: a new one per call, never the process's store for the bucket (whose Delta log
    /// cache the task's own reads fill), and without a log cache of its own.
    #[test]
    fn an_own_store_is_a_new_client_without_the_log_cache() {
        let url = Url::parse("s3://bucket/lake/t/").unwrap();
        let (_, shared) = store_for(&url).unwrap().unwrap();
        let (bucket, own) = own_store_for(&url).unwrap().unwrap();
        let (_, again) = own_store_for(&url).unwrap().unwrap();
        assert_eq!(bucket.as_str(), "s3://bucket/");
        assert!(!Arc::ptr_eq(&shared, &own));
        assert!(!Arc::ptr_eq(&own, &again));
        assert!(!own.to_string().contains("LogCache"), "{own}");
        assert!(own.to_string().starts_with("AmazonS3"), "{own}");
        assert!(
            own_store_for(&Url::parse("file:///tmp/x/").unwrap())
                .unwrap()
                .is_none()
        );
    }
}
