//! A landing zone as a DataFusion table: each scan reads the files [`LandingZone::files`]
//! selects for its filters from the run's pinned listings (on an object store, small Parquet
//! files with one request each, see `whole`).

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::project_schema;
use datafusion::datasource::TableType;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::helpers::expr_applicable_for_cols;
use datafusion::datasource::physical_plan::ParquetSource;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchemaBuilder;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;

use super::whole::WholeSmallFiles;
use super::{LandingZone, Listing};

/// The table a runner's session reads a landing zone through (see the module documentation).
#[derive(Debug)]
pub struct ZoneTable {
    zone: Arc<LandingZone>,
    schema: SchemaRef,
}

/// At most this many of a remote zone's files are read at once by one scan.
const REMOTE_READS: usize = 16;

impl ZoneTable {
    pub fn new(zone: Arc<LandingZone>) -> ZoneTable {
        let schema = zone.table_schema();
        ZoneTable { zone, schema }
    }

    /// How many groups (partitions, read concurrently) a scan of `files` files has: one per
    /// core on local disk; on an object store, where a small file costs a round trip or two
    /// and little CPU, up to [`REMOTE_READS`] so the round trips overlap.
    fn read_groups(&self, state: &dyn Session, files: usize) -> usize {
        let cores = state.config().target_partitions().max(1);
        if self.zone.url.scheme() == "file" {
            cores
        } else {
            cores.max(files.min(REMOTE_READS))
        }
    }
}

#[async_trait]
impl TableProvider for ZoneTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    /// Filters on partition columns only are applied exactly, by the listing (every file's
    /// partition values pass them); the others are left to the scan and the plan above it.
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::common::Result<Vec<TableProviderFilterPushDown>> {
        let names: Vec<&str> = self
            .zone
            .partition_columns()
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        Ok(filters
            .iter()
            .map(|f| {
                if expr_applicable_for_cols(&names, f) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Inexact
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let files = self
            .zone
            .files(filters, Listing::Pinned)
            .await
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        if files.is_empty() {
            let schema = project_schema(&self.schema, projection)?;
            return Ok(Arc::new(EmptyExec::new(schema)));
        }
        let groups = self.read_groups(state, files.len());
        let groups = FileGroup::new(files).split_files(groups);
        let table_schema = TableSchemaBuilder::from(&self.zone.file_schema)
            .with_table_partition_cols(self.zone.partition_fields())
            .build();
        let format = &self.zone.options.format;
        let remote_parquet = format
            .downcast_ref::<ParquetFormat>()
            .filter(|_| self.zone.url.scheme() != "file");
        let source = match remote_parquet {
            Some(parquet) => {
                let mut source = ParquetSource::new(table_schema)
                    .with_table_parquet_options(parquet.options().clone())
                    .with_parquet_file_reader_factory(Arc::new(WholeSmallFiles::new(
                        self.zone.store.clone(),
                    )));
                if let Some(hint) = parquet.metadata_size_hint() {
                    source = source.with_metadata_size_hint(hint);
                }
                Arc::new(source)
            }
            None => format.file_source(table_schema),
        };
        let config = FileScanConfigBuilder::new(self.zone.url.object_store(), source)
            .with_file_groups(groups)
            .with_projection_indices(projection.cloned())?
            .with_limit(limit)
            .build();
        if remote_parquet.is_some() {
            // Not `create_physical_plan`: it would put DataFusion's reader factory back.
            return Ok(DataSourceExec::from_data_source(config));
        }
        format.create_physical_plan(state, config).await
    }
}
