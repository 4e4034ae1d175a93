use super::recover::landed;
use super::*;
use crate::task::window::Grain;
use arrow::datatypes::{DataType, Field, Schema};

/// A day window of the date column `d`, day `n` since the epoch, staging `path` for `run`.
fn window(n: i32, path: &str, run: &str) -> WindowCommit {
    let day = (jiff::civil::date(1970, 1, 1) + jiff::Span::new().days(n)).to_string();
    WindowCommit {
        range: {
            let utc = jiff::tz::TimeZone::UTC;
            let w = crate::task::window::Window::parse(&day, Grain::Day, &utc).unwrap();
            WindowRange::new(Grain::Day, "d", &w)
        },
        adds: vec![Add {
            path: format!("d={day}/{path}"),
            partition_values: HashMap::from([("d".to_string(), Some(day.clone()))]),
            size: 10,
            data_change: true,
            ..Default::default()
        }],
        tags: RunTags {
            run_id: run.into(),
            window: day,
            sql_hash: "h".into(),
            inputs: None,
            checks: None,
        },
        record: serde_json::json!({"task": "t", "run_id": run}),
        metadata: None,
    }
}

async fn new_table(dir: &std::path::Path) -> DeltaTable {
    let url = url::Url::from_directory_path(dir).unwrap();
    let schema = Schema::new(vec![
        Field::new("x", DataType::Int64, true),
        Field::new("d", DataType::Date32, true),
    ]);
    let table = crate::delta::table::open(&url).await.unwrap();
    crate::delta::table::ensure_exists(table, &schema, "d", "t")
        .await
        .unwrap()
}

/// The live files of `table` as storage holds them now (the table opened afresh), sorted.
async fn live_paths(table: &DeltaTable) -> Vec<String> {
    let reread = crate::delta::table::open(table.table_url()).await.unwrap();
    let mut live: Vec<String> = reread
        .snapshot()
        .unwrap()
        .snapshot()
        .log_data()
        .iter()
        .map(|f| f.path().to_string())
        .collect();
    live.sort();
    live
}

/// `t`'s metadata with `extra` columns after its own.
fn widened(t: &DeltaTable, extra: &[Field]) -> deltalake::kernel::Metadata {
    use delta_kernel::engine::arrow_conversion::TryIntoKernel;
    use deltalake::kernel::MetadataExt;
    let snapshot = t.snapshot().unwrap();
    let mut fields: Vec<Field> = snapshot
        .snapshot()
        .arrow_schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.extend(extra.iter().cloned());
    let kernel: deltalake::kernel::StructType = (&Schema::new(fields)).try_into_kernel().unwrap();
    snapshot.metadata().clone().with_schema(&kernel).unwrap()
}

/// Bug: after a failed attempt, `landed` looked for the run's first file in the latest
/// snapshot before reading the log. A commit that landed (its response lost) and whose
/// window another writer had replaced since was taken for "not landed": the run would
/// commit its window again, over the other writer's newer one, and report the second
/// version. The log says which commit names the run, whatever came after it.
#[tokio::test]
async fn a_landed_commit_replaced_since_is_still_found_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = new_table(dir.path()).await;
    let base = table.version().unwrap() as i64;
    let ours = window(1, "ours.parquet", "run-ours");
    let c = commit_windows(&mut table, &mut None, "d", std::slice::from_ref(&ours))
        .await
        .unwrap();
    assert_eq!(c.version, base + 1);
    // Another writer replaces the same window.
    let mut other = crate::delta::table::open(table.table_url()).await.unwrap();
    let theirs = window(1, "theirs.parquet", "run-theirs");
    let c2 = commit_windows(&mut other, &mut None, "d", &[theirs])
        .await
        .unwrap();
    assert_eq!((c2.version, c2.files_removed), (base + 2, 1));
    table.update_state().await.unwrap();
    assert_eq!(
        landed(&table, std::slice::from_ref(&ours), base)
            .await
            .unwrap(),
        Some(base + 1)
    );
    // A run that never committed has not landed.
    let never = window(1, "never.parquet", "run-never");
    assert_eq!(landed(&table, &[never], base).await.unwrap(), None);
}

