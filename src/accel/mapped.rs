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
//! - A source truncated while a run reads it does not kill the process: a page of one of
//!   these maps that no longer has a file behind it raises SIGBUS, and the guard (see
//!   `guard`) puts a zero page in its place and records the fault against that file. The
//!   read completes with zeros, and a window that reaches the file fails before its commit
//!   (the run asks [`faulted`] and re-fingerprints its sources); windows reading other files
//!   are not affected, and a SIGBUS anywhere else in the process is not the guard's to handle.
//!   `IDEMLAKE_MMAP=0` turns maps off.

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

mod guard;

pub use guard::faulted;

/// A map of a source file, registered with the SIGBUS guard for as long as it lives.
struct Guarded {
    /// Declared first: unregistered before the map is unmapped.
    _registered: guard::Registered,
    map: memmap2::Mmap,
}

impl AsRef<[u8]> for Guarded {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

/// Ranges of fewer bytes than this (after grouping) are read, not mapped: a map costs
/// `mmap`, its page faults and `munmap` (with a TLB shootdown on every core running the
/// process), more than copying a small range. A landing zone of 17,520 files of ~10 KB took
/// 14.7 s to load mapped, 9.1 s read (issue 35).
const MAP_MIN: u64 = 1 << 20;

/// Ranges closer than this share one map (a row group's column chunks are adjacent; columns
/// the query does not read, between them, may be large and are not mapped).
const GAP: u64 = 1 << 20;

/// Map the ranges of the file at `path` (nearby ranges share one map) and slice each out.
fn map_ranges(
    path: &std::path::Path,
    location: &Path,
    ranges: &[Range<u64>],
) -> object_store::Result<Vec<Bytes>> {
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
        let all = map_one(&file, lo..hi, location)?;
        for &i in &order[at..end] {
            let r = &ranges[i];
            out[i] = all.slice((r.start - lo) as usize..(r.end - lo) as usize);
        }
        at = end;
    }
    Ok(out)
}

