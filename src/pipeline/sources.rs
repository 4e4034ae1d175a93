//! Source registration: each `[sources.<alias>]` becomes a table in the DataFusion session.
//!
//! Invariants: a Delta source is pinned to the version current when the run starts (the whole
//! run, reconciliation included, reads that one version); file sources are fingerprinted
//! (object paths, sizes and modification times) so the run record says exactly what was read.
//! Registration reads schemas and listings only, never rows.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::common::ScalarValue;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::{provider_as_source, view::ViewTable};
use datafusion::logical_expr::{LogicalPlanBuilder, col, lit};
use datafusion::prelude::{CsvReadOptions, JsonReadOptions, ParquetReadOptions, SessionContext};
use deltalake::kernel::{EagerSnapshot, LogicalFileView};
use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use sha2::{Digest, Sha256};

use crate::engine::Engine;
use crate::error::{Error, Result, ResultExt};
pub use crate::report::record::SourceVersion;
use crate::task::{Format, Source};

/// The URL DataFusion uses for a source location (local absolute path or URL).
fn listing_url(uri: &str) -> Result<ListingTableUrl> {
    ListingTableUrl::parse(uri).input_err(format!("invalid source location `{uri}`"))
}

/// Register every source of a task in `ctx`; returns what was pinned/fingerprinted.
/// On a remote `engine` a Delta source is registered as its pinned Parquet files (see
/// `register_files`).
pub async fn register(
    ctx: &SessionContext,
    sources: &[Source],
    engine: &Engine,
) -> Result<Vec<SourceVersion>> {
    let mut out = Vec::with_capacity(sources.len());
    for s in sources {
        let v = register_one(ctx, s, None, engine)
            .await
            .map_err(|e| e.context(format!("source `{}` ({})", s.alias, s.uri)))?;
        out.push(v);
    }
    Ok(out)
}

/// Register every source again in another session (the independent checks' own), Delta
/// sources at the versions `pins` recorded, so both sessions read the same inputs.
pub async fn register_pinned(
    ctx: &SessionContext,
    sources: &[Source],
    pins: &[SourceVersion],
    engine: &Engine,
) -> Result<()> {
    for s in sources {
        let pin = pins
            .iter()
            .find(|p| p.alias == s.alias)
            .and_then(|p| p.version);
        register_one(ctx, s, pin, engine)
            .await
            .map_err(|e| e.context(format!("source `{}` ({})", s.alias, s.uri)))?;
    }
    Ok(())
}

async fn register_one(
    ctx: &SessionContext,
    s: &Source,
    pin: Option<i64>,
    engine: &Engine,
) -> Result<SourceVersion> {
    if s.uri.contains("://") {
        let url = url::Url::parse(&s.uri)
            .map_err(|e| Error::input(format!("invalid source URL: {e}")))?;
        if let Some((bucket, store)) = crate::storage::store_for(&url)? {
            register_store(ctx, &bucket, store);
        }
    }
    if s.format == Format::Delta {
        return register_delta(ctx, s, pin, engine).await;
    }
    register_file_source(ctx, s).await
}

/// Register a Delta source, at version `pin` if given (else the latest): through delta-rs on
/// the local engine, as its pinned Parquet files on a remote one.
async fn register_delta(
    ctx: &SessionContext,
    s: &Source,
    pin: Option<i64>,
    engine: &Engine,
) -> Result<SourceVersion> {
    let url = crate::task::project::location_url(&s.uri, std::path::Path::new("/"))?;
    let mut table = crate::delta::table::builder(&url)?.build()?;
    match pin {
        Some(v) => table.load_version(v as u64).await,
        None => table.load().await,
    }
    .map_err(|e| match &s.upstream {
        Some(up) if pin.is_none() => Error::runtime(format!(
            "it is task `{up}`'s table, which cannot be read yet (run `{up}` first): {e}"
        )),
        _ => Error::runtime(format!("cannot open delta table: {e}")),
    })?;
    let version = table.version();
    if engine.is_local() {
        table.update_datafusion_session(&ctx.state())?;
        let provider = table.table_provider().await?;
        ctx.register_table(s.alias.as_str(), provider)?;
    } else {
        register_files(ctx, &s.alias, &table).await?;
    }
    Ok(SourceVersion {
        alias: s.alias.clone(),
        format: s.format,
        version: version.map(|v| v as i64),
        files: None,
        fingerprint: None,
    })
}

