//! The memo's entries read back as written, and its key changes with anything a check's
//! answer depends on.

use arrow::array::{Decimal128Array, Int64Array};
use arrow::datatypes::{DataType, Field, Schema};
use chrono::{TimeZone, Utc};
use datafusion::datasource::listing::PartitionedFile;
use object_store::ObjectMeta;
use object_store::memory::InMemory;

use super::*;
use crate::pipeline::checks::Fingerprint;

fn query_row(rows: i64, cents: i128) -> RecordBatch {
    RecordBatch::try_from_iter([
        (
            "rows",
            Arc::new(Int64Array::from(vec![rows])) as Arc<dyn Array>,
        ),
        (
            "amount",
            Arc::new(
                Decimal128Array::from(vec![cents])
                    .with_precision_and_scale(25, 2)
                    .unwrap(),
            ) as Arc<dyn Array>,
        ),
    ])
    .unwrap()
}

fn shown(results: &[PerWindow]) -> String {
    format!("{results:?}")
}

/// Every measure's results are read back exactly (decimals, counts, fingerprints), and only
/// as the measure and number of windows they were written for.
#[tokio::test]
async fn entries_read_back_as_written_for_their_measure_only() {
    let memo = Memo::new(
        Arc::new(InMemory::new()),
        Path::from("lake/t"),
        String::new(),
    );
    let cases = [
        (
            Measure::Query,
            vec![
                PerWindow::Query(query_row(3, 12345)),
                PerWindow::Query(query_row(0, 0)),
            ],
        ),
        (Measure::Rows, vec![PerWindow::Rows(7), PerWindow::Rows(0)]),
        (
            Measure::Content,
            vec![
                PerWindow::Content(Fingerprint {
                    rows: 2,
                    sum: u64::MAX,
                    xor: 42,
                }),
                PerWindow::Content(Fingerprint::default()),
            ],
        ),
    ];
    for (i, (measure, results)) in cases.iter().enumerate() {
        let key = format!("k{i}");
        assert!(memo.get(&key, *measure, 2).await.is_none(), "a miss");
        memo.put(&key, *measure, results).await;
        let got = memo.get(&key, *measure, 2).await.expect("a hit");
        assert_eq!(shown(&got), shown(results));
        assert!(memo.get(&key, *measure, 3).await.is_none(), "other windows");
        let other = if *measure == Measure::Rows {
            Measure::Content
        } else {
            Measure::Rows
        };
        assert!(memo.get(&key, other, 2).await.is_none(), "another measure");
    }
    // Under the table's `_idemlake/checks/`.
    let listed: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(
        memo.store
            .list(Some(&Path::from("lake/t/_idemlake/checks"))),
    )
    .await
    .unwrap();
    assert_eq!(listed.len(), 3);
    // A damaged entry is a miss, not an error.
    memo.store
        .put(&memo.path("k1"), PutPayload::from_static(b"not arrow"))
        .await
        .unwrap();
    assert!(memo.get("k1", Measure::Rows, 2).await.is_none());
}

fn file(path: &str, size: u64, secs: i64, etag: Option<&str>) -> PartitionedFile {
    PartitionedFile::from(ObjectMeta {
        location: Path::from(path),
        last_modified: Utc.timestamp_opt(secs, 0).unwrap(),
        size,
        e_tag: etag.map(str::to_string),
        version: None,
    })
}

fn scan(files: Vec<PartitionedFile>) -> Arc<dyn ExecutionPlan> {
    scan_as(files, DataType::Int64)
}

/// A Parquet scan of `files` producing a column `v` of type `ty`.
fn scan_as(files: Vec<PartitionedFile>, ty: DataType) -> Arc<dyn ExecutionPlan> {
    use datafusion::datasource::physical_plan::{FileScanConfigBuilder, ParquetSource};
    use datafusion::execution::object_store::ObjectStoreUrl;
    let schema = Arc::new(Schema::new(vec![Field::new("v", ty, true)]));
    let source = Arc::new(ParquetSource::new(schema.clone()));
    let config = FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), source)
        .with_file_groups(vec![files.into()])
        .build();
    DataSourceExec::from_data_source(config)
}

