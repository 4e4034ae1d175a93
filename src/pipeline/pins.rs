//! What a window read of each landing zone (see `landing`), taken before it reads, recorded in
//! its run record and checked again right before its commit.

use std::sync::Arc;

use datafusion::datasource::listing::PartitionedFile;
use datafusion::logical_expr::Expr;

use crate::error::{Error, Result};
use crate::pipeline::landing::{self, LandingZone, Listing};
use crate::pipeline::runner::Runner;
use crate::report::record::SourceVersion;
use crate::task::window::Window;

/// Files a window reaches in one landing zone.
pub struct Pin {
    zone: Arc<LandingZone>,
    /// The filters of each scan of the zone in the window's plan.
    scans: Vec<Vec<Expr>>,
    files: Vec<PartitionedFile>,
    /// Why the window has not landed (`None`: it has): a directory its filters reach must
    /// exist, and with arrival days declared, one of its own days' (see `Runner::landed`).
    landed: Option<String>,
    /// The files' identities when the window pinned them (see `storage::identity`).
    ids: Vec<crate::storage::identity::FileId>,
}

/// The deepest directories a window's filters reach that exist: whether there is any, and
/// their partition values.
struct Reached {
    any: bool,
    dirs: Vec<Vec<datafusion::common::ScalarValue>>,
}

/// The union of the files each scan's filters select (a scan without partition filters
/// reaches every file), and whether any directory they reach exists.
async fn reach(
    zone: &LandingZone,
    scans: &[Vec<Expr>],
    how: Listing,
) -> Result<(Vec<PartitionedFile>, Reached)> {
    let mut out: Vec<PartitionedFile> = Vec::new();
    let mut landed = Reached {
        any: scans.is_empty(),
        dirs: Vec::new(),
    };
    for filters in scans {
        let (files, dirs) = zone.reached(filters, how).await?;
        landed.any |= !dirs.is_empty();
        landed.dirs.extend(dirs);
        for f in files {
            if !out
                .iter()
                .any(|o| o.object_meta.location == f.object_meta.location)
            {
                out.push(f);
            }
        }
    }
    out.sort_by(|a, b| a.object_meta.location.cmp(&b.object_meta.location));
    Ok((out, landed))
}

impl Runner {
    /// Each window's files, listed as `run` lists them, for commands that read windows
    /// another way (`audit`): a landing-zone file off the zone's layout is an error there too.
    pub async fn reach(&self, windows: &[Window]) -> Result<()> {
        for w in windows {
            self.pin_window(w).await?;
        }
        Ok(())
    }

    /// The window's pins: its plan (the task's SQL bound to the window and optimised in the
    /// runner's session) gives the filters on each zone, and those select its files from the
    /// run's pinned listings (afresh on the plain twin, whose reads list for themselves).
    pub(super) async fn pin_window(&self, window: &Window) -> Result<Vec<Pin>> {
        if self.zones.is_empty() {
            return Ok(Vec::new());
        }
        let planned =
            crate::task::plan::plan_query_window(self.session(), self.task(), window).await?;
        let plan = planned.df.into_optimized_plan()?;
        let how = if crate::accel::session::accelerated() {
            Listing::Pinned
        } else {
            Listing::Fresh
        };
        let bounded = self
            .window_columns
            .get_or_try_init(|| window_bounded_columns(self.session(), self.task()))
            .await?;
        let mut pins = Vec::new();
        for zone in &self.zones {
            let scans = landing::scan_filters(&plan, &zone.alias);
            let (files, landed_all) = reach(zone, &scans, how).await?;
            // Landed: a directory exists among those the window's own bounds reach (other
            // filters, `city = 'Paris'`, say nothing of what has landed).
            let by_window: Vec<Vec<Expr>> = scans
                .iter()
                .map(|filters| {
                    filters
                        .iter()
                        .filter(|f| {
                            let cols = f.column_refs();
                            !cols.is_empty() && cols.iter().all(|c| bounded.contains(&c.name))
                        })
                        .cloned()
                        .collect()
                })
                .collect();
            // Most tasks filter a zone by the window alone: the same reach, not listed again.
            let reached = match by_window == scans {
                true => landed_all,
                false => reach(zone, &by_window, how).await?.1,
            };
            let landed = self.not_landed(zone, window, &scans, &reached)?;
            tracing::debug!(
                window = %window.label(),
                source = %zone.alias,
                files = files.len(),
                "files the window reaches"
            );
            let ids = landing::identities(&files);
            pins.push(Pin {
                zone: zone.clone(),
                scans,
                files,
                landed,
                ids,
            });
        }
        Ok(pins)
    }