/// Register a file source (Parquet, CSV or JSON) as a listing, fingerprinted.
async fn register_file_source(ctx: &SessionContext, s: &Source) -> Result<SourceVersion> {
    let url = listing_url(&s.uri)?;
    let store = ctx.runtime_env().object_store(&url)?;
    let (files, fingerprint) = fingerprint(store.as_ref(), &url).await?;
    if files == 0 {
        return Err(Error::runtime("no files found"));
    }
    // A single file keeps its own extension; a directory reads the format's usual extension.
    let ext = if url.is_collection() {
        None
    } else {
        std::path::Path::new(url.prefix().as_ref())
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .or(Some(String::new()))
    };
    let alias = s.alias.as_str();
    match s.format {
        Format::Parquet => {
            let mut o = ParquetReadOptions::default();
            if let Some(e) = &ext {
                o = o.file_extension(e);
            }
            ctx.register_parquet(alias, &s.uri, o).await?
        }
        Format::Csv => {
            let mut o = CsvReadOptions::new()
                .has_header(s.csv_header)
                .delimiter(s.csv_delimiter);
            if let Some(e) = &ext {
                o = o.file_extension(e);
            }
            ctx.register_csv(alias, &s.uri, o).await?
        }
        Format::Json => {
            let mut o = JsonReadOptions::default();
            if let Some(e) = &ext {
                o = o.file_extension(e);
            }
            ctx.register_json(alias, &s.uri, o).await?
        }
        Format::Delta => unreachable!("register_one registers delta sources"),
    }
    Ok(SourceVersion {
        alias: s.alias.clone(),
        format: s.format,
        version: None,
        files: Some(files),
        fingerprint: Some(fingerprint),
    })
}

/// What each file source looks like now (fingerprints), to detect inputs changing under a
/// run; Delta sources report their latest version.
pub async fn current_versions(
    ctx: &SessionContext,
    sources: &[Source],
) -> Result<Vec<SourceVersion>> {
    let mut out = Vec::new();
    for s in sources {
        if s.format == Format::Delta {
            let url = crate::task::project::location_url(&s.uri, std::path::Path::new("/"))?;
            let mut table = crate::delta::table::builder(&url)?.build()?;
            table.load().await?;
            out.push(SourceVersion {
                alias: s.alias.clone(),
                format: s.format,
                version: table.version().map(|v| v as i64),
                files: None,
                fingerprint: None,
            });
            continue;
        }
        let url = listing_url(&s.uri)?;
        let store = ctx.runtime_env().object_store(&url)?;
        let (files, fp) = fingerprint(store.as_ref(), &url).await?;
        out.push(SourceVersion {
            alias: s.alias.clone(),
            format: s.format,
            version: None,
            files: Some(files),
            fingerprint: Some(fp),
        });
    }
    Ok(out)
}

/// The file sources whose files changed (listing, sizes, modification times, ETags) since
/// `pinned` was taken; Delta sources are pinned to a version and cannot change under a run.
pub async fn changed_since(
    ctx: &SessionContext,
    sources: &[Source],
    pinned: &[SourceVersion],
) -> Result<Vec<String>> {
    let mut changed = Vec::new();
    for s in sources.iter().filter(|s| s.format != Format::Delta) {
        let Some(before) = pinned
            .iter()
            .find(|p| p.alias == s.alias)
            .and_then(|p| p.fingerprint.as_deref())
        else {
            continue;
        };
        let url = listing_url(&s.uri)?;
        let store = ctx.runtime_env().object_store(&url)?;
        let (_, now) = fingerprint(store.as_ref(), &url).await?;
        if now != before {
            changed.push(s.alias.clone());
        }
    }
    Ok(changed)
}

