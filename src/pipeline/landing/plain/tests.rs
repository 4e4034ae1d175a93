use std::fmt;
use std::sync::{Arc, Mutex};

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::DataType;
use datafusion::datasource::file_format::options::{ParquetReadOptions, ReadOptions};
use datafusion::datasource::listing::{ListingTable, ListingTableConfig};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use proptest::prelude::*;

use super::*;

/// An in-memory store that records its listings: `("all", prefix)` for a recursive one,
/// `("dir", prefix)` for a delimiter listing.
#[derive(Debug, Default)]
struct Recording {
    inner: InMemory,
    listings: Mutex<Vec<(&'static str, String)>>,
}

impl fmt::Display for Recording {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Recording")
    }
}

impl Recording {
    fn record(&self, how: &'static str, prefix: Option<&Path>) {
        let at = prefix.map(|p| p.to_string()).unwrap_or_default();
        self.listings.lock().unwrap().push((how, at));
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
        self.record("all", prefix);
        self.inner.list(prefix)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.record("dir", prefix);
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

/// A Parquet file of one column `v`.
fn parquet_of(v: Vec<i64>) -> Vec<u8> {
    let batch = RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from(v)) as _)]).unwrap();
    let mut buf = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    buf
}

/// A session reading `store` at `mem://zone/`.
fn session(store: Arc<dyn ObjectStore>) -> SessionContext {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
    ctx.register_object_store(&url::Url::parse("mem://zone").unwrap(), store);
    ctx
}

/// The zone `mem://zone/events/` as [`PlainTable`] and as DataFusion's listing table.
fn tables(
    ctx: &SessionContext,
    columns: &[(&str, DataType)],
) -> (Arc<dyn TableProvider>, Arc<dyn TableProvider>) {
    let url = ListingTableUrl::parse("mem://zone/events/").unwrap();
    let columns: Vec<(String, DataType)> = columns
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    let options = ParquetReadOptions::default()
        .to_listing_options(&ctx.copied_config(), ctx.copied_table_options())
        .with_table_partition_cols(columns);
    let file_schema = Arc::new(arrow::datatypes::Schema::new(vec![Field::new(
        "v",
        DataType::Int64,
        true,
    )]));
    let mut fields: Vec<Field> = vec![file_schema.field(0).clone()];
    for (n, t) in &options.table_partition_cols {
        fields.push(Field::new(n, t.clone(), false));
    }
    let schema = Arc::new(arrow::datatypes::Schema::new(fields));
    let schemas = (file_schema.clone(), schema);
    let plain = PlainTable::new(url.clone(), options.clone(), schemas, None);
    let config = ListingTableConfig::new(url)
        .with_listing_options(options)
        .with_schema(file_schema);
    let listing = ListingTable::try_new(config).unwrap();
    (Arc::new(plain), Arc::new(listing))
}

/// The values of `v` a query gives, sorted.
async fn values(ctx: &SessionContext, sql: &str) -> Vec<i64> {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let mut out: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            a.values().to_vec()
        })
        .collect();
    out.sort();
    out
}

/// Regression: the checks read a landing zone through DataFusion's listing table, which
/// listed the whole zone, recursively, for one day's range of `dt` (17,520 files for one
/// window of a two-year zone, three quarters of the run). The plain route lists the root and
/// the window's directory, with a delimiter, and nothing else.
#[tokio::test]
async fn the_checks_listing_of_a_day_window_lists_the_root_and_that_day_only() {
    let store = Arc::new(Recording::default());
    for day in 1..=5i64 {
        for part in 0..3i64 {
            let at = format!("events/dt=2026-11-0{day}/part-{part}.parquet");
            let bytes = parquet_of(vec![day * 10 + part]);
            store.put(&Path::from(at), bytes.into()).await.unwrap();
        }
    }
    let ctx = session(store.clone());
    let (plain, _) = tables(&ctx, &[("dt", DataType::Date32)]);
    ctx.register_table("events", plain).unwrap();
    store.listings.lock().unwrap().clear();
    let got = values(
        &ctx,
        "SELECT v FROM events WHERE dt >= DATE '2026-11-02' AND dt < DATE '2026-11-03'",
    )
    .await;
    assert_eq!(got, vec![20, 21, 22]);
    let listings = store.listings.lock().unwrap().clone();
    assert_eq!(
        listings,
        vec![
            ("dir", "events".to_string()),
            ("dir", "events/dt=2026-11-02".to_string())
        ]
    );
}

