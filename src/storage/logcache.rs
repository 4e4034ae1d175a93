//! Delta log files read from object storage, kept in memory for the rest of the process.
//!
//! A commit file (`_delta_log/<version>.json`) and a checkpoint (`<version>.checkpoint.parquet`,
//! or a part of a multi-part one) never change once written: put-if-absent creates a commit
//! exactly once, and a checkpoint of a version holds that version's state whoever writes it.
//! delta-rs nevertheless reads them more than once per process: loading a table reads every
//! commit after the checkpoint twice (once for the protocol and metadata, once for the files)
//! and the checkpoint in eleven ranged reads, and every later load (a read-back at an older
//! version, `status`, a dependency) reads them again. On S3 each read is a round trip.
//!
//! [`LogCache`] serves those reads from the first one: each such file is fetched whole, once
//! (concurrent first readers share the one request), and every later read — whole or ranged —
//! is cut from memory. What it does not do, by design:
//! - it never stores what this process *writes*: a commit is always read back from storage
//!   the first time (the read-back's independence), and only storage's bytes are ever cached;
//! - `_last_checkpoint`, the run log and data files are not log entries and pass through;
//! - a failed read (missing file, network) is not remembered;
//! - conditional or versioned reads and HEADs pass through;
//! - a file larger than [`MAX_OBJECT`], or one that would take the cache past [`MAX_TOTAL`],
//!   passes through as asked.
//!
//! Plain twin: `IDEMLAKE_LOG_CACHE=0` (or `IDEMLAKE_ACCELERATE=0`) leaves it out.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{
    Attributes, GetOptions, GetResult, GetResultPayload, ObjectMeta, ObjectStore, Result,
};
use tokio::sync::OnceCell;

use crate::storage::wrap::Intercept;

/// Largest log file kept (a bigger checkpoint is read as delta-rs asks).
pub const MAX_OBJECT: u64 = 128 << 20;
/// Most bytes kept in all.
pub const MAX_TOTAL: u64 = 512 << 20;

/// A log file as storage returned it.
struct Cached {
    data: Bytes,
    meta: ObjectMeta,
    attributes: Attributes,
}

/// One path's entry: empty until its first read ends; `None` once known too large to keep.
type Slot = OnceCell<Option<Arc<Cached>>>;

/// A store whose Delta log files are read once (see the module doc).
pub struct LogCache {
    inner: Arc<dyn ObjectStore>,
    entries: Mutex<HashMap<Path, Arc<Slot>>>,
    bytes: AtomicU64,
}

impl LogCache {
    pub fn new(inner: Arc<dyn ObjectStore>) -> LogCache {
        LogCache {
            inner,
            entries: Mutex::new(HashMap::new()),
            bytes: AtomicU64::new(0),
        }
    }

    /// The whole file at `location` (fetched now if it is the first read), or `None` when it
    /// is not kept here.
    async fn whole(&self, location: &Path) -> Option<Result<Arc<Cached>>> {
        if !is_log_entry(location) {
            return None;
        }
        let cell = self
            .entries
            .lock()
            .expect("not poisoned")
            .entry(location.clone())
            .or_default()
            .clone();
        let got = cell
            .get_or_try_init(|| async {
                let r = self.inner.get_opts(location, GetOptions::default()).await?;
                let size = r.meta.size;
                if size > MAX_OBJECT || self.bytes.load(Ordering::Relaxed) + size > MAX_TOTAL {
                    // Dropping the body ends the transfer; the caller reads as it asked.
                    tracing::debug!(%location, size, "log file not cached (too large)");
                    return Ok(None);
                }
                let (meta, attributes) = (r.meta.clone(), r.attributes.clone());
                let data = r.bytes().await?;
                self.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                Ok::<_, object_store::Error>(Some(Arc::new(Cached {
                    data,
                    meta,
                    attributes,
                })))
            })
            .await;
        match got {
            Ok(Some(c)) => Some(Ok(c.clone())),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

/// Is `location` an immutable Delta log entry: `_delta_log/<20 digits>.json`,
/// `…/<20 digits>.checkpoint.parquet` or a part `…/<20 digits>.checkpoint.<10>.<10>.parquet`?
pub fn is_log_entry(location: &Path) -> bool {
    let path = location.as_ref();
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    if !(dir == "_delta_log" || dir.ends_with("/_delta_log")) {
        return false;
    }
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    let Some((version, rest)) = name.split_once('.') else {
        return false;
    };
    digits(version, 20)
        && match rest.strip_prefix("checkpoint.") {
            None => rest == "json",
            Some("parquet") => true,
            // A part of a multi-part checkpoint: `<10 digits>.<10 digits>.parquet`.
            Some(part) => part
                .strip_suffix(".parquet")
                .and_then(|p| p.split_once('.'))
                .is_some_and(|(a, b)| digits(a, 10) && digits(b, 10)),
        }
}

/// Does `options` ask for nothing but (a range of) the current object?
fn plain(options: &GetOptions) -> bool {
    !options.head
        && options.if_match.is_none()
        && options.if_none_match.is_none()
        && options.if_modified_since.is_none()
        && options.if_unmodified_since.is_none()
        && options.version.is_none()
}

impl fmt::Debug for LogCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LogCache({:?})", self.inner)
    }
}

impl fmt::Display for LogCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LogCache({})", self.inner)
    }
}

