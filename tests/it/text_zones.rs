//! Landing zones whose files differ from the first one: text formats (JSON lines, CSV) read
//! exactly, and nested columns that evolve.

use std::path::Path;

use crate::common::*;

const TASK: &str = r#"
sql = """
SELECT dt AS day, ts, v FROM ev
WHERE dt >= $window_start AND dt < $window_end
"""

[target]
partition_by = "day"

[window]
grain = "day"
timezone = "UTC"

[sources.ev]
uri = "ev"
format = "FORMAT"

[write]
mode = "overwrite"
"#;

/// A zone of `format` (`json` or `csv`) whose day `dt` holds one file with values `vs`.
fn write_day(root: &Path, format: &str, dt: &str, vs: &[&str]) {
    let dir = root.join(format!("ev/dt={dt}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = String::new();
    if format == "csv" {
        text.push_str("ts,v\n");
    }
    for (i, v) in vs.iter().enumerate() {
        let ts = format!("{dt}T0{i}:00:00Z");
        match format {
            "csv" => text.push_str(&format!("{ts},{v}\n")),
            _ => text.push_str(&format!("{{\"ts\":\"{ts}\",\"v\":{v}}}\n")),
        }
    }
    std::fs::write(dir.join(format!("part-0.{format}")), text).unwrap();
}

/// `v` of table `table`'s day `dt`, in `ts` order, as polars reads it.
fn polars_values(table: &Path, dt: &str) -> String {
    let script = format!(
        "import polars as pl, datetime as d\n\
         t = pl.read_delta('{}').filter(pl.col('day') == d.date.fromisoformat('{dt}')).sort('ts')\n\
         print(t['v'].dtype, t['v'].to_list())",
        table.display()
    );
    python_prints(&script)
}

/// Regression (a JSON zone whose first file held integers published a later file's `1.5` as
/// 1, every check passing, since arrow's JSON reader truncates; a CSV zone failed with exit 1,
/// retryable, not naming the column): on the runner's route and its plain twin, a value that
/// is not a whole number of the zone's integer type fails the window with exit 2 naming the
/// column and the value, nothing published; whole numbers written otherwise (`3.0`, `1e2`)
/// are read as they are.
#[test]
fn a_text_zones_integer_column_holding_a_fraction_fails_its_window() {
    for format in ["json", "csv"] {
        for accelerate in ["1", "0"] {
            let p = TestProject::new();
            p.task("t", &TASK.replace("FORMAT", format));
            write_day(p.path(), format, "2026-11-01", &["1", "2"]);
            write_day(p.path(), format, "2026-11-02", &["1.5", "2"]);
            write_day(p.path(), format, "2026-11-03", &["3.0", "1e2"]);
            let what = format!("{format}, accelerate={accelerate}");
            let run = |day: &str| {
                p.run_env(
                    "IDEMLAKE_ACCELERATE",
                    accelerate,
                    &["--output", "json", "run", "t", "--window", day],
                )
            };
            let out = run("2026-11-02");
            assert_eq!(code(&out), 2, "{what}: {}", text(&out));
            let error = json_lines(&out)[0]["error"].as_str().unwrap().to_string();
            assert!(
                error.contains("column `v` holds 1.5") && error.contains("not a whole number"),
                "{what}: {error}"
            );
            assert_eq!(
                log_version(&p.table_dir("t")),
                None,
                "{what}: nothing published"
            );
            let out = run("2026-11-03");
            assert_eq!(code(&out), 0, "{what}: {}", text(&out));
            let out = run("2026-11-01");
            assert_eq!(code(&out), 0, "{what}: {}", text(&out));
            let table = p.table_dir("t");
            assert_eq!(
                polars_values(&table, "2026-11-03"),
                "Int64 [3, 100]",
                "{what}"
            );
            assert_eq!(
                polars_values(&table, "2026-11-01"),
                "Int64 [1, 2]",
                "{what}"
            );
        }
    }
}

/// Run `t` over `day` both ways (the runner's route, its plain twin) and return the outputs.
fn both_routes(p: &TestProject, day: &str) -> Vec<(String, std::process::Output)> {
    ["1", "0"]
        .iter()
        .map(|a| {
            let out = p.run_env(
                "IDEMLAKE_ACCELERATE",
                a,
                &["--output", "json", "run", "t", "--window", day],
            );
            (format!("accelerate={a}"), out)
        })
        .collect()
}

/// Each output failed with exit 2 with an error holding every one of `said`, and nothing was
/// published.
fn assert_refused(p: &TestProject, outs: &[(String, std::process::Output)], said: &[&str]) {
    for (what, out) in outs {
        assert_eq!(code(out), 2, "{what}: {}", text(out));
        let error = json_lines(out)[0]["error"].as_str().unwrap().to_string();
        for s in said {
            assert!(error.contains(s), "{what}: {s:?} not in {error}");
        }
    }
    assert_eq!(log_version(&p.table_dir("t")), None, "nothing published");
}

const CSV_TASK: &str = r#"
sql = """
SELECT dt AS day, id, qty, price FROM ev
WHERE dt >= $window_start AND dt < $window_end
"""
[target]
partition_by = "day"
[window]
grain = "day"
[sources.ev]
uri = "ev"
format = "csv"
[write]
mode = "overwrite"
"#;

fn csv_file(p: &TestProject, dt: &str, name: &str, body: &str) {
    let dir = p.path().join(format!("ev/dt={dt}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), body).unwrap();
}

/// Regression (a CSV file whose header listed the zone's columns in another order was read by
/// position: `price,id,qty` values published as `id,qty,price`, every check, `verify` and
/// `audit` passing): a file whose header is not the zone's fails its window with exit 2
/// naming it and both headers, on both routes; nothing published.
#[test]
fn a_csv_file_whose_header_differs_from_the_zones_fails_its_window() {
    for (header, row) in [
        ("price,id,qty", "300,3,30"),
        ("id,qty,price,note", "3,30,300,x"),
    ] {
        let p = TestProject::new();
        p.task("t", CSV_TASK);
        csv_file(&p, "2026-03-01", "part-0.csv", "id,qty,price\n1,10,100\n");
        csv_file(
            &p,
            "2026-03-01",
            "part-1.csv",
            &format!("{header}\n{row}\n"),
        );
        let outs = both_routes(&p, "2026-03-01");
        assert_refused(&p, &outs, &["part-1.csv", header, "id,qty,price"]);
    }
}

/// Regression (a CSV column with no value in the zone's first file — a header-only file, or
/// an optional column left empty — had no type, and every later value of it was published as
/// NULL once the task cast it): a window whose files hold a value in such a column fails
/// with exit 2 naming the column and the value; one whose files hold none reads NULL.
#[test]
fn a_csv_column_without_a_value_in_the_first_file_fails_windows_holding_values() {
    let p = TestProject::new();
    p.task(
        "t",
        &CSV_TASK.replace("SELECT dt AS day, id, qty, price", "SELECT dt AS day, CAST(id AS BIGINT) AS id, CAST(qty AS BIGINT) AS qty, CAST(price AS BIGINT) AS price"),
    );
    csv_file(&p, "2026-02-28", "part-0.csv", "id,qty,price\n");
    csv_file(&p, "2026-03-01", "part-0.csv", "id,qty,price\n1,10,100\n");
    csv_file(&p, "2026-03-02", "part-0.csv", "id,qty,price\n,,\n");
    let outs = both_routes(&p, "2026-03-01");
    assert_refused(
        &p,
        &outs,
        &["column `id` holds `1`", "no value in the zone's first file"],
    );
    for (what, out) in both_routes(&p, "2026-03-02") {
        assert_eq!(code(&out), 0, "{what}: {}", text(&out));
    }
}

/// Regression (compressed files and other extensions of the zone's format in a window's
/// directory — `part-1.csv.gz` beside `part-0.csv`, `.jsonl` beside `.json` — were skipped
/// without a word): such a file fails the window with exit 2 naming it; nothing published.
#[test]
fn a_compressed_or_renamed_data_file_in_a_windows_directory_fails_it() {
    for (format, first, other) in [
        ("csv", "part-0.csv", "part-1.csv.gz"),
        ("json", "part-0.json", "part-1.jsonl"),
    ] {
        let p = TestProject::new();
        p.task("t", &TASK.replace("FORMAT", format));
        write_day(p.path(), format, "2026-11-01", &["1", "2"]);
        let dir = p.path().join("ev/dt=2026-11-01");
        std::fs::rename(dir.join(format!("part-0.{format}")), dir.join(first)).unwrap();
        std::fs::copy(dir.join(first), dir.join(other)).unwrap();
        let outs = both_routes(&p, "2026-11-01");
        assert_refused(&p, &outs, &[other, "is not read"]);
    }
}

/// Write a Parquet file `path` with columns `id` and struct `st` of fields `fields` (each
/// field an Int64 of value `id * 10`).
fn struct_file(path: &Path, id: i64, fields: &[&str]) {
    use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StructArray};
    use datafusion::arrow::datatypes::{DataType, Field};
    use std::sync::Arc;
    let children: Vec<(Arc<Field>, ArrayRef)> = fields
        .iter()
        .map(|f| {
            (
                Arc::new(Field::new(*f, DataType::Int64, true)),
                Arc::new(Int64Array::from(vec![id * 10])) as ArrayRef,
            )
        })
        .collect();
    let st: ArrayRef = Arc::new(StructArray::from(children));
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(vec![id])) as ArrayRef),
        ("st", st),
    ])
    .unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// Regression (a later Parquet file whose struct column lacked one of the first file's
