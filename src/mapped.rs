//! Local source files read through memory maps.
//!
//! DataFusion's Parquet reader asks the object store for byte ranges (a row group's column
//! chunks). `object_store`'s local store answers each with a fresh zero-filled buffer that it
//! then fills with `pread`: for a one-day window over a 200 MB source that is ~200 MB of new
//! memory — page faults, zeroing and a copy that cost a fifth of the run's CPU (perf, SF1
//! lineitem). Here ranges are slices of read-only maps of the file (nearby ranges share one;
//! columns skipped between them are not mapped): the decoder reads the page cache directly.
//! Every other operation (listing, heads, writes) is the local store's.
//!
//! Invariants:
//! - Only reads of ranges are mapped; the bytes are exactly the file's (a range beyond the
//!   end of the file is an error, as with the local store).
//! - A source must not be truncated while a run reads it: runs already require sources to
//!   stay put (they are fingerprinted and checked), and a truncated mapped file would stop
//!   the process (SIGBUS) instead of failing the window. `IDEMLAKE_MMAP=0` turns maps off.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// The local file system, with range reads served from memory maps.
#[derive(Debug, Default)]
pub struct MappedLocal {
    inner: LocalFileSystem,
}

impl MappedLocal {
    /// The store to register for `file://` sources: mapped unless `IDEMLAKE_MMAP=0`.
    pub fn for_sources() -> Arc<dyn ObjectStore> {
        if std::env::var("IDEMLAKE_MMAP").is_ok_and(|v| v.trim() == "0") {
            Arc::new(LocalFileSystem::new())
        } else {
            Arc::new(MappedLocal::default())
        }
    }
}

impl fmt::Display for MappedLocal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MappedLocal({})", self.inner)
    }
}

fn generic(e: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic {
        store: "MappedLocal",
        source: Box::new(e),
    }
}

/// Ranges closer than this share one map (a row group's column chunks are adjacent; columns
/// the query does not read, between them, may be large and are not mapped).
const GAP: u64 = 1 << 20;

/// Map the ranges of the file at `path` (nearby ranges share one map) and slice each out.
fn map_ranges(path: &std::path::Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
    let file = std::fs::File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            object_store::Error::NotFound {
                path: path.display().to_string(),
                source: Box::new(e),
            }
        } else {
            generic(e)
        }
    })?;
    let len = file.metadata().map_err(generic)?.len();
    if let Some(bad) = ranges.iter().find(|r| r.start > r.end || r.end > len) {
        return Err(generic(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!(
                "range {}..{} is outside {} ({len} bytes)",
                bad.start,
                bad.end,
                path.display()
            ),
        )));
    }
    let mut order: Vec<usize> = (0..ranges.len())
        .filter(|&i| !ranges[i].is_empty())
        .collect();
    order.sort_by_key(|&i| ranges[i].start);
    let mut out = vec![Bytes::new(); ranges.len()];
    let mut at = 0;
    while at < order.len() {
        // A group of ranges each starting within GAP of the group's end so far.
        let lo = ranges[order[at]].start;
        let mut hi = ranges[order[at]].end;
        let mut end = at + 1;
        while end < order.len() && ranges[order[end]].start <= hi + GAP {
            hi = hi.max(ranges[order[end]].end);
            end += 1;
        }
        // SAFETY: the map is read-only and private to this process; the module's invariant
        // is that sources are not truncated while a run reads them.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(lo)
                .len((hi - lo) as usize)
                .populate()
                .map(&file)
        }
        .map_err(generic)?;
        let all = Bytes::from_owner(map);
        for &i in &order[at..end] {
            let r = &ranges[i];
            out[i] = all.slice((r.start - lo) as usize..(r.end - lo) as usize);
        }
        at = end;
    }
    Ok(out)
}

#[async_trait::async_trait]
impl ObjectStore for MappedLocal {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }
    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        let path = self.inner.path_to_filesystem(location)?;
        let ranges = ranges.to_vec();
        // Mapping with populate faults the pages in here, off the decoding threads.
        tokio::task::spawn_blocking(move || map_ranges(&path, &ranges))
            .await
            .map_err(generic)?
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_the_files_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let ranges = [5000..5100, 10..20, 19_990..20_000, 7..7, 15..30, 0..20_000];
        let got = map_ranges(&path, &ranges).unwrap();
        for (r, b) in ranges.iter().zip(&got) {
            assert_eq!(&b[..], &data[r.start as usize..r.end as usize]);
        }
        let past_end: [Range<u64>; 2] = [0..1, 0..20_001];
        let err = map_ranges(&path, &past_end).unwrap_err().to_string();
        assert!(err.contains("outside"), "{err}");
        // Ranges far apart get maps of their own; their bytes are still the file's.
        let far = dir.path().join("far.bin");
        let mut big = vec![0u8; 5 << 20];
        big[..4].copy_from_slice(b"head");
        big[(4 << 20)..(4 << 20) + 4].copy_from_slice(b"tail");
        std::fs::write(&far, &big).unwrap();
        let spread = [(4 << 20)..(4 << 20) + 4, 0..4, (2 << 20)..(2 << 20)];
        let got = map_ranges(&far, &spread).unwrap();
        assert_eq!(
            (&got[0][..], &got[1][..], got[2].len()),
            (&b"tail"[..], &b"head"[..], 0)
        );
        let missing = map_ranges(&dir.path().join("nope"), &ranges).unwrap_err();
        assert!(matches!(missing, object_store::Error::NotFound { .. }));
    }
}
