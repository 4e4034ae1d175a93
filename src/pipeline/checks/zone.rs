//! The checks' table over a landing zone: DataFusion's own `ListingTable`, scanned once per
//! top-level directory the scan's filters accept.
//!
//! DataFusion lists a partitioned table by the longest prefix its *equality* filters name
//! (`dt = '2026-11-28'` lists `dt=2026-11-28/`); a window's range (`dt >= … AND dt < …`)
//! names none, so a plain listing table lists the whole history for every window (and its
//! listing cache, on a miss, always lists the whole table). This table keeps DataFusion's
//! listing, and narrows it: the top-level values the scan's bounds name (a DATE or BIGINT
//! level bounded on both sides: every value between, see `bounded`) or else those one
//! delimiter listing of the zone's root finds (this module's, not the runner's `landing`
//! walk), kept if DataFusion's own `filter_partitioned_file` accepts them; each value's
//! directory is listed as the prefix `key=value/`. Above [`MAX_PRUNED_SCANS`] values (a long
//! backfill's grouped check) the whole zone is listed once: that is cheaper then.
//!
//! The files are read by the checks' own reader (see `files`: one GET of a small remote
//! file, one pass over a local one) when the zone is Parquet; its plain
//! twin (`IDEMLAKE_ACCELERATE=0`, or another format) is one DataFusion `ListingTable` scan per
//! value with the equality filter added, unioned.
//!
//! Shares nothing with the runner's route but the zone's opening (its schema and partition
//! columns): not `LandingZone::files`, not its pinned listings, not its pruning.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::datasource::TableType;
use datafusion::datasource::listing::helpers::{expr_applicable_for_cols, filter_partitioned_file};
use datafusion::datasource::listing::{ListingTable, ListingTableUrl, PartitionedFile};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, col, lit};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::union::UnionExec;
use object_store::path::Path;

/// Above this many accepted top-level values, one scan of the whole table.
pub const MAX_PRUNED_SCANS: usize = 64;

/// See the module documentation.
#[derive(Debug)]
pub struct CheckZone {
    inner: Arc<ListingTable>,
    root: ListingTableUrl,
    /// The partition columns and their types, the top directory level first (never empty).
    columns: Vec<(String, DataType)>,
    /// With the checks' own file reader (see `files`): the files' extension.
    own_reader: Option<String>,
    /// A remote file this small or smaller is fetched whole by the checks' own reader.
    whole_file_bytes: u64,
}

/// The files of a scan: every file of the zone, or those under the top-level values named.
type Values = Option<Vec<ScalarValue>>;

impl CheckZone {
    /// `inner`: DataFusion's listing table over `root`, partitioned by `columns` (top first).
    pub fn new(
        inner: ListingTable,
        root: ListingTableUrl,
        columns: &[(String, DataType)],
    ) -> Option<CheckZone> {
        columns.first()?;
        Some(CheckZone {
            inner: Arc::new(inner),
            root,
            columns: columns.to_vec(),
            own_reader: None,
            whole_file_bytes: files::WHOLE_FILE_BYTES,
        })
    }

    /// Scans read the zone's files with the checks' own reader (see `files`) when `on` and
    /// the zone can be: Parquet files (on local disk or an object store), named by a
    /// directory or by a glob (whose file pattern DataFusion's listing applies, as for its
    /// listing table; a glob zone's files were read with two GETs each before: footer, then
    /// pages).
    pub fn with_own_reader(mut self, on: bool) -> CheckZone {
        use datafusion::datasource::file_format::parquet::ParquetFormat;
        let options = self.inner.options();
        let parquet = options.format.downcast_ref::<ParquetFormat>().is_some();
        self.own_reader = (on && parquet).then(|| options.file_extension.clone());
        self
    }

    /// Remote files of at most `bytes` are fetched whole, not [`files::WHOLE_FILE_BYTES`]
    /// (for tests).
    #[cfg(test)]
    fn with_whole_file_bytes(mut self, bytes: u64) -> CheckZone {
        self.whole_file_bytes = bytes;
        self
    }

