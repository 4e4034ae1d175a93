//! Issue 39: OpenLineage run events per window — START, then COMPLETE or FAIL — received by a
//! local HTTP server (or a file, or stderr), every event validated against the official
//! OpenLineage JSON schemas (tests/openlineage/, spec 2-0-2, each facet against its own
//! schema) by scripts/openlineage_validate.py, and their content checked against the reports
//! and the tables: versions, row counts, assertions, parents. An endpoint that is down or
//! never answers costs a window at most the timeout and fails nothing.

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

const TASK: &str = "lineitem_by_ship_day";
const AIRFLOW_RUN: &str = "01932c4e-5a0b-7c3e-9f1a-2b3c4d5e6f70";
const AIRFLOW_ROOT: &str = "01932c4e-0000-7c3e-9f1a-2b3c4d5e6f71";

/// The lineage endpoint's receiving end (see [`HttpReceiver`]); bodies as JSON.
struct Receiver(HttpReceiver);

impl Receiver {
    fn start() -> Receiver {
        Receiver(HttpReceiver::start("201 Created"))
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.0.port)
    }

    /// Everything received so far (the command has exited: its events were all sent).
    fn received(&self) -> Vec<(String, Vec<String>, Value)> {
        let body = |b: String| serde_json::from_str(&b).unwrap();
        self.0
            .rx
            .try_iter()
            .map(|(r, h, b)| (r, h, body(b)))
            .collect()
    }
}

/// A server that accepts connections and never answers.
fn silent_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    port
}

