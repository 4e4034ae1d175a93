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

use super::groups::KeptGroups;
use super::whole::WholeSmallFiles;
use super::{LandingZone, Listing};

/// The table a runner's session reads a landing zone through (see the module documentation).
#[derive(Debug)]
pub struct ZoneTable {
    zone: Arc<LandingZone>,
    schema: SchemaRef,
    /// The files' columns as the scan reads them (the zone's, or see `exact`).
    file_schema: SchemaRef,
}

/// At most this many of a remote zone's files are read at once by one scan.
const REMOTE_READS: usize = 16;

impl ZoneTable {
    pub fn new(zone: Arc<LandingZone>) -> ZoneTable {
        let (schema, file_schema) = (zone.table_schema(), zone.file_schema.clone());
        ZoneTable {
            zone,
            schema,
            file_schema,
        }
    }

    /// The zone's table reading its files' columns as `file_schema` has them (`schema`: the
    /// table's, partition columns included).
    pub(super) fn reading(
        zone: Arc<LandingZone>,
        schema: SchemaRef,
        file_schema: SchemaRef,
    ) -> ZoneTable {
        ZoneTable {
            zone,
            schema,
            file_schema,
        }
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
        let mut files = self
            .zone
            .files(filters, Listing::Pinned)
            .await
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        if crate::fault::mutation("zone-drop-file") && files.len() > 1 {
            // Test-only: the runner's reader misses a file its listing found.
            files.pop();
        }
        if files.is_empty() {
            let schema = project_schema(&self.schema, projection)?;
            return Ok(Arc::new(EmptyExec::new(schema)));
        }
        let all_small = files
            .iter()
            .all(|f| f.object_meta.size <= super::whole::WHOLE_FILE_BYTES);
        let groups = self.read_groups(state, files.len());
        let groups = FileGroup::new(files).split_files(groups);
        let table_schema = TableSchemaBuilder::from(&self.file_schema)
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
        let parquet = format.downcast_ref::<ParquetFormat>().is_some();
        let config = FileScanConfigBuilder::new(self.zone.url.object_store(), source)
            .with_expr_adapter(parquet.then(|| self.zone.strict_casts() as _))
            .with_file_groups(groups)
            .with_projection_indices(projection.cloned())?
            .with_limit(limit)
            .build();
        if remote_parquet.is_some() {
            // Not `create_physical_plan`: it would put DataFusion's reader factory back.
            let scan = DataSourceExec::from_data_source(config);
            // Small files: round trips to overlap, nothing to prune inside a file. Larger
            // ones: DataFusion's grouping by byte ranges and its filters inside the scan.
            if all_small {
                return Ok(Arc::new(KeptGroups::new(scan)));
            }
            return Ok(scan);
        }
        format.create_physical_plan(state, config).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::datasource::file_format::options::{ParquetReadOptions, ReadOptions};
    use datafusion::physical_plan::ExecutionPlanProperties;
    use datafusion::prelude::{SessionConfig, SessionContext};
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use object_store::{ObjectStore, ObjectStoreExt};

    use super::*;

    /// Regression (found behind 20 ms of latency, a 31-day S3 backfill reading its 744 files
    /// two at a time): a remote zone's scan whose files total more than DataFusion's
    /// `repartition_file_min_size` (1 MiB) keeps its 16 concurrent read groups instead of
    /// being regrouped into `target_partitions` groups by size, and reads every row.
    #[tokio::test]
    async fn a_remote_zones_scan_over_1_mib_keeps_its_concurrent_reads() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let (days, per_day, rows) = (4i64, 10i64, 20_000i64);
        for d in 0..days {
            for f in 0..per_day {
                let v: Vec<i64> = (0..rows).map(|i| d * 1_000_000 + f * 100_000 + i).collect();
                let batch = RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from(v)) as _)])
                    .unwrap();
                let mut buf = Vec::new();
                let mut w =
                    parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), None).unwrap();
                w.write(&batch).unwrap();
                w.close().unwrap();
                let path = format!("zone/dt=2026-11-0{}/part-{f}.parquet", d + 1);
                store.put(&Path::from(path), buf.into()).await.unwrap();
            }
        }
        let listed: u64 = futures::TryStreamExt::try_collect::<Vec<_>>(store.list(None))
            .await
            .unwrap()
            .iter()
            .map(|m| m.size)
            .sum();
        assert!(listed > 2 << 20, "the files total {listed} bytes");

        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        ctx.register_object_store(&url::Url::parse("s3://zone-test").unwrap(), store);
        let options = ParquetReadOptions::default()
            .to_listing_options(&ctx.copied_config(), ctx.copied_table_options());
        let zone = LandingZone::open(
            &ctx,
            ("events", "s3://zone-test/zone/"),
            (
                &crate::task::Partitioning::Auto,
                crate::task::SchemaFrom::First,
            ),
            options,
            None,
        )
        .await
        .unwrap()
        .expect("a landing zone");
        ctx.register_table("events", Arc::new(ZoneTable::new(Arc::new(zone))))
            .unwrap();
        let df = ctx
            .sql("SELECT count(*) AS n, sum(v) AS s FROM events WHERE dt >= DATE '2026-11-01'")
            .await
            .unwrap();
        let plan = df.clone().create_physical_plan().await.unwrap();
        // The scan: the plan's leaf; 40 files split into groups of 3 for 16 reads at once.
        let mut groups = None;
        let _ = plan.apply(|p| {
            if p.children().is_empty() {
                groups = Some(p.output_partitioning().partition_count());
            }
            Ok(TreeNodeRecursion::Continue)
        });
        let files = (days * per_day) as usize;
        let want = files.div_ceil(files.div_ceil(REMOTE_READS));
        assert_eq!(groups, Some(want), "{}", {
            datafusion::physical_plan::displayable(plan.as_ref()).indent(true)
        });
        let got = df.collect().await.unwrap();
        let n = got[0]
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(0);
        assert_eq!(n, days * per_day * rows);
    }
}