/// Bug: a commit that adds a column and loses its version to another writer that added
/// the same column (backfill shards of a task whose query just gained it) compared the
/// re-read table's schema with the one from before its own change, and failed with "the
/// table's schema changed while this run was committing": every shard but the first
/// failed its first window. The schema this commit writes is not a change under it.
#[tokio::test]
async fn a_lost_race_to_the_same_new_column_rebuilds_instead_of_failing() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = new_table(dir.path()).await;
    let base = table.version().unwrap() as i64;
    let y = Field::new("y", DataType::Utf8, true);
    let wider = |t: &DeltaTable| widened(t, std::slice::from_ref(&y));
    // Both writers start from the same version, each adding column y.
    let mut first = crate::delta::table::open(table.table_url()).await.unwrap();
    let mut theirs = window(2, "theirs.parquet", "run-theirs");
    theirs.metadata = Some(wider(&first));
    let mut ours = window(1, "ours.parquet", "run-ours");
    ours.metadata = Some(wider(&table));
    let mut files = Some(FileMap::from_table(&table, "d").unwrap());
    commit_windows(&mut first, &mut None, "d", &[theirs])
        .await
        .unwrap();
    let c = commit_windows(&mut table, &mut files, "d", &[ours])
        .await
        .unwrap();
    assert_eq!(c.version, base + 2);
    let reread = crate::delta::table::open(table.table_url()).await.unwrap();
    let names: Vec<String> = reread
        .snapshot()
        .unwrap()
        .schema()
        .fields()
        .map(|f| f.name().to_string())
        .collect();
    assert_eq!(names, ["x", "d", "y"]);
    // A different change under it still fails, and publishes nothing.
    let mut other = crate::delta::table::open(table.table_url()).await.unwrap();
    let mut z = window(3, "z.parquet", "run-z");
    z.metadata = Some(widened(&other, &[Field::new("z", DataType::Int32, true)]));
    let mut stale = crate::delta::table::open(table.table_url()).await.unwrap();
    let mut stale_files = Some(FileMap::from_table(&stale, "d").unwrap());
    commit_windows(&mut other, &mut None, "d", &[z])
        .await
        .unwrap();
    let mut late = window(4, "late.parquet", "run-late");
    late.metadata = Some(widened(&stale, &[Field::new("w", DataType::Int32, true)]));
    let e = commit_windows(&mut stale, &mut stale_files, "d", &[late])
        .await
        .unwrap_err();
    assert!(e.message().contains("schema changed"), "{}", e.message());
    assert_eq!(
        crate::delta::table::open(table.table_url())
            .await
            .unwrap()
            .version(),
        Some((base + 3) as u64)
    );
}

/// The lost-race replay fetches the missed versions several at a time: a writer that missed
/// more commits than one fetch holds still replays every one of them (and none twice), and
/// its commit replaces exactly its window on top.
#[tokio::test]
async fn a_lost_race_to_more_commits_than_one_fetch_replays_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = new_table(dir.path()).await;
    let base = table.version().unwrap() as i64;
    let mut files = Some(FileMap::from_table(&table, "d").unwrap());
    let mut other = crate::delta::table::open(table.table_url()).await.unwrap();
    let missed = 2 * super::recover::AHEAD + 3;
    for i in 0..missed {
        // Day 5 twice among them: the replay must drop the first of its files.
        let day = if i == 9 { 5 } else { i as i32 + 1 };
        let w = window(day, &format!("theirs-{i}.parquet"), &format!("run-{i}"));
        commit_windows(&mut other, &mut None, "d", &[w])
            .await
            .unwrap();
    }
    let ours = window(5, "ours.parquet", "run-ours");
    let c = commit_windows(&mut table, &mut files, "d", &[ours])
        .await
        .unwrap();
    assert_eq!(c.version, base + missed + 1);
    let map = files.as_ref().expect("the map followed the replay");
    assert_eq!(map.version, c.version);
    let live = live_paths(&table).await;
    assert_eq!(live.len(), map.len());
    assert!(live.iter().any(|p| p.ends_with("/ours.parquet")));
    assert!(!live.iter().any(|p| p.starts_with("d=1970-01-06/theirs")));
    assert_eq!(live.len() as i64, missed - 1);
}

/// The checkpoint a commit makes due is handed back, not written inside the commit (the
/// table's turn): it is written when the caller says so, and is then the table's latest.
#[tokio::test]
async fn a_due_checkpoint_is_handed_back_and_written_after_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = new_table(dir.path()).await;
    let mut files = Some(FileMap::from_table(&table, "d").unwrap());
    let mut due = vec![];
    for i in 1..=12 {
        let w = window(i, &format!("f{i}.parquet"), &format!("run-{i}"));
        let c = commit_windows(&mut table, &mut files, "d", &[w])
            .await
            .unwrap();
        if let Some(cp) = c.checkpoint {
            due.push(c.version);
            let log = dir.path().join("_delta_log");
            let name = format!("{:020}.checkpoint.parquet", c.version);
            assert!(!log.join(&name).exists(), "written inside the commit");
            cp.write().await;
            assert!(log.join(&name).exists(), "not written when asked");
        }
    }
    assert_eq!(due, vec![9]);
}