/// The bytes `range` of `file` (the file at `location`): a registered map, or read without
/// one when the range is small (see [`MAP_MIN`]) or the guard has no slot left.
fn map_one(
    file: &std::fs::File,
    range: Range<u64>,
    location: &Path,
) -> object_store::Result<Bytes> {
    let len = (range.end - range.start) as usize;
    let read = || -> object_store::Result<Bytes> {
        let mut buf = vec![0u8; len];
        std::os::unix::fs::FileExt::read_exact_at(file, &mut buf, range.start).map_err(generic)?;
        Ok(Bytes::from(buf))
    };
    if range.end - range.start < MAP_MIN {
        return read();
    }
    // SAFETY: the map is read-only and private to this process; it is registered with the
    // guard before any of its pages is read, so a page that vanishes because the file is
    // truncated reads as zeros and is recorded against the file (see `guard`).
    let map = unsafe {
        memmap2::MmapOptions::new()
            .offset(range.start)
            .len(len)
            .populate()
            .map(file)
    }
    .map_err(generic)?;
    match guard::register(map.as_ptr() as usize, len, location.as_ref()) {
        Some(registered) => Ok(Bytes::from_owner(Guarded {
            _registered: registered,
            map,
        })),
        None => {
            drop(map);
            read()
        }
    }
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
        let location = location.clone();
        // Mapping with populate faults the pages in here, off the decoding threads.
        Some(
            tokio::task::spawn_blocking(move || map_ranges(&path, &location, &ranges))
                .await
                .map_err(generic)
                .and_then(|r| r),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(path: &std::path::Path) -> Path {
        Path::from(path.to_str().unwrap())
    }

    fn map(path: &std::path::Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        map_ranges(path, &loc(path), ranges)
    }

    #[test]
    fn ranges_are_the_files_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let ranges = [5000..5100, 10..20, 19_990..20_000, 7..7, 15..30, 0..20_000];
        let got = map(&path, &ranges).unwrap();
        for (r, b) in ranges.iter().zip(&got) {
            assert_eq!(&b[..], &data[r.start as usize..r.end as usize]);
        }
        let past_end: [Range<u64>; 2] = [0..1, 0..20_001];
        let err = map(&path, &past_end).unwrap_err().to_string();
        assert!(err.contains("outside"), "{err}");
        // Ranges far apart get maps of their own; their bytes are still the file's.
        let far = dir.path().join("far.bin");
        let mut big = vec![0u8; 5 << 20];
        big[..4].copy_from_slice(b"head");
        big[(4 << 20)..(4 << 20) + 4].copy_from_slice(b"tail");
        std::fs::write(&far, &big).unwrap();
        let spread = [(4 << 20)..(4 << 20) + 4, 0..4, (2 << 20)..(2 << 20)];
        let got = map(&far, &spread).unwrap();
        assert_eq!(
            (&got[0][..], &got[1][..], got[2].len()),
            (&b"tail"[..], &b"head"[..], 0)
        );
        let missing = map(&dir.path().join("nope"), &ranges).unwrap_err();
        assert!(matches!(missing, object_store::Error::NotFound { .. }));
    }

    /// Truncate `path` to one page, under its maps.
    fn truncate(path: &std::path::Path) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .set_len(4096)
            .unwrap();
    }

    /// Issue 14 §4: a source truncated while mapped killed the process with SIGBUS. Now the
    /// read completes (zeros) and the truncation is recorded for the run to fail the window.
    #[test]
    fn a_file_truncated_under_its_map_reads_zeros_and_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let whole: Range<u64> = 0..(1 << 20);
        let got = map(&path, std::slice::from_ref(&whole)).unwrap();
        assert_eq!(got[0][(1 << 19) + 1], 7);
        truncate(&path);
        // Past the new end: the page is gone; reading it must not kill the process.
        let sum: u64 = got[0][(1 << 19)..].iter().map(|b| u64::from(*b)).sum();
        assert_eq!(sum, 0);
        let at = loc(&path).to_string();
        assert_eq!(faulted(|l| l == at), vec![at.clone()]);
        // Still recorded once the map is gone.
        drop(got);
        assert_eq!(faulted(|l| l == at), vec![at.clone()]);
    }

    /// Found measuring issue 35's landing zone: its 17,520 small files, each range mapped,
    /// loaded in 14.7 s, and in 9.1 s with maps off. A range below `MAP_MIN` is read (a copy
    /// the file's later truncation cannot touch, nothing recorded); a large one is mapped.
    #[test]
    fn a_landing_zones_small_files_are_read_not_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("small.parquet");
        std::fs::write(&path, vec![5u8; 4 * MAP_MIN as usize]).unwrap();
        // Farther apart than GAP: each range on its own.
        let small: Range<u64> = 8192..(8192 + 10_000);
        let large: Range<u64> = (2 * MAP_MIN)..(4 * MAP_MIN);
        let got = map(&path, &[small, large]).unwrap();
        truncate(&path);
        assert!(
            got[0].iter().all(|b| *b == 5),
            "a read range keeps its bytes"
        );
        let tail: u64 = got[1].iter().map(|b| u64::from(*b)).sum();
        assert_eq!(tail, 0, "a mapped range shows the truncation");
        let at = loc(&path).to_string();
        assert_eq!(faulted(|l| l == at), vec![at.clone()]);
    }

    /// Defect (issue 37): one truncated mapped source set a process-wide flag that failed
    /// every later window of the process, whatever it read. The fault belongs to the file
    /// whose map faulted: reads of other files (before or after) are not tainted.
    #[test]
    fn a_truncated_mapped_source_does_not_fail_windows_reading_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.bin"), dir.path().join("b.bin"));
        std::fs::write(&a, vec![7u8; 1 << 20]).unwrap();
        std::fs::write(&b, vec![9u8; 1 << 20]).unwrap();
        let whole: Range<u64> = 0..(1 << 20);
        let got_a = map(&a, std::slice::from_ref(&whole)).unwrap();
        let got_b = map(&b, std::slice::from_ref(&whole)).unwrap();
        truncate(&a);
        let sum: u64 = got_a[0][(1 << 19)..].iter().map(|b| u64::from(*b)).sum();
        assert_eq!(sum, 0);
        drop(got_a);
        assert_eq!(got_b[0][(1 << 20) - 1], 9);
        let later = map(&b, std::slice::from_ref(&whole)).unwrap();
        assert_eq!(later[0][(1 << 19) + 1], 9);
        let (la, lb) = (loc(&a).to_string(), loc(&b).to_string());
        assert_eq!(faulted(|l| l == lb), Vec::<String>::new());
        assert_eq!(faulted(|l| l == la), vec![la.clone()]);
    }

    /// The child half of the test below: a file mapped outside this module (not registered),
    /// truncated, then read. Runs only when the parent asks for it.
    #[test]
    fn sigbus_child_reads_a_truncated_foreign_map() {
        let Some(how) = std::env::var_os("IDEMLAKE_SIGBUS_CHILD") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        // A registered map first, so the handler is installed.
        let ours = dir.path().join("ours.bin");
        std::fs::write(&ours, vec![1u8; MAP_MIN as usize]).unwrap();
        let all: Range<u64> = 0..MAP_MIN;
        map(&ours, std::slice::from_ref(&all)).unwrap();
        if how == "raise" {
            // SAFETY: raising a signal at this process.
            unsafe { libc::raise(libc::SIGBUS) };
            println!("a SIGBUS sent to the process was swallowed");
            return;
        }
        let path = dir.path().join("foreign.bin");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a test map; the read below is expected to raise SIGBUS.
        let foreign = unsafe { memmap2::Mmap::map(&file).unwrap() };
        truncate(&path);
        let v = std::hint::black_box(&foreign[..])[(1 << 19) + 1];
        println!("read {v} from a page that is gone");
    }

    /// Defect (issue 37): the SIGBUS handler mapped a zero page over ANY faulting address, so
    /// a fault elsewhere in the process (another library's map) read zeros silently. A
    /// SIGBUS outside idemlake's own maps gets the default action: the process dies of it.
    #[test]
    fn sigbus_outside_idemlakes_maps_is_not_swallowed() {
        // A fault in a map that is not ours, then a SIGBUS another process could have sent.
        for how in ["fault", "raise"] {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "accel::mapped::tests::sigbus_child_reads_a_truncated_foreign_map",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("IDEMLAKE_SIGBUS_CHILD", how)
                .output()
                .unwrap();
            use std::os::unix::process::ExitStatusExt as _;
            assert_eq!(
                out.status.signal(),
                Some(libc::SIGBUS),
                "{how}: {:?}\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
