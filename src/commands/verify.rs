//! `verify`: prove a task is idempotent for a window, and that the path which publishes it
//! agrees with its plain twin, by running it both ways and diffing.
//!
//! One run goes exactly the way `run` stages a window (`published_path`: the accelerations
//! on — shared scans over a chunk of windows, or of this one window, prepared and derived
//! plans, memory maps); one goes through the plain twin (`plain_twin`: the task's SQL planned
//! for the window on its own in the independent checker's session, sources read directly);
//! with `--twice` the published path runs again (`published_path_2`) and is compared with its
//! first run. A difference means the accelerations changed the answer, or the task is not
//! deterministic.
//!
//! Every run uses one runner, so Delta sources are pinned to one version; file sources are
//! fingerprinted before and after, and a change fails the verification instead of being
//! mistaken for non-determinism. Each run's output is staged to a private temporary directory
//! (nothing is published), then compared as multisets with DataFusion: rows are grouped with
//! their multiplicities and full-outer-joined with `IS NOT DISTINCT FROM` (NULL-aware, floats
//! compared exactly). The diff session has a memory limit and prefers sort-merge joins, so
//! outputs larger than memory spill to disk instead of failing or being held in a HashMap.
//! `--against-table` also compares the first run with the window as currently published.

use arrow::datatypes::SchemaRef;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::pipeline::runner::Runner;
use crate::task::Task;
use crate::task::project::Project;
use crate::task::range::WindowRange;
use crate::task::window::Window;

/// Memory the diff may use before spilling.
const DIFF_MEMORY: usize = 512 * 1024 * 1024;
/// Differing rows shown per side.
const SAMPLE: usize = 5;
/// The run staged exactly as `run` stages it.
const PUBLISHED: &str = "published_path";
/// The run through the plain twin.
const PLAIN: &str = "plain_twin";
/// The second run of the published path (`--twice`).
const AGAIN: &str = "published_path_2";

/// A multiset difference between two row sets.
#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    pub left: String,
    pub right: String,
    pub left_rows: u64,
    pub right_rows: u64,
    /// Rows (with multiplicity) only in the left / right side.
    pub only_left: u64,
    pub only_right: u64,
    pub sample_only_left: Vec<String>,
    pub sample_only_right: Vec<String>,
}

impl Diff {
    pub fn identical(&self) -> bool {
        self.only_left == 0 && self.only_right == 0
    }
}

/// The outcome of `verify`.
#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    pub task: String,
    pub window: crate::report::record::WindowRecord,
    /// How the published path ran: `accelerated`, or `plain` (`IDEMLAKE_ACCELERATE=0`).
    pub route: &'static str,
    pub status: &'static str,
    pub diffs: Vec<Diff>,
    pub duration_ms: u64,
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn diff_session() -> Result<SessionContext> {
    let config = SessionConfig::new()
        .set_bool("datafusion.optimizer.prefer_hash_join", false)
        .set_bool("datafusion.sql_parser.enable_ident_normalization", false);
    let rt = RuntimeEnvBuilder::new()
        .with_memory_limit(DIFF_MEMORY, 1.0)
        .build_arc()?;
    Ok(SessionContext::new_with_config_rt(config, rt))
}

/// Total `i` of the diff's one-row result. Unreadable totals are an error, never "0
/// differences".
fn total(totals: &[arrow::array::RecordBatch], i: usize) -> Result<u64> {
    let b = totals
        .iter()
        .find(|b| b.num_rows() > 0)
        .ok_or_else(|| Error::runtime("verify: the diff query returned no totals"))?;
    let a = datafusion::common::cast::as_int64_array(b.column(i))?;
    if arrow::array::Array::is_null(a, 0) {
        return Err(Error::runtime(
            "verify: the diff query returned a NULL total",
        ));
    }
    Ok(a.value(0) as u64)
}

/// The rows of `sql`, each as its values joined by ` | `.
async fn sample_rows(ctx: &SessionContext, sql: &str) -> Result<Vec<String>> {
    let batches = ctx.sql(sql).await?.collect().await?;
    let mut rows = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            let vals: Vec<String> = (0..b.num_columns())
                .map(|c| {
                    arrow::util::display::array_value_to_string(b.column(c), r).unwrap_or_default()
                })
                .collect();
            rows.push(vals.join(" | "));
        }
    }
    Ok(rows)
}

