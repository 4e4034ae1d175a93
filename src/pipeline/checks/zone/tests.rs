//! The checks' zone table lists the directories a scan names, and answers as DataFusion's
//! listing table does.

use std::fmt;
use std::sync::{Arc, Mutex};

use arrow::array::Int64Array;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig};
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use super::*;
use crate::pipeline::checks::session::{Listings, build};

/// A local store that records every listing: `list <prefix>` (recursive) or `dir <prefix>`.
#[derive(Debug, Default)]
struct Recording {
    inner: LocalFileSystem,
    lists: Mutex<Vec<String>>,
}

impl fmt::Display for Recording {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Recording({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for Recording {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let p = prefix.map(|p| p.to_string()).unwrap_or_default();
        self.lists.lock().unwrap().push(format!("list {p}"));
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let p = prefix.map(|p| p.to_string()).unwrap_or_default();
        self.lists.lock().unwrap().push(format!("dir {p}"));
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Five day directories of one file each (3 rows), under a fresh directory.
fn zone() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    for d in 1..=5 {
        let day = dir.path().join(format!("dt=2026-11-0{d}"));
        std::fs::create_dir_all(&day).unwrap();
        let file = std::fs::File::create(day.join("part-0.parquet")).unwrap();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(vec![d, d * 10, d * 100]))],
        )
        .unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
    dir
}

/// DataFusion's listing table over `dir`, partitioned by `dt` (a DATE).
async fn listing(ctx: &SessionContext, dir: &std::path::Path) -> (ListingTable, ListingTableUrl) {
    let url = ListingTableUrl::parse(format!("{}/", dir.display())).unwrap();
    let options = ListingOptions::new(Arc::new(ParquetFormat::default()))
        .with_file_extension(".parquet")
        .with_table_partition_cols(vec![("dt".into(), DataType::Date32)]);
    let config = ListingTableConfig::new(url.clone())
        .with_listing_options(options)
        .infer_schema(&ctx.state())
        .await
        .unwrap();
    (ListingTable::try_new(config).unwrap(), url)
}

async fn sum(ctx: &SessionContext, sql: &str) -> i64 {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let col = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    col.value(0)
}

use datafusion::prelude::SessionContext;

const RANGE: &str = "SELECT sum(v) FROM t WHERE dt >= DATE '2026-11-02' AND dt < DATE '2026-11-04'";

/// A window's range lists the window's own directories (named from its bounds), where
/// DataFusion's listing table lists the whole zone; a one-sided range lists the root (one
/// delimiter listing) and the directories it accepts; the answers are DataFusion's.
#[tokio::test]
async fn the_checks_list_only_the_directories_a_window_names() {
    let dir = zone();
    let ctx = build(false, Listings::Narrow).unwrap();
    let store = Arc::new(Recording::default());
    ctx.register_object_store(&url::Url::parse("file://").unwrap(), store.clone());
    let (table, url) = listing(&ctx, dir.path()).await;
    let root = url.prefix().to_string();
    let lists = |store: &Recording| {
        let mut l = std::mem::take(&mut *store.lists.lock().unwrap());
        l.sort();
        l
    };
    lists(&store);

    ctx.register_table("t", Arc::new(table)).unwrap();
    assert_eq!(sum(&ctx, RANGE).await, 2 + 20 + 200 + 3 + 30 + 300);
    assert_eq!(
        lists(&store),
        vec![format!("list {root}")],
        "DataFusion alone lists everything"
    );

    ctx.deregister_table("t").unwrap();
    let (table, url) = listing(&ctx, dir.path()).await;
    let cols = [("dt".to_string(), DataType::Date32)];
    let narrowed = CheckZone::new(table, url, &cols).unwrap();
    lists(&store);
    ctx.register_table("t", Arc::new(narrowed)).unwrap();
    assert_eq!(sum(&ctx, RANGE).await, 2 + 20 + 200 + 3 + 30 + 300);
    let day = |d: u8| format!("list {root}/dt=2026-11-0{d}");
    assert_eq!(lists(&store), vec![day(2), day(3)]);
    // Bounded on one side only: the root's directories, those the filter accepts.
    let from = "SELECT sum(v) FROM t WHERE dt >= DATE '2026-11-04'";
    assert_eq!(sum(&ctx, from).await, 4 * 111 + 5 * 111);
    assert_eq!(lists(&store), vec![format!("dir {root}"), day(4), day(5)]);
    // No filter on the partition column: the whole table, as DataFusion lists it.
    assert_eq!(
        sum(&ctx, "SELECT sum(v) FROM t WHERE v > 0").await,
        15 * 111
    );
    assert_eq!(lists(&store), vec![format!("list {root}")]);
    // A range no directory falls in: nothing read.
    let none = "SELECT count(*) FROM t WHERE dt >= DATE '2027-01-01'";
    assert_eq!(sum(&ctx, none).await, 0);
    assert_eq!(lists(&store), vec![format!("dir {root}")]);
}