    /// Why `window` has not landed in `zone` (`None`: it has), given what its filters reached.
    /// With arrival days declared, one of the window's own days must have landed: its
    /// lateness also reaches later days, whose late files alone are not the window (a day
    /// whose directory a retention policy removed would be re-published from them).
    fn not_landed(
        &self,
        zone: &LandingZone,
        window: &Window,
        scans: &[Vec<Expr>],
        reached: &Reached,
    ) -> Result<Option<String>> {
        let arrival = self
            .task()
            .sources
            .iter()
            .find(|s| s.alias == zone.alias)
            .and_then(|s| s.arrival.as_ref());
        Ok(match (reached.any, arrival) {
            (false, _) => Some("no directory its filters reach exists".to_string()),
            // A zone no scan of the window reads (only `[checks]` SQL, say) has no reach.
            (true, Some(a)) if !scans.is_empty() => {
                landing::late::own_days_absent(a, zone, window, &reached.dirs)?.map(|own| {
                    let unit = if a.hourly() { "hours" } else { "days" };
                    format!("no directory of its own arrival {unit} ({own}) exists; the later {unit} its lateness reaches hold only late events")
                })
            }
            (true, _) => None,
        })
    }

    /// Not landed is not empty: a window none of whose directories in a landing zone exist
    /// yet (run before its files landed, or after a retention policy removed them) fails,
    /// retryable, unless the source says such a window is empty (`on_missing = "empty"`). A
    /// directory that exists, even empty, is a window with no rows (`[write].on_empty`).
    pub(super) fn landed(&self, window: &Window, pins: &[Pin]) -> Result<()> {
        for p in pins {
            let Some(why) = &p.landed else {
                continue;
            };
            let source = self.task().sources.iter().find(|s| s.alias == p.zone.alias);
            if source.is_some_and(|s| s.on_missing == crate::task::OnMissing::Empty) {
                continue;
            }
            return Err(Error::runtime(format!(
                "source `{}`: nothing has landed for window {} yet under {} — {why}; nothing was published. Re-run once the files land, or set `on_missing = \"empty\"` in [sources.{}] if such a window is empty",
                p.zone.alias,
                window.label(),
                p.zone.root(),
                p.zone.alias
            )));
        }
        Ok(())
    }

    /// The window's own record of its sources: landing zones by the files it read.
    pub(super) fn window_sources(&self, pins: &[Pin]) -> Vec<SourceVersion> {
        self.source_versions()
            .iter()
            .map(|v| match pins.iter().find(|p| p.zone.alias == v.alias) {
                None => v.clone(),
                Some(p) => {
                    let (fingerprint, read) = landing::describe(&p.ids);
                    SourceVersion {
                        files: Some(p.files.len()),
                        fingerprint: Some(fingerprint),
                        read,
                        ..v.clone()
                    }
                }
            })
            .collect()
    }

    /// Right before the commit: each zone's files in the window's reach, listed afresh, must be
    /// the ones pinned (files elsewhere in the zone do not matter).
    pub(super) async fn check_pins(&self, pins: &[Pin]) -> Result<()> {
        for p in pins {
            let (now, _) = reach(&p.zone, &p.scans, Listing::Fresh).await?;
            let now = landing::identities(&now);
            let changed = landing::differences(&p.ids, &now);
            if changed.is_empty() {
                continue;
            }
            let shown: Vec<&str> = changed.iter().take(5).map(String::as_str).collect();
            return Err(Error::runtime(format!(
                "source `{}` changed inside this window's reach while it ran ({} file(s): {}{}); nothing was published — re-run the window",
                p.zone.alias,
                changed.len(),
                shown.join(", "),
                if changed.len() > 5 { ", …" } else { "" }
            )));
        }
        Ok(())
    }

    /// The source files this window reaches whose memory maps lost a page under a read (the
    /// file was truncated; see `accel::mapped`): a landing zone's pinned files, every file
    /// under another local source's location. Faults in files of other windows or other
    /// tasks do not count.
    pub(super) fn faulted_reads(&self, pins: &[Pin]) -> Result<Vec<String>> {
        let mut locations = Vec::new();
        for s in &self.task().sources {
            if pins.iter().any(|p| p.zone.alias == s.alias) {
                continue;
            }
            let url = crate::pipeline::sources::listing_url(&s.uri)?;
            if url.scheme() == "file" {
                locations.push(url);
            }
        }
        Ok(crate::accel::mapped::faulted(|at| {
            let pinned = pins
                .iter()
                .flat_map(|p| &p.files)
                .map(|f| &f.object_meta.location);
            reaches(at, pinned, &locations)
        }))
    }