/// The key names the files a scan reads: another size, modification time, ETag, file or
/// context gives another key; the same gives the same. A scan that cannot name its files
/// (an in-memory table) has no key.
#[test]
fn the_key_changes_with_every_file_read_and_the_context() {
    let a = || file("zone/dt=2026-11-01/a.parquet", 100, 1_000, Some("e1"));
    let b = || file("zone/dt=2026-11-01/b.parquet", 200, 2_000, None);
    let k = |files: Vec<PartitionedFile>, ctx: &str| key(&scan(files), ctx).unwrap();
    let base = k(vec![a(), b()], "rows [w1]");
    assert_eq!(base, k(vec![a(), b()], "rows [w1]"));
    let mut others = vec![
        k(vec![a()], "rows [w1]"),
        k(
            vec![a(), b(), file("zone/x.parquet", 1, 1, None)],
            "rows [w1]",
        ),
        k(
            vec![
                file("zone/dt=2026-11-01/a.parquet", 101, 1_000, Some("e1")),
                b(),
            ],
            "rows [w1]",
        ),
        k(
            vec![
                file("zone/dt=2026-11-01/a.parquet", 100, 1_001, Some("e1")),
                b(),
            ],
            "rows [w1]",
        ),
        k(
            vec![
                file("zone/dt=2026-11-01/a.parquet", 100, 1_000, Some("e2")),
                b(),
            ],
            "rows [w1]",
        ),
        k(vec![a(), b()], "rows [w2]"),
        key(&scan_as(vec![a(), b()], DataType::Int32), "rows [w1]").unwrap(),
    ];
    others.sort();
    others.dedup();
    assert_eq!(others.len(), 7);
    assert!(!others.contains(&base));

    let memory = datafusion::datasource::memory::MemorySourceConfig::try_new_exec(
        &[vec![query_row(1, 1)]],
        query_row(1, 1).schema(),
        None,
    )
    .unwrap();
    assert!(key(&(memory as Arc<dyn ExecutionPlan>), "rows").is_none());
}

/// Every key of a run includes the Delta sources' pinned versions: a Delta file read again
/// at another version (other deletion vectors, same path and size) is another key.
#[test]
fn a_delta_sources_pinned_version_is_part_of_every_key() {
    use crate::pipeline::sources::SourceVersion;
    use crate::task::Format;
    let pin = |version| SourceVersion {
        alias: "orders".into(),
        format: Format::Delta,
        version: Some(version),
        files: None,
        fingerprint: None,
        read: Vec::new(),
    };
    let (v3, v4) = (
        Memo::context(&[], &[pin(3)]).unwrap(),
        Memo::context(&[], &[pin(4)]).unwrap(),
    );
    assert_ne!(v3, v4);
    assert_eq!(v3, Memo::context(&[], &[pin(3)]).unwrap());
    let memo = |c: String| Memo::new(Arc::new(InMemory::new()), Path::from("t"), c);
    let plan = scan(vec![file("orders/part-0.parquet", 10, 0, None)]);
    assert_ne!(
        memo(v3).key(&plan, "rows").unwrap(),
        memo(v4).key(&plan, "rows").unwrap()
    );
}

/// Regression (a local file rewritten while the checks' query read it could be memoised under
/// the key of the version listed before): results are kept only if every local file a scan
/// read still has its listed size and modification time.
#[test]
fn a_local_file_changed_after_its_listing_is_not_memoised() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.parquet");
    std::fs::write(&path, b"0123456789").unwrap();
    let listed = |p: &std::path::Path| {
        let m = std::fs::metadata(p).unwrap();
        PartitionedFile::from(ObjectMeta {
            location: Path::from_absolute_path(p).unwrap(),
            last_modified: m.modified().unwrap().into(),
            size: m.len(),
            e_tag: None,
            version: None,
        })
    };
    let as_listed = scan(vec![listed(&path)]);
    assert!(super::still_as_listed(&as_listed));
    // Touched: another modification time.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_modified(later).unwrap();
    drop(f);
    assert!(!super::still_as_listed(&as_listed));
    assert!(super::still_as_listed(&scan(vec![listed(&path)])));
    // Another size; and gone.
    std::fs::write(&path, b"01234").unwrap();
    let before = scan(vec![listed(&path)]);
    std::fs::write(&path, b"0123456789").unwrap();
    assert!(!super::still_as_listed(&before));
    std::fs::remove_file(&path).unwrap();
    assert!(!super::still_as_listed(&scan(vec![file(
        "/no/such/file",
        1,
        0,
        None
    )])));
}

/// Regression (found in review: every grouped check over a local Delta source went
/// unmemoised): delta-rs lists a Delta table's files with no modification time (the epoch);
/// such a file is compared by its size, the key holding the table's pinned version.
#[test]
fn a_file_listed_without_a_time_is_compared_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("part-0.parquet");
    std::fs::write(&path, b"0123456789").unwrap();
    let as_delta_lists = |size| {
        let mut f = file("x", size, 0, None);
        f.object_meta.location = Path::from_absolute_path(&path).unwrap();
        f
    };
    assert!(super::still_as_listed(&scan(vec![as_delta_lists(10)])));
    assert!(!super::still_as_listed(&scan(vec![as_delta_lists(9)])));
}