/// List the objects under `url` and hash their (path, size, mtime).
async fn fingerprint(store: &dyn ObjectStore, url: &ListingTableUrl) -> Result<(usize, String)> {
    let mut metas = if url.is_collection() {
        store
            .list(Some(url.prefix()))
            .try_collect::<Vec<_>>()
            .await?
    } else {
        match store.head(url.prefix()).await {
            Ok(m) => vec![m],
            Err(object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(e.into()),
        }
    };
    metas.retain(|m| {
        let name = m.location.filename().unwrap_or_default();
        !name.starts_with('.') && !name.starts_with('_')
    });
    metas.sort_by(|a, b| a.location.cmp(&b.location));
    let mut h = Sha256::new();
    for m in &metas {
        h.update(m.location.as_ref().as_bytes());
        h.update(m.size.to_le_bytes());
        h.update(m.last_modified.timestamp_micros().to_le_bytes());
        h.update(m.e_tag.as_deref().unwrap_or_default().as_bytes());
    }
    Ok((metas.len(), hex::encode(&h.finalize()[..8])))
}

/// Make `store` the object store for `url`'s scheme and authority in `ctx`.
pub fn register_store(ctx: &SessionContext, url: &url::Url, store: Arc<dyn ObjectStore>) {
    ctx.runtime_env().register_object_store(url, store);
}

/// A Delta source for a remote engine: the live files of the pinned version, scanned as
/// Parquet (delta-rs's scan cannot be sent to a cluster). Partition values come from the log:
/// the files of each partition are one Parquet listing, with the partition columns added as
/// constants, and the source is the union of those (a view the cluster plans like a query;
/// a window's filter on a partition column leaves only its partitions). Refused for tables
/// whose files do not hold the logical rows on their own: deletion vectors, column mapping.
async fn register_files(
    ctx: &SessionContext,
    alias: &str,
    table: &deltalake::DeltaTable,
) -> Result<()> {
    let state = table.snapshot()?;
    let snapshot = state.snapshot();
    let config = snapshot.metadata().configuration();
    if config
        .get("delta.columnMapping.mode")
        .is_some_and(|m| m != "none")
    {
        return Err(Error::input(
            "a Delta source with column mapping cannot be read by the Ballista engine (its Parquet files name columns by id); run this task with the local engine",
        ));
    }
    let schema = snapshot.arrow_schema();
    let partition_cols: Vec<String> = snapshot.metadata().partition_columns().to_vec();
    let file_schema = Arc::new(arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .filter(|f| !partition_cols.contains(f.name()))
            .cloned()
            .collect::<Vec<_>>(),
    ));
    let root = table.table_url().clone();
    let present = stored_files(table).await?;
    let groups = files_by_partition(snapshot, &root, &partition_cols, &present)?;
    let provider = union_of_partitions(alias, groups, &schema, &partition_cols, file_schema)?;
    ctx.register_table(alias, provider)?;
    Ok(())
}

/// Every object stored under the Delta table's root.
async fn stored_files(table: &deltalake::DeltaTable) -> Result<HashSet<object_store::path::Path>> {
    // Every live file must exist: one listing of the table, not a request per file (a missing
    // file would otherwise read as no rows on the cluster).
    let store = table.log_store().object_store(None);
    let present: HashSet<object_store::path::Path> = store
        .list(None)
        .map_ok(|m| m.location)
        .try_collect::<Vec<_>>()
        .await
        .map_err(|e| Error::runtime(format!("cannot list the Delta source's files: {e}")))?
        .into_iter()
        .collect();
    Ok(present)
}

/// The live files of the snapshot as listing URLs under `root`, grouped by their partition
/// values (in `partition_cols`' order, from the log); each must be in `present`.
fn files_by_partition(
    snapshot: &EagerSnapshot,
    root: &url::Url,
    partition_cols: &[String],
    present: &HashSet<object_store::path::Path>,
) -> Result<BTreeMap<Vec<Option<String>>, Vec<ListingTableUrl>>> {
    let table_prefix = ListingTableUrl::parse(root.as_str())?;
    // Files by partition values (in the columns' order), from the log.
    let mut groups: BTreeMap<Vec<Option<String>>, Vec<ListingTableUrl>> = BTreeMap::new();
    for view in snapshot.log_data().iter() {
        if view.deletion_vector_descriptor().is_some() {
            return Err(Error::input(
                "a Delta source with deletion vectors cannot be read by the Ballista engine (rows its files hold are deleted); run this task with the local engine, or purge the table (OPTIMIZE/REORG) first",
            ));
        }
        let key = partition_key(&view, partition_cols)?;
        let relative = view.object_store_path();
        if !present.contains(&relative) {
            return Err(Error::runtime(format!(
                "a live file of the Delta source's pinned version is missing from storage (vacuumed?): {relative}"
            )));
        }
        let listed = file_url(root, &table_prefix, &relative)?;
        groups.entry(key).or_default().push(listed);
    }
    Ok(groups)
}

