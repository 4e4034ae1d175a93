//! `idemlake init [DIR]` and `idemlake new TASK`: a project skeleton and task files from a
//! template. Nothing is ever overwritten: an existing file is an input error (exit 2).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::task::names::is_identifier;

/// The sample rows `init` writes, so the example task validates and runs at once.
const SAMPLE_CSV: &str = "\
day,customer,amount
2026-01-01,alice,12.50
2026-01-01,bob,3.25
2026-01-02,alice,7.00
2026-01-02,carol,20.00
";

/// The commented example task `init` writes (table `example`).
const EXAMPLE_TASK: &str = r#"# An idemlake task: one file per target table; this one publishes table `example`.
# Every key, its type and default: docs/src/reference/task-file.md in the idemlake repository.
# Try it:  idemlake validate && idemlake run example --window 2026-01-01 && idemlake status example
description = "amount per customer and day"

# One query. $window_start / $window_end are the window's bounds, bound as typed parameters
# (DATE for day/week/month windows): the query must keep to [start, end). Amounts are summed
# as DECIMAL: a sum of floating-point values may differ in its last digits from one run to
# the next (the lint refuses it).
sql = """
SELECT day, customer, sum(CAST(amount AS DECIMAL(12, 2))) AS amount
FROM sales
WHERE day >= $window_start AND day < $window_end
GROUP BY day, customer
"""

[target]
partition_by = "day"            # the window column of the output (DATE; TIMESTAMP for hours)
# uri = "s3://bucket/tables/example"   # default: <lake>/example

[window]
grain = "day"                   # hour | day | week | month
# timezone = "UTC"              # IANA name the window bounds are computed in
# lookback = 0                  # also re-publish the N windows before (late data)

[sources.sales]                 # the SQL reads it as `sales`
uri = "data/example.csv"        # a file, a directory, a glob, s3://..., or task = "other_task"
# format = "csv"                # parquet | csv | json | delta (inferred from the extension)

# [write]
# mode = "overwrite"            # overwrite: replace the window | merge: upsert on key
# key = ["day", "customer"]

# Checked before the commit: the source's total for the window must equal the output's.
[reconcile]
source = "SELECT sum(CAST(amount AS DECIMAL(12, 2))) AS amount FROM sales WHERE day >= $window_start AND day < $window_end"
output = "SELECT sum(amount) AS amount FROM output"
"#;

/// The S3 settings template `init` writes.
const S3_ENV: &str = "\
# S3 settings for idemlake: copy to s3.env, fill in, then `set -a; . ./s3.env; set +a`.
# Keep s3.env out of version control (.gitignore lists it). On AWS, prefer short-lived
# credentials to keys in a file: an instance or pod role and web identity
# (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN) need no setting here; for a profile or SSO,
# `eval \"$(aws configure export-credentials --profile NAME --format env)\"` before running.
IDEMLAKE_LAKE=s3://my-bucket/lake
AWS_REGION=us-east-1
# AWS_ACCESS_KEY_ID=
# AWS_SECRET_ACCESS_KEY=
# A local or other S3-compatible server (MinIO, SeaweedFS, R2):
# AWS_ENDPOINT_URL=http://127.0.0.1:9000
# AWS_ALLOW_HTTP=true
";

const GITIGNORE: &str = "\
# idemlake: the local lake and local S3 settings
lake/
s3.env
";

/// Create a project skeleton in `dir`; returns the files written.
pub fn init(dir: &Path) -> Result<Vec<PathBuf>> {
    let tables = dir.join("tables");
    if has_tasks(&tables) {
        return Err(Error::input(format!(
            "{} already holds task files: this is a project already (add a task with `idemlake new TASK`)",
            tables.display()
        )));
    }
    let files = [
        (tables.join("example.toml"), EXAMPLE_TASK),
        (dir.join("data").join("example.csv"), SAMPLE_CSV),
        (dir.join("s3.env.example"), S3_ENV),
    ];
    if let Some((path, _)) = files.iter().find(|(p, _)| p.exists()) {
        return Err(Error::input(format!(
            "{} exists already; init writes nothing over an existing file",
            path.display()
        )));
    }
    let mut written = Vec::new();
    for (path, text) in files {
        write_new(&path, text)?;
        written.push(path);
    }
    let gitignore = dir.join(".gitignore");
    let old = std::fs::read_to_string(&gitignore).unwrap_or_default();
    if !old.lines().any(|l| l.trim() == "lake/") {
        let sep = if old.is_empty() || old.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        std::fs::write(&gitignore, format!("{old}{sep}{GITIGNORE}"))?;
        written.push(gitignore);
    }
    Ok(written)
}

/// Whether `tables` holds a task file.
fn has_tasks(tables: &Path) -> bool {
    std::fs::read_dir(tables).is_ok_and(|entries| {
        entries
            .filter_map(|e| e.ok())
            .any(|e| e.path().extension().is_some_and(|x| x == "toml"))
    })
}

fn write_new(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text)?;
    Ok(())
}

