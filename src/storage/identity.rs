//! The one identity of a source file, for every fingerprint, pin and change check: its path,
//! size, modification time, ETag and version as listed, and for a local file also its inode
//! and change time (`ctime`): a landing zone's listing records them as the file's version
//! ([`local_version`]), a fingerprint takes them when it lists. A file rewritten in place with its size and modification time
//! kept (`cp -p`, `rsync -t --inplace`) lists as it was — same inode, same size, same mtime,
//! so the same ETag object_store derives from them — but its change time moves: the kernel
//! sets it on every write and no tool can set it back.

use object_store::ObjectMeta;
use sha2::Digest;

/// See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileId {
    pub path: String,
    pub size: u64,
    /// Microseconds since the epoch.
    pub modified: i64,
    pub e_tag: Option<String>,
    pub version: Option<String>,
    /// A local file's inode and change time (nanoseconds since the epoch); `None` elsewhere,
    /// or when the file could not be read (it is gone: its listing says what was there).
    pub local: Option<(u64, i128)>,
}

impl FileId {
    /// The identity of the file `meta` lists; `local`: it was listed by object_store's local
    /// store (whose own mapping finds the file on disk), not an object store.
    pub fn of(meta: &ObjectMeta, local: bool) -> FileId {
        let local = local.then(|| local_identity(&meta.location)).flatten();
        FileId {
            path: meta.location.to_string(),
            size: meta.size,
            modified: meta.last_modified.timestamp_micros(),
            e_tag: meta.e_tag.clone(),
            version: meta.version.clone(),
            local,
        }
    }

    /// Feed the identity into a fingerprint.
    pub fn hash_into(&self, h: &mut sha2::Sha256) {
        h.update(self.path.as_bytes());
        h.update(self.size.to_le_bytes());
        h.update(self.modified.to_le_bytes());
        h.update(self.e_tag.as_deref().unwrap_or_default().as_bytes());
        h.update(self.version.as_deref().unwrap_or_default().as_bytes());
        if let Some((inode, changed)) = self.local {
            h.update(inode.to_le_bytes());
            h.update(changed.to_le_bytes());
        }
    }
}

/// Whether a location of URL scheme `scheme` is on the local file system.
pub fn is_local(scheme: &str) -> bool {
    scheme == "file"
}

/// The inode and change time of the local file at `location` (object_store's local store
/// path), if it can be read.
fn local_identity(location: &object_store::path::Path) -> Option<(u64, i128)> {
    let path = object_store::local::LocalFileSystem::new()
        .path_to_filesystem(location)
        .ok()?;
    Some(inode_and_change(&std::fs::metadata(path).ok()?))
}

fn inode_and_change(m: &std::fs::Metadata) -> (u64, i128) {
    use std::os::unix::fs::MetadataExt as _;
    (
        m.ino(),
        i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
    )
}

/// A local file's version as a listing records it (`ObjectMeta::version`, which object_store's
/// local store leaves empty): its inode and change time, taken when it is listed, so a pin
/// holds what the file was when the window's listing saw it.
pub fn local_version(m: &std::fs::Metadata) -> String {
    let (inode, changed) = inode_and_change(m);
    format!("{inode:x}-{changed:x}")
}

/// [`local_version`] of the local file at `location`, if it can be read.
pub fn local_version_at(location: &object_store::path::Path) -> Option<String> {
    local_identity(location).map(|(inode, changed)| format!("{inode:x}-{changed:x}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt as _;
    use object_store::local::LocalFileSystem;

    async fn listed(store: &LocalFileSystem, path: &std::path::Path) -> ObjectMeta {
        let location = object_store::path::Path::from_filesystem_path(path).unwrap();
        store.head(&location).await.unwrap()
    }

    /// Regression (a local file rewritten with the same size and modification time, as
    /// `cp -p` or `rsync -t` leave it, was seen as unchanged by the checks' memo and by the
    /// runner's change detection): its identity differs, by its change time.
    #[tokio::test]
    async fn a_local_file_rewritten_with_its_size_and_mtime_kept_has_another_identity() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a file%20here.parquet");
        std::fs::write(&path, b"first bytes").unwrap();
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        let store = LocalFileSystem::new();
        let root = true;
        let before = listed(&store, &path).await;
        let id = FileId::of(&before, root);
        assert!(id.local.is_some(), "{id:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
        // In place, same length, the modification time put back.
        std::fs::write(&path, b"other bytes").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let after = listed(&store, &path).await;
        assert_eq!(
            (before.size, before.last_modified, &before.e_tag),
            (after.size, after.last_modified, &after.e_tag),
            "the listing cannot tell"
        );
        assert_ne!(FileId::of(&after, root), id);
        assert_eq!(FileId::of(&after, root), FileId::of(&after, root));
        // An object store's file: its listing is its identity.
        assert_eq!(FileId::of(&after, false).local, None);
    }
}