/// A file's partition values in `partition_cols`' order (`None` for a NULL value).
fn partition_key(view: &LogicalFileView, partition_cols: &[String]) -> Result<Vec<Option<String>>> {
    let values = view.partition_values_map();
    let mut key = Vec::with_capacity(partition_cols.len());
    for c in partition_cols {
        match values.get(c) {
            // An empty string is a NULL partition value (Delta protocol).
            Some(v) => key.push(v.clone().filter(|v| !v.is_empty())),
            None => {
                return Err(Error::runtime(format!(
                    "a file of the Delta source has no value for partition column `{c}`: {}",
                    view.path()
                )));
            }
        }
    }
    Ok(key)
}

/// The listing URL of the file `relative` to the table's `root`, refused unless the listing
/// reads it as the very object named (`table_prefix` is `root` as a listing URL).
fn file_url(
    root: &url::Url,
    table_prefix: &ListingTableUrl,
    relative: &object_store::path::Path,
) -> Result<ListingTableUrl> {
    // The URL by segments: each is percent-encoded once here and decoded once by the
    // listing, so a file named with `%` escapes (timestamp partitions) is found as named.
    let mut url = root.clone();
    url.path_segments_mut()
        .map_err(|()| Error::runtime(format!("the Delta source's location {root} is not a path")))?
        .pop_if_empty()
        .extend(relative.parts().map(|p| p.as_ref().to_string()));
    let listed = ListingTableUrl::parse(url.as_str())?;
    let expected: object_store::path::Path = table_prefix
        .prefix()
        .parts()
        .chain(relative.parts())
        .collect();
    if listed.prefix() != &expected {
        return Err(Error::runtime(format!(
            "the file {relative} of the Delta source would be read as {} (an encoding problem); nothing was run",
            listed.prefix()
        )));
    }
    Ok(listed)
}

/// The source as one provider: per partition, a Parquet listing of its files (in
/// `file_schema`) with the partition columns added as constants, all of them unioned into a
/// view in `schema`'s columns; an empty table when there are no files.
fn union_of_partitions(
    alias: &str,
    groups: BTreeMap<Vec<Option<String>>, Vec<ListingTableUrl>>,
    schema: &SchemaRef,
    partition_cols: &[String],
    file_schema: SchemaRef,
) -> Result<Arc<dyn TableProvider>> {
    let options = ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension("");
    let listing = |paths: Vec<ListingTableUrl>| -> Result<Arc<dyn TableProvider>> {
        let config = ListingTableConfig::new_with_multi_paths(paths)
            .with_listing_options(options.clone())
            .with_schema(file_schema.clone());
        Ok(Arc::new(ListingTable::try_new(config)?))
    };
    let mut plan: Option<LogicalPlanBuilder> = None;
    for (values, paths) in groups {
        let exprs = partition_exprs(schema, partition_cols, &values)?;
        let branch = LogicalPlanBuilder::scan(alias, provider_as_source(listing(paths)?), None)?
            .project(exprs)?;
        plan = Some(match plan {
            None => branch,
            Some(p) => p.union(branch.build()?)?,
        });
    }
    let provider: Arc<dyn TableProvider> = match plan {
        None => Arc::new(datafusion::datasource::empty::EmptyTable::new(
            schema.clone(),
        )),
        Some(plan) => Arc::new(ViewTable::new(plan.build()?, None)),
    };
    Ok(provider)
}

/// The projection of one partition's files onto `schema`: data columns as read, partition
/// columns as the constants `values` (typed like the column; `None` is NULL).
fn partition_exprs(
    schema: &SchemaRef,
    partition_cols: &[String],
    values: &[Option<String>],
) -> Result<Vec<datafusion::logical_expr::Expr>> {
    let mut exprs: Vec<datafusion::logical_expr::Expr> = Vec::new();
    for f in schema.fields() {
        match partition_cols.iter().position(|c| c == f.name()) {
            None => exprs.push(col(datafusion::common::Column::from_name(f.name()))),
            Some(i) => {
                let v = match &values[i] {
                    Some(text) => ScalarValue::try_from_string(text.clone(), f.data_type())?,
                    None => ScalarValue::try_from(f.data_type())?,
                };
                exprs.push(lit(v).alias(f.name()));
            }
        }
    }
    Ok(exprs)
}
