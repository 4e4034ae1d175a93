//! Landing zones: Hive-style directory sources (`events/dt=2026-11-28/part-*.parquet`).
//!
//! A landing zone holds years of small files and keeps receiving more. A window must read only
//! the directories its filters can reach, and must depend only on what it read:
//! - **Partition columns.** Each `key=value` path segment is a typed column of the source
//!   (declared with `partition_columns`, or inferred from the first directory: DATE, BIGINT or
//!   VARCHAR). The schema of the files is taken from one file (the first in path order), not
//!   from every footer.
//! - **Pruned listing.** [`LandingZone::files`] walks the directories level by level with
//!   delimiter listings, keeping at each level only the values the filters on the partition
//!   columns known so far can accept (ranges included), and lists files only in the leaves
//!   kept: a day window lists the root and its day.
//! - **Pinned listings.** Every directory listing is kept for the run the first time it is
//!   made ([`Listing::Pinned`]): every window of a backfill, and every chunk of a shared scan,
//!   sees the same files for a directory, and lists it once. A window's pin is the files its
//!   filters select in those listings; right before its commit the same selection is listed
//!   again, afresh ([`Listing::Fresh`]), and any difference (a file added, removed or rewritten
//!   in the window's own directories, a new directory its filters accept) fails the window.
//!   Files landing anywhere else never do.
//!
//! Routes: the runner reads a landing zone through [`ZoneTable`] (this module's listing). The
//! independent checks read it through `plain`: DataFusion's listing table with the same
//! partition columns and schema, listed level by level by a walk of its own that shares
//! nothing with this one (no pins, the reading session's store). The plain twin
//! (`IDEMLAKE_ACCELERATE=0`) and a remote engine read it as DataFusion's own `ListingTable`
//! (the whole prefix listed), so no walk of idemlake's is on both sides of a check; a zone of
//! levels without names, which only `plain` reads, is the exception on the plain twin.

mod casts;
mod exact;
mod glob;
mod groups;
mod headers;
pub mod late;
mod layout;
mod local;
mod pins;
mod plain;
mod provider;
mod prune;
mod register;
mod whole;

pub use exact::{exact_file_table, read_schema};
pub use glob::{Glob, split as split_glob};
pub use headers::{incomplete, read_header};
pub use layout::compression_of;
pub use pins::{describe, differences, identities, scan_filters};
pub use plain::Plain;
pub use provider::ZoneTable;
pub use register::{Route, listing_options, register};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::listing::{ListingOptions, ListingTableUrl, PartitionedFile};
use datafusion::logical_expr::Expr;
use datafusion::prelude::SessionContext;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore};

use crate::error::{Error, Result};
use crate::task::{PartitionColumn, PartitionKind, Partitioning, SchemaFrom};

/// Directory listings in flight at once.
const CONCURRENT_LISTINGS: usize = 32;

/// Whether a listing may come from the run's pinned listings or must be made afresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// The first listing of each directory this run made (made now if there is none).
    Pinned,
    /// A new listing, which leaves the pinned ones as they are.
    Fresh,
}

/// One directory as listed: its files (hidden ones left out) and its subdirectories.
#[derive(Debug, Clone)]
struct Dir {
    files: Vec<ObjectMeta>,
    dirs: Vec<Path>,
}

impl Dir {
    /// A delimiter listing's visible entries: non-empty files and directories whose names
    /// start with neither `.` nor `_`.
    fn of(listed: object_store::ListResult) -> Dir {
        let visible = |p: &Path| {
            p.filename()
                .is_some_and(|n| !n.starts_with('.') && !n.starts_with('_'))
        };
        Dir {
            files: listed
                .objects
                .into_iter()
                .filter(|m| m.size > 0 && visible(&m.location))
                .collect(),
            dirs: listed.common_prefixes.into_iter().filter(visible).collect(),
        }
    }
}

/// A Hive-partitioned directory source (see the module documentation).
#[derive(Debug)]
pub struct LandingZone {
    pub alias: String,
    url: ListingTableUrl,
    store: Arc<dyn ObjectStore>,
    /// The partition columns, one per directory level, and their Arrow types.
    columns: Vec<(String, DataType)>,
    /// The files' own columns (partition columns excluded).
    file_schema: SchemaRef,
    options: ListingOptions,
    /// The glob of a `.../*/part-*.parquet` location (its root is `url`).
    glob: Option<glob::Glob>,
    /// Whether the columns come from the last file in path order (`schema_from = "last"`).
    last: bool,
    /// Whether directories are named `key=value` (Hive); `false`: each level's directory name
    /// is its value (`partitioning = "directories"`).
    named: bool,
    /// A text zone's compression, from its first file's name (`part-0.csv.gz`): every route
    /// reads its files through DataFusion's decompression.
    compression: Option<FileCompressionType>,
    pinned: Mutex<HashMap<Path, Arc<Dir>>>,
}