/// What `idemlake new` writes.
#[derive(Debug, Clone)]
pub struct NewTask<'a> {
    pub name: &'a str,
    /// hour | day | week | month.
    pub grain: &'a str,
    /// The source location, relative to the project or a URI.
    pub source: &'a str,
    /// The source column holding the window's time (DATE, or TIMESTAMP for hours).
    pub column: &'a str,
}

/// Write `tables/<name>.toml` from the template; returns its path.
pub fn new_task(project_dir: &Path, t: &NewTask<'_>) -> Result<PathBuf> {
    if !is_identifier(t.name) {
        return Err(Error::input(format!(
            "task name `{}` must be a plain identifier (letters, digits, _), it names the table",
            t.name
        )));
    }
    if !is_identifier(t.column) {
        return Err(Error::input(format!(
            "--column `{}` must be a plain identifier",
            t.column
        )));
    }
    let tables = project_dir.join("tables");
    if !tables.is_dir() {
        return Err(Error::input(format!(
            "{} does not exist: create a project with `idemlake init {}`, or pass --project DIR naming the one that holds tables/",
            tables.display(),
            project_dir.display()
        )));
    }
    let file = tables.join(format!("{}.toml", t.name));
    if file.exists() {
        return Err(Error::input(format!(
            "{} exists already; new writes nothing over an existing file",
            file.display()
        )));
    }
    let text = match zone_layout(project_dir, t.source) {
        Some(zone) => zone_template(t, &zone),
        None => template(t),
    };
    write_new(&file, &text)?;
    Ok(file)
}

/// A local landing zone laid out by date: its arrival declaration (as the task file writes
/// it) and the format of its first file.
struct Zone {
    /// The source options declaring the layout and the arrival: `arrival = "dt"` for dated
    /// `key=YYYY-MM-DD` directories; `arrival = ["year", "month", "day"]` (and `"hour"`) for
    /// `year=YYYY/month=MM/day=DD/` levels, or for `YYYY/MM/DD/` ones without names (then with
    /// `partitioning = "directories"` naming them).
    arrival: String,
    format: &'static str,
    /// The year, month, day (and hour) levels, left out of the task's `SELECT *` (a `day`
    /// level would clash with the window column); none for a `dt` zone.
    levels: Vec<String>,
}

/// The zone at `source` (relative to the project), if it is one (see [`Zone`]): the first
/// directories down to its first file say its layout.
fn zone_layout(project_dir: &Path, source: &str) -> Option<Zone> {
    let mut at = project_dir.join(source);
    let mut levels: Vec<String> = Vec::new();
    loop {
        let mut entries: Vec<std::path::PathBuf> = std::fs::read_dir(&at)
            .ok()?
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| {
                !p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(['.', '_']))
            })
            .collect();
        entries.sort();
        // Dated directories first (`key=…` or digits), then any directory: a stray file or
        // directory beside the partitions does not hide them.
        let dated = |p: &&std::path::PathBuf| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.contains('=') || n.bytes().all(|b| b.is_ascii_digit())
        };
        let dirs: Vec<&std::path::PathBuf> = entries.iter().filter(|p| p.is_dir()).collect();
        let next = dirs
            .iter()
            .find(|p| dated(p))
            .or_else(|| dirs.first())
            .copied()
            .or_else(|| entries.first())?
            .clone();
        if next.is_dir() {
            levels.push(next.file_name()?.to_string_lossy().into_owned());
            at = next;
            continue;
        }
        let name = next.file_name()?.to_string_lossy().to_lowercase();
        let format = ["parquet", "csv", "json"].into_iter().find(|f| {
            name.contains(&format!(".{f}")) || (*f == "json" && name.contains(".ndjson"))
        })?;
        let arrival = arrival_of(&levels)?;
        let levels = match levels.len() {
            1 => Vec::new(),
            n => match levels[0].contains('=') {
                true => levels
                    .iter()
                    .filter_map(|l| Some(l.split_once('=')?.0.to_string()))
                    .collect(),
                false => ["year", "month", "day", "hour"][..n]
                    .iter()
                    .map(|n| n.to_string())
                    .collect(),
            },
        };
        return Some(Zone {
            arrival,
            format,
            levels,
        });
    }
}

/// The arrival declaration of a zone whose first file lies below directories `levels`.
fn arrival_of(levels: &[String]) -> Option<String> {
    let digits = |v: &str, n: usize| v.len() == n && v.bytes().all(|b| b.is_ascii_digit());
    if let Some((key, value)) = levels.first()?.split_once('=')
        && value
            .get(..10)
            .is_some_and(|v| v.parse::<jiff::civil::Date>().is_ok())
    {
        return Some(format!("arrival = \"{key}\""));
    }
    let widths = [4, 2, 2, 2];
    if !(3..=4).contains(&levels.len()) {
        return None;
    }
    let named: Option<Vec<&str>> = levels
        .iter()
        .zip(widths)
        .map(|(l, w)| {
            let (k, v) = l.split_once('=')?;
            digits(v, w).then_some(k)
        })
        .collect();
    let quoted = |names: &[&str]| {
        let q: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
        format!("[{}]", q.join(", "))
    };
    if let Some(keys) = named {
        return Some(format!("arrival = {}", quoted(&keys)));
    }
    let unnamed = levels.iter().zip(widths).all(|(l, w)| digits(l, w));
    if !unnamed {
        return None;
    }
    let names = &["year", "month", "day", "hour"][..levels.len()];
    let columns: Vec<String> = names.iter().map(|n| format!("\"{n} INT\"")).collect();
    Some(format!(
        "partitioning = \"directories\"   # YYYY/MM/DD levels without names\npartition_columns = [{}]\narrival = {}",
        columns.join(", "),
        quoted(names)
    ))
}

