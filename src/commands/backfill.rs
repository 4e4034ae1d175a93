//! Backfill: re-run a range of windows, each atomic and independent, optionally in parallel.
//!
//! One [`Runner`] serves the whole range: one DataFusion session, sources registered (and Delta
//! sources pinned) once, the table state shared. Windows run as concurrent tasks, at most
//! `parallel` at a time; commits of different windows rebase on each other. A failed window
//! does not stop the others. `--missing` selects windows with no successful idemlake run in the
//! log that hold no rows another tool published (so re-running the same command after a crash
//! finishes the job), `--stale` also those `status` marks stale.

use std::io::IsTerminal;
use std::sync::Arc;

use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::pipeline::runner::Runner;
use crate::report::record::{Report, Status};
use crate::task::Task;
use crate::task::project::Project;
use crate::task::window::Window;

/// Which windows of the range to run, and how many at once.
#[derive(Debug, Clone)]
pub struct Options {
    pub parallel: usize,
    pub missing: bool,
    pub stale: bool,
    /// This worker's share of the range (`--shard I/N`); `None`: the whole range.
    pub shard: Option<Shard>,
    /// Show a progress bar (only when stdout is a terminal).
    pub progress: bool,
}

/// `--shard I/N`: worker `I` (counted from 0, as Kubernetes' `JOB_COMPLETION_INDEX` and
/// Airflow's `map_index` are) of `N` workers sharing one range.
///
/// The range's windows are cut into `N` contiguous blocks whose sizes differ by at most one
/// (worker `I` takes windows `⌊I·M/N⌋ .. ⌊(I+1)·M/N⌋` of the `M`): contiguous so that each
/// worker's shared scans still read its sources once per chunk, deterministic so that a
/// retried worker takes the same windows. The cut is made on the whole range, before
/// `--missing`/`--stale` choose among the worker's windows: which worker owns a window never
/// depends on what is already published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Shard, String> {
        let bad = || format!("`{s}` is not a shard: write I/N, worker I (from 0) of N, e.g. 0/4");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 {
            return Err(format!(
                "shard `{s}`: the number of workers N must be at least 1"
            ));
        }
        if index >= count {
            return Err(format!(
                "shard `{s}`: workers are counted from 0, so I must be below N (0..={})",
                count - 1
            ));
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// This worker's block of `all` (the range's windows in order).
    pub fn take<T>(&self, all: Vec<T>) -> Vec<T> {
        let m = all.len() as u64;
        let (i, n) = (u64::from(self.index), u64::from(self.count));
        let (lo, hi) = ((i * m / n) as usize, ((i + 1) * m / n) as usize);
        all.into_iter().skip(lo).take(hi - lo).collect()
    }
}

/// Select the windows of `[from, to]` to run.
pub async fn select(
    project: &Project,
    runner: &Runner,
    from: &Window,
    to: &Window,
    opts: &Options,
) -> Result<Vec<Window>> {
    let mut all = Window::range(from, to)?;
    if let Some(shard) = opts.shard {
        all = shard.take(all);
    }
    if !opts.missing && !opts.stale {
        return Ok(all);
    }
    let (Some(first), Some(last)) = (all.first(), all.last()) else {
        return Ok(all);
    };
    let task = runner.task();
    let (_, status) =
        crate::commands::status::status(project, task, Some((first.clone(), last.clone()))).await?;
    Ok(all
        .into_iter()
        .zip(status)
        // A window another tool published (`published-untracked`: an adopted table's) holds
        // rows: it is not missing, and its source may be gone.
        .filter(|(_, s)| {
            (s.run_id.is_none() && s.state != "published-untracked") || (opts.stale && s.stale)
        })
        .map(|(w, _)| w)
        .collect())
}

/// Run `windows` through `runner`, calling `each` with every report as it completes.
pub async fn run(
    runner: Arc<Runner>,
    windows: Vec<Window>,
    opts: &Options,
    mut each: impl FnMut(&Report),
) -> Vec<Report> {
    let total = windows.len();
    let bar = (opts.progress && std::io::stdout().is_terminal() && total > 0).then(|| {
        let b = indicatif::ProgressBar::new(total as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} windows  {msg}  eta {eta}",
            )
            .expect("valid template"),
        );
        b
    });
    let started = std::time::Instant::now();
    let mut rows = 0u64;
    let mut reports = Vec::with_capacity(total);
    runner.share_scans(&windows);
    runner.set_parallel(opts.parallel.max(1));
    // More windows in flight than execute at once: the extra ones are staged and waiting for
    // a group commit (see `Runner::publish`), which is what amortises commits. Up to a whole
    // commit's worth: while other workers hold the table, this one keeps staging, and its next
    // commit takes everything staged meanwhile (bench/SCALE.md).
    let in_flight =
        (opts.parallel.max(1) * 16).max(crate::pipeline::target::MAX_WINDOWS_PER_COMMIT);
    let mut queue = windows.into_iter();
    let mut running = JoinSet::new();
    loop {
        while running.len() < in_flight {
            let Some(w) = queue.next() else { break };
            let r = runner.clone();
            running.spawn(async move {
                use futures::FutureExt;
                let outcome = std::panic::AssertUnwindSafe(r.run(&w)).catch_unwind().await;
                outcome.unwrap_or_else(|panic| {
                    // A panicking window must not take the others down, and is a failed
                    // window: it is reported (and counted in the exit code) like any other.
                    let what = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "unknown panic".to_string());
                    crate::report::record::Report::panicked(r.task(), &w, &what)
                })
            });
        }
        let Some(done) = running.join_next().await else {
            break;
        };
        let report = match done {
            Ok(r) => r,
            Err(e) => {
                // Only a cancelled task gets here (panics are caught above).
                tracing::error!("a window task was cancelled: {e}");
                continue;
            }
        };
        rows += report.rows_written;
        if let Some(b) = &bar {
            b.inc(1);
            let secs = started.elapsed().as_secs_f64().max(1e-3);
            b.set_message(format!("{:.0} rows/s", rows as f64 / secs));
            b.suspend(|| each(&report));
        } else {
            each(&report);
        }
        reports.push(report);
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    reports.sort_by(|a, b| a.window.start.cmp(&b.window.start));
    reports
}

