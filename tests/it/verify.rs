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
    assert!(
        s.contains("differs") && s.contains("only in published_path:"),
        "{s}"
    );
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

/// `verify` runs the path `run` publishes by (accelerated) against the plain twin: a fault
/// injected only into the accelerations (every shared-scan slice loses a row) makes it fail
/// with exit 4, naming the published path as the side with fewer rows; with the accelerations
/// off (`IDEMLAKE_ACCELERATE=0`) the same fault has nothing to corrupt, as plain-only
/// verification never had. `--twice` adds the published path against itself.
#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
fn verify_catches_a_fault_only_in_the_accelerated_path() {
    let p = TestProject::new();
    let task = "lineitem_by_ship_day";
    let verify = |extra: &[(&str, &str)], args: &[&str]| {
        let mut c = p.cmd();
        c.env("IDEMLAKE_TEST_FAULT", "slice-drop-row");
        for (k, v) in extra {
            c.env(k, v);
        }
        c.args(["--output", "json", "verify", task])
            .args(args)
            .output()
            .unwrap()
    };
    let out = verify(&[], &["--window", "1995-06-03"]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    let v = &json_lines(&out)[0];
    assert_eq!(v["status"], "differs", "{v}");
    assert_eq!(v["route"], "accelerated", "{v}");
    let d = &v["diffs"][0];
    assert_eq!(d["left"], "published_path", "{v}");
    assert_eq!(d["right"], "plain_twin", "{v}");
    assert_eq!(d["only_left"], 0, "{v}");
    assert!(d["only_right"].as_u64().unwrap() >= 1, "{v}");
    // A range (shared scans over a chunk of its windows): every window differs.
    let out = verify(&[], &["--from", "1995-06-01", "--to", "1995-06-03"]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 3, "{}", text(&out));
    assert!(
        lines.iter().all(|v| v["status"] == "differs"),
        "{}",
        text(&out)
    );
    // The plain route alone would have passed.
    let out = verify(&[("IDEMLAKE_ACCELERATE", "0")], &["--window", "1995-06-03"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(json_lines(&out)[0]["route"], "plain");
    // Without the fault, the published path twice and the plain twin agree.
    let out = p.run(&[
        "--output",
        "json",
        "verify",
        task,
        "--window",
        "1995-06-03",
        "--twice",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let v = &json_lines(&out)[0];
    assert_eq!(v["diffs"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["diffs"][1]["right"], "published_path_2", "{v}");
    assert!(
        log_version(&p.table_dir(task)).is_none(),
        "verify must not write"
    );
}