    /// The top-level values `filters` accept; `None` when the
    /// filters say nothing of the top level, or a directory's spelling is not the text of its
    /// typed value (DataFusion's prefix would then miss it: the whole table is scanned).
    ///
    /// A DATE or BIGINT top level bounded on both sides (a window's range) names its values
    /// without a listing: each value in the bounds is a candidate, and DataFusion lists the
    /// directory it spells (`dt=2026-11-28/`; nothing if there is none). A directory spelled
    /// otherwise (`n=007`) is then not read here while the runner reads it: the window fails
    /// its check rather than pass with rows missing on both sides.
    async fn accepted(&self, state: &dyn Session, filters: &[Expr]) -> Result<Values> {
        let (name, ty) = &self.columns[0];
        let on_first: Vec<Expr> = filters
            .iter()
            .filter(|f| expr_applicable_for_cols(&[name.as_str()], f))
            .map(|f| unqualified(f.clone()))
            .collect();
        if on_first.is_empty() {
            return Ok(None);
        }
        let candidates = match bounded::values(&on_first, name, ty) {
            Some(values) => values,
            None => match self.listed(state, name, ty).await? {
                Some(values) => values,
                None => return Ok(None),
            },
        };
        let schema = DFSchema::from_unqualified_fields(
            vec![Field::new(name, ty.clone(), true)].into(),
            Default::default(),
        )?;
        let mut out = Vec::new();
        for value in candidates {
            let mut probe = PartitionedFile::new(format!("{name}={value}"), 0);
            probe.partition_values = vec![value.clone()];
            if filter_partitioned_file(probe, &on_first, &schema)?.is_some() {
                out.push(value);
            }
            if out.len() > MAX_PRUNED_SCANS {
                return Ok(None);
            }
        }
        Ok(Some(out))
    }

    /// The values of the top-level directories, from one delimiter listing of the root;
    /// `None` if one is spelled otherwise than its typed value prints.
    async fn listed(
        &self,
        state: &dyn Session,
        name: &str,
        ty: &DataType,
    ) -> Result<Option<Vec<ScalarValue>>> {
        let store = state.runtime_env().object_store(&self.root)?;
        let listed = store
            .list_with_delimiter(Some(self.root.prefix()))
            .await
            .map_err(|e| DataFusionError::ObjectStore(Box::new(e)))?;
        let mut out = Vec::new();
        for dir in &listed.common_prefixes {
            match top_value(dir, name, ty) {
                None => continue,
                Some(None) => return Ok(None),
                Some(Some(v)) => out.push(v),
            }
        }
        Ok(Some(out))
    }
}

/// The typed value a top-level directory `key=value` names: `None` for another key or a
/// hidden directory (not part of the source), `Some(None)` when its text is not what the
/// typed value prints as (percent escapes, `007` for 7: no equality prefix can find it).
fn top_value(dir: &Path, name: &str, ty: &DataType) -> Option<Option<ScalarValue>> {
    let segment = dir.filename()?;
    let (key, raw) = segment.split_once('=')?;
    if key != name || segment.starts_with('.') || segment.starts_with('_') {
        return None;
    }
    let value = ScalarValue::try_from_string(raw.to_string(), ty).ok()?;
    if value.is_null() {
        return None;
    }
    Some((value.to_string() == raw).then_some(value))
}

/// `e` with its columns unqualified (evaluated in a schema of the partition column alone).
pub(super) fn unqualified(e: Expr) -> Expr {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    e.transform(|e| {
        Ok(match e {
            Expr::Column(c) if c.relation.is_some() => Transformed::yes(Expr::Column(
                datafusion::common::Column::new_unqualified(c.name),
            )),
            other => Transformed::no(other),
        })
    })
    .map(|t| t.data)
    .expect("renaming columns cannot fail")
}

#[async_trait]
impl TableProvider for CheckZone {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let values = self.accepted(state, filters).await?;
        if let Some(ext) = &self.own_reader {
            let url = &self.inner.table_paths()[0];
            let prefixes = values.as_ref().map(|vs| {
                let name = &self.columns[0].0;
                vs.iter()
                    .map(|v| Path::from(format!("{name}={v}")))
                    .collect::<Vec<_>>()
            });
            let found =
                files::list(state, url, ext, &self.columns, filters, prefixes.as_deref()).await?;
            tracing::debug!(
                table = %self.root,
                directories = prefixes.as_ref().map(Vec::len),
                files = found.len(),
                "the checks read the zone's files themselves"
            );
            let schema = datafusion::common::project_schema(&self.schema(), projection)?;
            let store = state.runtime_env().object_store(url)?;
            let partitions = state.config().target_partitions();
            let whole = self.whole_file_bytes;
            return files::scan(
                found,
                schema,
                &self.columns,
                partitions,
                (store, url, whole),
            );
        }
        let Some(values) = values else {
            return self.inner.scan(state, projection, filters, limit).await;
        };
        tracing::debug!(
            table = %self.root,
            directories = values.len(),
            "the checks list only the top-level directories the filters accept"
        );
        let name = self.columns[0].0.as_str();
        let mut plans = Vec::with_capacity(values.len());
        for value in values {
            let mut narrowed = filters.to_vec();
            narrowed.push(col(name).eq(lit(value)));
            plans.push(self.inner.scan(state, projection, &narrowed, limit).await?);
        }
        if plans.is_empty() {
            let schema = datafusion::common::project_schema(&self.schema(), projection)?;
            return Ok(Arc::new(EmptyExec::new(schema)));
        }
        UnionExec::try_new(plans)
    }
}

mod bounded;
mod files;
mod ranges;

pub use files::ZoneScanExec;

#[cfg(test)]
mod tests;