/// Windows staged while a commit lost a race join the rebuilt commit: after the lost race the
/// caller is asked to rejoin (the map caught up with the winner's commit), and one commit then
/// publishes the first window and the joined one on top of it, each replacing its own window.
#[tokio::test]
async fn windows_waiting_when_a_race_is_lost_join_the_rebuilt_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = new_table(dir.path()).await;
    let base = table.version().unwrap() as i64;
    let mut files = Some(FileMap::from_table(&table, "d").unwrap());
    let mut other = crate::delta::table::open(table.table_url()).await.unwrap();
    let theirs = window(3, "theirs.parquet", "run-theirs");
    commit_windows(&mut other, &mut None, "d", &[theirs])
        .await
        .unwrap();
    let ours = window(5, "ours.parquet", "run-ours");
    let asked = commit_or_rejoin(
        &mut table,
        &mut files,
        "d",
        std::slice::from_ref(&ours),
        &|| true,
    )
    .await
    .unwrap();
    assert!(asked.is_none(), "not asked to rejoin");
    assert_eq!(
        files.as_ref().unwrap().version,
        base + 1,
        "the map caught up"
    );
    let joined = window(6, "joined.parquet", "run-ours");
    let c = commit_or_rejoin(&mut table, &mut files, "d", &[ours, joined], &|| true)
        .await
        .unwrap()
        .expect("landed");
    assert_eq!(c.version, base + 2);
    assert_eq!(c.files_added, 2);
    let live = live_paths(&table).await;
    assert_eq!(
        live,
        [
            "d=1970-01-04/theirs.parquet",
            "d=1970-01-06/ours.parquet",
            "d=1970-01-07/joined.parquet"
        ]
    );
}

/// A store that, on the first PUT of version 0, lets another writer create the table and
/// commit a window just before the PUT goes through: the race a worker that found no table
/// loses to another worker between delta-rs's "is there a table" listing and its PUT.
#[derive(Debug)]
struct CreatedMeanwhile {
    inner: object_store::local::LocalFileSystem,
    dir: std::path::PathBuf,
    raced: std::sync::atomic::AtomicBool,
}

impl std::fmt::Display for CreatedMeanwhile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CreatedMeanwhile")
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for CreatedMeanwhile {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        let first = location
            .as_ref()
            .ends_with("_delta_log/00000000000000000000.json")
            && !self.raced.swap(true, std::sync::atomic::Ordering::SeqCst);
        if first {
            let mut winner = new_table(&self.dir).await;
            commit_windows(
                &mut winner,
                &mut None,
                "d",
                &[window(1, "w.parquet", "won")],
            )
            .await
            .unwrap();
        }
        self.inner.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.inner.get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<
            'static,
            object_store::Result<object_store::path::Path>,
        >,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }
    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Bug: a worker that found no table and lost the race to create it went on with delta-rs's
/// create commit retried on top of the winner's commits. The log gained a second CREATE TABLE
/// (a new table id; readers that follow a table by its id see another table), after reading
/// each missed commit one after the other. The loser must take the winner's table as it is.
#[tokio::test]
async fn a_worker_that_loses_the_race_to_create_the_table_writes_no_second_create_table() {
    let dir = tempfile::tempdir().unwrap();
    let url = url::Url::from_directory_path(dir.path()).unwrap();
    let store = std::sync::Arc::new(CreatedMeanwhile {
        inner: object_store::local::LocalFileSystem::new(),
        dir: dir.path().to_path_buf(),
        raced: Default::default(),
    });
    let loser = crate::delta::table::builder_for(&url)
        .unwrap()
        .with_storage_backend(store, url.clone())
        .build()
        .unwrap();
    let schema = Schema::new(vec![
        Field::new("x", DataType::Int64, true),
        Field::new("d", DataType::Date32, true),
    ]);
    let table = crate::delta::table::ensure_exists(loser, &schema, "d", "t")
        .await
        .unwrap();
    assert_eq!(table.version(), Some(1), "the winner's table, as it is");
    let reread = crate::delta::table::open(&url).await.unwrap();
    assert_eq!(
        reread.version(),
        Some(1),
        "nothing committed after the winner's window"
    );
    let mut creates = 0;
    for e in std::fs::read_dir(dir.path().join("_delta_log")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            creates += std::fs::read_to_string(&p)
                .unwrap()
                .matches("\"operation\":\"CREATE TABLE\"")
                .count();
        }
    }
    assert_eq!(creates, 1, "one CREATE TABLE");
}
