//! Object-store requests counted per process, by kind, for the `-v` summary a command ends
//! with (`storage requests: GET 12 (3.1 MiB), PUT 4 (90 KiB), LIST 2, …`).
//!
//! Every S3 store idemlake builds is wrapped in [`Counted`] (see `store_for`); one call on the
//! store is one HTTP request (ranged reads go through `get_opts` one range at a time),
//! except: a multipart upload counts once as `PUT` whatever its parts; a listing counts once
//! per call however many pages it takes (1,000 keys a page); `DELETE` counts objects (S3
//! deletes up to 1,000 per request); object_store's own retries happen inside the wrapped
//! store and are not seen here.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// Requests and bytes by kind (`GET`, `HEAD`, `PUT`, `LIST`, `DELETE`, `COPY`).
fn counts() -> &'static Mutex<BTreeMap<&'static str, (u64, u64)>> {
    static COUNTS: std::sync::OnceLock<Mutex<BTreeMap<&'static str, (u64, u64)>>> =
        std::sync::OnceLock::new();
    COUNTS.get_or_init(Default::default)
}

fn add(kind: &'static str, bytes: u64) {
    let mut c = counts().lock().expect("not poisoned");
    let e = c.entry(kind).or_default();
    e.0 += 1;
    e.1 += bytes;
}

/// The requests counted so far, by kind: `(requests, bytes)`.
pub fn snapshot() -> BTreeMap<&'static str, (u64, u64)> {
    counts().lock().expect("not poisoned").clone()
}

/// One line for the log, or `None` if no request was made.
pub fn summary() -> Option<String> {
    let c = snapshot();
    if c.is_empty() {
        return None;
    }
    let total: u64 = c.values().map(|(n, _)| n).sum();
    let parts: Vec<String> = c
        .iter()
        .map(|(k, (n, b))| {
            if *b > 0 {
                format!("{k} {n} ({})", human(*b))
            } else {
                format!("{k} {n}")
            }
        })
        .collect();
    Some(format!("storage requests: {total} ({})", parts.join(", ")))
}

fn human(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// A store whose requests are counted.
#[derive(Debug)]
pub struct Counted(pub Arc<dyn ObjectStore>);

impl fmt::Display for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[async_trait]
impl ObjectStore for Counted {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        add("PUT", payload.content_length() as u64);
        self.0.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        add("PUT", 0);
        self.0.put_multipart_opts(location, opts).await
    }
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let head = options.head;
        let result = self.0.get_opts(location, options).await;
        let bytes = match &result {
            Ok(r) if !head => r.range.end - r.range.start,
            _ => 0,
        };
        add(if head { "HEAD" } else { "GET" }, bytes);
        result
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.0
            .delete_stream(locations.inspect(|_| add("DELETE", 0)).boxed())
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        add("LIST", 0);
        self.0.list(prefix)
    }
    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        add("LIST", 0);
        self.0.list_with_offset(prefix, offset)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        add("LIST", 0);
        self.0.list_with_delimiter(prefix).await
    }
    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        add("COPY", 0);
        self.0.copy_opts(from, to, options).await
    }
}
