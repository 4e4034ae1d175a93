use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};

use super::*;
use crate::pipeline::landing::Listing;
use crate::task::{Partitioning, Require};

fn write_parquet(path: &std::path::Path, ids: &[i64]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from(ids.to_vec()))],
    )
    .unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// A Parquet landing zone `events` at `root`, with every option at its default.
fn zone_source(root: &std::path::Path) -> Source {
    Source {
        alias: "events".into(),
        uri: format!("{}/", root.display()),
        upstream: None,
        require: Require::Complete,
        format: Format::Parquet,
        csv_header: true,
        csv_delimiter: b',',
        partitioning: Partitioning::Auto,
        schema_from: crate::task::SchemaFrom::First,
        on_missing: crate::task::OnMissing::Retry,
        arrival: None,
        table: None,
    }
}

/// Issue 37, item 3 (an observation on S3 that the checks made no listing of their own
/// there): the checks' landing zone is DataFusion's listing table over the zone, registered
/// in the checks' session, and lists the zone itself. A file that lands in a day after the
/// runner pinned that day's listing is not in the runner's pins, and is in the checks' read:
/// their file list does not come from the runner's pinned listings (the pin check before the
/// commit is what fails such a window).
#[tokio::test]
async fn the_checks_list_a_landing_zone_themselves_not_through_the_runners_pins() {
    let dir = tempfile::tempdir().unwrap();
    let day = dir.path().join("zone/dt=2026-01-02");
    write_parquet(&dir.path().join("zone/dt=2026-01-01/a.parquet"), &[1, 2]);
    write_parquet(&day.join("a.parquet"), &[3, 4, 5]);
    let source = zone_source(&dir.path().join("zone"));
    // The runner's route: the zone's pinned listings, made now.
    let runner = SessionContext::new();
    let zone = crate::pipeline::landing::register(&runner, &source, Route::Zone, None)
        .await
        .unwrap()
        .expect("a landing zone");
    assert_eq!(zone.files(&[], Listing::Pinned).await.unwrap().len(), 2);
    // A file lands in the second day; then the checks register the zone.
    write_parquet(&day.join("b.parquet"), &[6]);
    assert_eq!(zone.files(&[], Listing::Pinned).await.unwrap().len(), 2);
    let checks = crate::session::build(crate::session::Profile::Checks).unwrap();
    register_pinned(
        &checks,
        std::slice::from_ref(&source),
        &[],
        &Engine::Local,
        &[],
    )
    .await
    .unwrap();
    let count = |sql: &'static str| {
        let checks = checks.clone();
        async move {
            let batches = checks.sql(sql).await.unwrap().collect().await.unwrap();
            let col = batches[0].column(0).as_any();
            col.downcast_ref::<Int64Array>().unwrap().value(0)
        }
    };
    let sql = "SELECT count(*) FROM events WHERE dt = DATE '2026-01-02'";
    assert_eq!(count(sql).await, 4);
    // And the runner's pinned route still reads its three rows there.
    let rows = runner
        .sql("SELECT count(*) FROM events WHERE dt = DATE '2026-01-02'")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let col = rows[0].column(0).as_any();
    assert_eq!(col.downcast_ref::<Int64Array>().unwrap().value(0), 3);
}

/// Regression (the checks' own reader converted a file's columns with arrow's default cast,
/// an overflow becoming NULL, where the runner refuses a lossy conversion): the checks read a
/// landing zone through the plain route, which refuses it the same way, naming the column.
#[tokio::test]
async fn the_checks_route_refuses_a_lossy_conversion_as_the_runner_does() {
    let dir = tempfile::tempdir().unwrap();
    write_parquet(&dir.path().join("zone/dt=2026-01-01/a.parquet"), &[1, 2]);
    // The second day's file holds `id` as DOUBLE: into the zone's BIGINT it would lose values.
    let later = dir.path().join("zone/dt=2026-01-02/a.parquet");
    std::fs::create_dir_all(later.parent().unwrap()).unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new(
        "id",
        DataType::Float64,
        false,
    )]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(arrow::array::Float64Array::from(vec![1.5, 1e300]))],
    )
    .unwrap();
    let file = std::fs::File::create(&later).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let source = zone_source(&dir.path().join("zone"));
    let checks = crate::session::build(crate::session::Profile::Checks).unwrap();
    let zones = register_pinned(
        &checks,
        std::slice::from_ref(&source),
        &[],
        &Engine::Local,
        &[],
    )
    .await
    .unwrap();
    assert_eq!(zones.len(), 1);
    let first = "SELECT sum(id) FROM events WHERE dt = DATE '2026-01-01'";
    let df = checks.sql(first).await.unwrap();
    assert_eq!(df.collect().await.unwrap()[0].num_rows(), 1);
    let all = checks.sql("SELECT sum(id) FROM events").await.unwrap();
    let err = all.collect().await.unwrap_err().to_string();
    assert!(err.contains("id"), "{err}");
    assert!(err.contains("Float64") || err.contains("DOUBLE"), "{err}");
}
