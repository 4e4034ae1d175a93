//! Tables written by idemlake are read correctly by independent Delta clients: the Python
//! `deltalake` package, `polars` and DuckDB's delta extension (installed by scripts/py-env).

use std::process::Command;

use crate::common::*;

#[tokio::test]
async fn python_deltalake_and_polars_read_what_idemlake_wrote() {
    let p = TestProject::new();
    let days = ["1995-06-01", "1995-06-02", "1995-06-03"];
    for d in days {
        p.run_ok("lineitem_by_ship_day", d);
    }
    p.run_ok("lineitem_by_ship_day", days[1]); // a re-run must not show up as duplicates
    p.run_ok("orders_by_day", days[0]);
    p.run_ok("orders_by_day", days[0]);

    let out = Command::new(python())
        .arg(repo().join("scripts/read_delta.py"))
        .arg(p.table_dir("lineitem_by_ship_day"))
        .args(["ship_date", "l_extendedprice"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    let expected = source_rows(
        "SELECT CAST(l_shipdate AS VARCHAR) AS d, count(*) AS n, CAST(sum(l_extendedprice) AS VARCHAR) AS s \
         FROM lineitem WHERE l_shipdate >= DATE '1995-06-01' AND l_shipdate < DATE '1995-06-04' GROUP BY l_shipdate",
    )
    .await;
    let mut total = 0u64;
    for row in &expected {
        let cols: std::collections::HashMap<&str, &str> =
            row.split('|').map(|c| c.split_once('=').unwrap()).collect();
        let n: u64 = cols["n"].parse().unwrap();
        total += n;
        assert_eq!(
            got["partitions"][cols["d"]], n,
            "rows of {} per the Python readers: {got}",
            cols["d"]
        );
    }
    assert_eq!(got["rows"], total);
    let sum = source_rows("SELECT CAST(sum(l_extendedprice) AS VARCHAR) AS s FROM lineitem WHERE l_shipdate >= DATE '1995-06-01' AND l_shipdate < DATE '1995-06-04'").await;
    assert_eq!(
        format!("s={}", got["sums"]["l_extendedprice"].as_str().unwrap()),
        sum[0]
    );
    assert_eq!(got["version"], 4);

    let out = Command::new(python())
        .arg(repo().join("scripts/read_delta.py"))
        .arg(p.table_dir("orders_by_day"))
        .args(["order_date", "o_totalprice"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n =
        source_rows("SELECT count(*) AS n FROM orders WHERE o_orderdate = DATE '1995-06-01'").await;
    assert_eq!(
        format!("n={}", got["rows"]),
        n[0],
        "merge re-run read back by deltalake/polars/DuckDB: {got}"
    );
}

/// The tables idemlake creates write their checkpoints with the file statistics as a struct
/// (`delta.checkpoint.writeStatsAsStruct`) as well as JSON: loading the table then reads
/// parsed statistics instead of parsing a JSON string per file (a day window on a table of
/// 2,500 files: ~0.94× the time). Every independent reader must still read such a table,
/// loading it from that checkpoint. They also checkpoint every 10 commits (Spark's default).
#[tokio::test(flavor = "multi_thread")]
async fn checkpoints_carry_parsed_stats_and_independent_readers_read_them() {
    let p = TestProject::new();
    let name = "lineitem_by_ship_day";
    let table = p.table_dir(name);
    p.run_ok(name, "1995-06-01"); // versions 0 (create) and 1
    let created = commit_actions(&table, 0);
    let config = created
        .iter()
        .find_map(|a| a.get("metaData"))
        .map(|m| m["configuration"].clone())
        .unwrap();
    assert_eq!(
        config["delta.checkpoint.writeStatsAsStruct"], "true",
        "{config}"
    );
    // Issue 35 (a day window on S3 read 35 log files of 34 commits): a checkpoint every 10
    // commits, as Spark's tables have.
    assert_eq!(config["delta.checkpointInterval"], "10", "{config}");
    set_checkpoint_interval(&table, 4).await; // version 2
    for d in ["1995-06-02", "1995-06-01", "1995-06-03"] {
        p.run_ok(name, d); // versions 3 (checkpoint: version + 1 a multiple of 4), 4, 5
    }
    let cp = table.join(format!("_delta_log/{:020}.checkpoint.parquet", 3));
    let reader =
        parquet::file::reader::SerializedFileReader::new(std::fs::File::open(&cp).unwrap())
            .unwrap();
    let schema = parquet::file::reader::FileReader::metadata(&reader)
        .file_metadata()
        .schema_descr()
        .root_schema()
        .clone();
    let add = schema
        .get_fields()
        .iter()
        .find(|f| f.name() == "add")
        .unwrap()
        .get_fields()
        .iter()
        .map(|f| f.name().to_string())
        .collect::<Vec<_>>();
    assert!(
        add.contains(&"stats".to_string()) && add.contains(&"stats_parsed".to_string()),
        "the checkpoint's add columns: {add:?}"
    );

    let out = Command::new(python())
        .arg(repo().join("scripts/read_delta.py"))
        .arg(&table)
        .args(["ship_date", "l_extendedprice"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["version"], 5);
    assert_eq!(
        got["readers"],
        serde_json::json!(["deltalake", "polars", "duckdb"])
    );
    let expected = source_rows(
        "SELECT count(*) AS n, CAST(sum(l_extendedprice) AS VARCHAR) AS s FROM lineitem \
         WHERE l_shipdate >= DATE '1995-06-01' AND l_shipdate < DATE '1995-06-04'",
    )
    .await;
    assert_eq!(
        format!(
            "n={}|s={}",
            got["rows"],
            got["sums"]["l_extendedprice"].as_str().unwrap()
        ),
        expected[0]
    );
}
