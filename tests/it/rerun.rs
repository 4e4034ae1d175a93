//! Re-runs leave identical content, one commit per run, and record the run in commitInfo.

use crate::common::*;

#[tokio::test]
async fn overwrite_reruns_are_identical_and_one_commit_each() {
    let p = TestProject::new();
    let table = p.table_dir("daily_revenue");
    for day in ["1995-06-01", "1995-06-02", "1995-06-03"] {
        p.run_ok("daily_revenue", day);
    }
    let first = table_rows(&table, "").await;
    let v = log_version(&table).unwrap();
    assert_eq!(v, 3, "table created at 0, one commit per window");
    p.run_ok("daily_revenue", "1995-06-02");
    assert_eq!(log_version(&table), Some(v + 1));
    assert_eq!(
        table_rows(&table, "").await,
        first,
        "content identical after a re-run"
    );

    // The re-run is one commit that removes the window's old files and adds the new ones,
    // touching no other partition.
    let actions = commit_actions(&table, v + 1);
    let removes: Vec<_> = actions.iter().filter_map(|a| a.get("remove")).collect();
    let adds: Vec<_> = actions.iter().filter_map(|a| a.get("add")).collect();
    assert!(!removes.is_empty() && !adds.is_empty());
    for a in removes.iter().chain(&adds) {
        assert_eq!(a["partitionValues"]["ship_date"], "1995-06-02", "{a}");
    }
    let info = actions
        .iter()
        .find_map(|a| a.get("commitInfo"))
        .expect("commitInfo");
    assert_eq!(info["operation"], "WRITE");
    assert_eq!(info["operationParameters"]["mode"], "Overwrite");
    assert!(
        info["operationParameters"]["predicate"]
            .as_str()
            .unwrap()
            .contains("ship_date")
    );
    let rec = &info["idemlake"];
    assert_eq!(rec["task"], "daily_revenue");
    assert_eq!(rec["window"]["label"], "1995-06-02");
    assert_eq!(rec["window"]["start"], "1995-06-02T00:00:00+00:00");
    assert!(rec["run_id"].as_str().unwrap().len() >= 32);
    assert!(rec["sql_hash"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(rec["sources"][0]["alias"], "lineitem");
    assert!(rec["sources"][0]["fingerprint"].is_string());
    let rows = adds.iter().map(|a| {
        let stats: serde_json::Value = serde_json::from_str(a["stats"].as_str().unwrap()).unwrap();
        stats["numRecords"].as_u64().unwrap()
    });
    assert_eq!(rec["rows_written"].as_u64().unwrap(), rows.sum::<u64>());
    let checks = rec["reconciliation"].as_array().unwrap();
    assert!(
        checks
            .iter()
            .any(|c| c["check"] == "revenue" && c["ok"] == true),
        "{checks:?}"
    );
}

#[tokio::test]
async fn merge_reruns_update_never_duplicate() {
    let p = TestProject::new();
    let table = p.table_dir("orders_by_day");
    p.run_ok("orders_by_day", "1995-06-01");
    p.run_ok("orders_by_day", "1995-06-02");
    let first = table_rows(&table, "").await;
    let expected = source_rows(
        "SELECT o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderpriority, o_orderdate AS order_date \
         FROM orders WHERE o_orderdate >= DATE '1995-06-01' AND o_orderdate < DATE '1995-06-03'",
    )
    .await;
    assert_eq!(first, expected);
    for _ in 0..2 {
        let out = p.run_ok("orders_by_day", "1995-06-01");
        assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
    }
    assert_eq!(
        table_rows(&table, "").await,
        expected,
        "merge re-runs update, never duplicate"
    );
    let info = commit_actions(&table, log_version(&table).unwrap())
        .into_iter()
        .find_map(|a| a.get("commitInfo").cloned())
        .unwrap();
    assert_eq!(info["operation"], "MERGE");
    assert_eq!(info["idemlake"]["window"]["label"], "1995-06-01");
}

/// One process commits the same windows again and again: its map of the table's live files
/// advances with each commit (the table state is never re-read), across checkpoints. Every
/// commit must remove exactly the files the previous commit of that window added, the
/// checkpoints must be written as the table's interval says, and a fresh reader (delta-rs,
/// loading from the checkpoint) must see each window's rows once.
#[tokio::test(flavor = "multi_thread")]
async fn one_process_replaces_windows_repeatedly_across_checkpoints() {
    use idemlake::report::record::Status;
    let p = TestProject::new();
    let name = "lineitem_by_ship_day";
    let table = p.table_dir(name);
    p.run_ok(name, "1995-06-01"); // versions 0 (create) and 1
    set_checkpoint_interval(&table, 3).await; // version 2

    let project = idemlake::task::project::Project::resolve(Some(p.path()), None).unwrap();
    let task = project.task(name).unwrap();
    let runner = idemlake::pipeline::runner::Runner::new(&project, &task)
        .await
        .unwrap();
    let days = [
        "1995-06-01",
        "1995-06-02",
        "1995-06-01",
        "1995-06-01",
        "1995-06-02",
        "1995-06-01",
        "1995-06-01",
    ];
    for (i, day) in days.iter().enumerate() {
        let w = idemlake::task::window::Window::parse(day, task.grain, &task.timezone).unwrap();
        let r = runner.run(&w).await;
        assert_eq!(r.status, Status::Ok, "{day}: {:?}", r.error);
        assert_eq!(r.table_version, Some(3 + i as i64), "{day}");
    }
    assert_eq!(log_version(&table), Some(9));

    // Each commit removes what the previous commit of its window added, nothing else.
    let mut live: std::collections::HashMap<String, Vec<String>> = Default::default();
    for v in 1..=9u64 {
        let actions = commit_actions(&table, v);
        let paths = |kind: &str| {
            let mut ps: Vec<String> = actions
                .iter()
                .filter_map(|a| a.get(kind))
                .map(|a| a["path"].as_str().unwrap().to_string())
                .collect();
            ps.sort();
            ps
        };
        let (adds, removes) = (paths("add"), paths("remove"));
        if v == 2 {
            assert!(
                adds.is_empty() && removes.is_empty(),
                "property change only"
            );
            continue;
        }
        let day = actions
            .iter()
            .find_map(|a| a.get("add"))
            .map(|a| {
                a["partitionValues"]["ship_date"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .unwrap();
        let before = live.insert(day.clone(), adds).unwrap_or_default();
        assert_eq!(
            removes, before,
            "version {v} ({day}) removes the previous files"
        );
    }
    for v in [5, 8] {
        let cp = table.join(format!("_delta_log/{v:020}.checkpoint.parquet"));
        assert!(cp.is_file(), "checkpoint at version {v}");
    }
    for day in ["1995-06-01", "1995-06-02"] {
        assert_eq!(
            table_rows(&table, &format!("ship_date = DATE '{day}'")).await,
            expected_lineitem_day(day).await,
            "{day}"
        );
    }
}
