//! Tables written by idemlake are read correctly by independent Delta clients: the Python
//! `deltalake` package and `polars` (installed by scripts/py-env).

use std::process::Command;

use crate::common::*;

fn python() -> String {
    let py = std::env::var("IDEMLAKE_PYTHON").unwrap_or_else(|_| {
        repo()
            .join(".venv-py/bin/python")
            .to_string_lossy()
            .into_owned()
    });
    assert!(
        std::path::Path::new(&py).exists(),
        "{py} is missing: run scripts/py-env (make test does) or set IDEMLAKE_PYTHON"
    );
    py
}

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
        "merge re-run read back by polars/deltalake: {got}"
    );
}
