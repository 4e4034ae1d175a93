//! Storage: one object store per location, shared by DataFusion sources and Delta tables.
//!
//! Local paths need nothing. `s3://bucket/…` locations get an S3 client configured only from
//! the standard `AWS_*` environment (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ALLOW_HTTP`, …) — nothing
//! provider-specific, path-style addressing unless `AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true`.
//! Delta commits are put-if-absent (`If-None-Match: *`); before the first commit to a bucket,
//! a probe checks that the server really refuses to overwrite, because a server that ignores
//! the header would let two writers both create the same log version (a lost commit).
//! Invariant: credentials are never formatted into messages; errors are passed through
//! `cli::redact` before printing anyway.

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
    let s3: Arc<dyn ObjectStore> = Arc::new(
        AmazonS3Builder::from_env()
            .with_url(bucket.as_str())
            .with_retry(retry_config()?)
            .build()
            .map_err(|e| Error::input(format!("cannot configure S3 access for {bucket}: {e}")))?,
    );
    let store: Arc<dyn ObjectStore> = Arc::new(wrap::Wrapped(count::Counted(s3)));
    map.insert(bucket.to_string(), store.clone());
    Ok(Some((bucket, store)))
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

/// Check once per bucket that the server refuses a second put-if-absent of the same key.
pub async fn probe_conditional_put(url: &Url) -> Result<()> {
    static PROBED: OnceLock<Mutex<HashMap<String, bool>>> = OnceLock::new();
    let Some((bucket, store)) = store_for(url)? else {
        return Ok(());
    };
    if PROBED
        .get_or_init(Default::default)
        .lock()
        .expect("not poisoned")
        .contains_key(bucket.as_str())
    {
        return Ok(());
    }
    let prefix = url.path().trim_matches('/');
    let key = Path::from(format!(
        "{}{}_idemlake_probe/{}",
        prefix,
        if prefix.is_empty() { "" } else { "/" },
        uuid::Uuid::new_v4()
    ));
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
            PROBED
                .get()
                .expect("initialised")
                .lock()
                .expect("not poisoned")
                .insert(bucket.to_string(), true);
            Ok(())
        }
        Ok(_) => Err(Error::runtime(format!(
            "the S3 server for {bucket} ignores conditional PUT (If-None-Match: *): two writers could both create the same Delta log version and one commit would be lost. Use a server that honours it (AWS S3, MinIO, SeaweedFS >= 4.18, Cloudflare R2); nothing was written"
        ))),
        Err(e) => Err(Error::runtime(format!("S3 probe of {bucket} failed: {e}"))),
    }
}

pub mod count;
pub mod wrap;