/// Compare tables `left` and `right` (same columns) registered in `ctx`, as multisets.
pub async fn diff(
    ctx: &SessionContext,
    schema: &SchemaRef,
    left: &str,
    right: &str,
) -> Result<Diff> {
    let cols: Vec<String> = schema.fields().iter().map(|f| quote(f.name())).collect();
    let list = cols.join(", ");
    let on = cols
        .iter()
        .map(|c| format!("(l.{c} IS NOT DISTINCT FROM r.{c})"))
        .collect::<Vec<_>>()
        .join(" AND ");
    let joined = format!(
        "WITH l AS (SELECT {list}, count(*) AS __idemlake_n FROM {left} GROUP BY {list}), \
              r AS (SELECT {list}, count(*) AS __idemlake_n FROM {right} GROUP BY {list}) \
         SELECT {sel}, coalesce(l.__idemlake_n, 0) AS __idemlake_nl, coalesce(r.__idemlake_n, 0) AS __idemlake_nr \
         FROM l FULL OUTER JOIN r ON {on}",
        sel = cols
            .iter()
            .map(|c| format!("coalesce(l.{c}, r.{c}) AS {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let totals = ctx
        .sql(&format!(
            "SELECT CAST(coalesce(sum(__idemlake_nl), 0) AS BIGINT) AS nl, CAST(coalesce(sum(__idemlake_nr), 0) AS BIGINT) AS nr, \
             CAST(coalesce(sum(CASE WHEN __idemlake_nl > __idemlake_nr THEN __idemlake_nl - __idemlake_nr ELSE 0 END), 0) AS BIGINT) AS ol, \
             CAST(coalesce(sum(CASE WHEN __idemlake_nr > __idemlake_nl THEN __idemlake_nr - __idemlake_nl ELSE 0 END), 0) AS BIGINT) AS orr \
             FROM ({joined})"
        ))
        .await?
        .collect()
        .await?;
    let get = |i: usize| total(&totals, i);
    let sample = |cond: &str| {
        let sql =
            format!("SELECT {list} FROM ({joined}) WHERE {cond} ORDER BY {list} LIMIT {SAMPLE}");
        async move { sample_rows(ctx, &sql).await }
    };
    let (only_left, only_right) = (get(2)?, get(3)?);
    Ok(Diff {
        left: left.to_string(),
        right: right.to_string(),
        left_rows: get(0)?,
        right_rows: get(1)?,
        only_left,
        only_right,
        sample_only_left: if only_left > 0 {
            sample("__idemlake_nl > __idemlake_nr").await?
        } else {
            Vec::new()
        },
        sample_only_right: if only_right > 0 {
            sample("__idemlake_nr > __idemlake_nl").await?
        } else {
            Vec::new()
        },
    })
}

/// What `verify` compares besides the published path with its plain twin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Also the published path's output with the window as the table holds it now.
    pub against_table: bool,
    /// Also a second run of the published path with the first.
    pub twice: bool,
}

/// Run the window by the published path and by its plain twin (and optionally again, and
/// against the table) and diff.
pub async fn verify(
    project: &Project,
    task: &Task,
    window: &Window,
    options: Options,
) -> Result<Verification> {
    let runner = verify_runner(project, task, options.against_table).await?;
    verify_with(&runner, window, options).await
}

/// The runner of a verification: on the task's engine, or in this process when it also
/// reads the published table (delta-rs, which a cluster cannot plan).
async fn verify_runner(project: &Project, task: &Task, against_table: bool) -> Result<Runner> {
    if against_table {
        Runner::new_local(project, task).await
    } else {
        Runner::new(project, task).await
    }
}

/// Verify every window of `[from, to]` (inclusive) with one shared runner (sources registered
/// once), in order; stops at the first error, not at the first difference.
pub async fn verify_range(
    project: &Project,
    task: &Task,
    from: &Window,
    to: &Window,
    options: Options,
    mut each: impl FnMut(&Verification),
) -> Result<Vec<Verification>> {
    let runner = verify_runner(project, task, options.against_table).await?;
    let windows = Window::range(from, to)?;
    // The published path reads shared sources a chunk of windows at a time, as a backfill.
    runner.share_scans_only(&windows);
    let mut out = Vec::new();
    for w in windows {
        let v = verify_with(&runner, &w, options).await?;
        each(&v);
        out.push(v);
    }
    Ok(out)
}

/// Verify one window with an existing runner.
pub async fn verify_with(
    runner: &Runner,
    window: &Window,
    options: Options,
) -> Result<Verification> {
    let task = runner.task();
    let started = std::time::Instant::now();
    let (dir_a, _) = runner.stage_to_temp(window).await?;
    let (dir_b, _, planned) = runner.stage_plain_to_temp(window).await?;
    let dir_c = match options.twice {
        true => Some(runner.stage_to_temp(window).await?.0),
        false => None,
    };
    let now = crate::pipeline::sources::current_versions(runner.session(), &task.sources).await?;
    let files_changed: Vec<&str> = runner
        .source_versions()
        .iter()
        .zip(&now)
        .filter(|(a, b)| {
            a.format != crate::task::Format::Delta && a.fingerprint.is_some() && a != b
        })
        .map(|(a, _)| a.alias.as_str())
        .collect();
    if !files_changed.is_empty() {
        return Err(Error::runtime(format!(
            "source(s) {} changed while verifying; the two runs did not read the same inputs, run verify again",
            files_changed.join(", ")
        )));
    }

    let ctx = diff_session()?;
    let schema = planned.schema.clone();
    let (a, b, c) = (PUBLISHED, PLAIN, AGAIN);
    for (name, dir) in [(a, Some(&dir_a)), (b, Some(&dir_b)), (c, dir_c.as_ref())] {
        let Some(dir) = dir else { continue };
        ctx.register_parquet(
            name,
            dir.path().to_string_lossy().as_ref(),
            ParquetReadOptions::default().schema(&schema),
        )
        .await?;
    }
    let mut diffs = vec![diff(&ctx, &schema, a, b).await?];
    if dir_c.is_some() {
        diffs.push(diff(&ctx, &schema, a, c).await?);
    }

    if options.against_table {
        let table = runner.table().await?;
        if table.version().is_none() {
            return Err(Error::runtime(
                "--against-table: the task's table does not exist yet",
            ));
        }
        table.update_datafusion_session(&ctx.state())?;
        let provider = table.table_provider().await?;
        ctx.register_table("published_all", provider)?;
        let df = ctx
            .table("published_all")
            .await?
            .filter(
                WindowRange::of(task, window).filter(datafusion::prelude::col(
                    datafusion::common::Column::from_name(&task.partition_by),
                )),
            )?;
        ctx.register_table("published", df.into_view())?;
        diffs.push(diff(&ctx, &schema, a, "published").await?);
    }
    let identical = diffs.iter().all(Diff::identical);
    Ok(Verification {
        task: task.name.clone(),
        window: window.into(),
        route: runner.route(),
        status: if identical { "identical" } else { "differs" },
        diffs,
        duration_ms: started.elapsed().as_millis() as u64,
    })
}

/// Human-readable verification.
pub fn describe(v: &Verification) -> String {
    let mut s = format!(
        "{:<9} {} {}  {:.2}s  (published path: {})",
        v.status,
        v.task,
        v.window.label,
        v.duration_ms as f64 / 1000.0,
        v.route
    );
    for d in &v.diffs {
        s.push_str(&format!(
            "\n  {} vs {}: {} vs {} rows; only in {}: {}, only in {}: {}",
            d.left, d.right, d.left_rows, d.right_rows, d.left, d.only_left, d.right, d.only_right
        ));
        for r in &d.sample_only_left {
            s.push_str(&format!("\n    only in {}: {r}", d.left));
        }
        for r in &d.sample_only_right {
            s.push_str(&format!("\n    only in {}: {r}", d.right));
        }
    }
    s
}