/// Validate `events` with scripts/openlineage_validate.py against the vendored spec and
/// idemlake's own facet schema; the validator's output and whether it passed.
fn validate(events: &[Value]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let lines: Vec<String> = events.iter().map(Value::to_string).collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = std::process::Command::new(python())
        .arg(repo().join("scripts/openlineage_validate.py"))
        .arg(repo().join("tests/openlineage"))
        .arg(&file)
        .arg(repo().join("docs/src/reference/openlineage/IdemlakeRunFacet-1-0-0.json"))
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

fn assert_valid(events: &[Value]) {
    let (ok, said) = validate(events);
    assert!(ok, "events do not validate:\n{said}");
    assert!(said.contains(&format!("{} events", events.len())), "{said}");
}

/// Write the project file.
fn project_file(p: &TestProject, toml: &str) {
    std::fs::write(p.path().join("idemlake.toml"), toml).unwrap();
}

/// The events a file transport wrote.
fn file_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The names of the data-quality assertions on the first input, and whether each passed.
fn assertions(e: &Value) -> Vec<(String, bool)> {
    e["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap().to_string(),
                a["success"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The lineitem task with `[checks]` that pass.
fn checked_lineitem(p: &TestProject) {
    let toml = std::fs::read_to_string(p.path().join("tables/lineitem_by_ship_day.toml")).unwrap();
    p.task(
        TASK,
        &format!(
            "{toml}\n[checks]\nnot_null = [\"l_orderkey\"]\nunique = [[\"l_orderkey\", \"l_linenumber\"]]\nrow_count = {{ min = 1 }}\n"
        ),
    );
}

#[test]
fn a_window_sends_start_and_complete_to_a_marquez_compatible_endpoint() {
    let p = TestProject::new();
    checked_lineitem(&p);
    project_file(&p, "[lineage]\nnamespace = \"pipelines\"\n");
    let r = Receiver::start();
    let parent = format!("airflow/daily_dag.load_lineitem/{AIRFLOW_RUN}");
    let out = p
        .cmd()
        .env("OPENLINEAGE_URL", r.url())
        .env("OPENLINEAGE_API_KEY", "k3y-for-the-test")
        .args(["--output", "json", "--lineage-parent", &parent])
        .args(["run", TASK, "--window", "1995-06-02"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(!text(&out).contains("k3y-for-the-test"), "{}", text(&out));
    let report = json_lines(&out).remove(0);
    assert_eq!(
        report["lineage"],
        serde_json::json!({"sent": 2, "failed": 0}),
        "{report}"
    );
    let got = r.received();
    let events: Vec<Value> = got.iter().map(|(_, _, e)| e.clone()).collect();
    assert_eq!(events.len(), 2, "{events:?}");
    for (request, headers, _) in &got {
        assert_eq!(request, "POST /api/v1/lineage HTTP/1.1");
        assert!(
            headers
                .iter()
                .any(|h| h == "authorization: Bearer k3y-for-the-test"),
            "{headers:?}"
        );
    }
    assert_valid(&events);
    let (start, complete) = (&events[0], &events[1]);
    assert_eq!(
        (start["eventType"].as_str(), complete["eventType"].as_str()),
        (Some("START"), Some("COMPLETE"))
    );
    for e in &events {
        assert_eq!(
            e["run"]["runId"], report["run_id"],
            "one run per window, its run id"
        );
        assert_eq!(e["job"]["namespace"], "pipelines");
        assert_eq!(e["job"]["name"], TASK);
        let parent = &e["run"]["facets"]["parent"];
        assert_eq!(parent["run"]["runId"], AIRFLOW_RUN);
        assert_eq!(parent["job"]["name"], "daily_dag.load_lineitem");
        assert_eq!(
            parent["root"]["run"]["runId"], AIRFLOW_RUN,
            "the parent is its own root"
        );
        let own = &e["run"]["facets"]["idemlake"];
        assert_eq!(own["window"]["start"], report["window"]["start"]);
        assert_eq!(own["window"]["end"], report["window"]["end"]);
        assert_eq!(
            (own["timeZone"].as_str(), own["grain"].as_str()),
            (Some("UTC"), Some("day"))
        );
        assert_eq!(own["runId"], report["run_id"]);
        assert_eq!(
            e["run"]["facets"]["nominalTime"]["nominalStartTime"],
            report["window"]["start"]
        );
        let sql = e["job"]["facets"]["sql"]["query"].as_str().unwrap();
        assert!(sql.contains("l_shipdate AS ship_date"), "{sql}");
        let input = &e["inputs"][0];
        assert_eq!(input["namespace"], "file");
        let name = p.path().join("data/lineitem.parquet");
        assert_eq!(input["name"], name.to_str().unwrap());
        assert!(
            input["facets"]["version"]["datasetVersion"]
                .as_str()
                .is_some(),
            "{input}"
        );
        let output = &e["outputs"][0];
        assert_eq!(output["namespace"], "file");
        assert_eq!(output["name"], p.table_dir(TASK).to_str().unwrap());
    }
    assert_eq!(
        start["outputs"][0]["facets"]["version"],
        Value::Null,
        "not known at START"
    );
    assert!(assertions(start).is_empty());
    // COMPLETE: the version the commit made, what it wrote, the checks that passed.
    let output = &complete["outputs"][0];
    assert_eq!(
        output["facets"]["version"]["datasetVersion"],
        report["table_version"].to_string()
    );
    let stats = &output["outputFacets"]["outputStatistics"];
    assert_eq!(stats["rowCount"], report["rows_written"]);
    assert!(
        stats["size"].as_u64().unwrap() > 0 && stats["fileCount"].as_u64().unwrap() > 0,
        "{stats}"
    );
    let checks = assertions(complete);
    for name in [
        "rows_staged",
        "rows_committed",
        "rows",
        "extendedprice",
        "not_null(l_orderkey)",
        "row_count",
    ] {
        assert!(
            checks.contains(&(name.to_string(), true)),
            "{name} in {checks:?}"
        );
    }
    let dq = &complete["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"];
    let not_null = dq
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["assertion"] == "not_null")
        .unwrap();
    assert_eq!(
        (not_null["column"].as_str(), not_null["severity"].as_str()),
        (Some("l_orderkey"), Some("error"))
    );
    let staged = dq
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "rows_staged")
        .unwrap();
    assert_eq!(staged["actual"], report["rows_written"].to_string());
}

#[test]
fn a_failed_window_sends_fail_with_its_error_and_exit_class() {
    let p = TestProject::new();
    project_file(&p, "[lineage]\npath = \"lineage.jsonl\"\n");
    let events_file = p.path().join("lineage.jsonl");
    // A data check that fails: exit 6, nothing published.
    let toml = std::fs::read_to_string(p.path().join("tables/lineitem_by_ship_day.toml")).unwrap();
    p.task(
        "capped",
        &format!("{toml}\n[checks]\nrow_count = {{ max = 0 }}\n"),
    );
    let out = p.run(&[
        "--output",
        "json",
        "run",
        "capped",
        "--window",
        "1995-06-02",
    ]);
    assert_eq!(code(&out), 6, "{}", text(&out));
    let report = json_lines(&out).remove(0);
    let events = file_events(&events_file);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["eventType"], "START");
    let fail = &events[1];
    assert_eq!(fail["eventType"], "FAIL");
    assert_eq!(fail["run"]["runId"], report["run_id"]);
    let message = fail["run"]["facets"]["errorMessage"]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("data checks failed"), "{message}");
    let own = &fail["run"]["facets"]["idemlake"];
    assert_eq!(
        (own["exitCode"].as_u64(), own["exitClass"].as_str()),
        (Some(6), Some("rejected"))
    );
    assert_eq!(own["published"], false);
    assert!(
        assertions(fail).contains(&("row_count".to_string(), false)),
        "{fail}"
    );
    assert_eq!(
        fail["outputs"][0]["facets"]["version"],
        Value::Null,
        "nothing was published"
    );
    // A runtime failure right before the commit: exit 1, class runtime.
    let out = p
        .cmd()
        .env("IDEMLAKE_TEST_FAULT", "before-commit")
        .args(["--output", "json", "run", TASK, "--window", "1995-06-02"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", text(&out));
    let events = file_events(&events_file);
    assert_eq!(events.len(), 4);
    let own = &events[3]["run"]["facets"]["idemlake"];
    assert_eq!(
        (own["exitCode"].as_u64(), own["exitClass"].as_str()),
        (Some(1), Some("runtime"))
    );
    assert_eq!(own["retryable"], true);
    assert_valid(&events);
}

#[test]
fn windows_that_run_together_or_never_start_are_runs_too() {
    let p = TestProject::new();
    project_file(&p, "[lineage]\npath = \"lineage.jsonl\"\n");
    let events_file = p.path().join("lineage.jsonl");
    // `run` with a lookback window: two windows published together, a run each.
    let toml = std::fs::read_to_string(p.path().join("tables/lineitem_by_ship_day.toml")).unwrap();
    p.task(
        "late",
        &toml.replace("[window]\n", "[window]\nlookback = 1\n"),
    );
    let out = p.run(&["--output", "json", "run", "late", "--window", "1995-06-02"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let reports = json_lines(&out);
    assert_eq!(reports.len(), 2);
    let events = file_events(&events_file);
    assert_eq!(events.len(), 4, "{events:#?}");
    for r in &reports {
        let mine: Vec<&Value> = events
            .iter()
            .filter(|e| e["run"]["runId"] == r["run_id"])
            .collect();
        let kinds: Vec<&str> = mine
            .iter()
            .map(|e| e["eventType"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["START", "COMPLETE"], "{r}");
        let version = &mine[1]["outputs"][0]["facets"]["version"]["datasetVersion"];
        assert_eq!(version, &r["table_version"].to_string());
        assert_eq!(
            mine[0]["run"]["facets"].get("parent"),
            None,
            "no orchestrator, no backfill"
        );
    }
    // A window whose runner cannot start (its source does not exist): START and FAIL.
    p.task(
        "nowhere",
        &toml.replace("data/lineitem.parquet", "data/missing.parquet"),
    );
    let out = p.run(&[
        "--output",
        "json",
        "run",
        "nowhere",
        "--window",
        "1995-06-02",
    ]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let events = file_events(&events_file);
    let mine: Vec<&Value> = events
        .iter()
        .filter(|e| e["job"]["name"] == "nowhere")
        .collect();
    let kinds: Vec<&str> = mine
        .iter()
        .map(|e| e["eventType"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["START", "FAIL"]);
    let own = &mine[1]["run"]["facets"]["idemlake"];
    assert_eq!(
        (own["exitCode"].as_u64(), own["exitClass"].as_str()),
        (Some(2), Some("input"))
    );
    assert_eq!(mine[1]["run"]["runId"], json_lines(&out)[0]["run_id"]);
    assert_valid(&events);
}

#[test]
fn a_backfill_is_one_run_with_a_run_per_window_under_it() {
    let p = TestProject::new();
    let r = Receiver::start();
    let out = p
        .cmd()
        .env("OPENLINEAGE_URL", r.url())
        .env("OPENLINEAGE_NAMESPACE", "lake")
        .env(
            "OPENLINEAGE_PARENT_ID",
            format!("airflow/dag.backfill_task/{AIRFLOW_RUN}"),
        )
        .env(
            "OPENLINEAGE_ROOT_PARENT_ID",
            format!("airflow/dag/{AIRFLOW_ROOT}"),
        )
        .args([
            "--output",
            "json",
            "backfill",
            TASK,
            "--from",
            "1995-06-01",
            "--to",
            "1995-06-03",
        ])
        .args(["--parallel", "2"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    let reports = json_lines(&out);
    assert_eq!(reports.len(), 3);
    let events: Vec<Value> = r.received().into_iter().map(|(_, _, e)| e).collect();
    assert_eq!(events.len(), 2 + 3 * 2, "{events:#?}");
    assert_valid(&events);
    // The backfill's own run: first and last, under the orchestrator's run.
    let (first, last) = (&events[0], &events[events.len() - 1]);
    assert_eq!(
        (first["eventType"].as_str(), last["eventType"].as_str()),
        (Some("START"), Some("COMPLETE"))
    );
    let backfill_run = first["run"]["runId"].as_str().unwrap();
    assert_eq!(last["run"]["runId"], backfill_run);
    assert_eq!(first["job"]["name"], format!("{TASK}.backfill"));
    assert_eq!(first["job"]["namespace"], "lake");
    assert_eq!(
        first["run"]["facets"]["parent"]["run"]["runId"],
        AIRFLOW_RUN
    );
    assert_eq!(
        first["run"]["facets"]["parent"]["root"]["run"]["runId"],
        AIRFLOW_ROOT
    );
    // One run per window, each START then COMPLETE, under the backfill's run.
    for report in &reports {
        let run = report["run_id"].as_str().unwrap();
        let mine: Vec<&Value> = events.iter().filter(|e| e["run"]["runId"] == run).collect();
        let kinds: Vec<&str> = mine
            .iter()
            .map(|e| e["eventType"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["START", "COMPLETE"], "{run}");
        for e in &mine {
            let parent = &e["run"]["facets"]["parent"];
            assert_eq!(parent["run"]["runId"], backfill_run);
            assert_eq!(parent["job"]["name"], format!("{TASK}.backfill"));
            assert_eq!(parent["root"]["run"]["runId"], AIRFLOW_ROOT);
            assert_eq!(e["job"]["name"], TASK);
            assert_eq!(
                e["run"]["facets"]["idemlake"]["window"]["label"],
                report["window"]["label"]
            );
        }
        assert_eq!(
            mine[1]["outputs"][0]["facets"]["version"]["datasetVersion"],
            report["table_version"].to_string()
        );
        assert_eq!(
            mine[1]["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"],
            report["rows_written"]
        );
        assert_eq!(report["lineage"]["sent"], 2);
    }
}

#[test]
fn a_downstream_event_reads_the_version_the_upstream_event_wrote() {
    let p = TestProject::new();
    project_file(
        &p,
        "[lineage]\ntransport = \"file\"\npath = \"events/lineage.jsonl\"\n",
    );
    std::fs::create_dir_all(p.path().join("events")).unwrap();
    p.task(
        "daily_lines",
        r#"sql = """
SELECT CAST($window_start AS DATE) AS day, count(*) AS lines
FROM days WHERE ship_date >= $window_start AND ship_date < $window_end
"""
[target]
partition_by = "day"
[window]
grain = "day"
[sources.days]
task = "lineitem_by_ship_day"
"#,
    );
    for day in ["1995-06-01", "1995-06-02"] {
        p.run_ok(TASK, day);
    }
    let out = p.run(&[
        "--output",
        "json",
        "run",
        "daily_lines",
        "--window",
        "1995-06-02",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let events = file_events(&p.path().join("events/lineage.jsonl"));
    assert_eq!(events.len(), 6);
    assert_valid(&events);
    let upstream = events
        .iter()
        .rev()
        .find(|e| e["job"]["name"] == TASK && e["eventType"] == "COMPLETE")
        .unwrap();
    let written = &upstream["outputs"][0];
    let downstream: Vec<&Value> = events
        .iter()
        .filter(|e| e["job"]["name"] == "daily_lines")
        .collect();
    assert_eq!(downstream.len(), 2);
    for e in downstream {
        let read = &e["inputs"][0];
        assert_eq!(
            (&read["namespace"], &read["name"]),
            (&written["namespace"], &written["name"])
        );
        assert_eq!(
            read["facets"]["version"], written["facets"]["version"],
            "{}",
            e["eventType"]
        );
        assert_eq!(read["facets"]["storage"]["storageLayer"], "delta");
    }
}

#[test]
fn a_landing_zone_input_lists_the_files_its_window_read() {
    let p = crate::landing::landing_project(3, 2);
    project_file(&p, "[lineage]\npath = \"lineage.jsonl\"\n");
    let day = crate::landing::day(1).to_string();
    let out = p.run(&["--output", "json", "run", "events", "--window", &day]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let events = file_events(&p.path().join("lineage.jsonl"));
    assert_eq!(events.len(), 2);
    assert_valid(&events);
    let input = &events[1]["inputs"][0];
    let zone = p.path().join("events");
    assert_eq!(input["name"], zone.to_str().unwrap());
    let facets = &input["inputFacets"];
    assert_eq!(facets["inputStatistics"]["fileCount"], 2, "{input}");
    assert!(facets["inputStatistics"]["size"].as_u64().unwrap() > 0);
    let condition = &facets["subset"]["inputCondition"];
    assert_eq!(condition["type"], "location");
    let locations: Vec<&str> = condition["locations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(locations.len(), 2, "{locations:?}");
    for l in locations {
        assert!(
            l.starts_with(zone.to_str().unwrap()) && l.contains(&day),
            "{l}"
        );
        assert!(Path::new(l).is_file(), "{l}");
    }
}

/// The duration of `idemlake <args>` in `p`, with `env` set; its output.
fn timed(p: &TestProject, env: &[(&str, &str)], args: &[&str]) -> (Duration, std::process::Output) {
    let mut cmd = p.cmd();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t = Instant::now();
    let out = cmd.args(args).output().unwrap();
    (t.elapsed(), out)
}

#[test]
fn an_endpoint_that_never_answers_costs_a_window_at_most_its_timeout() {
    let p = TestProject::new();
    let run = [
        "--output",
        "json",
        "-v",
        "run",
        TASK,
        "--window",
        "1995-06-02",
    ];
    p.run_ok(TASK, "1995-06-02");
    let (base, out) = timed(&p, &[], &run);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let port = silent_server();
    project_file(
        &p,
        &format!("[lineage]\nurl = \"http://127.0.0.1:{port}\"\ntimeout_secs = 1\n"),
    );
    let (slow, out) = timed(&p, &[], &run);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let report = json_lines(&out).remove(0);
    assert_eq!(report["status"], "ok", "{report}");
    assert_eq!(
        (
            report["lineage"]["sent"].as_u64(),
            report["lineage"]["failed"].as_u64()
        ),
        (Some(0), Some(2))
    );
    let error = report["lineage"]["error"].as_str().unwrap();
    assert!(
        error.contains("no answer within 1.0 s") || error.contains("timed out"),
        "{error}"
    );
    // The START event waited the timeout; the COMPLETE event was not tried (the transport
    // rests after a failure), so the window paid one timeout.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("OpenLineage START event not sent"),
        "{stderr}"
    );
    assert!(
        slow < base + Duration::from_secs(3),
        "{slow:?} against {base:?} without lineage"
    );
    // A backfill against it: every window exits 0, the whole range pays about one timeout.
    let (slow, out) = timed(
        &p,
        &[],
        &[
            "--output",
            "json",
            "backfill",
            TASK,
            "--from",
            "1995-06-01",
            "--to",
            "1995-06-04",
        ],
    );
    assert_eq!(code(&out), 0, "{}", text(&out));
    for r in json_lines(&out) {
        assert_eq!(r["lineage"]["failed"], 2, "{r}");
    }
    assert!(slow < base * 4 + Duration::from_secs(4), "{slow:?}");
}

#[test]
fn a_refused_connection_fails_nothing() {
    let p = TestProject::new();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = p
        .cmd()
        .env("OPENLINEAGE_URL", format!("http://127.0.0.1:{port}"))
        .args(["--output", "json", "run", TASK, "--window", "1995-06-02"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    let report = json_lines(&out).remove(0);
    assert_eq!(
        (report["status"].as_str(), report["published"].as_bool()),
        (Some("ok"), Some(true))
    );
    assert_eq!(report["lineage"]["failed"], 2, "{report}");
    assert!(
        report["lineage"]["error"]
            .as_str()
            .unwrap()
            .contains("connect"),
        "{report}"
    );
    // The failure is kept in the run log (a successful overwrite otherwise has no entry).
    let runs = p.table_dir(TASK).join("_idemlake/runs");
    let logged = std::fs::read_dir(&runs).map(|d| d.count()).unwrap_or(0);
    assert_eq!(logged, 1, "{}", runs.display());
}

#[test]
fn console_events_go_to_stderr_and_leave_the_json_reports_alone() {
    let p = TestProject::new();
    project_file(&p, "[lineage]\ntransport = \"console\"\n");
    let out = p.run(&["--output", "json", "run", TASK, "--window", "1995-06-02"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["lineage"]["sent"], 2);
    let events: Vec<Value> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e.get("eventType").is_some())
        .collect();
    assert_eq!(events.len(), 2, "{}", text(&out));
    assert_valid(&events);
    // OPENLINEAGE_DISABLED turns every transport off.
    let out = p.run_env(
        "OPENLINEAGE_DISABLED",
        "true",
        &["--output", "json", "run", TASK, "--window", "1995-06-02"],
    );
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("eventType"),
        "{}",
        text(&out)
    );
    assert_eq!(json_lines(&out)[0].get("lineage"), None);
}

#[test]
fn the_validator_resolves_facet_schemas_and_refuses_broken_events() {
    let p = TestProject::new();
    project_file(&p, "[lineage]\npath = \"lineage.jsonl\"\n");
    p.run_ok(TASK, "1995-06-02");
    let events = file_events(&p.path().join("lineage.jsonl"));
    assert_valid(&events);
    let complete = events[1].clone();
    type Break = fn(&mut Value);
    let broken: [(&str, Break); 5] = [
        ("not a 'uuid'", |e| e["run"]["runId"] = "run-1".into()),
        ("'job' is a required property", |e| {
            e["run"]["facets"]["parent"] = serde_json::json!({
                "_producer": "https://example.com/p",
                "_schemaURL": "https://openlineage.io/spec/facets/1-2-0/ParentRunFacet.json#/$defs/ParentRunFacet",
                "run": {"runId": AIRFLOW_RUN},
            })
        }),
        ("is not of type 'integer'", |e| {
            e["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] = "many".into()
        }),
        ("no known schema", |e| {
            e["job"]["facets"]["sql"]["_schemaURL"] = "https://example.com/Sql.json".into()
        }),
        ("is not one of", |e| {
            e["run"]["facets"]["idemlake"]["grain"] = "year".into()
        }),
    ];
    for (says, breaks) in broken {
        let mut e = complete.clone();
        breaks(&mut e);
        let (ok, said) = validate(&[e]);
        assert!(!ok && said.contains(says), "expected `{says}`:\n{said}");
    }
}
