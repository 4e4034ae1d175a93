//! The independent checks' route over a landing zone: DataFusion's listing table, listed level
//! by level. (The runner's plain twin reads DataFusion's own `ListingTable`, except a zone of
//! levels without names: see `LandingZone::plain_table`.)
//!
//! DataFusion 55's `ListingTable` lists a partitioned location whole, recursively, unless its
//! filters fix the leading partition columns by equality (`dt = DATE '…'`). A window's
//! `dt >= $window_start AND dt < $window_end` is a range, so a check of one day listed all
//! 17,520 files of a two-year zone (a `stat` each on local disk): three quarters of the run.
//! [`PlainTable`] is that listing table with its listing made one directory at a time: a
//! delimiter listing per directory, keeping at each level only the directories whose values
//! pass the filters on the partition columns known so far (DataFusion's
//! `parse_partitions_for_path` and `filter_partitioned_file`, as its listing applies them to
//! each file), and files only in the leaves kept, matched as DataFusion matches them
//! (`ListingTableUrl::contains`, the file extension, non-empty).
//!
//! Everything else is DataFusion's, built as `ListingTable::scan` builds it: the format's own
//! file source in a `FileScanConfig`, partition values as columns, the files' columns adapted
//! to the zone's schema (through [`super::casts::StrictCasts`] for Parquet), and filters pushed
//! into the scan by DataFusion's optimizer. Deliberate differences from `ListingTable`: no file
//! statistics are gathered before the scan (nothing is answered from footers), and nothing
//! below the last partition level is read (the runner refuses such a zone).
//!
//! Listings go through the object store the reading session registered for the location (the
//! checks': their own client) and are made afresh by every scan; nothing is kept.

use std::borrow::Cow;
use std::sync::Arc;

use arrow::datatypes::{Field, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, ScalarValue, project_schema};
use datafusion::datasource::TableType;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::helpers::{
    expr_applicable_for_cols, filter_partitioned_file, parse_partitions_for_path,
};
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl, PartitionedFile,
};
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::table_schema::TableSchemaBuilder;
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr_adapter::PhysicalExprAdapterFactory;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;

/// Who reads a zone on a plain route (see `LandingZone::plain_table`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plain {
    /// The runner's plain twin (`IDEMLAKE_ACCELERATE=0`).
    Twin,
    /// The independent checks.
    Checks,
}

/// Directory listings in flight at once.
const LISTINGS: usize = 32;

/// A landing zone read as DataFusion's listing table, listed level by level (see the module
/// documentation).
#[derive(Debug)]
pub struct PlainTable {
    url: ListingTableUrl,
    /// The format, file extension and partition columns.
    options: ListingOptions,
    /// The files' columns (partition columns excluded).
    file_schema: SchemaRef,
    /// The files' columns, then the partition columns (never NULL).
    schema: SchemaRef,
    adapter: Option<Arc<dyn PhysicalExprAdapterFactory>>,
    /// Whether directories are named `key=value`; `false`: each level's directory name is its
    /// value (`partitioning = "directories"`, which DataFusion's listing does not read).
    named: bool,
}

impl PlainTable {
    /// `schema`: the files' columns, then the partition columns (never NULL).
    pub fn new(
        url: ListingTableUrl,
        options: ListingOptions,
        (file_schema, schema): (SchemaRef, SchemaRef),
        adapter: Option<Arc<dyn PhysicalExprAdapterFactory>>,
    ) -> PlainTable {
        PlainTable {
            url,
            options,
            file_schema,
            schema,
            adapter,
            named: true,
        }
    }

    /// The table over a zone whose directories are named `key=value` (`named`, the default)
    /// or by their values alone.
    pub fn named(self, named: bool) -> PlainTable {
        PlainTable { named, ..self }
    }

