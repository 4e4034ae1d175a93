//! Shared test fixtures: a throw-away project with the sample tasks, TPC-H SF 0.01 data
//! generated once per test binary, the idemlake binary, and independent ways to read tables.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use assert_cmd::Command;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::prelude::SessionContext;
use deltalake::DeltaTableBuilder;

/// The repository root (where tables/ and scripts/ live).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// TPC-H SF 0.01 parquet files, generated once into the cargo target tmp dir.
pub fn tpch_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tpch-sf0.01");
        idemlake::commands::tpch::generate(&dir, 0.01, false).expect("generate TPC-H data");
        dir
    })
}

/// The OpenLineage variables a test's environment might hold, removed from every command (a
/// test that wants lineage sets its own).
pub const LINEAGE_VARS: [&str; 11] = [
    "OPENLINEAGE_URL",
    "OPENLINEAGE_ENDPOINT",
    "OPENLINEAGE_API_KEY",
    "OPENLINEAGE_NAMESPACE",
    "OPENLINEAGE_DISABLED",
    "OPENLINEAGE_PARENT_ID",
    "OPENLINEAGE_ROOT_PARENT_ID",
    "OPENLINEAGE_PARENT_RUN_ID",
    "OPENLINEAGE_PARENT_JOB_NAME",
    "OPENLINEAGE_PARENT_JOB_NAMESPACE",
    "OPENLINEAGE_CONFIG",
];

/// A temporary project: the repository's sample tasks plus the shared TPC-H data.
pub struct TestProject {
    pub dir: tempfile::TempDir,
}

impl TestProject {
    /// Start `idemlake <args>` in this project (lake `lake`) without waiting, output piped.
    pub fn spawn(&self, lake: &Path, args: &[&str]) -> std::process::Child {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin!("idemlake"));
        for v in LINEAGE_VARS {
            cmd.env_remove(v);
        }
        cmd.arg("--project")
            .arg(self.path())
            .arg("--lake")
            .arg(lake)
            .env_remove("IDEMLAKE_LAKE")
            .env_remove("IDEMLAKE_PROJECT")
            .env_remove("IDEMLAKE_TEST_FAULT")
            .env_remove("IDEMLAKE_RUN_LOG")
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    pub fn new() -> TestProject {
        let dir = tempfile::Builder::new()
            .prefix("idemlake-it-")
            .tempdir()
            .unwrap();
        let tables = dir.path().join("tables");
        std::fs::create_dir_all(&tables).unwrap();
        for e in std::fs::read_dir(repo().join("tables")).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, tables.join(p.file_name().unwrap())).unwrap();
        }
        std::os::unix::fs::symlink(tpch_dir(), dir.path().join("data")).unwrap();
        TestProject { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write (or replace) a task file.
    pub fn task(&self, name: &str, toml: &str) {
        std::fs::write(
            self.path().join("tables").join(format!("{name}.toml")),
            toml,
        )
        .unwrap();
    }

    pub fn table_dir(&self, name: &str) -> PathBuf {
        self.path().join("lake").join(name)
    }

    /// An `idemlake` command running in this project.
    pub fn cmd(&self) -> Command {
        let mut c = Command::cargo_bin("idemlake").unwrap();
        c.arg("--project").arg(self.path());
        c.env_remove("IDEMLAKE_LAKE")
            .env_remove("IDEMLAKE_PROJECT")
            .env_remove("IDEMLAKE_TEST_FAULT")
            .env_remove("IDEMLAKE_RUN_LOG");
        for v in LINEAGE_VARS {
            c.env_remove(v);
        }
        c
    }

    /// Run `idemlake <args>` and return its output (any exit code).
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    /// Run `idemlake <args>` with the environment variable `var` set to `value`.
    pub fn run_env(&self, var: &str, value: &str, args: &[&str]) -> Output {
        self.cmd().env(var, value).args(args).output().unwrap()
    }

    /// Run one window and assert success.
    pub fn run_ok(&self, task: &str, window: &str) -> Output {
        let out = self.run(&["run", task, "--window", window]);
        assert_eq!(code(&out), 0, "run {task} {window} failed:\n{}", text(&out));
        out
    }
}

pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

pub fn text(out: &Output) -> String {
    format!(
        "status: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The latest version in a table's `_delta_log`, read straight from the directory listing
/// (independent of idemlake and delta-rs); `None` if there is no table.
pub fn log_version(table: &Path) -> Option<u64> {
    let log = table.join("_delta_log");
    std::fs::read_dir(log)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_suffix(".json")
                .and_then(|v| v.parse::<u64>().ok())
        })
        .max()
}

/// Set the local table's `delta.checkpointInterval` to `n` (one commit, with delta-rs, not
/// idemlake): a checkpoint is then written at each version `v` with `v + 1` a multiple of `n`.
pub async fn set_checkpoint_interval(table: &Path, n: u32) {
    let url = url::Url::from_directory_path(table).unwrap();
    deltalake::open_table(url)
        .await
        .unwrap()
        .set_tbl_properties()
        .with_properties(std::collections::HashMap::from([(
            "delta.checkpointInterval".to_string(),
            n.to_string(),
        )]))
        .await
        .unwrap();
}

/// The actions of commit `version`, one JSON value per line.
pub fn commit_actions(table: &Path, version: u64) -> Vec<serde_json::Value> {
    let file = table.join("_delta_log").join(format!("{version:020}.json"));
    std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Render batches as sorted row strings (columns in name order): a multiset of rows.
pub fn rows_of(batches: &[RecordBatch]) -> Vec<String> {
    let mut rows = Vec::new();
    for b in batches {
        let schema = b.schema();
        let mut cols: Vec<usize> = (0..b.num_columns()).collect();
        cols.sort_by_key(|&i| schema.field(i).name().clone());
        for r in 0..b.num_rows() {
            let row: Vec<String> = cols
                .iter()
                .map(|&i| {
                    format!(
                        "{}={}",
                        schema.field(i).name(),
                        array_value_to_string(b.column(i), r).unwrap()
                    )
                })
                .collect();
            rows.push(row.join("|"));
        }
    }
    rows.sort();
    rows
}

/// All rows of a Delta table (optionally filtered), read through delta-rs, as a sorted multiset.
pub async fn table_rows(table: &Path, filter: &str) -> Vec<String> {
    let (_, ctx) = table_session(table).await.expect("a Delta table");
    let sql = if filter.is_empty() {
        "SELECT * FROM t".to_string()
    } else {
        format!("SELECT * FROM t WHERE {filter}")
    };
    rows_of(&ctx.sql(&sql).await.unwrap().collect().await.unwrap())
}

/// The Delta table at `table`, loaded by delta-rs (not idemlake) and registered as `t` in a
/// fresh DataFusion session; `None` if there is no table.
pub async fn table_session(table: &Path) -> Option<(deltalake::DeltaTable, SessionContext)> {
    let url = url::Url::from_directory_path(table).ok()?;
    let mut t = DeltaTableBuilder::from_url(url).ok()?.build().ok()?;
    t.load().await.ok()?;
    let ctx = SessionContext::new();
    t.update_datafusion_session(&ctx.state()).unwrap();
    ctx.register_table("t", t.table_provider().await.unwrap())
        .unwrap();
    Some((t, ctx))
}

/// Append the rows of `table` matching `filter` (all rows if empty) once more, as an
/// append-style job would; returns how many rows were appended.
pub async fn append_again(table: &Path, filter: &str) -> usize {
    let (t, ctx) = table_session(table).await.expect("a Delta table");
    let sql = if filter.is_empty() {
        "SELECT * FROM t".to_string()
    } else {
        format!("SELECT * FROM t WHERE {filter}")
    };
    let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    let n = batches.iter().map(|b| b.num_rows()).sum();
    t.write(batches)
        .with_save_mode(deltalake::protocol::SaveMode::Append)
        .await
        .unwrap();
    n
}

/// Rows of a SQL query over the TPC-H source files (`lineitem`, `orders`).
pub async fn source_rows(sql: &str) -> Vec<String> {
    let ctx = SessionContext::new();
    for t in ["lineitem", "orders"] {
        ctx.register_parquet(
            t,
            tpch_dir().join(format!("{t}.parquet")).to_str().unwrap(),
            Default::default(),
        )
        .await
        .unwrap();
    }
    rows_of(&ctx.sql(sql).await.unwrap().collect().await.unwrap())
}

/// The lineitem pass-through task's expected rows for one ship day.
pub async fn expected_lineitem_day(day: &str) -> Vec<String> {
    source_rows(&format!(
        "SELECT l_orderkey, l_linenumber, l_partkey, l_suppkey, l_quantity, l_extendedprice, l_discount, l_tax, \
         l_returnflag, l_linestatus, l_commitdate, l_receiptdate, l_shipinstruct, l_shipmode, l_shipdate AS ship_date \
         FROM lineitem WHERE l_shipdate = DATE '{day}'"
    ))
    .await
}

/// Parse the JSON lines idemlake printed.
pub fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A day task over the TPC-H `lineitem` source, partitioned by `ship_date`: `sql`, then
/// `extra` TOML appended.
pub fn lineitem_task(sql: &str, extra: &str) -> String {
    format!(
        r#"sql = """
{sql}
"""
[target]
partition_by = "ship_date"
[window]
grain = "day"
[sources.lineitem]
uri = "data/lineitem.parquet"
{extra}
"#
    )
}

/// The project's Python (scripts/py-env's venv, or IDEMLAKE_PYTHON), which the oracles run in.
pub fn python() -> String {
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

/// What Python `script` prints (run with [`python`]: polars, deltalake), trimmed; the script
/// must succeed.
pub fn python_prints(script: &str) -> String {
    let out = std::process::Command::new(python())
        .args(["-c", script])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// As another tool's log cleanup leaves it: a checkpoint of `t` at its version, and the
/// commit files of versions below `below` deleted.
pub async fn checkpoint_and_clean_log(t: &deltalake::DeltaTable, table: &Path, below: u64) {
    deltalake::checkpoints::create_checkpoint(t, None)
        .await
        .unwrap();
    for e in std::fs::read_dir(table.join("_delta_log")).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let version = name
            .strip_suffix(".json")
            .and_then(|v| v.parse::<u64>().ok());
        if version.is_some_and(|v| v < below) {
            std::fs::remove_file(&path).unwrap();
        }
    }
}

/// A loopback HTTP server answering every request with `status` (e.g. `200 OK`); yields
/// (request line, headers, body), one per request (webhooks, OpenLineage's HTTP transport).
pub struct HttpReceiver {
    pub port: u16,
    pub rx: std::sync::mpsc::Receiver<(String, Vec<String>, String)>,
}

impl HttpReceiver {
    pub fn start(status: &'static str) -> HttpReceiver {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut request = String::new();
                if reader.read_line(&mut request).unwrap_or(0) == 0 {
                    continue;
                }
                let (mut headers, mut length) = (Vec::new(), 0usize);
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    let line = line.trim_end().to_string();
                    if line.is_empty() {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                    headers.push(line);
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                let answer =
                    format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                let _ = conn.write_all(answer.as_bytes());
                let body = String::from_utf8(body).unwrap();
                let _ = tx.send((request.trim_end().to_string(), headers, body));
            }
        });
        HttpReceiver { port, rx }
    }
}

/// `scripts/<script> start` (it must succeed), then its `env` lines as a map: the loopback
/// servers the tests read (`s3-server`, `pg-server`).
pub fn server_env(script: &str) -> std::collections::HashMap<String, String> {
    let script = repo().join("scripts").join(script);
    let out = std::process::Command::new(&script)
        .arg("start")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} start failed:\n{}",
        script.display(),
        text(&out)
    );
    let out = std::process::Command::new(&script)
        .arg("env")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string()))
        .collect()
}
