//! A window's staged (uncommitted) files as a table, read back by plain DataFusion: the data
//! checks see what the commit will publish, not the batches the task query streamed.
//!
//! Delta data files do not hold the partition column (its value is in the Add action), so it
//! is added back as DataFusion's partition column from each file's partition value. Paths are
//! taken exactly as the writer recorded them (no URL round trip: an hour partition's directory
//! name holds `%` characters).

use std::sync::Arc;

use arrow::datatypes::{Field, FieldRef, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use deltalake::kernel::Add;
use object_store::{ObjectMeta, ObjectStore};

use crate::error::{Error, Result};

/// The staged files of one window.
#[derive(Debug)]
struct StagedFiles {
    url: ObjectStoreUrl,
    table_schema: TableSchema,
    files: Vec<PartitionedFile>,
}

/// `adds` (paths relative to `store`'s root) as a table with `schema`'s columns: the files'
/// own columns and, when the files lack it, `partition_by` filled from each file's partition
/// value. The store is registered in `ctx` under a name of its own, returned for
/// [`release`] once the table is no longer read.
pub async fn table(
    ctx: &SessionContext,
    store: Arc<dyn ObjectStore>,
    adds: &[Add],
    schema: &SchemaRef,
    partition_by: &str,
) -> Result<(Arc<dyn TableProvider>, Option<url::Url>)> {
    if adds.is_empty() {
        let empty = MemTable::try_new(schema.clone(), vec![vec![]])?;
        return Ok((Arc::new(empty), None));
    }
    let url = format!("idemlake-staged://{}", uuid::Uuid::new_v4().simple());
    let registered = url::Url::parse(&url).map_err(|e| Error::runtime(e.to_string()))?;
    ctx.runtime_env()
        .register_object_store(&registered, store.clone());
    let metas = adds
        .iter()
        .map(|a| {
            Ok(ObjectMeta {
                location: object_store::path::Path::parse(&a.path)
                    .map_err(|e| Error::runtime(format!("staged file {}: {e}", a.path)))?,
                last_modified: chrono::DateTime::<chrono::Utc>::MIN_UTC,
                size: u64::try_from(a.size).unwrap_or_default(),
                e_tag: None,
                version: None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let file_schema = ParquetFormat::default()
        .infer_schema(&ctx.state(), &store, &metas[..1])
        .await?;
    let part: Option<FieldRef> = match file_schema.field_with_name(partition_by) {
        Ok(_) => None,
        Err(_) => Some(Arc::new(
            schema
                .field_with_name(partition_by)
                .map(|f| f.clone().with_nullable(true))
                .unwrap_or_else(|_| {
                    Field::new(partition_by, arrow::datatypes::DataType::Utf8, true)
                }),
        )),
    };
    let mut files = Vec::with_capacity(adds.len());
    for (a, meta) in adds.iter().zip(metas) {
        let mut f = PartitionedFile::new_from_meta(meta);
        if let Some(field) = &part {
            let value = match a.partition_values.get(partition_by).cloned().flatten() {
                Some(v) => ScalarValue::try_from_string(v, field.data_type())?,
                None => ScalarValue::try_new_null(field.data_type())?,
            };
            f = f.with_partition_values(vec![value]);
        }
        files.push(f);
    }
    let table_schema = TableSchema::builder(file_schema)
        .with_table_partition_cols(part.into_iter().collect::<Vec<_>>())
        .build();
    let table = StagedFiles {
        url: ObjectStoreUrl::parse(&url)?,
        table_schema,
        files,
    };
    Ok((Arc::new(table), Some(registered)))
}

/// Unregister the store [`table`] registered (the registry is shared by every window of a
/// run).
pub fn release(ctx: &SessionContext, url: Option<url::Url>) {
    if let Some(url) = url {
        let _ = ctx.runtime_env().deregister_object_store(&url);
    }
}

#[async_trait]
impl TableProvider for StagedFiles {
    fn schema(&self) -> SchemaRef {
        self.table_schema.table_schema().clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let source = Arc::new(ParquetSource::new(self.table_schema.clone()));
        let config = FileScanConfigBuilder::new(self.url.clone(), source)
            .with_file_group(FileGroup::new(self.files.clone()))
            .with_projection_indices(projection.cloned())?
            .with_limit(limit)
            .build();
        Ok(DataSourceExec::from_data_source(config))
    }
}