/// The summary line and exit code of a backfill.
pub fn summarize(task: &Task, shard: Option<Shard>, reports: &[Report]) -> (String, u8) {
    let count = |s: Status| {
        reports
            .iter()
            .filter(|r| r.status == s && r.exit_code.is_none())
            .count()
    };
    let failed: Vec<&Report> = reports.iter().filter(|r| r.exit_code.is_some()).collect();
    let scope = shard.map(|s| format!(" (shard {s})")).unwrap_or_default();
    let mut line = format!(
        "backfill {}{scope}: {} windows, {} ok, {} skipped, {} published with a reconciliation warning, {} failed",
        task.name,
        reports.len(),
        count(Status::Ok),
        count(Status::Skipped),
        count(Status::Mismatch),
        failed.len()
    );
    let warned = count(Status::Warned);
    if warned > 0 {
        line.push_str(&format!(", {warned} published with data-check warnings"));
    }
    for r in &failed {
        line.push_str(&format!(
            "\n  failed {}: {}",
            r.window.label,
            r.error.as_deref().unwrap_or("unknown error")
        ));
    }
    let code = failed.iter().filter_map(|r| r.exit_code).max().unwrap_or(0);
    (line, code)
}

/// Parse the range bounds of a task.
pub fn range(task: &Task, from: &str, to: &str) -> Result<(Window, Window)> {
    let a = Window::parse(from, task.grain, &task.timezone)?;
    let b = Window::parse(to, task.grain, &task.timezone)?;
    if b.start() < a.start() {
        return Err(Error::input(format!("--to {to} is before --from {from}")));
    }
    Ok((a, b))
}

/// The tasks reading `root` (through `task = "…"` sources), directly or further down, in
/// dependency order: every task after all the tasks it reads.
pub fn downstream_of(project: &Project, root: &Task) -> Result<Vec<Task>> {
    let mut tasks = Vec::new();
    for name in project.task_names()? {
        // A task that does not load is not anyone's downstream here (validate reports it).
        if let Ok(t) = project.task(&name) {
            tasks.push(t);
        }
    }
    let reads = |t: &Task, up: &str| t.sources.iter().any(|s| s.upstream.as_deref() == Some(up));
    // Reachable from root.
    let mut reached: Vec<String> = vec![root.name.clone()];
    let mut i = 0;
    while i < reached.len() {
        let up = reached[i].clone();
        for t in &tasks {
            if reads(t, &up) && !reached.contains(&t.name) {
                reached.push(t.name.clone());
            }
        }
        i += 1;
    }
    // Dependency order among the reached tasks (the chain has no cycles: loading refuses them).
    let mut order: Vec<Task> = Vec::new();
    let mut left: Vec<&Task> = tasks
        .iter()
        .filter(|t| t.name != root.name && reached.contains(&t.name))
        .collect();
    while !left.is_empty() {
        let ready = left.iter().position(|t| {
            t.sources.iter().all(|s| match &s.upstream {
                Some(up) => {
                    up == &root.name || !reached.contains(up) || order.iter().any(|o| &o.name == up)
                }
                None => true,
            })
        });
        let Some(k) = ready else {
            return Err(Error::input("the task dependencies form a cycle"));
        };
        order.push(left.remove(k).clone());
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_shard_is_written_i_slash_n_counted_from_zero() {
        assert_eq!("0/4".parse(), Ok(Shard { index: 0, count: 4 }));
        assert_eq!(" 3 / 4 ".parse(), Ok(Shard { index: 3, count: 4 }));
        assert_eq!("0/1".parse(), Ok(Shard { index: 0, count: 1 }));
        for (bad, says) in [
            ("4/4", "counted from 0"),
            ("1/0", "at least 1"),
            ("2", "not a shard"),
            ("a/4", "not a shard"),
            ("-1/4", "not a shard"),
            ("1/4/2", "not a shard"),
            ("", "not a shard"),
        ] {
            let err = bad.parse::<Shard>().unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
        assert_eq!(Shard { index: 2, count: 8 }.to_string(), "2/8");
    }

    proptest! {
        /// The shards of a range are contiguous blocks in order, together every window exactly
        /// once, their sizes differing by at most one.
        #[test]
        fn shards_cover_the_range_once_in_balanced_contiguous_blocks(m in 0usize..400, n in 1u32..40) {
            let all: Vec<usize> = (0..m).collect();
            let blocks: Vec<Vec<usize>> = (0..n)
                .map(|index| Shard { index, count: n }.take(all.clone()))
                .collect();
            let joined: Vec<usize> = blocks.iter().flatten().copied().collect();
            prop_assert_eq!(&joined, &all);
            let sizes: Vec<usize> = blocks.iter().map(Vec::len).collect();
            let (lo, hi) = (*sizes.iter().min().unwrap(), *sizes.iter().max().unwrap());
            prop_assert!(hi - lo <= 1, "sizes {:?}", sizes);
        }
    }
}