impl LandingZone {
    /// The landing zone behind source `uri`, or `None` when it is not one: a single file, a
    /// directory without `key=value` levels (with `partitioning = "auto"`), or `none`.
    /// `options` carry the format (from the session's defaults); reads one listing per level
    /// down the first directories and one file's schema. `listed_root`: the root's delimiter listing
    /// if the caller made one (kept as the run's pinned listing of the root, not made again).
    pub async fn open(
        ctx: &SessionContext,
        (alias, uri): (&str, &str),
        (partitioning, schema_from): (&Partitioning, SchemaFrom),
        options: ListingOptions,
        listed_root: Option<object_store::ListResult>,
    ) -> Result<Option<LandingZone>> {
        let Some((root, glob)) = split_location(uri, partitioning)? else {
            return Ok(None);
        };
        let uri = root.as_str();
        let url = ListingTableUrl::parse(uri)
            .map_err(|e| Error::input(format!("invalid source location `{uri}`: {e}")))?;
        if glob.is_none() && !url.is_collection() && !is_directory(&url) {
            return Ok(None);
        }
        let url = if url.is_collection() {
            url
        } else {
            ListingTableUrl::parse(format!("{}/", uri.trim_end_matches('/')))?
        };
        let store = ctx.runtime_env().object_store(&url)?;
        let mut zone = LandingZone {
            alias: alias.to_string(),
            url,
            store,
            columns: Vec::new(),
            file_schema: Arc::new(Schema::empty()),
            options,
            glob,
            last: schema_from == SchemaFrom::Last,
            named: !matches!(partitioning, Partitioning::Directories(_)),
            compression: None,
            pinned: Mutex::new(HashMap::new()),
        };
        if let Some(listed) = listed_root.filter(|_| zone.glob.is_none()) {
            let dir = Arc::new(Dir::of(listed));
            let key = zone.url.prefix().clone();
            zone.pinned.lock().expect("not poisoned").insert(key, dir);
        }
        let mut other = None;
        let first = zone.first_file_compressed(&mut other).await?;
        let Some((levels, candidates)) = first else {
            return Err(zone.no_files(other).await);
        };
        let at = &candidates[0].location;
        let Some(columns) = zone.columns_of(partitioning, &levels, at)? else {
            return Ok(None);
        };
        zone.columns = columns;
        let (schema, first) = zone.newest_complete(ctx, candidates).await?;
        no_clash(&zone.columns, &schema, &first)?;
        zone.file_schema = schema;
        Ok(Some(zone))
    }

    /// The partition columns of a zone whose first file (`at`) lies below directories
    /// `levels` (`key`, value; no key without names), as `partitioning` declares or infers
    /// them; `None`: not a landing zone.
    fn columns_of(
        &self,
        partitioning: &Partitioning,
        levels: &[(String, String)],
        at: &Path,
    ) -> Result<Option<Vec<(String, DataType)>>> {
        Ok(Some(match partitioning {
            Partitioning::Directories(declared) => {
                if levels.len() != declared.len() {
                    return Err(Error::input(format!(
                        "partitioning = \"directories\" declares {} levels in partition_columns, but the first file under {} ({at}) lies {} directories below it",
                        declared.len(),
                        self.url.as_str(),
                        levels.len()
                    )));
                }
                declared
                    .iter()
                    .map(|c| (c.name.clone(), arrow_type(c.kind)))
                    .collect()
            }
            Partitioning::Hive(declared) if !declared.is_empty() => {
                check_levels(declared, levels, at)?;
                declared
                    .iter()
                    .map(|c| (c.name.clone(), arrow_type(c.kind)))
                    .collect()
            }
            Partitioning::Hive(_) if levels.is_empty() => {
                return Err(Error::input(format!(
                    "partitioning = \"hive\", but the first file under {} ({at}) lies in no key=value directory",
                    self.url.as_str(),
                )));
            }
            _ if levels.is_empty() && self.glob.is_none() => return Ok(None),
            _ => levels
                .iter()
                .map(|(k, v)| (k.clone(), arrow_type(PartitionKind::infer(v))))
                .collect(),
        }))
    }

