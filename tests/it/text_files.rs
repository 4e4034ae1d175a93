//! Text sources that are one file (not a landing zone): read exactly, compressed or not.

use std::io::Write;
use std::path::Path;

use crate::common::*;

const TASK: &str = r#"
sql = """
SELECT CAST(ts AS DATE) AS day, ts, v FROM ev
WHERE CAST(ts AS TIMESTAMP) >= $window_start_ts AND CAST(ts AS TIMESTAMP) < $window_end_ts
"""

[target]
partition_by = "day"

[window]
grain = "day"
timezone = "UTC"

[sources.ev]
uri = "URI"
format = "FORMAT"

[write]
mode = "overwrite"
"#;

/// One file of `format` (`json` or `csv`): `n` rows on 2026-11-01, `v` = the row's number,
/// except that row `odd` (if any) holds `value`.
fn text_file(format: &str, n: usize, odd: Option<(usize, &str)>) -> String {
    let mut text = String::new();
    if format == "csv" {
        text.push_str("ts,v\n");
    }
    for i in 0..n {
        let ts = format!(
            "2026-11-01T{:02}:{:02}:{:02}",
            i / 3600,
            i / 60 % 60,
            i % 60
        );
        let v = match odd {
            Some((at, value)) if at == i => value.to_string(),
            _ => i.to_string(),
        };
        match format {
            "csv" => text.push_str(&format!("{ts},{v}\n")),
            _ => text.push_str(&format!("{{\"ts\":\"{ts}\",\"v\":{v}}}\n")),
        }
    }
    text
}

fn gzip(path: &Path, text: &str) {
    let file = std::fs::File::create(path).unwrap();
    let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    gz.write_all(text.as_bytes()).unwrap();
    gz.finish().unwrap();
}

/// Regression (a JSON file whose first 1,000 rows held integers, the rows DataFusion infers a
/// schema from, published row 1,200's `1.5` as 1, every check passing; a CSV file failed with
/// exit 1, retryable): on the runner's route and its plain twin, the value fails the window
/// with exit 2 naming the column and the value, and nothing is published; whole numbers
/// written otherwise (`3.0`, `1e2`) are published exactly.
#[test]
fn a_single_text_files_integer_column_holding_a_fraction_past_the_inferred_rows_fails_its_window() {
    for format in ["json", "csv"] {
        for accelerate in ["1", "0"] {
            let what = format!("{format}, accelerate={accelerate}");
            let p = TestProject::new();
            let uri = format!("ev.{format}");
            p.task("t", &TASK.replace("FORMAT", format).replace("URI", &uri));
            let file = p.path().join(&uri);
            std::fs::write(&file, text_file(format, 1500, Some((1200, "1.5")))).unwrap();
            let run = || {
                p.run_env(
                    "IDEMLAKE_ACCELERATE",
                    accelerate,
                    &["--output", "json", "run", "t", "--window", "2026-11-01"],
                )
            };
            let out = run();
            assert_eq!(code(&out), 2, "{what}: {}", text(&out));
            let error = json_lines(&out)[0]["error"].as_str().unwrap().to_string();
            assert!(
                error.contains("column `v` holds 1.5") && error.contains("not a whole number"),
                "{what}: {error}"
            );
            assert_eq!(json_lines(&out)[0]["retryable"], false, "{what}");
            assert_eq!(
                log_version(&p.table_dir("t")),
                None,
                "{what}: nothing published"
            );

            std::fs::write(&file, text_file(format, 1500, Some((1200, "1e2")))).unwrap();
            let out = run();
            assert_eq!(code(&out), 0, "{what}: {}", text(&out));
            let script = format!(
                "import polars as pl\n\
                 t = pl.read_delta('{}').sort('ts')\n\
                 print(t['v'].dtype, t.height, t['v'][1199], t['v'][1200], t['v'].sum())",
                p.table_dir("t").display()
            );
            let expected = (0..1500).sum::<usize>() - 1200 + 100;
            assert_eq!(
                python_prints(&script),
                format!("Int64 1500 1199 100 {expected}"),
                "{what}"
            );
        }
    }
}