/// The task file text for `t` over a landing zone: its arrival days declared, the task
/// filtering only on its event time.
fn zone_template(t: &NewTask<'_>, zone: &Zone) -> String {
    let alias = source_alias(t.source);
    let (window_column, expr, kind) = if t.grain == "hour" {
        (
            "window_hour",
            format!("date_trunc('hour', {})", t.column),
            "TIMESTAMP",
        )
    } else {
        ("day", format!("CAST({} AS DATE)", t.column), "DATE")
    };
    format!(
        r#"# Task `{name}`: publishes table `{name}`, one {grain} window per commit, from the landing
# zone `{source}`. Every key: docs/src/reference/task-file.md in the idemlake repository.
sql = """
SELECT {expr} AS {window_column}, *{exclude}
FROM {alias}
WHERE {column} >= $window_start_ts AND {column} < $window_end_ts
"""

[target]
partition_by = "{window_column}"   # the window column of the output ({kind})

[window]
grain = "{grain}"
# timezone = "UTC"

[sources.{alias}]
uri = "{source}"
format = "{format}"
{arrival}           # the directories' arrival: a window reads only the days it reaches
# arrival_timezone = "UTC"
lateness = "1 day"            # how late an event may land after its window
event_time = "{column}"          # rows later than that are counted (late_rows)
# on_late = "warn"            # or "fail"
"#,
        name = t.name,
        grain = t.grain,
        column = t.column,
        format = zone.format,
        arrival = zone.arrival,
        exclude = match zone.levels.is_empty() {
            true => String::new(),
            false => format!(" EXCLUDE ({})", zone.levels.join(", ")),
        },
        source = t.source.replace('\\', "\\\\").replace('"', "\\\""),
    )
}

/// The task file text for `t`.
fn template(t: &NewTask<'_>) -> String {
    let alias = source_alias(t.source);
    let (select, partition_by, kind) = if t.grain == "hour" {
        (
            format!("date_trunc('hour', {}) AS window_hour, *", t.column),
            "window_hour".to_string(),
            "TIMESTAMP",
        )
    } else {
        ("*".to_string(), t.column.to_string(), "DATE")
    };
    format!(
        r#"# Task `{name}`: publishes table `{name}`, one {grain} window per commit.
# Every key, its type and default: docs/src/reference/task-file.md in the idemlake repository.
sql = """
SELECT {select}
FROM {alias}
WHERE {column} >= $window_start AND {column} < $window_end
"""

[target]
partition_by = "{partition_by}"   # the window column of the output ({kind})

[window]
grain = "{grain}"
# timezone = "UTC"
# lookback = 0

[sources.{alias}]
uri = "{source}"

# [write]
# mode = "overwrite"        # or "merge" with key = [...]
"#,
        name = t.name,
        grain = t.grain,
        column = t.column,
        source = t.source.replace('\\', "\\\\").replace('"', "\\\""),
    )
}

/// A SQL alias for a source location: its file stem as an identifier, else `src`.
fn source_alias(source: &str) -> String {
    let last = source
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    let stem = last.split('.').next().unwrap_or_default();
    let alias: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if is_identifier(&alias) {
        alias
    } else {
        "src".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zones_arrival_comes_from_its_dated_levels() {
        let levels = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            arrival_of(&levels(&["dt=2026-11-28"])).as_deref(),
            Some("arrival = \"dt\"")
        );
        assert_eq!(
            arrival_of(&levels(&["year=2026", "month=11", "day=28"])).as_deref(),
            Some("arrival = [\"year\", \"month\", \"day\"]")
        );
        let tree = arrival_of(&levels(&["2026", "11", "28", "07"])).unwrap();
        assert!(tree.contains("partitioning = \"directories\""), "{tree}");
        assert!(
            tree.contains(
                "partition_columns = [\"year INT\", \"month INT\", \"day INT\", \"hour INT\"]"
            ),
            "{tree}"
        );
        assert!(
            tree.ends_with("arrival = [\"year\", \"month\", \"day\", \"hour\"]"),
            "{tree}"
        );
        assert_eq!(arrival_of(&levels(&["2026", "11"])), None);
        assert_eq!(arrival_of(&levels(&["region=eu"])), None);
        assert_eq!(arrival_of(&levels(&["2026", "nov", "28"])), None);
    }

    #[test]
    fn aliases_come_from_the_file_stem() {
        assert_eq!(source_alias("data/example.csv"), "example");
        assert_eq!(source_alias("s3://raw/Events-2026/"), "events_2026");
        assert_eq!(source_alias("data/*/part-*.parquet"), "part__");
        assert_eq!(source_alias("data/1.csv"), "src");
    }
}
