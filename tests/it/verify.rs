//! verify: idempotent tasks pass, a task using random() (allowed through [lint]) fails with
//! exit 4, and --against-table finds a damaged published window.

use crate::common::*;

#[test]
fn verify_passes_on_every_sample_task() {
    let p = TestProject::new();
    for t in ["lineitem_by_ship_day", "daily_revenue", "orders_by_day"] {
        let out = p.run(&["--output", "json", "verify", t, "--window", "1995-06-01"]);
        assert_eq!(code(&out), 0, "{t}: {}", text(&out));
        let v = &json_lines(&out)[0];
        assert_eq!(v["status"], "identical");
        assert!(v["diffs"][0]["left_rows"].as_u64().unwrap() > 0);
        // Nothing was published.
        assert!(
            log_version(&p.table_dir(t)).is_none(),
            "{t}: verify must not write"
        );
    }
    let out = p.run(&[
        "verify",
        "lineitem_by_ship_day",
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-04",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .matches("identical")
            .count(),
        4
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("4 windows, 0 differ"));
    // --window and a range together is a usage error.
    let out = p.run(&[
        "verify",
        "lineitem_by_ship_day",
        "--window",
        "1995-06-01",
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-02",
    ]);
    assert_eq!(code(&out), 2);
}

#[test]
fn verify_fails_on_a_task_using_random_through_the_escape_hatch() {
    let p = TestProject::new();
    p.task(
        "noisy",
        &lineitem_task(
            "SELECT l_orderkey, l_linenumber, l_extendedprice * random() AS jitter, \
             l_shipdate AS ship_date \
             FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end",
            "[lint]\nallow = [\"random\"]",
        ),
    );
    // The lint lets it through (and explain says so) …
    let out = p.run(&["explain", "noisy", "--window", "1995-06-01"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("lint allow:    random"),
        "{}",
        text(&out)
    );
    // … but verify proves it is not idempotent.
    let out = p.run(&["verify", "noisy", "--window", "1995-06-01"]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("differs") && s.contains("only in published_path:"), "{s}");
    // Over a range, every window is verified and the command exits 4.
    let out = p.run(&[
        "--output",
        "json",
        "verify",
        "noisy",
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-03",
    ]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 3, "{}", text(&out));
    assert!(lines.iter().all(|l| l["status"] == "differs"), "{lines:?}");
    // The allowance is recorded in the commit of a real run.
    p.run_ok("noisy", "1995-06-01");
    let info = commit_actions(&p.table_dir("noisy"), 1)
        .into_iter()
        .find_map(|a| a.get("commitInfo").cloned())
        .unwrap();
    assert_eq!(info["idemlake"]["lint_allow"][0], "random");
}

#[test]
fn verify_handles_duplicate_rows_and_nulls_as_multisets() {
    let p = TestProject::new();
    std::fs::write(
        p.path().join("e.csv"),
        "k,v,day\n1,,2026-01-01\n1,,2026-01-01\n2,0.1,2026-01-01\n",
    )
    .unwrap();
    p.task(
        "dups",
        "sql = \"SELECT k, CAST(v AS DOUBLE) AS v, CAST(day AS DATE) AS day FROM e WHERE CAST(day AS DATE) >= $window_start AND CAST(day AS DATE) < $window_end\"\n\
         [target]\npartition_by = \"day\"\n[window]\ngrain = \"day\"\n[sources.e]\nuri = \"e.csv\"\n",
    );
    let out = p.run(&[
        "--output",
        "json",
        "verify",
        "dups",
        "--window",
        "2026-01-01",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(json_lines(&out)[0]["diffs"][0]["left_rows"], 3);
}

#[tokio::test]
async fn verify_against_table_finds_a_damaged_window() {
    let p = TestProject::new();
    p.run_ok("daily_revenue", "1995-06-01");
    let out = p.run(&[
        "verify",
        "daily_revenue",
        "--window",
        "1995-06-01",
        "--against-table",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    // Damage the published window the way a legacy job would: append its rows again.
    append_again(&p.table_dir("daily_revenue"), "").await;
    let out = p.run(&[
        "verify",
        "daily_revenue",
        "--window",
        "1995-06-01",
        "--against-table",
    ]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("only in published: 3"),
        "{}",
        text(&out)
    );
}
