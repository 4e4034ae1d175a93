//! Where a landing zone's files may lie: the `key=value` directories of its partition levels,
//! typed, and the files at the last level; anything a window reaches elsewhere is an error
//! (rows it would silently miss).

use std::sync::Arc;

use datafusion::common::ScalarValue;
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use object_store::ObjectMeta;
use object_store::path::Path;

use super::{LandingZone, Listing, percent_decode};

/// Incomplete newest files `schema_from = "last"` passes over before it gives up.
const MAX_PASSED_OVER: usize = 64;
use crate::error::{Error, Result};

impl LandingZone {
    /// The value of partition column `depth` a directory names (`key=value`, its last
    /// segment), typed; `None` for a directory of another key (not part of the source).
    pub(super) fn value_of(&self, dir: &Path, depth: usize) -> Result<Option<ScalarValue>> {
        let (name, ty) = &self.columns[depth];
        let Some(segment) = dir.filename() else {
            return Ok(None);
        };
        let (key, raw) = match self.named {
            true => match segment.split_once('=') {
                Some(kv) => kv,
                None => return Ok(None),
            },
            // `partitioning = "directories"`: the directory's name is the value.
            false => (name.as_str(), segment),
        };
        if key != name {
            // Beside the zone's own directories, the root may hold others; below them, a
            // directory of another key holds rows no window reads.
            return match depth {
                0 => Ok(None),
                _ => Err(self.off_layout(dir, "a partition directory")),
            };
        }
        let text = percent_decode(raw);
        if text == HIVE_NULL {
            // Hive's spelling of a NULL partition value (Spark, DuckDB and polars read NULL);
            // DataFusion's listing table, the plain twin's route, cannot read it as such.
            return Err(Error::input(format!(
                "directory {} of source `{}` holds rows whose partition column `{name}` is NULL (`{HIVE_NULL}`), which idemlake does not read (no window's filter would accept them): move the directory out of the zone",
                self.shown(dir),
                self.alias
            )));
        }
        match ScalarValue::try_from_string(text.clone(), ty) {
            Ok(v) if !v.is_null() => Ok(Some(v)),
            _ => Err(Error::input(format!(
                "directory {} of source `{}`: `{text}` is not a {ty} value of partition column `{name}` (if the type was inferred from the first directory, declare it in partition_columns; a directory that is not part of the zone, move it out)",
                self.shown(dir),
                self.alias
            ))),
        }
    }

    /// `path` as a user knows it: `/tmp/…` on local disk, `s3://bucket/…` on an object store
    /// (object_store's paths have no leading `/` and no bucket).
    pub(super) fn shown(&self, path: &Path) -> String {
        match self.url.scheme() {
            "file" => format!("/{path}"),
            _ => format!("{}{path}", self.url.object_store().as_str()),
        }
    }

    /// The error for `what` at `location`, found where the zone's layout (its partition levels)
    /// has none: rows the window would silently miss.
    pub(super) fn off_layout(&self, location: &Path, what: &str) -> Error {
        let layout: String = self
            .columns
            .iter()
            .map(|(n, _)| match self.named {
                true => format!("{n}=…/"),
                false => format!("<{n}>/"),
            })
            .collect();
        Error::input(format!(
            "source `{}`: {} is {what} outside the zone's layout `{layout}` (its partition levels, from partition_columns or its first file): a window would not read it; move it into the layout or declare the partition columns to match; nothing was read",
            self.alias,
            self.shown(location)
        ))
    }

    /// Whether an object under the zone is one of its files: the format's extension, and the
    /// glob's file pattern if there is one.
    pub(super) fn is_source_file(&self, location: &Path) -> bool {
        location.as_ref().ends_with(&self.options.file_extension)
            && self
                .glob
                .as_ref()
                .is_none_or(|g| location.filename().is_some_and(|name| g.matches_file(name)))
    }

    /// The compression of the text file named `location`, if the zone reads such files
    /// (CSV or JSON, not yet compressed, the name the format's extension then a compression
    /// suffix, or any name a glob matches).
    pub(super) fn compressed(&self, location: &Path) -> Option<(FileCompressionType, String)> {
        use datafusion::datasource::file_format::{csv::CsvFormat, json::JsonFormat};
        let format = &self.options.format;
        let text = format.downcast_ref::<CsvFormat>().is_some()
            || format.downcast_ref::<JsonFormat>().is_some();
        let name = location.filename()?;
        let ext = &self.options.file_extension;
        let named = self.glob.is_some() || (!ext.is_empty() && name.contains(&format!("{ext}.")));
        let suffix = format!(".{}", name.rsplit_once('.')?.1);
        (text && self.compression.is_none() && named)
            .then(|| compression_of(name))
            .flatten()
            .map(|c| (c, suffix))
    }

