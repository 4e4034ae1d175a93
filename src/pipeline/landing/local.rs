//! Listing a local landing zone's directory with `read_dir`.
//!
//! object_store's local store lists a directory through `walkdir` following links, with a
//! `stat` and a URL round trip per entry: ~45 ms for a root of 4,380 day directories, made
//! twice a window (the run's pinned listing and the re-check before the commit). Here a
//! directory entry costs its `d_type` and a file its `stat`; the objects are the ones
//! object_store would list (same locations, sizes, modification times and ETags; with a
//! version, see `storage::identity`), for the names it spells the same: a directory holding any other name (one object_store would
//! percent-encode) is listed by object_store instead ([`list`] returns `None`).

use std::os::unix::fs::MetadataExt;
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ListResult, ObjectMeta};

/// The directory at `location` (an object_store path of the local filesystem), listed as
/// object_store's `list_with_delimiter` would; `None` if a name needs object_store's own
/// spelling, or the directory cannot be read (object_store then says why).
pub fn list(location: &Path) -> Option<ListResult> {
    let dir = std::path::PathBuf::from(format!("/{location}"));
    let mut out = ListResult {
        common_prefixes: Vec::new(),
        objects: Vec::new(),
    };
    for entry in std::fs::read_dir(&dir).ok()? {
        let entry = entry.ok()?;
        let name = entry.file_name().into_string().ok()?;
        if !plain(&name) {
            return None;
        }
        let child = location.clone().join(name.as_str());
        let mut kind = entry.file_type().ok()?;
        if kind.is_symlink() {
            kind = std::fs::metadata(entry.path()).ok()?.file_type();
        }
        if kind.is_dir() {
            out.common_prefixes.push(child);
        } else if kind.is_file() {
            out.objects
                .push(meta(&std::fs::metadata(entry.path()).ok()?, child));
        }
    }
    out.common_prefixes.sort();
    Some(out)
}

/// Whether a name is spelled the same as an object_store path part and a file name.
fn plain(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('#')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'='))
}

/// A file's metadata as object_store's local store reports it (its ETag is
/// `{inode:x}-{mtime µs:x}-{size:x}`), with its version (inode and change time, see
/// `storage::identity`), which object_store leaves empty.
fn meta(m: &std::fs::Metadata, location: Path) -> ObjectMeta {
    let modified = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    let micros = modified
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros();
    ObjectMeta {
        location,
        last_modified: DateTime::<Utc>::from(modified),
        size: m.len(),
        e_tag: Some(format!("{:x}-{micros:x}-{:x}", m.ino(), m.len())),
        version: Some(crate::storage::identity::local_version(m)),
    }
}

#[cfg(test)]
mod tests {
    use object_store::ObjectStore;
    use object_store::local::LocalFileSystem;

    use super::*;

    /// The same listing as object_store's, directories and files alike; a name it would
    /// spell otherwise hands the directory back to it.
    #[tokio::test]
    async fn a_local_listing_equals_object_stores() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["dt=2026-11-01", "dt=2026-11-02", "_tmp", ".hidden"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        for f in ["part-0.parquet", "b.csv", "_SUCCESS"] {
            std::fs::write(dir.path().join(f), f.as_bytes()).unwrap();
        }
        std::os::unix::fs::symlink(
            dir.path().join("dt=2026-11-01"),
            dir.path().join("dt=2026-11-03"),
        )
        .unwrap();
        let location = Path::from_filesystem_path(dir.path()).unwrap();
        let ours = list(&location).unwrap();
        let mut theirs = LocalFileSystem::new()
            .list_with_delimiter(Some(&location))
            .await
            .unwrap();
        theirs.objects.sort_by(|a, b| a.location.cmp(&b.location));
        let mut objects = ours.objects.clone();
        objects.sort_by(|a, b| a.location.cmp(&b.location));
        // The version is ours (inode and change time); the rest is object_store's.
        assert!(objects.iter().all(|o| o.version.is_some()));
        for o in &mut objects {
            o.version = None;
        }
        assert_eq!(ours.common_prefixes, theirs.common_prefixes);
        assert_eq!(objects, theirs.objects);
        std::fs::write(dir.path().join("a b.parquet"), b"x").unwrap();
        assert!(list(&location).is_none(), "a name object_store encodes");
    }
}
