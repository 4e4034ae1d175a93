//! The checks' reads pinned to the version of each file their listing saw.

use super::*;

/// Regression (a file replaced between the checks' listing and their read was read as its
/// new bytes, while the checks' memo keyed the result by the version listed): the checks'
/// reader reads the version its listing saw or fails — a local file by its size and
/// modification time, a remote one by a read conditional on its listed ETag, whole or by
/// ranges.
#[tokio::test]
async fn a_file_replaced_after_the_checks_listed_it_fails_their_read() {
    let expect_changed = |e: DataFusionError| {
        assert!(
            e.to_string().contains("changed after it was listed")
                || e.to_string().contains("precondition"),
            "{e}"
        );
    };
    // Local: touched after planning (the listing), before the read.
    let dir = zone();
    let ctx = build(false, Listings::Narrow).unwrap();
    let (table, url) = listing(&ctx, dir.path()).await;
    let cols = [("dt".to_string(), DataType::Date32)];
    let own = CheckZone::new(table, url, &cols)
        .unwrap()
        .with_own_reader(true);
    ctx.register_table("t", Arc::new(own)).unwrap();
    let plan = ctx.sql(RANGE).await.unwrap();
    let plan = plan.create_physical_plan().await.unwrap();
    let f = dir.path().join("dt=2026-11-03/part-0.parquet");
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    let handle = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
    handle.set_modified(later).unwrap();
    drop(handle);
    let err = datafusion::physical_plan::collect(plan, ctx.task_ctx()).await;
    expect_changed(err.unwrap_err());
    // Planned again (listed again), it is read.
    assert_eq!(sum(&ctx, RANGE).await, 2 + 20 + 200 + 3 + 30 + 300);

    // Remote: every file of the zone put again (same bytes, a new ETag) after planning.
    for whole in [files::WHOLE_FILE_BYTES, 0] {
        let (ctx, store) = remote_own_reader(whole).await;
        let q = "SELECT count(*), sum(v) FROM t WHERE dt >= DATE '2026-11-02' AND dt < DATE '2026-11-03'";
        let before = ctx.sql(q).await.unwrap().collect().await.unwrap();
        let plan = ctx
            .sql(q)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let all: Vec<ObjectMeta> = futures::TryStreamExt::try_collect(store.inner.list(None))
            .await
            .unwrap();
        for meta in &all {
            let bytes = store
                .inner
                .get(&meta.location)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            store.inner.put(&meta.location, bytes.into()).await.unwrap();
        }
        let err = datafusion::physical_plan::collect(plan, ctx.task_ctx()).await;
        expect_changed(err.unwrap_err());
        let after = ctx.sql(q).await.unwrap().collect().await.unwrap();
        assert_eq!(
            before, after,
            "the same bytes, listed again (whole file up to {whole} bytes)"
        );
    }
}

/// ETags compare as values: quotes and a weak marker aside; an empty listed ETag is no ETag
/// (no `If-Match` sent, the modification time compared); an ETag listed but not returned is a
/// change.
#[test]
fn etags_compare_without_quotes_and_an_empty_one_is_none() {
    use super::ranges::{pinned, unchanged};
    let meta = |etag: Option<&str>, secs: i64| ObjectMeta {
        location: Path::from("zone/dt=2026-11-01/part-0.parquet"),
        last_modified: chrono::TimeZone::timestamp_opt(&chrono::Utc, secs, 0).unwrap(),
        size: 10,
        e_tag: etag.map(str::to_string),
        version: None,
    };
    assert!(unchanged(&meta(Some("\"abc\""), 1), &meta(Some("abc"), 2)).is_ok());
    assert!(unchanged(&meta(Some("W/\"abc\""), 1), &meta(Some("\"abc\""), 2)).is_ok());
    assert!(unchanged(&meta(Some("\"abc\""), 1), &meta(Some("\"abd\""), 1)).is_err());
    assert!(unchanged(&meta(Some("\"abc\""), 1), &meta(None, 1)).is_err());
    assert!(unchanged(&meta(Some(""), 1), &meta(Some("\"abc\""), 1)).is_ok());
    assert!(unchanged(&meta(Some(""), 1), &meta(Some("\"abc\""), 2)).is_err());
    let mut bigger = meta(Some("\"abc\""), 1);
    bigger.size = 11;
    assert!(unchanged(&meta(Some("\"abc\""), 1), &bigger).is_err());
    assert_eq!(pinned(&meta(Some(""), 1), None).if_match, None);
    assert_eq!(
        pinned(&meta(Some("\"abc\""), 1), None).if_match.as_deref(),
        Some("\"abc\"")
    );
}