    /// Read the zone's files as compressed with `c`: its format decompresses, and a directory
    /// zone's files are those named with the format's extension and `suffix` (`.gz`).
    pub(super) fn compress(&mut self, (c, suffix): (FileCompressionType, String)) {
        self.compression = Some(c);
        if self.glob.is_none() {
            let ext = format!("{}{suffix}", self.options.file_extension);
            self.options.file_extension = ext;
        }
        self.options = self.compressed_options(self.options.clone());
    }

    /// `options` (another session's, or the zone's own) with the zone's compression and file
    /// extension.
    pub(super) fn compressed_options(
        &self,
        mut options: datafusion::datasource::listing::ListingOptions,
    ) -> datafusion::datasource::listing::ListingOptions {
        use datafusion::datasource::file_format::{csv::CsvFormat, json::JsonFormat};
        let Some(c) = self.compression else {
            return options;
        };
        if let Some(csv) = options.format.downcast_ref::<CsvFormat>() {
            let csv = CsvFormat::default().with_options(csv.options().clone());
            options.format = Arc::new(csv.with_file_compression_type(c));
        } else if let Some(json) = options.format.downcast_ref::<JsonFormat>() {
            let json = JsonFormat::default().with_options(json.options().clone());
            options.format = Arc::new(json.with_file_compression_type(c));
        }
        options.file_extension = self.options.file_extension.clone();
        options
    }

    /// A file a window reaches that is not one of the zone's files: an error if its name says it
    /// holds data of the zone's format by another name (compressed, `part-1.csv.gz`; JSON
    /// lines as `.jsonl` or `.ndjson`), rows the window would silently miss. Other files
    /// (`_SUCCESS`, manifests) are left alone, as are all when a glob names the files.
    pub(super) fn not_read(&self, location: &Path) -> Result<()> {
        let ext = self.options.file_extension.as_str();
        let name = location.filename().unwrap_or_default();
        let json = ext == ".json"
            && [".jsonl", ".ndjson"]
                .iter()
                .any(|e| name.ends_with(e) || name.contains(&format!("{e}.")));
        // Compression suffixes as DataFusion knows them; not `.tmp`, `.part` or `.bak` (files
        // being written or set aside).
        let compressed = !ext.is_empty()
            && [
                ".gz", ".bz2", ".xz", ".zst", ".zstd", ".lz4", ".snappy", ".deflate",
            ]
            .iter()
            .any(|c| name.contains(&format!("{ext}{c}")));
        // A plain file of the format in a compressed zone (`part-0.csv` beside `.csv.gz`).
        let plain = self.compression.is_some()
            && ext
                .rsplit_once('.')
                .is_some_and(|(base, _)| !base.is_empty() && name.ends_with(base));
        if self.glob.is_none() && plain {
            return Err(Error::input(format!(
                "source `{}`: {} lies in the window's directories but is not read: this zone's files are compressed `{ext}` files (like its first file); compress it the same way, or move it out of the zone; nothing was read",
                self.alias,
                self.shown(location),
            )));
        }
        if self.glob.is_none() && (json || compressed) {
            return Err(Error::input(format!(
                "source `{}`: {} lies in the window's directories but is not read: a landing zone reads uncompressed `{ext}` files only (not compressed ones, nor other extensions); {}; nothing was read",
                self.alias,
                self.shown(location),
                match json {
                    true =>
                        "rename it, name such files with a glob location (`events/*/*.jsonl`), or move it out of the zone",
                    false => "decompress or rename it, or move it out of the zone",
                }
            )));
        }
        Ok(())
    }