#[async_trait]
impl Intercept for LogCache {
    fn inner(&self) -> &dyn ObjectStore {
        self.inner.as_ref()
    }

    async fn get(&self, location: &Path, options: &GetOptions) -> Option<Result<GetResult>> {
        if !plain(options) {
            return None;
        }
        let cached = match self.whole(location).await? {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        let len = cached.data.len() as u64;
        // An invalid range is the wrapped store's to refuse, with its own error.
        let range = match &options.range {
            None => 0..len,
            Some(r) => r.as_range(len).ok()?,
        };
        let data = cached.data.slice(range.start as usize..range.end as usize);
        Some(Ok(GetResult {
            payload: GetResultPayload::Stream(Box::pin(futures::stream::once(
                async move { Ok(data) },
            ))),
            meta: cached.meta.clone(),
            range,
            attributes: cached.attributes.clone(),
        }))
    }

    async fn read_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> Option<Result<Vec<Bytes>>> {
        let cached = match self.whole(location).await? {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        let len = cached.data.len() as u64;
        if ranges.iter().any(|r| r.start > r.end || r.end > len) {
            return None;
        }
        Some(Ok(ranges
            .iter()
            .map(|r| cached.data.slice(r.start as usize..r.end as usize))
            .collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{GetRange, ObjectStoreExt, PutPayload};

    use crate::storage::wrap::Wrapped;

    #[test]
    fn only_immutable_log_entries_are_kept() {
        for (path, kept) in [
            ("t/_delta_log/00000000000000000007.json", true),
            ("_delta_log/00000000000000000599.checkpoint.parquet", true),
            (
                "t/_delta_log/00000000000000000599.checkpoint.0000000001.0000000002.parquet",
                true,
            ),
            ("t/_delta_log/_last_checkpoint", false),
            ("t/_delta_log/00000000000000000007.crc", false),
            ("t/_delta_log/0000000000000000007.json", false),
            ("t/_delta_log/00000000000000000007.json.tmp", false),
            ("t/00000000000000000007.json", false),
            ("t/_idemlake/runs/00000000000000000007.json", false),
            ("t/day=1/part-0.parquet", false),
        ] {
            assert_eq!(is_log_entry(&Path::from(path)), kept, "{path}");
        }
    }

    /// Counts the reads that reach the wrapped store.
    #[derive(Debug)]
    struct Reads(Arc<dyn ObjectStore>, Arc<AtomicU64>);
    impl fmt::Display for Reads {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "Reads")
        }
    }
    #[async_trait]
    impl Intercept for Reads {
        fn inner(&self) -> &dyn ObjectStore {
            self.0.as_ref()
        }
        async fn get(&self, _: &Path, _: &GetOptions) -> Option<Result<GetResult>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            None
        }
    }

    #[tokio::test]
    async fn a_log_entry_is_fetched_once_and_ranges_are_cut_from_it() {
        let mem: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let reads = Arc::new(AtomicU64::new(0));
        let counted: Arc<dyn ObjectStore> = Arc::new(Wrapped(Reads(mem.clone(), reads.clone())));
        let store = Wrapped(LogCache::new(counted));
        let log = Path::from("t/_delta_log/00000000000000000003.checkpoint.parquet");
        let other = Path::from("t/_delta_log/_last_checkpoint");
        mem.put(&log, PutPayload::from_static(b"0123456789"))
            .await
            .unwrap();
        mem.put(&other, PutPayload::from_static(b"abc"))
            .await
            .unwrap();

        let (a, b) = tokio::join!(store.get_range(&log, 2..5), store.get_range(&log, 7..10));
        assert_eq!(
            (a.unwrap().as_ref(), b.unwrap().as_ref()),
            (&b"234"[..], &b"789"[..])
        );
        let opts = GetOptions {
            range: Some(GetRange::Suffix(4)),
            ..Default::default()
        };
        let r = store.get_opts(&log, opts).await.unwrap();
        assert_eq!((r.range.clone(), r.meta.size), (6..10, 10));
        assert_eq!(r.bytes().await.unwrap().as_ref(), b"6789");
        let parts = store.get_ranges(&log, &[0..1, 9..10]).await.unwrap();
        assert_eq!(
            parts,
            vec![Bytes::from_static(b"0"), Bytes::from_static(b"9")]
        );
        assert_eq!(
            reads.load(Ordering::SeqCst),
            1,
            "one whole read of the log entry"
        );

        // Not a log entry: every read reaches storage.
        store.get(&other).await.unwrap();
        store.get(&other).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 3);

        // A missing entry is not remembered: once written, it is read.
        let next = Path::from("t/_delta_log/00000000000000000004.json");
        assert!(store.get(&next).await.is_err());
        mem.put(&next, PutPayload::from_static(b"{}"))
            .await
            .unwrap();
        assert_eq!(
            store
                .get(&next)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
                .as_ref(),
            b"{}"
        );

        // What this process writes is not cached: the next read goes to storage.
        let mine = Path::from("t/_delta_log/00000000000000000005.json");
        store
            .put(&mine, PutPayload::from_static(b"{\"add\":1}"))
            .await
            .unwrap();
        let before = reads.load(Ordering::SeqCst);
        store.get(&mine).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), before + 1);
    }
}
