//! A Delta source for a remote engine (Ballista): its pinned version's files, registered as
//! Parquet listings per partition.

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
use datafusion::prelude::SessionContext;
use deltalake::kernel::{EagerSnapshot, LogicalFileView};
use futures::TryStreamExt;

use crate::error::{Error, Result};

/// A Delta source for a remote engine: the live files of the pinned version, scanned as
/// Parquet (delta-rs's scan cannot be sent to a cluster). Partition values come from the log:
/// the files of each partition are one Parquet listing, with the partition columns added as
/// constants, and the source is the union of those (a view the cluster plans like a query;
/// a window's filter on a partition column leaves only its partitions). Refused for tables
/// whose files do not hold the logical rows on their own: deletion vectors, column mapping.
pub(super) async fn register_files(
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