    /// The inputs must still be the ones the run started with (file sources are not
    /// versioned: a file rewritten while the window ran may have been read half old, half
    /// new). Checked after the checks, right before the commit.
    pub(super) async fn check_inputs(
        &self,
        w: &crate::pipeline::stages::StagedWindow,
        pins: &[Pin],
    ) -> Result<()> {
        crate::fault::pause("before-inputs-check").await;
        let unchanged = self.inputs_unchanged(pins).await;
        if unchanged.is_err() {
            crate::pipeline::execute::discard(&w.store, &w.staged.adds).await;
        }
        unchanged
    }

    /// Every file the window pinned is as it was, and every other source as at the start of
    /// the run (exit 1, retryable, otherwise).
    pub(super) async fn inputs_unchanged(&self, pins: &[Pin]) -> Result<()> {
        self.check_pins(pins).await?;
        let task = self.task();
        let mut changed = crate::pipeline::sources::changed_since(
            self.checker().session(),
            &task.sources,
            self.source_versions(),
        )
        .await?;
        if changed.is_empty() {
            let faulted = self.faulted_reads(pins)?;
            if !faulted.is_empty() {
                changed.push(format!(
                    "(memory-mapped file(s) truncated under the read: {})",
                    faulted.join(", ")
                ));
            }
        }
        if changed.is_empty() {
            return Ok(());
        }
        Err(Error::runtime(format!(
            "source(s) {} changed while the window ran (files, sizes or modification times differ from the start of the run); nothing was published — re-run once the sources are stable",
            changed.join(", ")
        )))
    }
}

/// The columns the task's SQL bounds by window parameters (`dt >= $window_start`), in a
/// filter of its unbound plan.
pub(crate) async fn window_bounded_columns(
    ctx: &datafusion::prelude::SessionContext,
    task: &crate::task::Task,
) -> Result<std::collections::HashSet<String>> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::LogicalPlan;
    use datafusion::logical_expr::utils::split_conjunction;
    let df = crate::task::plan::plan_query_unbound(ctx, task).await?;
    let mut out = std::collections::HashSet::new();
    let _ = df.logical_plan().apply_with_subqueries(|p| {
        if let LogicalPlan::Filter(f) = p {
            for c in split_conjunction(&f.predicate) {
                let mut param = false;
                let _ = c.apply(|e| {
                    param |= matches!(e, Expr::Placeholder(_));
                    Ok(TreeNodeRecursion::Continue)
                });
                if param {
                    out.extend(c.column_refs().into_iter().map(|col| col.name.clone()));
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    Ok(out)
}

/// Whether the file at `at` (an object store location as recorded: already percent-encoded)
/// is one of `pinned` or lies under one of `locations`.
fn reaches<'a>(
    at: &str,
    mut pinned: impl Iterator<Item = &'a object_store::path::Path>,
    locations: &[datafusion::datasource::listing::ListingTableUrl],
) -> bool {
    // `Path::from` would encode the `%` of an escape again (`New%20York` → `New%2520York`).
    let Ok(path) = object_store::path::Path::parse(at) else {
        return false;
    };
    pinned.any(|p| *p == path) || locations.iter().any(|u| u.contains(&path, false))
}

#[cfg(test)]
mod tests {
    use object_store::path::Path;

    /// Regression (a truncated file under a `%`-escaped directory was never attributed to its
    /// window: its recorded location was encoded a second time before the comparison).
    #[test]
    fn a_fault_under_a_percent_escaped_directory_is_attributed_to_its_window() {
        // A directory named `city=New%20York` on disk (as pyarrow escapes a value).
        let file = Path::from_iter(["zone", "city=New%20York", "part-0.parquet"]);
        let at = file.to_string();
        assert!(at.contains("%2520"), "{at}");
        assert_ne!(Path::from(at.as_str()), file, "the defect: encoded twice");
        assert!(super::reaches(&at, [&file].into_iter(), &[]));
        let zone =
            datafusion::datasource::listing::ListingTableUrl::parse("file:///zone/").unwrap();
        assert!(super::reaches(&at, std::iter::empty(), &[zone]));
        let other = Path::from_iter(["zone", "city=Paris", "part-0.parquet"]);
        assert!(!super::reaches(&at, [&other].into_iter(), &[]));
    }
}
