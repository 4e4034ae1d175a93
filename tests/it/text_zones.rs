//! Landing zones of text files (JSON lines, CSV): their integer columns are read exactly.

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
    let out = std::process::Command::new(python())
        .args(["-c", &script])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
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