/// A directory named with a percent escape (`city=New%20York`, as pyarrow writes it) is
/// listed under the name the store gave it, and its value read decoded, as DataFusion's
/// listing table reads it (a first version rebuilt the path from text, escaping its `%` again,
/// and found nothing there).
#[tokio::test]
async fn a_percent_escaped_directory_is_listed_under_its_own_name() {
    let store = Arc::new(InMemory::new());
    for (city, v) in [("New%20York", 1), ("Paris", 2)] {
        let at = Path::parse(format!("events/city={city}/part-0.parquet")).unwrap();
        store.put(&at, parquet_of(vec![v]).into()).await.unwrap();
    }
    let ctx = session(store);
    let (plain, listing) = tables(&ctx, &[("city", DataType::Utf8)]);
    ctx.register_table("plain", plain).unwrap();
    ctx.register_table("listing", listing).unwrap();
    for filter in ["city = 'New York'", "city < 'P'", "city <> 'Paris'"] {
        let plain = values(&ctx, &format!("SELECT v FROM plain WHERE {filter}")).await;
        let listing = values(&ctx, &format!("SELECT v FROM listing WHERE {filter}")).await;
        assert_eq!((filter, plain), (filter, vec![1]));
        assert_eq!((filter, listing), (filter, vec![1]));
    }
}

/// One generated zone: `levels` partition levels (`a`, then `b`, `c`: integers), `width`
/// directories per level, a file per leaf, and junk DataFusion's listing leaves out: a
/// hidden-like directory without `=`, a file of another extension, an empty file, a file at
/// the root.
async fn zone(store: &InMemory, levels: usize, width: i64) {
    let names = ["a", "b", "c"];
    let mut leaves: Vec<(String, i64)> = vec![(String::new(), 0)];
    for name in names.iter().take(levels) {
        leaves = leaves
            .into_iter()
            .flat_map(|(at, v)| (0..width).map(move |i| (format!("{at}{name}={i}/"), v * 10 + i)))
            .collect();
    }
    for (at, v) in &leaves {
        let file = Path::from(format!("events/{at}part-0.parquet"));
        store.put(&file, parquet_of(vec![*v]).into()).await.unwrap();
        let other = Path::from(format!("events/{at}notes.txt"));
        store
            .put(&other, b"not data".to_vec().into())
            .await
            .unwrap();
        let empty = Path::from(format!("events/{at}empty.parquet"));
        store.put(&empty, Vec::<u8>::new().into()).await.unwrap();
    }
    let junk = Path::from("events/_temporary/part-9.parquet");
    store.put(&junk, parquet_of(vec![-1]).into()).await.unwrap();
    let root = Path::from("events/stray.parquet");
    store.put(&root, parquet_of(vec![-2]).into()).await.unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The plain route reads what DataFusion's own listing table reads, for filters on any
    /// partition level, in any conjunct order, mixed with filters on the files' column.
    #[test]
    fn the_plain_route_reads_what_datafusions_listing_table_reads(
        levels in 1usize..=3,
        width in 1i64..=3,
        conjuncts in proptest::collection::vec((0usize..4, 0usize..3, 0i64..4), 0..4),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let store = Arc::new(InMemory::new());
            zone(&store, levels, width).await;
            let ctx = session(store);
            let columns: Vec<(&str, DataType)> =
                ["a", "b", "c"].iter().take(levels).map(|n| (*n, DataType::Int64)).collect();
            let (plain, listing) = tables(&ctx, &columns);
            ctx.register_table("plain", plain).unwrap();
            ctx.register_table("listing", listing).unwrap();
            let ops = ["=", ">=", "<", "<>"];
            let filters: Vec<String> = conjuncts
                .iter()
                .map(|(op, col, value)| match col {
                    c if *c < levels => format!("{} {} {value}", columns[*c].0, ops[*op]),
                    _ => format!("v {} {}", ops[*op], value * 5),
                })
                .collect();
            let filter = match filters.is_empty() {
                true => "TRUE".to_string(),
                false => filters.join(" AND "),
            };
            let plain = values(&ctx, &format!("SELECT v FROM plain WHERE {filter}")).await;
            let listing = values(&ctx, &format!("SELECT v FROM listing WHERE {filter}")).await;
            prop_assert_eq!(plain, listing, "{}", filter);
            Ok(())
        })?;
    }
}