/// fields was read by the runner — the field NULL — but the checks' own reader failed on it,
/// exit 1 retryable on every run with `default = "content"`, and `verify` failed alike): the
/// checks' reader matches struct fields by name, a missing one NULL, and the window publishes
/// and verifies.
#[test]
fn a_struct_missing_a_field_in_a_later_parquet_file_is_checked() {
    let p = TestProject::new();
    let task = r#"
sql = """
SELECT dt AS day, id, st.a AS a, st.b AS b FROM ev WHERE dt >= $window_start AND dt < $window_end
"""
[target]
partition_by = "day"
[window]
grain = "day"
[sources.ev]
uri = "ev"
format = "parquet"
[reconcile]
default = "content"
"#;
    p.task("t", task);
    struct_file(
        &p.path().join("ev/dt=2026-03-01/part-0.parquet"),
        1,
        &["a", "b"],
    );
    struct_file(&p.path().join("ev/dt=2026-03-02/part-0.parquet"), 2, &["a"]);
    for (what, out) in both_routes(&p, "2026-03-02") {
        assert_eq!(code(&out), 0, "{what}: {}", text(&out));
        assert!(
            text(&out).contains("source_content"),
            "{what}: {}",
            text(&out)
        );
    }
    let out = p.run(&["verify", "t", "--window", "2026-03-02"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let script = format!(
        "import polars as pl\nt = pl.read_delta('{}')\nprint(t['a'].to_list(), t['b'].to_list())",
        p.table_dir("t").display()
    );
    assert_eq!(python_prints(&script), "[20] [None]");
}

/// Regression (a glob naming `.jsonl`, `.ndjson` or `.tsv` files was refused with "no .json
/// files under …: check the source's format", though the format was right): a glob location
/// names its files itself, whatever their extension, on both routes and in the checks.
#[test]
fn a_glob_location_reads_the_files_it_names_whatever_their_extension() {
    for (format, glob, name, body) in [
        (
            "json",
            "ev/*/*.jsonl",
            "a.jsonl",
            "{\"id\":1}\n{\"id\":2}\n",
        ),
        ("csv", "ev/*/*.tsv", "a.tsv", "id\tv\n1\tx\n2\ty\n"),
    ] {
        let p = TestProject::new();
        let delimiter = if format == "csv" {
            "\ndelimiter = \"\\t\""
        } else {
            ""
        };
        p.task(
            "t",
            &format!(
                r#"sql = """
SELECT dt AS day, id FROM ev WHERE dt >= $window_start AND dt < $window_end
"""
[target]
partition_by = "day"
[window]
grain = "day"
[sources.ev]
uri = "{glob}"
format = "{format}"{delimiter}
"#
            ),
        );
        let dir = p.path().join("ev/dt=2026-03-01");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), body).unwrap();
        for (what, out) in both_routes(&p, "2026-03-01") {
            assert_eq!(code(&out), 0, "{glob} {what}: {}", text(&out));
            assert_eq!(json_lines(&out)[0]["rows_written"], 2, "{glob} {what}");
        }
    }
}

/// Regression (a JSON or CSV file holding a value its column's type cannot hold — `"abc"` in
/// a `BIGINT` column, `13` in a string column — failed with exit 1, `retryable: true`, on
/// every retry, and orchestrators retried it forever): exit 2, not retryable, nothing
/// published.
#[test]
fn a_text_value_its_columns_type_cannot_hold_is_not_retryable() {
    for (format, first, second) in [
        ("json", "1", "\"abc\""),
        ("json", "\"12\"", "13"),
        ("json", "1.5", "\"abc\""),
        ("json", "1", "123456789012345678901234"),
        ("csv", "1", "abc"),
    ] {
        let p = TestProject::new();
        p.task("t", &TASK.replace("FORMAT", format));
        write_day(p.path(), format, "2026-11-01", &[first]);
        write_day(p.path(), format, "2026-11-02", &[second]);
        for (what, out) in both_routes(&p, "2026-11-02") {
            assert_eq!(code(&out), 2, "{format} {second} {what}: {}", text(&out));
            let report = &json_lines(&out)[0];
            assert_eq!(report["retryable"], false, "{report}");
            let error = report["error"].as_str().unwrap();
            assert!(error.contains("cannot hold"), "{error}");
        }
        assert_eq!(log_version(&p.table_dir("t")), None, "nothing published");
    }
}

/// A column only later files of a zone hold is not one of the zone's (its columns are the
/// first file's): naming it is exit 2, and the error says why rather than only "No field
/// named" (found by trying: a new user took it for a typo).
#[test]
fn naming_a_column_only_later_files_hold_says_the_zones_columns_are_the_first_files() {
    let p = TestProject::new();
    p.task(
        "t",
        &TASK
            .replace("FORMAT", "json")
            .replace("ts, v FROM", "ts, v, channel FROM"),
    );
    write_day(p.path(), "json", "2026-11-01", &["1"]);
    let dir = p.path().join("ev/dt=2026-11-02");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("part-0.json"),
        "{\"ts\":\"2026-11-02T01:00:00Z\",\"v\":2,\"channel\":\"web\"}\n",
    )
    .unwrap();
    let out = p.run(&["run", "t", "--window", "2026-11-02"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("a zone's columns are those of its first file"),
        "{}",
        text(&out)
    );
}

/// On S3 the header check reads each CSV file's first bytes through the zone's store, and
/// the error names the file as `s3://bucket/…`: a file in another column order fails its
/// window (exit 2); a window whose files all have the zone's header publishes.
#[tokio::test(flavor = "multi_thread")]
async fn s3_a_csv_zones_headers_are_checked_and_named_by_their_s3_location() {
    use object_store::{ObjectStoreExt, PutPayload, path::Path as ObjPath};
    let p = TestProject::new();
    let prefix = format!("it-{}", uuid::Uuid::new_v4().simple());
    let store = crate::s3::store();
    for (rel, body) in [
        ("dt=2026-03-01/part-0.csv", "id,qty,price\n1,10,100\n"),
        ("dt=2026-03-02/part-0.csv", "id,qty,price\n2,20,200\n"),
        ("dt=2026-03-02/part-1.csv", "price,id,qty\n300,3,30\n"),
    ] {
        let key = ObjPath::from(format!("{prefix}/ev/{rel}"));
        store
            .put(&key, PutPayload::from(body.as_bytes().to_vec()))
            .await
            .unwrap();
    }
    let bucket = crate::s3::bucket();
    let uri = format!("s3://{bucket}/{prefix}/ev");
    p.task(
        "t",
        &CSV_TASK.replace("uri = \"ev\"", &format!("uri = \"{uri}\"")),
    );
    let run = |day: &str| {
        p.cmd()
            .envs(crate::s3::s3_env())
            .env("IDEMLAKE_LAKE", format!("s3://{bucket}/{prefix}/lake"))
            .args(["--output", "json", "run", "t", "--window", day])
            .output()
            .unwrap()
    };
    let out = run("2026-03-01");
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = run("2026-03-02");
    assert_eq!(code(&out), 2, "{}", text(&out));
    let error = json_lines(&out)[0]["error"].as_str().unwrap().to_string();
    let named = format!("s3://{bucket}/{prefix}/ev/dt=2026-03-02/part-1.csv");
    assert!(error.contains(&named), "{error}");
}

/// `schema_from = "last"`: a zone's columns come from its last file in path order (the newest
/// day), so a column added since is read, NULL in older files; on both routes, checked by
/// content, and the table matches what polars reads from the files.
#[test]
fn schema_from_last_reads_a_column_added_in_later_files() {
    for format in ["json", "parquet"] {
        let p = TestProject::new();
        let task = TASK
            .replace("FORMAT", format)
            .replace("ts, v FROM", "ts, v, channel FROM")
            .replace(
                &format!("format = \"{format}\""),
                &format!("format = \"{format}\"\nschema_from = \"last\"\n[reconcile]\ndefault = \"content\""),
            );
        p.task("t", &task);
        let rows = [
            ("2026-11-01", "{\"ts\":\"2026-11-01T01:00:00Z\",\"v\":1}"),
            (
                "2026-11-02",
                "{\"ts\":\"2026-11-02T01:00:00Z\",\"v\":2,\"channel\":\"web\"}",
            ),
        ];
        for (day, line) in rows {
            let dir = p.path().join(format!("ev/dt={day}"));
            std::fs::create_dir_all(&dir).unwrap();
            let json = dir.join("part-0.json");
            std::fs::write(&json, format!("{line}\n")).unwrap();
            if format == "parquet" {
                let script = format!(
                    "import polars as pl\npl.read_ndjson('{0}').with_columns(pl.col('ts').str.to_datetime(time_zone='UTC')).write_parquet('{1}')",
                    json.display(),
                    dir.join("part-0.parquet").display()
                );
                python_prints(&script);
                std::fs::remove_file(&json).unwrap();
            }
        }
        for day in ["2026-11-01", "2026-11-02"] {
            for (what, out) in both_routes(&p, day) {
                assert_eq!(code(&out), 0, "{format} {day} {what}: {}", text(&out));
                assert!(text(&out).contains("source_content"), "{}", text(&out));
            }
        }
        let script = format!(
            "import polars as pl\nt = pl.read_delta('{}').sort('day')\nprint(t['channel'].to_list())",
            p.table_dir("t").display()
        );
        assert_eq!(python_prints(&script), "[None, 'web']", "{format}");
    }
}

/// `schema_from` is `first` or `last`, and not for a Delta source (its columns are its log's).
#[test]
fn schema_from_is_validated() {
    let p = TestProject::new();
    for (format, value, said) in [
        ("json", "newest", "must be first or last"),
        ("delta", "last", "come from the table"),
        ("csv", "last", "must all carry one header"),
    ] {
        let extra = format!("format = \"{format}\"\nschema_from = \"{value}\"");
        p.task("t", &TASK.replace("format = \"FORMAT\"", &extra));
        let out = p.run(&["validate", "t"]);
        assert_eq!(code(&out), 2, "{extra}: {}", text(&out));
        assert!(text(&out).contains(said), "{extra}: {}", text(&out));
    }
}

/// Review finding: in a text zone whose window is chosen by an integer partition level
/// (`n=1/`, `n=2/`), the filter on it was kept above the scan like the integer file columns',
/// so every window listed the whole zone, and a refused file in another window's directory
/// failed every window. A window lists only its own directories; a file set aside under a
/// name that only contains the format's (`part-2.json.tmp`) is not refused.
#[test]
fn a_text_zone_window_chosen_by_an_integer_level_lists_only_its_directories() {
    let p = TestProject::new();
    p.task(
        "t",
        r#"sql = """
SELECT CAST($window_start AS DATE) AS day, v FROM ev WHERE n = date_part('day', $window_start)
"""
[target]
partition_by = "day"
[window]
grain = "day"
[sources.ev]
uri = "ev"
format = "json"
"#,
    );
    for (dir, name) in [
        ("n=1", "part-0.json"),
        ("n=1", "part-2.json.tmp"),
        ("n=2", "part-0.json"),
        ("n=2", "part-1.json.gz"),
    ] {
        let d = p.path().join("ev").join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), "{\"v\":1}\n{\"v\":2}\n").unwrap();
    }
    for (what, out) in both_routes(&p, "2026-11-01") {
        assert_eq!(code(&out), 0, "{what}: {}", text(&out));
        assert_eq!(json_lines(&out)[0]["rows_written"], 2, "{what}");
    }
    let outs = both_routes(&p, "2026-11-02");
    for (what, out) in &outs {
        assert_eq!(code(out), 2, "{what}: {}", text(out));
        assert!(
            text(out).contains("part-1.json.gz"),
            "{what}: {}",
            text(out)
        );
    }
}

/// Review finding: a CSV file whose first line is not complete yet (a writer still at work,
/// or a header longer than the first read) was refused as a header that differs (exit 2).
/// A file with no complete first line is a retryable failure (exit 1); a header longer than
/// 64 KiB is read whole.
#[test]
fn a_csv_file_without_a_complete_header_line_yet_is_retryable() {
    let p = TestProject::new();
    p.task("t", CSV_TASK);
    csv_file(&p, "2026-03-01", "part-0.csv", "id,qty,price\n1,10,100\n");
    csv_file(&p, "2026-03-01", "part-1.csv", "id,qty,pr");
    for (what, out) in both_routes(&p, "2026-03-01") {
        assert_eq!(code(&out), 1, "{what}: {}", text(&out));
        let report = &json_lines(&out)[0];
        assert_eq!(report["retryable"], true, "{report}");
        assert!(
            text(&out).contains("no complete header line"),
            "{}",
            text(&out)
        );
    }
    // A long header (a wide export) is read whole and checked.
    let wide: Vec<String> = (0..9000).map(|i| format!("c{i:05}")).collect();
    let p = TestProject::new();
    p.task(
        "t",
        &CSV_TASK.replace(
            "SELECT dt AS day, id, qty, price",
            "SELECT dt AS day, c00000",
        ),
    );
    let header = wide.join(",");
    let row: Vec<&str> = wide.iter().map(|_| "1").collect();
    csv_file(
        &p,
        "2026-03-01",
        "part-0.csv",
        &format!("{header}\n{}\n", row.join(",")),
    );
    csv_file(
        &p,
        "2026-03-01",
        "part-1.csv",
        &format!("{header}\n{}\n", row.join(",")),
    );
    for (what, out) in both_routes(&p, "2026-03-01") {
        assert_eq!(code(&out), 0, "{what}: {}", text(&out));
    }
}

/// gzip `path` in place (`part-0.csv` → `part-0.csv.gz`), as Firehose and Spark write them.
fn gzip(path: &Path) {
    use std::io::Write as _;
    let bytes = std::fs::read(path).unwrap();
    let out = std::fs::File::create(format!("{}.gz", path.display())).unwrap();
    let mut w = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    w.write_all(&bytes).unwrap();
    w.finish().unwrap();
    std::fs::remove_file(path).unwrap();
}

/// Issue 52: gzip-compressed landing zones are read, in a directory zone (`part-0.csv.gz`)
/// and named by a glob (`ev/*/*.json.gz`; it read gzip bytes as text and failed, retryable),
/// on the runner's route and its plain twin, the checks' included; the values are those
/// polars reads from the table. A plain file beside the compressed ones is refused by name.
#[test]
fn gzip_compressed_landing_zones_are_read_on_every_route() {
    for (format, glob) in [
        ("csv", false),
        ("json", false),
        ("csv", true),
        ("json", true),
    ] {
        let p = TestProject::new();
        let task = TASK.replace("FORMAT", format);
        let task = match glob {
            true => task.replace("uri = \"ev\"", &format!("uri = \"ev/*/*.{format}.gz\"")),
            false => task,
        };
        p.task("t", &task);
        for (dt, vs) in [("2026-11-01", ["1", "2"]), ("2026-11-02", ["3", "4"])] {
            write_day(p.path(), format, dt, &vs);
            gzip(&p.path().join(format!("ev/dt={dt}/part-0.{format}")));
        }
        let what = format!("{format}, glob={glob}");
        for (route, out) in both_routes(&p, "2026-11-02") {
            assert_eq!(code(&out), 0, "{what}, {route}: {}", text(&out));
            assert_eq!(json_lines(&out)[0]["rows_written"], 2, "{what}, {route}");
            let values = polars_values(&p.table_dir("t"), "2026-11-02");
            assert!(values.ends_with("[3, 4]"), "{what}, {route}: {values}");
        }
        if !glob {
            // A plain file beside the compressed ones would be skipped: refused by name.
            write_day(p.path(), format, "2026-11-03", &["5"]);
            for (route, out) in both_routes(&p, "2026-11-03") {
                assert_eq!(code(&out), 2, "{what}, {route}: {}", text(&out));
                assert!(
                    text(&out).contains(&format!("part-0.{format}")),
                    "{}",
                    text(&out)
                );
            }
        }
    }
}
