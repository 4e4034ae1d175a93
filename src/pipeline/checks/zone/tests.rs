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
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use super::*;
use crate::pipeline::checks::session::{Listings, build};

/// A store (local by default) that records every listing: `list <prefix>` (recursive) or
/// `dir <prefix>`, and every read: `get <path>` (whole) or `range <path>` (a part or a head).
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn ObjectStore>,
    lists: Mutex<Vec<String>>,
    gets: Mutex<Vec<String>>,
}

impl Default for Recording {
    fn default() -> Self {
        Recording::over(Arc::new(LocalFileSystem::new()))
    }
}

impl Recording {
    fn over(inner: Arc<dyn ObjectStore>) -> Recording {
        Recording {
            inner,
            lists: Mutex::default(),
            gets: Mutex::default(),
        }
    }
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
        let whole = options.range.is_none() && !options.head;
        let kind = if whole { "get" } else { "range" };
        self.gets.lock().unwrap().push(format!("{kind} {location}"));
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
/// delimiter listing) and the directories it accepts; the answers are DataFusion's. The same
/// with the checks' own reader and with its plain twin.
#[tokio::test]
async fn the_checks_list_only_the_directories_a_window_names() {
    for own_reader in [false, true] {
        lists_only_the_directories_a_window_names(own_reader).await;
    }
}

async fn lists_only_the_directories_a_window_names(own_reader: bool) {
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
    let narrowed = CheckZone::new(table, url, &cols)
        .unwrap()
        .with_own_reader(own_reader);
    lists(&store);
    ctx.register_table("t", Arc::new(narrowed)).unwrap();
    assert_eq!(sum(&ctx, RANGE).await, 2 + 20 + 200 + 3 + 30 + 300);
    let day = |d: u8| format!("list {root}/dt=2026-11-0{d}");
    assert_eq!(
        lists(&store),
        vec![day(2), day(3)],
        "own reader: {own_reader}"
    );
    // Days without a directory (a gap in the zone) are listed and hold nothing.
    let gap = "SELECT sum(v) FROM t WHERE dt >= DATE '2026-11-05' AND dt < DATE '2026-11-08'";
    assert_eq!(sum(&ctx, gap).await, 5 * 111);
    assert_eq!(lists(&store), vec![day(5), day(6), day(7)]);
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

/// A two-level zone (`dt=…/h=…/`) whose files disagree with the table's schema: written as
/// (v BIGINT, s VARCHAR); then, once the schema is inferred, a file without `s` and with `v`
/// as INT, a stale file in the root, an empty file and a file of another extension.
async fn uneven_zone(ctx: &SessionContext) -> (tempfile::TempDir, ListingTable) {
    use arrow::array::{Int32Array, StringArray};
    let dir = tempfile::tempdir().unwrap();
    let write = |path: std::path::PathBuf, batch: RecordBatch| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let file = std::fs::File::create(path).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    };
    let full = |d: i64, h: i64| {
        let v: Vec<i64> = (0..7).map(|i| d * 100 + h * 10 + i).collect();
        let s: Vec<Option<String>> = (0..7)
            .map(|i| (i % 3 != 0).then(|| format!("s{i}")))
            .collect();
        RecordBatch::try_from_iter([
            ("v", Arc::new(Int64Array::from(v)) as arrow::array::ArrayRef),
            (
                "s",
                Arc::new(StringArray::from(s)) as arrow::array::ArrayRef,
            ),
        ])
        .unwrap()
    };
    for d in 1..=4 {
        for h in 0..=1 {
            let p = dir
                .path()
                .join(format!("dt=2026-11-0{d}/h={h}/part-0.parquet"));
            write(p, full(d, h));
        }
    }
    let url = ListingTableUrl::parse(format!("{}/", dir.path().display())).unwrap();
    let options = ListingOptions::new(Arc::new(ParquetFormat::default()))
        .with_file_extension(".parquet")
        .with_table_partition_cols(vec![
            ("dt".into(), DataType::Date32),
            ("h".into(), DataType::Int64),
        ]);
    let config = ListingTableConfig::new(url)
        .with_listing_options(options)
        .infer_schema(&ctx.state())
        .await
        .unwrap();
    let narrow = RecordBatch::try_from_iter([(
        "v",
        Arc::new(Int32Array::from(vec![7, 8, 9])) as arrow::array::ArrayRef,
    )])
    .unwrap();
    write(dir.path().join("dt=2026-11-02/h=1/part-1.parquet"), narrow);
    write(dir.path().join("stale.parquet"), full(9, 9));
    std::fs::write(dir.path().join("dt=2026-11-03/h=0/empty.parquet"), b"").unwrap();
    std::fs::write(dir.path().join("dt=2026-11-03/h=0/_SUCCESS"), b"ok").unwrap();
    (dir, ListingTable::try_new(config).unwrap())
}

/// What the differential tests ask of both tables: whole-zone scans (no filter on `dt`) and
/// scans of the directories a window's range or an equality names.
const QUERIES: [&str; 8] = [
    "SELECT dt, h, count(*), sum(v), count(s), min(s) FROM t GROUP BY dt, h ORDER BY dt, h",
    "SELECT count(*) FROM t",
    "SELECT s, v, dt FROM t WHERE v > 150 ORDER BY v, s",
    "SELECT dt, sum(v) FROM t WHERE h = 1 GROUP BY dt ORDER BY dt",
    "SELECT count(*), sum(v) FROM t WHERE h = 0 AND v % 2 = 0",
    "SELECT h, count(*), sum(v), min(s) FROM t WHERE dt >= DATE '2026-11-02' AND dt < DATE '2026-11-04' GROUP BY h ORDER BY h",
    "SELECT v, s FROM t WHERE dt = DATE '2026-11-03' AND h = 0 ORDER BY v",
    "SELECT count(*), sum(v) FROM t WHERE dt >= DATE '2026-11-03'",
];

const COLUMNS: [(&str, DataType); 2] = [("dt", DataType::Date32), ("h", DataType::Int64)];

fn columns() -> Vec<(String, DataType)> {
    COLUMNS
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect()
}

/// Every query of [`QUERIES`] answers the same in `ctx` (table `t`: the checks' own reader)
/// as in `twin_ctx` (table `t`: DataFusion's listing table), and plans the own reader's scan.
async fn same_answers(ctx: &SessionContext, twin_ctx: &SessionContext) {
    for q in QUERIES {
        let df = ctx.sql(q).await.unwrap();
        let plan = df.clone().create_physical_plan().await.unwrap();
        let shown = datafusion::physical_plan::displayable(plan.as_ref())
            .indent(false)
            .to_string();
        assert!(shown.contains("ZoneScanExec"), "{q}: {shown}");
        let got = arrow::util::pretty::pretty_format_batches(&df.collect().await.unwrap())
            .unwrap()
            .to_string();
        let want = twin_ctx.sql(q).await.unwrap().collect().await.unwrap();
        let want = arrow::util::pretty::pretty_format_batches(&want)
            .unwrap()
            .to_string();
        assert_eq!(got, want, "{q}");
        assert!(
            !got.contains("990"),
            "the stale root file is not read: {got}"
        );
    }
    // The INT file's rows are there, `s` NULL: 2026-11-02 h=1 holds 7 + 3 rows.
    let rows = sum(
        ctx,
        "SELECT count(*) FROM t WHERE dt = DATE '2026-11-02' AND h = 1 AND s IS NULL",
    )
    .await;
    assert_eq!(rows, 3 + 3);
}

/// Scans read by the checks' own reader answer as DataFusion's listing table does (the plain
/// twin): the same files, columns adapted to the table's schema, the partition filters
/// applied.
#[tokio::test]
async fn the_checks_own_reader_answers_as_datafusions_listing_table() {
    let ctx = build(false, Listings::Narrow).unwrap();
    let (_dir, plain) = uneven_zone(&ctx).await;
    let url = plain.table_paths()[0].clone();
    let own = CheckZone::new(plain, url.clone(), &columns())
        .unwrap()
        .with_own_reader(true);
    let twin_ctx = build(false, Listings::Narrow).unwrap();
    let (_dir2, twin) = uneven_zone(&twin_ctx).await;
    twin_ctx.register_table("t", Arc::new(twin)).unwrap();
    ctx.register_table("t", Arc::new(own)).unwrap();
    same_answers(&ctx, &twin_ctx).await;
}

/// The zone of [`uneven_zone`] copied into an in-memory object store registered as
/// `s3://zone-test` (wrapped in a [`Recording`]), and DataFusion's listing table over it with
/// the local zone's schema.
async fn remote_zone(ctx: &SessionContext) -> (Arc<Recording>, ListingTable) {
    let local_ctx = build(false, Listings::Narrow).unwrap();
    let (dir, local) = uneven_zone(&local_ctx).await;
    let memory: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    for entry in walkdir(dir.path()) {
        let rel = entry.strip_prefix(dir.path()).unwrap().to_str().unwrap();
        let bytes = std::fs::read(&entry).unwrap();
        memory
            .put(&Path::from(format!("zone/{rel}")), bytes.into())
            .await
            .unwrap();
    }
    let store = Arc::new(Recording::over(memory));
    ctx.register_object_store(&url::Url::parse("s3://zone-test").unwrap(), store.clone());
    let url = ListingTableUrl::parse("s3://zone-test/zone/").unwrap();
    let options = ListingOptions::new(Arc::new(ParquetFormat::default()))
        .with_file_extension(".parquet")
        .with_table_partition_cols(
            COLUMNS
                .iter()
                .map(|(n, t)| (n.to_string(), t.clone()))
                .collect(),
        );
    let file_schema = Schema::new(
        local
            .schema()
            .fields()
            .iter()
            .filter(|f| COLUMNS.iter().all(|(n, _)| n != f.name()))
            .cloned()
            .collect::<Vec<_>>(),
    );
    let config = ListingTableConfig::new(url)
        .with_listing_options(options)
        .with_schema(Arc::new(file_schema));
    (store, ListingTable::try_new(config).unwrap())
}

/// A fresh checks' session with `t` the remote zone read by the checks' own reader, a file of
/// at most `whole` bytes fetched whole; and the zone's recording store.
async fn remote_own_reader(whole: u64) -> (SessionContext, Arc<Recording>) {
    let ctx = build(false, Listings::Narrow).unwrap();
    let (store, plain) = remote_zone(&ctx).await;
    let url = plain.table_paths()[0].clone();
    let own = CheckZone::new(plain, url, &columns())
        .unwrap()
        .with_own_reader(true)
        .with_whole_file_bytes(whole);
    ctx.register_table("t", Arc::new(own)).unwrap();
    (ctx, store)
}

/// Every file under `dir`, recursively.
fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walkdir(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// On an object store the checks' own reader answers as DataFusion's listing table does, and
/// reads each small file with one GET (DataFusion's reader: two or more, its footer then its
/// pages); a file above the whole-file size is read by ranges, with the same answers.
#[tokio::test]
async fn on_an_object_store_the_checks_own_reader_gets_each_small_file_once() {
    let gets = |s: &Recording| std::mem::take(&mut *s.gets.lock().unwrap());
    for whole in [files::WHOLE_FILE_BYTES, 0] {
        // Fresh sessions: DataFusion keeps the footers it read for the session's later scans.
        let twin_ctx = build(false, Listings::Narrow).unwrap();
        let (twin_store, twin) = remote_zone(&twin_ctx).await;
        twin_ctx.register_table("t", Arc::new(twin)).unwrap();
        let (ctx, store) = remote_own_reader(whole).await;

        // One window's directory: its three files.
        gets(&store);
        gets(&twin_store);
        let q = "SELECT count(*), sum(v) FROM t WHERE dt >= DATE '2026-11-02' AND dt < DATE '2026-11-03'";
        let ours = ctx.sql(q).await.unwrap().collect().await.unwrap();
        let theirs = twin_ctx.sql(q).await.unwrap().collect().await.unwrap();
        assert_eq!(ours, theirs);
        let (ours, theirs) = (gets(&store), gets(&twin_store));
        let files: std::collections::BTreeSet<_> =
            ours.iter().map(|g| g.split(' ').nth(1)).collect();
        assert_eq!(files.len(), 3, "{ours:?}");
        assert!(theirs.len() >= 6, "DataFusion's reader: {theirs:?}");
        if whole > 0 {
            assert_eq!(ours.len(), 3, "one GET a file: {ours:?}");
            assert!(ours.iter().all(|g| g.starts_with("get ")), "{ours:?}");
        } else {
            assert!(ours.iter().all(|g| g.starts_with("range ")), "{ours:?}");
            assert!(ours.len() >= 6, "footer, then pages: {ours:?}");
        }
        same_answers(&ctx, &twin_ctx).await;
    }
}

mod pinned;
