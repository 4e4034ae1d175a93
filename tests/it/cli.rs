//! The command line contract: help with examples, JSON lines, explain, validate.

use crate::common::*;

#[test]
fn help_shows_examples_and_exit_codes() {
    let p = TestProject::new();
    let out = p.run(&["--help"]);
    assert_eq!(code(&out), 0);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("Examples:") && s.contains("Exit codes"), "{s}");
    let out = p.run(&["run", "--help"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("--window"));
    assert_eq!(code(&p.run(&["frobnicate"])), 2);
}

#[test]
fn json_output_has_the_contract_fields() {
    let p = TestProject::new();
    let out = p.run(&[
        "--output",
        "json",
        "run",
        "daily_revenue",
        "--window",
        "1995-06-01T00:00:00+00:00/1995-06-02T00:00:00+00:00",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1);
    let j = &lines[0];
    for key in [
        "task",
        "window",
        "status",
        "rows_written",
        "table_version",
        "reconciliation",
        "duration_ms",
        "error",
    ] {
        assert!(j.get(key).is_some(), "missing {key} in {j}");
    }
    assert_eq!(j["window"]["start"], "1995-06-01T00:00:00+00:00");
    assert_eq!(j["window"]["end"], "1995-06-02T00:00:00+00:00");
    assert_eq!(j["status"], "ok");
    assert_eq!(j["table_version"], 1);
    for c in j["reconciliation"].as_array().unwrap() {
        for key in ["check", "source", "output", "ok"] {
            assert!(c.get(key).is_some(), "{c}");
        }
    }
    // Failures are JSON lines too.
    let out = p.run(&[
        "--output",
        "json",
        "run",
        "daily_revenue",
        "--window",
        "1995-06",
    ]);
    assert_eq!(code(&out), 2);
    assert_eq!(json_lines(&out)[0]["status"], "failed");
}

#[test]
fn explain_shows_bound_parameters_plan_and_predicate() {
    let p = TestProject::new();
    let out = p.run(&["explain", "lineitem_by_ship_day", "--window", "1995-06-01"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "replaceWhere:  \"ship_date\" >= DATE '1995-06-01' AND \"ship_date\" < DATE '1995-06-02'",
        "$window_start",
        "Date32(\"1995-06-01\")",
        "logical plan",
        "physical plan",
        "checks:        [reconcile].source on the independent path",
        "accelerations: on",
        "configuration: accelerate = true",
        "scan_cache_kb = auto",
    ] {
        assert!(s.contains(needle), "missing {needle} in:\n{s}");
    }
    // explain writes nothing.
    assert!(log_version(&p.table_dir("lineitem_by_ship_day")).is_none());
}

#[test]
fn validate_accepts_the_sample_tasks() {
    let p = TestProject::new();
    let out = p.run(&["validate"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    for t in ["daily_revenue", "lineitem_by_ship_day", "orders_by_day"] {
        assert!(s.contains(&format!("ok       {t}")), "{s}");
    }
}

#[test]
fn every_command_has_help_examples() {
    let p = TestProject::new();
    for cmd in [
        "run",
        "backfill",
        "verify",
        "audit",
        "repair",
        "validate",
        "explain",
        "status",
        "gen-tpch",
        "completions",
    ] {
        let out = p.run(&[cmd, "--help"]);
        assert_eq!(code(&out), 0, "{cmd}: {}", text(&out));
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            help.contains("Example") && help.contains(&format!("idemlake {cmd}")),
            "{cmd} --help has no example:\n{help}"
        );
    }
}

#[test]
fn completions_for_each_shell_name_the_commands() {
    let p = TestProject::new();
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef idemlake"),
        ("fish", "complete -c idemlake"),
    ] {
        let out = p.run(&["completions", shell]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        for cmd in ["backfill", "status", "repair"] {
            assert!(script.contains(cmd), "{shell} completion lacks {cmd}");
        }
    }
    let out = p.run(&["completions", "tcsh"]);
    assert_eq!(code(&out), 2);
}

#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
fn log_format_json_makes_every_stderr_line_json_and_no_color_is_respected() {
    let p = TestProject::new();
    // A run with info logs and a failure: every stderr line parses as JSON.
    let out = p
        .cmd()
        .env("IDEMLAKE_TEST_FAULT", "before-commit")
        .args([
            "-vv",
            "--log-format",
            "json",
            "run",
            "lineitem_by_ship_day",
            "--window",
            "1995-06-01",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(lines.len() >= 2, "{stderr}");
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string())
    );
    let last = lines.last().unwrap();
    assert_eq!(last["level"], "ERROR");
    assert_eq!(last["fields"]["exit_code"], 1);
    assert!(
        last["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("injected")
    );

    // Off a terminal there is never colour; NO_COLOR changes nothing there either.
    for no_color in [None, Some("1")] {
        let mut c = p.cmd();
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        let out = c
            .args([
                "-v",
                "status",
                "lineitem_by_ship_day",
                "--from",
                "1995-06-01",
                "--to",
                "1995-06-02",
            ])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", text(&out));
        assert!(
            !out.stdout.contains(&0x1b) && !out.stderr.contains(&0x1b),
            "{}",
            text(&out)
        );
    }
}

/// Issue 15: settings were read wherever they were used, a malformed number sometimes
/// ignored. Now the configuration is resolved once, before anything runs: a malformed
/// setting exits 2 naming it, nothing is written, and `explain` shows what is in force.
#[test]
fn a_malformed_setting_exits_2_before_anything_runs() {
    let p = TestProject::new();
    for (var, value) in [
        ("IDEMLAKE_SCAN_CACHE_KB", "lots"),
        ("IDEMLAKE_S3_MAX_RETRIES", "-1"),
    ] {
        let out = p
            .cmd()
            .env(var, value)
            .args(["run", "lineitem_by_ship_day", "--window", "1995-06-01"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{var}: {}", text(&out));
        assert!(text(&out).contains(var), "{}", text(&out));
        assert!(log_version(&p.table_dir("lineitem_by_ship_day")).is_none());
    }
    let out = p
        .cmd()
        .env("IDEMLAKE_ACCELERATE", "0")
        .env("IDEMLAKE_SCAN_CACHE_KB", "4096")
        .args(["explain", "lineitem_by_ship_day", "--window", "1995-06-01"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    for needle in ["accelerate = false", "mmap = false", "scan_cache_kb = 4096"] {
        assert!(s.contains(needle), "missing {needle} in:\n{s}");
    }
}

/// `validate` with `var=value` exits 0.
fn accepted_setting(p: &TestProject, var: &str, value: &str) {
    let out = p
        .cmd()
        .env(var, value)
        .args(["validate", "lineitem_by_ship_day"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{var}={value}: {}", text(&out));
}

/// Run `lineitem_by_ship_day` for one day with `var=value`; assert exit 2, the variable and
/// the value named on stderr, and nothing written.
fn refused_setting(p: &TestProject, var: &str, value: &str) {
    let out = p
        .cmd()
        .env(var, value)
        .args(["run", "lineitem_by_ship_day", "--window", "1995-06-01"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{var}={value}: {}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(var), "{var}={value}: {}", text(&out));
    assert!(err.contains(value), "{var}={value}: {}", text(&out));
    assert!(!err.contains("panicked"), "{}", text(&out));
    assert!(log_version(&p.table_dir("lineitem_by_ship_day")).is_none());
}

/// Defect (issue 37): an invalid `IDEMLAKE_LOG` was ignored silently (the `-v` filter ran
/// instead). Now it exits 2 naming the variable and its value, before anything runs; valid
/// filters still work.
#[test]
fn an_invalid_idemlake_log_is_refused_not_ignored() {
    let p = TestProject::new();
    for bad in [
        "idemlake=loud",
        "verbose",
        "debug,idemlake=[",
        "idemlake=debug,,=x",
    ] {
        refused_setting(&p, "IDEMLAKE_LOG", bad);
    }
    for good in [
        "warn",
        "idemlake=debug",
        "idemlake::storage::count=trace,idemlake=info",
        "INFO",
    ] {
        accepted_setting(&p, "IDEMLAKE_LOG", good);
    }
}

/// Defect (issue 37): `IDEMLAKE_SCAN_CACHE_KB` beyond what a byte count can hold overflowed
/// silently (KiB × 1024 wrapped). Now a budget beyond 1 PiB exits 2 naming it.
#[test]
fn an_overflowing_scan_cache_kb_is_refused_not_wrapped() {
    let p = TestProject::new();
    for bad in [
        "18446744073709551615",
        "18014398509481984",
        "1125899906842625",
    ] {
        refused_setting(&p, "IDEMLAKE_SCAN_CACHE_KB", bad);
    }
    // The conditional-PUT probe's age limit turned negative past i64::MAX seconds: no probe
    // record was ever trusted, silently.
    refused_setting(&p, "IDEMLAKE_S3_PROBE_MAX_AGE_SECS", "18446744073709551615");
}

/// Defect (issue 37): the on/off switches took anything but `0|off|false|no` as on, so a
/// misspelled `IDEMLAKE_ACCELERATE=disabled` ran accelerated without a word, and a
/// misspelled `IDEMLAKE_TEST_FAULT` injected nothing (a test of it passed vacuously). Both
/// are refused now, naming the variable and its value.
#[test]
fn a_misspelled_switch_or_fault_is_refused_not_ignored() {
    let p = TestProject::new();
    for var in ["IDEMLAKE_ACCELERATE", "IDEMLAKE_MMAP", "IDEMLAKE_LOG_CACHE"] {
        refused_setting(&p, var, "disabled");
    }
    for bad in [
        "before-comit",
        "batch:x",
        "pause-before-inputs-check",
        "slice-drop",
    ] {
        refused_setting(&p, "IDEMLAKE_TEST_FAULT", bad);
    }
    for (var, good) in [
        ("IDEMLAKE_ACCELERATE", "1"),
        ("IDEMLAKE_ACCELERATE", "on"),
        ("IDEMLAKE_MMAP", "yes"),
        ("IDEMLAKE_LOG_CACHE", "false"),
        ("IDEMLAKE_TEST_FAULT", ""),
    ] {
        accepted_setting(&p, var, good);
    }
}

/// Issue 16 §6: a `DATE/DATE` interval names the day window as it is; an empty interval (Airflow
/// 3's CronTriggerTimetable) is refused with the way out (issue 38: the data interval of a
/// CronDataIntervalTimetable), exit 2, nothing written.
#[test]
fn scheduler_date_intervals_run_the_day_and_empty_ones_say_why() {
    let p = TestProject::new();
    let out = p.run(&[
        "--output",
        "json",
        "run",
        "lineitem_by_ship_day",
        "--window",
        "1995-06-01/1995-06-02",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let report = &json_lines(&out)[0];
    assert_eq!(report["window"]["label"], "1995-06-01", "{report}");
    assert_eq!(report["status"], "ok", "{report}");
    let v = log_version(&p.table_dir("lineitem_by_ship_day"));
    let out = p.run(&[
        "run",
        "lineitem_by_ship_day",
        "--window",
        "1995-06-02/1995-06-02",
    ]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("START equals END"), "{}", text(&out));
    assert!(
        text(&out).contains("{{ data_interval_start }}/{{ data_interval_end }}")
            && !text(&out).contains("next_ds"),
        "{}",
        text(&out)
    );
    assert_eq!(log_version(&p.table_dir("lineitem_by_ship_day")), v);
}

/// Issue 16 §6: `run`, `backfill`, `status` and `audit` print a window the same way —
/// `window: {label, start, end}`, `table_version` — and say whether re-running is the fix.
#[test]
fn every_command_prints_a_window_the_same_way_and_whether_to_retry() {
    let p = TestProject::new();
    let task = "lineitem_by_ship_day";
    let json = |args: &[&str]| {
        let out = p.run(&[&["--output", "json"], args].concat());
        (code(&out), json_lines(&out))
    };
    let (c, run) = json(&["run", task, "--window", "1995-06-01"]);
    assert_eq!(c, 0);
    let (c, backfill) = json(&[
        "backfill",
        task,
        "--from",
        "1995-06-02",
        "--to",
        "1995-06-02",
    ]);
    assert_eq!(c, 0);
    let range = ["--from", "1995-06-01", "--to", "1995-06-03"];
    let (c, status) = json(&[&["status", task], &range[..]].concat());
    assert_eq!(c, 0);
    let (c, audit) = json(&["audit", task, "--from", "1995-06-01", "--to", "1995-06-02"]);
    assert_eq!(c, 0, "{audit:?}");
    for (i, r) in [&run[0], &backfill[0]].into_iter().enumerate() {
        let s = &status[i];
        let a = &audit[i];
        for x in [s, a] {
            assert_eq!(x["window"], r["window"], "{x} vs {r}");
        }
        assert_eq!(s["table_version"], r["table_version"], "{s}");
        assert!(a["table_version"].as_i64().unwrap() >= r["table_version"].as_i64().unwrap());
        for x in [r, s, a] {
            assert_eq!(x["retryable"], false, "{x}");
        }
    }
    // Nothing published yet: re-running is the fix.
    assert_eq!(status[2]["window"]["label"], "1995-06-03");
    assert_eq!(status[2]["retryable"], true, "{}", status[2]);
    // A runtime failure is worth retrying as is; invalid input is not.
    let broken = lineitem_task(
        "SELECT l_orderkey, l_shipdate AS ship_date FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end",
        "",
    )
    .replace("data/lineitem.parquet", "data/no-such-file.parquet");
    p.task("broken", &broken);
    let (c, r) = json(&["run", "broken", "--window", "1995-06-01"]);
    assert!(c == 1 || c == 2, "{r:?}");
    assert_eq!(r[0]["retryable"], c == 1, "{}", r[0]);
    let (c, r) = json(&["run", task, "--window", "1995-13-01"]);
    assert_eq!(c, 2);
    assert_eq!(r[0]["retryable"], false, "{}", r[0]);
}

/// Bug: transparent huge pages were turned off in `main`, after the runtime's first
/// allocations had faulted whole 2 MiB pages into mimalloc's arena (the kernel zeroing them
/// was the first ~10 ms of a day window, on the one thread running then). The allocator's
/// defaults now apply before anything allocates, and a user's `MIMALLOC_ALLOW_THP` still wins.
#[test]
fn huge_pages_are_off_before_the_first_allocation() {
    let p = TestProject::new();
    let state = |thp: Option<&str>| {
        let mut c = p.cmd();
        if let Some(v) = thp {
            c.env("MIMALLOC_ALLOW_THP", v);
        } else {
            c.env_remove("MIMALLOC_ALLOW_THP");
        }
        let out = c.args(["-vv", "validate"]).output().unwrap();
        assert_eq!(code(&out), 0, "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        err.lines()
            .find(|l| l.contains("allocator: mimalloc"))
            .unwrap_or_else(|| panic!("no allocator line in:\n{err}"))
            .to_string()
    };
    let ours = state(None);
    assert!(
        ours.contains("transparent huge pages off, anonymous huge pages so far: 0 kB"),
        "{ours}"
    );
    let users = state(Some("1"));
    assert!(users.contains("transparent huge pages on"), "{users}");
}

/// Issue 17 §2: the Ballista engine is a cargo feature. A build without it refuses every way of
/// asking for it (`[engine]`, `--engine`, `idemlake cluster`) with exit 2 and how to get it,
/// writing nothing; a malformed scheduler URL is refused the same way in any build.
#[test]
fn the_ballista_engine_is_refused_clearly_where_it_is_not_built() {
    let p = TestProject::new();
    let built = cfg!(feature = "ballista");
    let out = p.run(&[
        "--engine",
        "http://127.0.0.1:1",
        "run",
        "lineitem_by_ship_day",
        "--window",
        "1995-06-01",
    ]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("df://host:port"), "{}", text(&out));
    assert!(log_version(&p.table_dir("lineitem_by_ship_day")).is_none());
    if built {
        return;
    }
    p.task(
        "on_cluster",
        &lineitem_task(
            "SELECT l_orderkey, l_shipdate AS ship_date FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end",
            "[engine]\nkind = \"ballista\"\nscheduler = \"df://127.0.0.1:1\"\n",
        ),
    );
    let cases: [&[&str]; 3] = [
        &["run", "on_cluster", "--window", "1995-06-01"],
        &[
            "--engine",
            "df://127.0.0.1:1",
            "run",
            "lineitem_by_ship_day",
            "--window",
            "1995-06-01",
        ],
        &["cluster", "scheduler", "--bind", "127.0.0.1:0"],
    ];
    for args in cases {
        let out = p.run(args);
        assert_eq!(code(&out), 2, "{args:?}: {}", text(&out));
        assert!(
            text(&out).contains("--features ballista"),
            "{args:?}: {}",
            text(&out)
        );
    }
    for t in ["on_cluster", "lineitem_by_ship_day"] {
        assert!(log_version(&p.table_dir(t)).is_none(), "{t} was written");
    }
}

/// Issue 38: `init`, then `new`, then `validate` and a run work in an empty directory, and
/// neither command writes over an existing file.
#[test]
fn init_then_new_then_validate_work_in_an_empty_directory() {
    let dir = tempfile::tempdir().unwrap();
    let idemlake = |args: &[&str]| {
        assert_cmd::Command::cargo_bin("idemlake")
            .unwrap()
            .current_dir(dir.path())
            .env_remove("IDEMLAKE_PROJECT")
            .env_remove("IDEMLAKE_LAKE")
            .args(args)
            .output()
            .unwrap()
    };
    let out = idemlake(&["init"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    for f in ["tables/example.toml", "data/example.csv", "s3.env.example"] {
        assert!(dir.path().join(f).is_file(), "init wrote no {f}");
    }
    let ignore = std::fs::read_to_string(dir.path().join(".gitignore")).unwrap();
    assert!(ignore.lines().any(|l| l == "lake/"), "{ignore}");
    let out = idemlake(&["--output", "json", "new", "my_task"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let created = &json_lines(&out)[0]["created"][0];
    assert!(
        created.as_str().unwrap().ends_with("tables/my_task.toml"),
        "{created}"
    );
    let out = idemlake(&["validate"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(text(&out).contains("my_task") && text(&out).contains("example"));
    let out = idemlake(&["run", "my_task", "--window", "2026-01-02"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    // An hour task from the template validates over a timestamped source.
    std::fs::write(
        dir.path().join("data/clicks.csv"),
        "ts,page\n2026-01-01T05:10:00Z,a\n2026-01-01T06:20:00Z,b\n",
    )
    .unwrap();
    let out = idemlake(&[
        "new",
        "clicks_hourly",
        "--grain",
        "hour",
        "--source",
        "data/clicks.csv",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = idemlake(&["validate", "clicks_hourly"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    // Nothing is overwritten; bad names are input errors.
    let before = std::fs::read_to_string(dir.path().join("tables/my_task.toml")).unwrap();
    for args in [
        &["init"][..],
        &["new", "my_task"][..],
        &["new", "my-task"][..],
        &["new", "x", "--grain", "year"][..],
    ] {
        let out = idemlake(args);
        assert_eq!(code(&out), 2, "{args:?}: {}", text(&out));
    }
    let after = std::fs::read_to_string(dir.path().join("tables/my_task.toml")).unwrap();
    assert_eq!(before, after);
}

/// Issue 38: a directory without tables/ says what to do: `--project` or `init`.
#[test]
fn a_directory_without_tables_names_project_and_init() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["validate"][..],
        &["run", "x", "--window", "2026-01-01"][..],
    ] {
        let out = assert_cmd::Command::cargo_bin("idemlake")
            .unwrap()
            .current_dir(dir.path())
            .env_remove("IDEMLAKE_PROJECT")
            .env_remove("IDEMLAKE_LAKE")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{args:?}: {}", text(&out));
        let t = text(&out);
        assert!(
            t.contains("--project") && t.contains("idemlake init"),
            "{args:?}: {t}"
        );
    }
}

/// Rows of a Parquet file, from its footer.
fn parquet_rows(path: &std::path::Path) -> i64 {
    use parquet::file::reader::FileReader;
    let f = std::fs::File::open(path).unwrap();
    parquet::file::reader::SerializedFileReader::new(f)
        .unwrap()
        .metadata()
        .file_metadata()
        .num_rows()
}

/// Issue 38 (the gen-tpch defect): `gen-tpch --scale 0.002` into a directory holding SF 0.001
/// kept the old files and said SF 0.002 was ready. Files of another scale are regenerated;
/// files of the same scale are kept.
#[test]
fn gen_tpch_at_another_scale_regenerates_instead_of_keeping_the_old_files() {
    let p = TestProject::new();
    let out = p.path().join("tpch");
    let out = out.to_str().unwrap();
    let gen_at = |scale: &str| {
        let o = p.run(&["gen-tpch", "--scale", scale, "--out", out]);
        assert_eq!(code(&o), 0, "{}", text(&o));
    };
    let lineitem = p.path().join("tpch/lineitem.parquet");
    let orders = p.path().join("tpch/orders.parquet");
    gen_at("0.001");
    let (l1, o1) = (parquet_rows(&lineitem), parquet_rows(&orders));
    gen_at("0.002");
    let (l2, o2) = (parquet_rows(&lineitem), parquet_rows(&orders));
    assert!(
        l2 > l1 * 3 / 2,
        "lineitem rows {l1} at SF 0.001, {l2} at SF 0.002"
    );
    assert!(
        o2 > o1 * 3 / 2,
        "orders rows {o1} at SF 0.001, {o2} at SF 0.002"
    );
    // The same scale again keeps the files as they are.
    let modified = std::fs::metadata(&lineitem).unwrap().modified().unwrap();
    gen_at("0.002");
    assert_eq!(
        std::fs::metadata(&lineitem).unwrap().modified().unwrap(),
        modified
    );
    assert_eq!(parquet_rows(&lineitem), l2);
}

/// Regression (`idemlake backfill … | head -1`, `explain … | head -1`: the reader closing
/// standard output made the next `println!` panic, exit 101, an undocumented code): output
/// stops quietly and the exit code is the command's own; the windows were published.
#[test]
fn a_reader_closing_standard_output_early_is_not_a_panic() {
    let p = TestProject::new();
    for args in [
        &[
            "backfill",
            "lineitem_by_ship_day",
            "--from",
            "1995-06-01",
            "--to",
            "1995-06-06",
        ][..],
        &["status", "lineitem_by_ship_day"][..],
        &["explain", "lineitem_by_ship_day", "--window", "1995-06-01"][..],
    ] {
        let mut child = p.spawn(&p.path().join("lake"), args);
        // The reader goes away before the first line is written.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
    let script = format!(
        "import polars as pl\nprint(pl.read_delta('{}')['ship_date'].n_unique())",
        p.table_dir("lineitem_by_ship_day").display()
    );
    assert_eq!(python_prints(&script), "6");
    // Review: standard error closed too (`2>&1 | head`): the diagnostics stop quietly, and
    // an invalid window is still exit 2, not a panic.
    for (args, want) in [
        (
            &["run", "lineitem_by_ship_day", "--window", "1995-02-30"][..],
            2,
        ),
        (
            &[
                "-v",
                "run",
                "lineitem_by_ship_day",
                "--window",
                "1995-06-01",
            ][..],
            0,
        ),
    ] {
        let mut child = p.spawn(&p.path().join("lake"), args);
        drop(child.stdout.take());
        drop(child.stderr.take());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(want), "{args:?}");
    }
    // Review: standard output failing otherwise (a full disk) is not a success.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut child = p.spawn(
        &p.path().join("lake"),
        &["--output", "json", "status", "lineitem_by_ship_day"],
    );
    drop(child.stdout.take());
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin!("idemlake"))
        .args(["--project"])
        .arg(p.path())
        .args(["--output", "json", "status", "lineitem_by_ship_day"])
        .stdout(full)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let _ = child.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("could not write to standard output"), "{err}");
}

/// Regression (`validate`, `status`, `verify` and `audit`, which write nothing, created an
/// empty `lake/<task>/` directory when the table did not exist yet): they leave the lake as
/// they found it; the first `run` then creates the table.
#[test]
fn read_only_commands_leave_no_directory_for_a_table_not_written_yet() {
    let p = TestProject::new();
    let (t, w) = ("lineitem_by_ship_day", "1995-06-01");
    for args in [
        &["validate", t][..],
        &["status", t][..],
        &["verify", t, "--window", w][..],
        &["audit", t, "--from", w, "--to", w][..],
    ] {
        let out = p.run(args);
        assert!(matches!(code(&out), 0 | 4), "{args:?}: {}", text(&out));
        assert!(!p.path().join("lake").exists(), "{args:?} created the lake");
    }
    p.run_ok(t, w);
    assert_eq!(log_version(&p.table_dir(t)), Some(1));
}

/// Regression (only one of `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` set: exit 2 with
/// object_store's "Generic S3 error: Missing SecretAccessKey"): one sentence naming the
/// variable that is missing, exit 2, not retryable.
#[test]
fn one_of_the_two_aws_keys_missing_names_the_missing_variable() {
    let p = TestProject::new();
    for (set, unset) in [
        ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
        ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"),
    ] {
        let out = p
            .cmd()
            .env(set, "some-value")
            .env_remove(unset)
            .env_remove("AWS_PROFILE")
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_REGION", "us-east-1")
            .args(["--lake", "s3://no-bucket/lake", "--output", "json"])
            .args(["run", "lineitem_by_ship_day", "--window", "1995-06-01"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{set}: {}", text(&out));
        let said = text(&out);
        assert!(
            said.contains(&format!("{set} is set but {unset} is not")),
            "{said}"
        );
        assert!(!said.contains("Generic S3 error"), "{said}");
    }
}

/// Regression (a number past 2^64 − 1 was "must be a whole number"; a glob location matching
/// no file said "no  files under …", the extension left blank): the messages say what is
/// wrong.
#[test]
fn a_too_large_number_and_a_glob_matching_nothing_are_said_plainly() {
    let p = TestProject::new();
    let out = p.run_env(
        "IDEMLAKE_SCAN_CACHE_KB",
        "18446744073709551616",
        &["validate", "lineitem_by_ship_day"],
    );
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("is too large"), "{}", text(&out));
    std::fs::create_dir_all(p.path().join("events/dt=2026-11-01")).unwrap();
    std::fs::write(p.path().join("events/dt=2026-11-01/notes.txt"), "x").unwrap();
    p.task(
        "g",
        r#"
sql = "SELECT * FROM events WHERE dt >= $window_start AND dt < $window_end"
[target]
partition_by = "dt"
[window]
grain = "day"
[sources.events]
uri = "events/*/part-*.parquet"
format = "parquet"
"#,
    );
    let out = p.run(&["run", "g", "--window", "2026-11-01"]);
    let said = text(&out);
    assert!(said.contains("no data files under"), "{said}");
    assert!(!said.contains("no  files"), "{said}");
}

/// Regression (found by trying: with `--output json`, a command line clap refuses — a
/// missing `--window`, an unknown flag, an invalid `--shard` — printed nothing on standard
/// output, where every other whole-command failure prints one JSON line): one JSON line
/// naming the problem, exit 2, not retryable; `--help` still prints help, exit 0.
#[test]
fn a_usage_error_with_output_json_prints_one_json_line() {
    let p = TestProject::new();
    for (args, said) in [
        (&["run", "lineitem_by_ship_day"][..], "--window"),
        (
            &[
                "run",
                "lineitem_by_ship_day",
                "--window",
                "1995-06-01",
                "--bogus",
            ][..],
            "--bogus",
        ),
    ] {
        let out = p
            .cmd()
            .args(["--output", "json"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{args:?}: {}", text(&out));
        let lines = json_lines(&out);
        assert_eq!(lines.len(), 1, "{args:?}: {}", text(&out));
        assert_eq!(lines[0]["status"], "failed");
        assert_eq!(lines[0]["retryable"], false);
        assert!(
            lines[0]["error"].as_str().unwrap().contains(said),
            "{}",
            lines[0]
        );
    }
    let out = p.run(&["--output", "json", "--help"]);
    assert_eq!(code(&out), 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage"));
}

/// Regression (an `http://` endpoint without `AWS_ALLOW_HTTP` failed with "HTTP error: builder
/// error", exit 1, retryable): it names the variable to set, exit 2, not retryable; an
/// endpoint that does not answer is named (`AWS_ENDPOINT_URL`), exit 1.
#[test]
fn an_http_endpoint_without_allow_http_and_an_unreachable_one_are_named() {
    let p = TestProject::new();
    let s3 = |allow: Option<&str>| {
        let mut c = p.cmd();
        c.env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
            .env("AWS_ACCESS_KEY_ID", "k")
            .env("AWS_SECRET_ACCESS_KEY", "s")
            .env("AWS_REGION", "us-east-1")
            .env("IDEMLAKE_S3_MAX_RETRIES", "0")
            .env_remove("AWS_ALLOW_HTTP")
            .args(["--lake", "s3://nowhere/lake", "--output", "json"])
            .args(["run", "daily_revenue", "--window", "1995-06-01"]);
        if let Some(a) = allow {
            c.env("AWS_ALLOW_HTTP", a);
        }
        c.output().unwrap()
    };
    let out = s3(None);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let r = &json_lines(&out)[0];
    assert!(
        r["error"].as_str().unwrap().contains("AWS_ALLOW_HTTP=true"),
        "{r}"
    );
    assert_eq!(r["retryable"], false, "{r}");
    let out = s3(Some("true"));
    assert_eq!(code(&out), 1, "{}", text(&out));
    let r = &json_lines(&out)[0];
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("AWS_ENDPOINT_URL = http://127.0.0.1:1"),
        "{r}"
    );
}

/// Regression (`2026/11/21` and a two-day interval got messages about RFC 3339 and alignment;
/// an hour was "a hour"): each says what a window looks like.
#[test]
fn window_messages_say_what_a_window_looks_like() {
    let p = TestProject::new();
    let said = |window: &str| {
        let out = p.run(&["run", "daily_revenue", "--window", window]);
        assert_eq!(code(&out), 2, "{}", text(&out));
        text(&out)
    };
    let t = said("1995/06/01");
    assert!(t.contains("write it 1995-06-01"), "{t}");
    let t = said("1995-06-01/1995-06-03");
    assert!(
        t.contains("spans more than one day") && t.contains("--from 1995-06-01 --to 1995-06-02"),
        "{t}"
    );
    let t = said("1995-06-01T10");
    assert!(t.contains("is an hour"), "{t}");
}