    /// The first file in path order (the last with `schema_from = "last"`) and the
    /// `key=value` levels above it: one pinned listing
    /// per level down the first directories (files directly in a directory come first; with a
    /// glob, only at its depth and under directories it matches). `other`: the first visible
    /// file seen without the format's extension.
    pub(super) async fn first_file(
        &self,
        other: &mut Option<Path>,
        passed_over: &[Path],
    ) -> Result<Option<(Vec<(String, String)>, Vec<ObjectMeta>)>> {
        let depth_of_files = self.glob.as_ref().map(|g| g.dirs.len());
        // Depth-first, smallest path first: (directory, depth, levels above it).
        let mut stack = vec![(self.url.prefix().clone(), 0usize, Vec::new())];
        while let Some((path, depth, levels)) = stack.pop() {
            let dir = self.list(&path, Listing::Pinned).await?;
            let ext = &self.options.file_extension;
            if let Some(f) = dir
                .files
                .iter()
                .find(|f| !f.location.as_ref().ends_with(ext))
            {
                other.get_or_insert_with(|| f.location.clone());
            }
            if depth_of_files.is_none_or(|d| d == depth) {
                let files = dir
                    .files
                    .iter()
                    .filter(|m| self.is_source_file(&m.location))
                    .filter(|m| !passed_over.contains(&m.location));
                let files = self.schema_candidates(files);
                if let Some(f) = files.first() {
                    let levels_below = match self.named {
                        true => dir.dirs.iter().any(is_hive_dir),
                        false => !dir.dirs.is_empty(),
                    };
                    if depth == 0 && self.glob.is_none() && levels_below {
                        return Err(Error::input(format!(
                            "source `{}`: {} lies in the zone's root beside its key=value directories (its partitions): no window would read its rows by the partitions' layout; move it into a partition directory, or out of the zone; nothing was read",
                            self.alias,
                            self.shown(&f.location)
                        )));
                    }
                    return Ok(Some((levels, files)));
                }
            }
            let mut next = self.next_dirs(&dir, depth);
            // Popped smallest first (or, for `schema_from = "last"`, largest first).
            match self.last {
                true => next.sort(),
                false => next.sort_by(|a, b| b.cmp(a)),
            }
            for child in next {
                let segment = child.filename().unwrap_or_default();
                let mut levels = levels.clone();
                if !self.named {
                    levels.push((String::new(), percent_decode(segment)));
                    stack.push((child.clone(), depth + 1, levels));
                    continue;
                }
                match segment.split_once('=') {
                    Some((k, v)) => levels.push((k.to_string(), percent_decode(v))),
                    None if self.glob.is_some() => {
                        return Err(Error::input(format!(
                            "directory {} matches the glob of source `{}`, but a glob's directory levels must be key=value directories (Hive partitions)",
                            self.shown(child),
                            self.alias
                        )));
                    }
                    None => {}
                }
                stack.push((child.clone(), depth + 1, levels));
            }
        }
        Ok(None)
    }

    /// The directories of `dir` (at `depth`) the search for the first file goes down.
    fn next_dirs<'a>(&self, dir: &'a super::Dir, depth: usize) -> Vec<&'a Path> {
        match &self.glob {
            Some(g) => dir
                .dirs
                .iter()
                .filter(|p| g.matches_dir(depth, p.filename().unwrap_or_default()))
                .collect(),
            // The `key=value` directories, smallest first, the next one tried when one
            // holds no file: a stray `aaa/` or `_temporary/` sorting before the
            // partitions, or an empty first day, does not hide the zone's layout.
            None if !self.named => dir.dirs.iter().collect(),
            None => {
                let partitions: Vec<&Path> = dir.dirs.iter().filter(|p| is_hive_dir(p)).collect();
                match partitions.is_empty() {
                    true => dir.dirs.iter().min().into_iter().collect(),
                    false => partitions,
                }
            }
        }
    }

    /// Why the zone has no first file: a location that does not exist (nothing at all under
    /// it, hidden files included) or holding files of another extension (`other`) is the
    /// task's mistake (exit 2); one that exists but holds no data files yet — empty, or only
    /// `_SUCCESS`, folder markers and other hidden files — is retryable (exit 1): files may
    /// still land.
    pub(super) async fn no_files(&self, other: Option<Path>) -> Error {
        let at = self.url.as_str();
        // With a glob the files have no required extension (it names them itself).
        let ext = match self.options.file_extension.as_str() {
            "" => "data",
            e => e,
        };
        if let Some(o) = other {
            return Error::input(format!(
                "no {ext} files under {at}, but {} is there: check the source's format (and its uri)",
                self.shown(&o)
            ));
        }
        let exists = if self.url.scheme() == "file" {
            Ok(std::path::Path::new("/")
                .join(self.url.prefix().as_ref())
                .is_dir())
        } else {
            let mut listed = self.store.list(Some(self.url.prefix()));
            futures::StreamExt::next(&mut listed)
                .await
                .transpose()
                .map(|o| o.is_some())
        };
        match exists {
            Ok(true) => Error::runtime(format!(
                "no {ext} files under {at} yet: the location exists but holds no data files (files may still land; retry later)"
            )),
            Ok(false) => Error::input(format!(
                "no {ext} files under {at}: nothing is there; check the source's uri (and its format)"
            )),
            Err(e) => e.into(),
        }
    }
}

