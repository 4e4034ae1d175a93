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
//! - A source truncated while a run reads it does not kill the process: a page of a map that
//!   no longer has a file behind it raises SIGBUS, and the handler installed here (see
//!   `guard`) puts a zero page in its place and records it. The read completes with zeros,
//!   and the window fails before its commit: the run checks [`truncated`] and re-fingerprints
//!   its sources. `IDEMLAKE_MMAP=0` turns maps off.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;

use crate::storage::wrap::{Intercept, Wrapped};

/// The local file system, with range reads served from memory maps.
#[derive(Debug, Default)]
pub struct MappedLocal {
    inner: LocalFileSystem,
}

impl MappedLocal {
    /// The store to register for `file://` sources.
    pub fn for_sources() -> Arc<dyn ObjectStore> {
        Arc::new(Wrapped(MappedLocal::default()))
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

/// Set by the SIGBUS handler when a mapped page vanished (its file was truncated).
static TRUNCATED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The page size, read before the handler is installed (the handler only reads it).
static PAGE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(4096);

/// Whether a mapped source page vanished while this process read it: what was read from it
/// is zeros, not the file, and nothing computed from it may be published.
pub fn truncated() -> bool {
    TRUNCATED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Install the SIGBUS handler (once per process, before the first map).
fn guard() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: sysconf and sigaction are called with valid arguments; the handler only
        // makes async-signal-safe calls (mmap, signal) and touches atomics.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE.store(page as usize, std::sync::atomic::Ordering::SeqCst);
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        }
    });
}

/// SIGBUS on a page whose file is gone (`BUS_ADRERR`): map a zero page over it and carry on;
/// anything else gets the default action (the process stops, as it would have).
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: called by the kernel with a valid siginfo for SIGBUS.
    unsafe {
        let code = (*info).si_code;
        let addr = (*info).si_addr() as usize;
        let page = PAGE.load(std::sync::atomic::Ordering::SeqCst);
        if code == libc::BUS_ADRERR && addr != 0 {
            let at = (addr & !(page - 1)) as *mut libc::c_void;
            let zero = libc::mmap(
                at,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            );
            if zero != libc::MAP_FAILED {
                TRUNCATED.store(true, std::sync::atomic::Ordering::SeqCst);
                return;
            }
        }
        libc::signal(sig, libc::SIG_DFL);
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
        guard();
        // SAFETY: the map is read-only and private to this process; a page that vanishes
        // because the file is truncated is replaced by zeros and reported (see `guard`).
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
impl Intercept for MappedLocal {
    fn inner(&self) -> &dyn ObjectStore {
        &self.inner
    }
    async fn read_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> Option<object_store::Result<Vec<Bytes>>> {
        let path = match self.inner.path_to_filesystem(location) {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        let ranges = ranges.to_vec();
        // Mapping with populate faults the pages in here, off the decoding threads.
        Some(
            tokio::task::spawn_blocking(move || map_ranges(&path, &ranges))
                .await
                .map_err(generic)
                .and_then(|r| r),
        )
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

    /// Issue 14 §4: a source truncated while mapped killed the process with SIGBUS. Now the
    /// read completes (zeros) and the truncation is recorded for the run to fail the window.
    #[test]
    fn a_file_truncated_under_its_map_reads_zeros_and_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let whole: Range<u64> = 0..(1 << 20);
        let got = map_ranges(&path, std::slice::from_ref(&whole)).unwrap();
        assert_eq!(got[0][(1 << 19) + 1], 7);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4096)
            .unwrap();
        // Past the new end: the page is gone; reading it must not kill the process.
        let sum: u64 = got[0][(1 << 19)..].iter().map(|b| u64::from(*b)).sum();
        assert_eq!(sum, 0);
        assert!(truncated());
    }
}