/// Regression (a source `ev.csv.gz` was read as text, failing with exit 1, retryable, and an
/// invalid-UTF-8 error; `validate` called it invalid with exit 1): a single gzip-compressed
/// JSON or CSV file is read decompressed, on both routes, and its rows are those of the
/// uncompressed file as polars reads them.
#[test]
fn a_gzip_compressed_text_file_source_is_read_decompressed() {
    for format in ["json", "csv"] {
        for accelerate in ["1", "0"] {
            let what = format!("{format}, accelerate={accelerate}");
            let p = TestProject::new();
            let uri = format!("ev.{format}.gz");
            p.task("t", &TASK.replace("FORMAT", format).replace("URI", &uri));
            let body = text_file(format, 50, None);
            gzip(&p.path().join(&uri), &body);
            let plain = p.path().join(format!("plain.{format}"));
            std::fs::write(&plain, &body).unwrap();
            let out = p.run_env("IDEMLAKE_ACCELERATE", accelerate, &["validate", "t"]);
            assert_eq!(code(&out), 0, "{what}: {}", text(&out));
            let out = p.run_env(
                "IDEMLAKE_ACCELERATE",
                accelerate,
                &["--output", "json", "run", "t", "--window", "2026-11-01"],
            );
            assert_eq!(code(&out), 0, "{what}: {}", text(&out));
            let read = match format {
                "csv" => "pl.read_csv",
                _ => "pl.read_ndjson",
            };
            let script = format!(
                "import polars as pl\n\
                 t = pl.read_delta('{}').sort('ts')\n\
                 s = {read}('{}').sort('ts')\n\
                 ts = lambda f: [str(x).replace(' ', 'T')[:19] for x in f['ts'].to_list()]\n\
                 print(t.height, t['v'].to_list() == s['v'].to_list(), ts(t) == ts(s))",
                p.table_dir("t").display(),
                plain.display()
            );
            assert_eq!(python_prints(&script), "50 True True", "{what}");
        }
    }
}

/// Regression (naming a column a single CSV file does not have said "if that column is only in
/// a landing zone's later files …", about a source that is no landing zone): the error names
/// the column and the file's columns, and no hint about zones.
#[test]
fn an_unknown_column_of_a_single_file_source_says_nothing_of_landing_zones() {
    let p = TestProject::new();
    p.task(
        "t",
        &TASK
            .replace("FORMAT", "csv")
            .replace("URI", "ev.csv")
            .replace("ts, v FROM", "ts, v, id FROM"),
    );
    std::fs::write(p.path().join("ev.csv"), text_file("csv", 3, None)).unwrap();
    let out = p.run(&["validate", "t"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("No field named id"), "{said}");
    assert!(!said.contains("landing zone"), "{said}");
}

/// Regression (a directory of CSV files without `key=value` levels, one file headed `ts,v,w`
/// and another `ts,w,v`, was read by column position: the second file's `w` published as `v`,
/// every check passing): on both of the runner's routes the window fails with exit 2 naming
/// the file and both headers, nothing published; with the file rewritten in the first file's
/// order the rows are those polars reads from the files by name.
#[test]
fn a_csv_directory_file_whose_header_differs_from_the_first_fails_the_window() {
    for accelerate in ["1", "0"] {
        let what = format!("accelerate={accelerate}");
        let p = TestProject::new();
        p.task(
            "t",
            &TASK
                .replace("FORMAT", "csv")
                .replace("URI", "ev")
                .replace("ts, v FROM", "ts, v, w FROM"),
        );
        let dir = p.path().join("ev");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.csv"), "ts,v,w\n2026-11-01T01:00:00,1,10\n").unwrap();
        std::fs::write(dir.join("b.csv"), "ts,w,v\n2026-11-01T02:00:00,20,2\n").unwrap();
        let run = || {
            p.run_env(
                "IDEMLAKE_ACCELERATE",
                accelerate,
                &["--output", "json", "run", "t", "--window", "2026-11-01"],
            )
        };
        let out = run();
        assert_eq!(code(&out), 2, "{what}: {}", text(&out));
        let error = json_lines(&out)[0]["error"].as_str().unwrap().to_string();
        assert!(
            error.contains("b.csv is `ts,w,v`, not `ts,v,w`"),
            "{what}: {error}"
        );
        assert_eq!(
            log_version(&p.table_dir("t")),
            None,
            "{what}: nothing published"
        );
        // A file with a column more: named against the first file's header (review: the
        // message compared with the merged columns of every file, blaming the wrong one).
        std::fs::write(dir.join("b.csv"), "ts,v,w,x\n2026-11-01T02:00:00,2,20,7\n").unwrap();
        let out = run();
        assert_eq!(code(&out), 2, "{what}: {}", text(&out));
        let error = json_lines(&out)[0]["error"].as_str().unwrap().to_string();
        assert!(
            error.contains("b.csv is `ts,v,w,x`, not `ts,v,w` (the header of")
                && error.contains("a.csv, the first file"),
            "{what}: {error}"
        );
        std::fs::write(dir.join("b.csv"), "ts,v,w\n2026-11-01T02:00:00,2,20\n").unwrap();
        // An empty file (a writer's, before its first write) is skipped, not waited for.
        std::fs::write(dir.join("c.csv"), "").unwrap();
        let out = run();
        assert_eq!(code(&out), 0, "{what}: {}", text(&out));
        let script = format!(
            "import polars as pl, glob, os\n\
             t = pl.read_delta('{}').sort('v')\n\
             s = pl.concat([pl.read_csv(f) for f in sorted(glob.glob('{}/*.csv')) if os.path.getsize(f) > 0], how='diagonal').sort('v')\n\
             print(t['v'].to_list() == s['v'].to_list(), t['w'].to_list() == s['w'].to_list(), t.height)",
            p.table_dir("t").display(),
            dir.display()
        );
        assert_eq!(python_prints(&script), "True True 2", "{what}");
    }
}