impl LandingZone {
    /// The files of one directory to take the zone's schema from, in order: the first in path
    /// order; with `schema_from = "last"` every one, newest first (the newest may still be
    /// being written: see `LandingZone::schema_of`).
    fn schema_candidates<'a>(
        &self,
        files: impl Iterator<Item = &'a ObjectMeta>,
    ) -> Vec<ObjectMeta> {
        let mut files: Vec<ObjectMeta> = files.cloned().collect();
        files.sort_by(|a, b| match self.last {
            true => b.location.cmp(&a.location),
            false => a.location.cmp(&b.location),
        });
        files.truncate(if self.last { files.len() } else { 1 });
        files
    }

    /// [`LandingZone::first_file`], the zone's compression found on the way: a compressed
    /// text file (`part-0.csv.gz`) first in path order, before any plain one, or the first
    /// file a glob names, makes the zone read compressed files (and looks again).
    pub(super) async fn first_file_compressed(
        &mut self,
        other: &mut Option<Path>,
    ) -> Result<Option<(Vec<(String, String)>, Vec<ObjectMeta>)>> {
        let first = self.first_file(other, &[]).await?;
        let named = match (&first, &*other) {
            (Some((_, c)), Some(o)) if self.glob.is_none() && *o < c[0].location => Some(o.clone()),
            (Some((_, c)), _) => Some(c[0].location.clone()),
            (None, o) => o.clone(),
        };
        match named.as_ref().and_then(|n| self.compressed(n)) {
            Some(c) => {
                self.compress(c);
                *other = None;
                self.first_file(other, &[]).await
            }
            None => Ok(first),
        }
    }

    /// The files' schema and the file it came from: the first of `candidates` whose schema
    /// can be read. With `schema_from = "last"`, the newest complete file: the newest
    /// directory's files still being written are passed over, then, if all are, that
    /// directory's, up to [`MAX_PASSED_OVER`] files.
    pub(super) async fn newest_complete(
        &self,
        ctx: &datafusion::prelude::SessionContext,
        mut candidates: Vec<ObjectMeta>,
    ) -> Result<(arrow::datatypes::SchemaRef, ObjectMeta)> {
        let mut passed_over: Vec<Path> = Vec::new();
        loop {
            let tried: Vec<Path> = candidates.iter().map(|m| m.location.clone()).collect();
            if let Some(found) = self.schema_of(ctx, candidates).await? {
                return Ok(found);
            }
            passed_over.extend(tried);
            if passed_over.len() > MAX_PASSED_OVER {
                return Err(Error::runtime(format!(
                    "source `{}`: none of its newest {} files can be read yet (still being written?); retry later",
                    self.alias,
                    passed_over.len()
                )));
            }
            let mut other = None;
            candidates = match self.first_file(&mut other, &passed_over).await? {
                Some((_, c)) => c,
                None => return Err(self.no_files(other).await),
            };
        }
    }

    /// The files' schema, from the first of `candidates` whose schema can be read (and that
    /// file). With `schema_from = "last"` the candidates are a directory's files, newest
    /// first, and one still being written (its footer or last line not there yet: a format
    /// error, not a storage one) is passed over for the next; `None` when every one was.
    pub(super) async fn schema_of(
        &self,
        ctx: &datafusion::prelude::SessionContext,
        candidates: Vec<ObjectMeta>,
    ) -> Result<Option<(arrow::datatypes::SchemaRef, ObjectMeta)>> {
        use datafusion::error::DataFusionError;
        let state = ctx.state();
        for file in candidates {
            let read = self
                .options
                .format
                .infer_schema(&state, &self.store, std::slice::from_ref(&file))
                .await;
            match read {
                Ok(schema) => return Ok(Some((schema, file))),
                Err(e @ (DataFusionError::ParquetError(_) | DataFusionError::ArrowError(..)))
                    if self.last =>
                {
                    tracing::info!(file = %file.location, "schema_from = \"last\": passed over an incomplete file: {e}");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }
}

/// Whether `dir` is a `key=value` directory of a zone (not hidden: `_temporary/`, `.x=1/`).
fn is_hive_dir(dir: &Path) -> bool {
    dir.filename()
        .is_some_and(|n| n.contains('=') && !n.starts_with(['.', '_']))
}

/// The directory value Hive writers use for a NULL partition value.
const HIVE_NULL: &str = "__HIVE_DEFAULT_PARTITION__";

/// The compression a file's name says it has (its last suffix), if any DataFusion reads:
/// `events.csv.gz` is gzip.
pub fn compression_of(location: &str) -> Option<FileCompressionType> {
    let name = location.rsplit('/').next().unwrap_or(location);
    let (_, suffix) = name.rsplit_once('.')?;
    match suffix.to_ascii_lowercase().as_str() {
        "gz" | "gzip" => Some(FileCompressionType::GZIP),
        "bz2" => Some(FileCompressionType::BZIP2),
        "xz" => Some(FileCompressionType::XZ),
        "zst" | "zstd" => Some(FileCompressionType::ZSTD),
        _ => None,
    }
}