    /// The zone's root location (without a glob's file pattern).
    pub fn root(&self) -> &ListingTableUrl {
        &self.url
    }

    /// The partition columns with their types, in directory order.
    pub fn partition_columns(&self) -> &[(String, DataType)] {
        &self.columns
    }

    /// The source's schema: the files' columns, then the partition columns (never NULL), as
    /// DataFusion's listing table has it.
    pub fn table_schema(&self) -> SchemaRef {
        self.table_schema_of(&self.file_schema)
    }

    /// [`LandingZone::table_schema`] with the files' columns as `file_schema` has them.
    fn table_schema_of(&self, file_schema: &SchemaRef) -> SchemaRef {
        let mut fields: Vec<Field> = file_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.extend(
            self.partition_fields()
                .into_iter()
                .map(|f| f.as_ref().clone()),
        );
        Arc::new(Schema::new(fields).with_metadata(file_schema.metadata().clone()))
    }

    /// The partition columns as fields (never NULL).
    pub fn partition_fields(&self) -> Vec<arrow::datatypes::FieldRef> {
        self.columns
            .iter()
            .map(|(n, t)| Arc::new(Field::new(n, t.clone(), false)))
            .collect()
    }

    /// The files `filters` can reach, with their partition values: directories are listed level
    /// by level, only those whose values the filters on known partition columns accept (filters
    /// naming other columns are ignored here).
    pub async fn files(&self, filters: &[Expr], how: Listing) -> Result<Vec<PartitionedFile>> {
        Ok(self.reached(filters, how).await?.0)
    }

    /// [`LandingZone::files`], and the partition values of the deepest directories `filters`
    /// reach that exist (none: nothing has landed; a zone without levels is its root, one).
    pub async fn reached(
        &self,
        filters: &[Expr],
        how: Listing,
    ) -> Result<(Vec<PartitionedFile>, Vec<Vec<ScalarValue>>)> {
        let names: Vec<&str> = self.columns.iter().map(|(n, _)| n.as_str()).collect();
        let filters: Vec<&Expr> = filters
            .iter()
            .filter(|f| {
                datafusion::datasource::listing::helpers::expr_applicable_for_cols(&names, f)
            })
            .collect();
        let root = self.url.prefix().clone();
        let mut level: Vec<(Path, Vec<ScalarValue>)> = vec![(root, Vec::new())];
        for depth in 0..self.columns.len() {
            let listed: Vec<(Path, Vec<ScalarValue>, Arc<Dir>)> =
                futures::stream::iter(level.into_iter().map(|(p, values)| async move {
                    let dir = self.list(&p, how).await?;
                    Ok::<_, Error>((p, values, dir))
                }))
                .buffered(CONCURRENT_LISTINGS)
                .try_collect()
                .await?;
            let mut children: Vec<(Path, Vec<ScalarValue>)> = Vec::new();
            for (_, values, dir) in listed {
                if depth > 0
                    && let Some(f) = dir.files.iter().find(|m| self.is_source_file(&m.location))
                {
                    return Err(self.off_layout(&f.location, "a file"));
                }
                for child in &dir.dirs {
                    let Some(v) = self.value_of(child, depth)? else {
                        continue;
                    };
                    let mut vs = values.clone();
                    vs.push(v);
                    children.push((child.clone(), vs));
                }
            }
            level = prune::keep(&self.columns, children, depth, &filters)?;
        }
        let leaves: Vec<(Vec<ScalarValue>, Arc<Dir>)> =
            futures::stream::iter(level.into_iter().map(|(p, values)| async move {
                let dir = self.list(&p, how).await?;
                Ok::<_, Error>((values, dir))
            }))
            .buffered(CONCURRENT_LISTINGS)
            .try_collect()
            .await?;
        let mut out = Vec::new();
        let reached: Vec<Vec<ScalarValue>> = leaves.iter().map(|(v, _)| v.clone()).collect();
        for (values, dir) in leaves {
            // Below the last level (hidden `_`/`.` directories are not listed).
            let nested = dir.dirs.iter().find(|_| !self.columns.is_empty());
            if let Some(d) = nested {
                return Err(self.off_layout(d, "a directory"));
            }
            for meta in &dir.files {
                if !self.is_source_file(&meta.location) {
                    self.not_read(&meta.location)?;
                    continue;
                }
                let mut pf = PartitionedFile::from(meta.clone());
                pf.partition_values = values.clone();
                out.push(pf);
            }
        }
        out.sort_by(|a, b| a.object_meta.location.cmp(&b.object_meta.location));
        Ok((out, reached))
    }