    /// The partition values of `dir`, a directory `depth + 1` levels below the root, as text
    /// (percent-escapes decoded); `None` for a directory that is not one of the zone's.
    fn values_of<'a>(&self, dir: &'a Path, known: &[&'a str]) -> Option<Vec<Cow<'a, str>>> {
        if self.named {
            let parsed = parse_partitions_for_path(&self.url, dir, known.to_vec())?;
            return (parsed.len() == known.len()).then_some(parsed);
        }
        let names: Vec<&str> = self.url.strip_prefix(dir)?.collect();
        let hidden = names.iter().any(|n| n.starts_with(['.', '_']));
        if hidden || names.len() != known.len() {
            return None;
        }
        let decoded = names.into_iter().map(|n| {
            let decoded = percent_encoding::percent_decode_str(n).decode_utf8();
            decoded.unwrap_or(Cow::Borrowed(n))
        });
        Some(decoded.collect())
    }

    fn names(&self) -> Vec<&str> {
        let columns = &self.options.table_partition_cols;
        columns.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The files `filters` (on partition columns only) accept, with their partition values.
    async fn files(&self, state: &dyn Session, filters: &[Expr]) -> Result<Vec<PartitionedFile>> {
        let store = state.runtime_env().object_store(&self.url)?;
        let columns = &self.options.table_partition_cols;
        let names = self.names();
        // Each directory kept so far, as a file of no size holding its partition values.
        let mut level = vec![directory(self.url.prefix().clone(), Vec::new())];
        for depth in 0..=columns.len() {
            let listed: Vec<(PartitionedFile, object_store::ListResult)> =
                futures::stream::iter(level.into_iter().map(|dir| {
                    let store = store.clone();
                    async move {
                        let at = &dir.object_meta.location;
                        let prefix = (!at.as_ref().is_empty()).then_some(at);
                        let listed = store.list_with_delimiter(prefix).await?;
                        Ok::<_, datafusion::error::DataFusionError>((dir, listed))
                    }
                }))
                .buffered(LISTINGS)
                .try_collect()
                .await?;
            if depth == columns.len() {
                let ignore = state
                    .config_options()
                    .execution
                    .listing_table_ignore_subdirectory;
                let mut files = Vec::new();
                for (dir, listed) in listed {
                    for meta in listed.objects {
                        let location = &meta.location;
                        // DataFusion's match for `key=value` levels (no level of another
                        // name counts as one); levels without names are matched by depth.
                        if meta.size > 0
                            && location.as_ref().ends_with(&self.options.file_extension)
                            && (!self.named || self.url.contains(location, ignore))
                        {
                            let values = dir.partition_values.clone();
                            files.push(PartitionedFile::from(meta).with_partition_values(values));
                        }
                    }
                }
                return Ok(files);
            }
            let known = &names[..=depth];
            let usable: Vec<Expr> = filters
                .iter()
                .filter(|f| expr_applicable_for_cols(known, f))
                .cloned()
                .collect();
            let fields = columns[..=depth]
                .iter()
                .map(|(n, t)| Field::new(n, t.clone(), true))
                .collect();
            let schema = DFSchema::from_unqualified_fields(fields, Default::default())?;
            let mut kept = Vec::new();
            for (_, listed) in listed {
                for child in listed.common_prefixes {
                    let Some(parsed) = self.values_of(&child, known) else {
                        continue;
                    };
                    let values = parsed
                        .into_iter()
                        .zip(columns)
                        .map(|(v, (_, t))| ScalarValue::try_from_string(v.into_owned(), t))
                        .collect::<Result<Vec<_>>>()?;
                    let dir = directory(child, values);
                    kept.extend(filter_partitioned_file(dir, &usable, &schema)?);
                }
            }
            level = kept;
        }
        unreachable!("the last level returns")
    }
}

/// The directory at `location` as a file of no size with `values` (the path kept as listed: a
/// string round trip would escape a `%` in a directory's name again).
fn directory(location: Path, values: Vec<ScalarValue>) -> PartitionedFile {
    let meta = object_store::ObjectMeta {
        location,
        last_modified: chrono::DateTime::<chrono::Utc>::MIN_UTC,
        size: 0,
        e_tag: None,
        version: None,
    };
    PartitionedFile::new_from_meta(meta).with_partition_values(values)
}

#[async_trait]
impl TableProvider for PlainTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    /// As DataFusion's listing table: filters on partition columns only are applied exactly,
    /// by the listing; the others are left to the scan and the plan above it.
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        let names = self.names();
        Ok(filters
            .iter()
            .map(|f| match expr_applicable_for_cols(&names, f) {
                true => TableProviderFilterPushDown::Exact,
                false => TableProviderFilterPushDown::Inexact,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let names = self.names();
        let on_partitions: Vec<Expr> = filters
            .iter()
            .filter(|f| expr_applicable_for_cols(&names, f))
            .cloned()
            .collect();
        let files = self.files(state, &on_partitions).await?;
        if files.is_empty() {
            let schema = project_schema(&self.schema, projection)?;
            return Ok(Arc::new(EmptyExec::new(schema)));
        }
        let groups = FileGroup::new(files).split_files(state.config().target_partitions());
        let partition_fields: Vec<_> = self
            .options
            .table_partition_cols
            .iter()
            .map(|(n, t)| Arc::new(Field::new(n, t.clone(), false)))
            .collect();
        let table_schema = TableSchemaBuilder::from(&self.file_schema)
            .with_table_partition_cols(partition_fields)
            .build();
        let source = self.options.format.file_source(table_schema);
        let config = FileScanConfigBuilder::new(self.url.object_store(), source)
            .with_file_groups(groups)
            .with_projection_indices(projection.cloned())?
            .with_limit(limit)
            .with_expr_adapter(self.adapter.clone())
            .build();
        self.options
            .format
            .create_physical_plan(state, config)
            .await
    }
}

/// The zone's routes other than the runner's own (`Route::Plain`, `Route::Listing`).
impl super::LandingZone {
    /// DataFusion's own listing table over the same location, partition columns and schema
    /// (a listing of its own): a remote engine's route, which converts a file's columns as
    /// DataFusion does.
    pub fn listing_table(&self) -> crate::error::Result<ListingTable> {
        if !self.named {
            return Err(crate::error::Error::input(format!(
                "source `{}`: partitioning = \"directories\" is read on the local engine only (DataFusion's listing table reads key=value directories)",
                self.alias
            )));
        }
        let config = self.listing_config(self.options.clone(), &self.file_schema)?;
        Ok(ListingTable::try_new(config)?)
    }

    /// The zone on the local engine for `who`: the independent checks read it through
    /// `PlainTable` (their own listing, level by level); the runner's plain twin
    /// (`IDEMLAKE_ACCELERATE=0`) through DataFusion's own `ListingTable` (a listing of the
    /// whole prefix, no walk of idemlake's), except a zone of levels without names, which only
    /// `PlainTable` reads. `options`: the reading session's format settings (`None`: the
    /// zone's own). A Parquet file's columns are converted strictly (`casts`), text files read
    /// exactly (`exact`); partition values, their filters and schema adaptation are
    /// DataFusion's; files are listed and read through the object store the reading session
    /// registered for the location.
    pub fn plain_table(
        self: &Arc<Self>,
        options: Option<ListingOptions>,
        who: Plain,
    ) -> crate::error::Result<Arc<dyn TableProvider>> {
        if let Some(exact) = self.exact_table(Some(who))? {
            return Ok(exact);
        }
        let options = options.unwrap_or_else(|| self.options.clone());
        let parquet = options.format.downcast_ref::<ParquetFormat>().is_some();
        let adapter = parquet.then(|| self.strict_casts() as _);
        if who == Plain::Twin && self.named {
            let mut config = self.listing_config(options, &self.file_schema)?;
            if let Some(adapter) = adapter {
                config = config.with_expr_adapter_factory(adapter);
            }
            return Ok(Arc::new(ListingTable::try_new(config)?));
        }
        let (url, options) = self.listing_parts(options)?;
        let schemas = (self.file_schema.clone(), self.table_schema());
        let table = PlainTable::new(url, options, schemas, adapter);
        Ok(Arc::new(table.named(self.named)))
    }

    /// The adapter of a Parquet file's columns to the zone's schema the runner reads through.
    pub fn strict_casts(&self) -> Arc<super::casts::StrictCasts> {
        Arc::new(super::casts::StrictCasts {
            alias: self.alias.clone(),
        })
    }

    /// DataFusion's listing table configuration of the zone with `options`.
    pub(super) fn listing_config(
        &self,
        options: ListingOptions,
        file_schema: &SchemaRef,
    ) -> crate::error::Result<ListingTableConfig> {
        let (url, options) = self.listing_parts(options)?;
        Ok(ListingTableConfig::new(url)
            .with_listing_options(options)
            .with_schema(file_schema.clone()))
    }

    /// The location and listing options of a listing table over the zone with `options`.
    pub(super) fn listing_parts(
        &self,
        options: ListingOptions,
    ) -> crate::error::Result<(ListingTableUrl, ListingOptions)> {
        let options = self
            .compressed_options(options)
            .with_table_partition_cols(self.columns.clone());
        // DataFusion matches a glob against the file names, `key=value` levels left out.
        let url = match &self.glob {
            Some(g) => self.url.clone().with_glob(g.file.as_str())?,
            None => self.url.clone(),
        };
        Ok((url, options))
    }
}

#[cfg(test)]
mod tests;