    /// The directory at `path`, listed with a delimiter (pinned or afresh, see [`Listing`]).
    async fn list(&self, path: &Path, how: Listing) -> Result<Arc<Dir>> {
        if how == Listing::Pinned
            && let Some(d) = self.pinned.lock().expect("not poisoned").get(path)
        {
            return Ok(d.clone());
        }
        let prefix = (!path.as_ref().is_empty()).then_some(path);
        let fast = match self.url.scheme() {
            "file" => {
                let p = path.clone();
                tokio::task::spawn_blocking(move || local::list(&p))
                    .await
                    .unwrap_or(None)
            }
            _ => None,
        };
        let listed = match fast {
            Some(l) => l,
            None => {
                let mut l = self.store.list_with_delimiter(prefix).await.map_err(|e| {
                    Error::runtime(format!(
                        "cannot list {} of source `{}`: {e}",
                        path, self.alias
                    ))
                })?;
                if self.url.scheme() == "file" {
                    // As `local::list` records them: inode and change time as the version.
                    for o in &mut l.objects {
                        o.version = crate::storage::identity::local_version_at(&o.location);
                    }
                }
                l
            }
        };
        let dir = Arc::new(Dir::of(listed));
        if how == Listing::Fresh {
            return Ok(dir);
        }
        let mut pinned = self.pinned.lock().expect("not poisoned");
        Ok(pinned.entry(path.clone()).or_insert(dir).clone())
    }
}

/// A zone's root and glob; `None` when `partitioning = "none"` leaves a plain location alone.
fn split_location(
    uri: &str,
    partitioning: &Partitioning,
) -> Result<Option<(String, Option<glob::Glob>)>> {
    let (root, glob) = glob::split(uri)?;
    if glob.is_some() && matches!(partitioning, Partitioning::Directories(_)) {
        return Err(Error::input(format!(
            "partitioning = \"directories\" names the levels of a directory location, but `{uri}` is a glob: give the zone's root directory as uri"
        )));
    }
    if let Some(g) = &glob
        && *partitioning == Partitioning::None
        && !g.dirs.is_empty()
    {
        return Err(Error::input(format!(
            "partitioning = \"none\", but the glob `{uri}` has directory levels: they are read as key=value partitions"
        )));
    }
    if *partitioning == Partitioning::None && glob.is_none() {
        return Ok(None);
    }
    Ok(Some((root, glob)))
}

/// The Arrow type of a partition column's values.
fn arrow_type(kind: PartitionKind) -> DataType {
    match kind {
        PartitionKind::Date => DataType::Date32,
        PartitionKind::Int => DataType::Int64,
        PartitionKind::Text => DataType::Utf8,
    }
}

/// Declared columns must name the directory levels above the first file, in order.
fn check_levels(
    declared: &[PartitionColumn],
    found: &[(String, String)],
    file: &Path,
) -> Result<()> {
    let names: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
    let want: Vec<&str> = declared.iter().map(|c| c.name.as_str()).collect();
    if names != want {
        return Err(Error::input(format!(
            "partition_columns names [{}], but the directories above the first file ({file}) are [{}]",
            want.join(", "),
            names.join(", ")
        )));
    }
    Ok(())
}

/// Whether a local path without a trailing `/` is a directory (remote URLs must end in `/`
/// to name a prefix).
/// A partition column that is also a column of the files is the task's mistake.
fn no_clash(columns: &[(String, DataType)], schema: &Schema, first: &ObjectMeta) -> Result<()> {
    match columns
        .iter()
        .find(|(c, _)| schema.field_with_name(c).is_ok())
    {
        Some(clash) => Err(Error::input(format!(
            "partition column `{}` is also a column of the files ({}); rename the directory level or the column",
            clash.0, first.location
        ))),
        None => Ok(()),
    }
}

fn is_directory(url: &ListingTableUrl) -> bool {
    url.scheme() == "file"
        && url
            .as_str()
            .strip_prefix("file://")
            .is_some_and(|p| std::path::Path::new(&percent_decode(p)).is_dir())
}

/// A path segment's text, `%XX` escapes decoded (as Hive, Spark and DataFusion write them).
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}
