//! Independent checks: the source side of every window's reconciliation, computed by a route
//! that none of the accelerations touch.
//!
//! The task query runs through shared chunk scans sliced per window, prepared plans, physical
//! plans derived by literal substitution and memory-mapped sources. A check that read the
//! source the same way would share their bugs: a slice missing a row would be missing on both
//! sides and reconciliation would agree. So the [`Checker`] has its own DataFusion session,
//! built here (`session`, nothing of `accel`): the sources registered as plain listing tables
//! read through object_store's plain local store or an S3 client of the checker's own (no
//! Delta log cache; Delta sources pinned at the versions the runner pinned), no scan cache, no
//! prepared or derived plan — every window's check query is planned from the task's SQL text
//! with that window's parameters bound. DataFusion's partition and row-group pruning stay on;
//! what the session leaves off is listed once, in `session::Profile::Checks`.
//!
//! What is checked per window:
//! - with `[reconcile]` `source`/`output`: its `source` query, here, against its `output`
//!   query over the rows written;
//! - the default check, on every task whatever its shape (unless its `[reconcile]` queries
//!   replace it, or it opts out with `independent = false`): the number of rows the task's own
//!   query gives here (`source_rows`) against the rows staged, and with
//!   `[reconcile] default = "content"` also an order-independent fingerprint of every row
//!   (`source_content`, see `content`) against the staged files read back.
//!
//! A backfill announces its windows ([`Checker::announce`]); their checks are then computed a
//! batch of windows at a time by one grouped query each (see `grouped`) where the check query
//! has the everyday shape, so the source is read once per batch rather than once per window.
//! `IDEMLAKE_CHECK_BATCH=1` (or `IDEMLAKE_ACCELERATE=0`) checks window by window.
//!
//! Invariant: nothing here depends on `scan`, `prepared`, `reuse`, `mapped` or `filemap`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use datafusion::prelude::SessionContext;
use tokio::sync::OnceCell;

use crate::error::Result;
use crate::pipeline::sources::{self, SourceVersion};
use crate::report::record::Computed;
use crate::task::window::Window;
use crate::task::{DefaultCheck, Task};

pub mod content;
pub mod data;
pub mod grouped;
pub mod in_database;
pub mod read;
pub mod staged;

pub use content::Fingerprint;
use grouped::{Grouped, Measure, PerWindow};

/// What the source says a window's output must reconcile to, computed in this run.
#[derive(Debug, Clone, Default)]
pub struct SourceSide {
    /// The `[reconcile].source` query's rows (with `[reconcile]` `source`/`output`), and how
    /// they were computed.
    pub reconcile: Option<(Vec<RecordBatch>, Computed)>,
    /// The default check's measure of the task's query (unless the task has none), and how it
    /// was computed.
    pub default: Option<(Measured, Computed)>,
}

/// The default check's measure of a window's rows.
#[derive(Debug, Clone)]
pub enum Measured {
    Rows(u64),
    Content(Fingerprint),
}

/// The route every check's source side is computed by (see the module documentation).
const ROUTE: &str = "independent";

impl SourceSide {
    fn add(&mut self, (part, computed): (PerWindow, Computed)) {
        match part {
            PerWindow::Query(b) => self.reconcile = Some((vec![b], computed)),
            PerWindow::Batches(b) => self.reconcile = Some((b, computed)),
            PerWindow::Rows(n) => self.default = Some((Measured::Rows(n), computed)),
            PerWindow::Content(f) => self.default = Some((Measured::Content(f), computed)),
        }
    }
}

/// The two kinds of check computed on the independent path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    /// `[reconcile].source`.
    Reconcile = 0,
    /// The default check over the task's own query.
    Default = 1,
}

/// How one lane of a task's checks is computed for a batch of windows.
enum Template {
    /// One grouped query per batch (see `grouped`).
    Grouped(Box<Grouped>),
    /// Nothing to compute: the task has no check of this lane.
    Unchecked,
    /// Window by window.
    PerWindow,
}

/// Source sides by window key, taken out as their windows ask for them.
type Sides = Mutex<HashMap<(i64, i64), (PerWindow, Computed)>>;

/// Windows announced together, whose source sides come from one grouped query per lane.
struct Batch {
    windows: Vec<Window>,
    /// Per lane; `None` when the batch could not be grouped (its windows are then checked
    /// one by one).
    sides: [OnceCell<Option<Sides>>; 2],
}

/// The independent check path of one runner.
pub struct Checker {
    ctx: SessionContext,
    /// On S3, a client of the checks' own rooted at the target table, to read staged files
    /// back (`source_content`); `None`: a local table (read through the staging store).
    table_store: Option<Arc<dyn object_store::ObjectStore>>,
    /// Windows per grouped query; 1: window by window (the plain twin).
    batch_size: usize,
    templates: [OnceCell<Template>; 2],
    batches: Mutex<HashMap<(i64, i64), Arc<Batch>>>,
}

fn lanes(task: &Task) -> Vec<Lane> {
    let mut out = Vec::new();
    if task.reconcile.is_some() {
        out.push(Lane::Reconcile);
    }
    if task.checking.default.is_some() {
        out.push(Lane::Default);
    }
    out
}

impl Checker {
    /// A session of its own with the task's sources registered plainly (Delta sources at
    /// `pins`, the versions the runner read); staged files of the table at `table` are read
    /// back through a client of its own too.
    /// On a remote `engine` the checks' source side runs on the cluster too (the window may
    /// not fit this machine), window by window; except when the task reads a Delta source:
    /// the cluster reads it as a file list idemlake resolved, so the check reads it through
    /// delta-rs here, a route that resolution does not touch. Landing zones the runner
    /// `opened` (their partition columns and file schema) are not opened again.
    pub async fn new(
        task: &Task,
        (pins, opened): (
            &[SourceVersion],
            &[Arc<crate::pipeline::landing::LandingZone>],
        ),
        engine: &crate::engine::Engine,
        table: &url::Url,
    ) -> Result<Checker> {
        let reads_delta = task
            .sources
            .iter()
            .any(|s| s.format == crate::task::Format::Delta);
        let local = crate::engine::Engine::Local;
        let engine = if reads_delta && !engine.is_local() {
            tracing::info!(
                "the checks of this task read its Delta sources with delta-rs in this process, independently of the cluster's file lists"
            );
            &local
        } else {
            engine
        };
        let ctx = match engine {
            crate::engine::Engine::Local => crate::session::build(crate::session::Profile::Checks)?,
            remote => {
                crate::engine::session(remote, crate::session::Profile::Checks, false).await?
            }
        };
        let zones = sources::register_pinned(&ctx, &task.sources, pins, engine, opened).await?;
        if engine.is_local() {
            register_zones(&ctx, task, &zones)?;
        }
        let config = crate::config::get();
        let batch_size = if config.accelerate && engine.is_local() {
            config.check_batch.max(1) as usize
        } else {
            1
        };
        let table_store = crate::delta::readback::own_root(table)?;
        Ok(Checker {
            ctx,
            table_store,
            batch_size,
            templates: [OnceCell::new(), OnceCell::new()],
            batches: Mutex::new(HashMap::new()),
        })
    }

    /// The session checks run in.
    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// The store to read staged files back through: on S3 the checks' own client rooted at
    /// the target table when they were staged there (overwrite), else `staging` (the store
    /// they were written with: a local table, or a merge's local temp dir).
    pub fn staged_store(
        &self,
        staging: &Arc<dyn object_store::ObjectStore>,
        in_table: bool,
    ) -> Arc<dyn object_store::ObjectStore> {
        match &self.table_store {
            Some(own) if in_table => own.clone(),
            _ => staging.clone(),
        }
    }

    /// Announce the windows about to run (ascending): their checks are computed a batch of
    /// windows at a time, by one grouped query each where the check query allows it, and the
    /// first batch starts now, beside the windows' own scans (a single window's check too).
    /// Not with the plain twin (`batch_size` 1), which checks each window when it is staged.
    pub fn announce(self: &Arc<Self>, task: &Task, windows: &[Window]) {
        if self.batch_size < 2 || windows.is_empty() {
            return;
        }
        let mut first = None;
        {
            let mut map = self.batches.lock().expect("not poisoned");
            for chunk in windows.chunks(self.batch_size) {
                let batch = Arc::new(Batch {
                    windows: chunk.to_vec(),
                    sides: [OnceCell::new(), OnceCell::new()],
                });
                for w in chunk {
                    map.insert(w.key(), batch.clone());
                }
                first.get_or_insert(batch);
            }
        }
        if let Some(batch) = first {
            for lane in lanes(task) {
                let (checker, task, batch) = (self.clone(), task.clone(), batch.clone());
                tokio::spawn(async move {
                    batch.sides[lane as usize]
                        .get_or_init(|| checker.grouped_sides(&task, lane, &batch.windows))
                        .await;
                });
            }
        }
    }

    /// The source side of `window`'s checks, planned from the task's SQL here: from its
    /// batch's grouped queries if it was announced in one, else by itself.
    pub async fn source_side(&self, task: &Task, window: &Window) -> Result<SourceSide> {
        let batch = self
            .batches
            .lock()
            .expect("not poisoned")
            .get(&window.key())
            .cloned();
        let mut side = SourceSide::default();
        for lane in lanes(task) {
            let mut part = None;
            if let Some(batch) = &batch {
                let sides = batch.sides[lane as usize]
                    .get_or_init(|| self.grouped_sides(task, lane, &batch.windows))
                    .await;
                if let Some(sides) = sides {
                    part = sides.lock().expect("not poisoned").remove(&window.key());
                }
            }
            let part = match part {
                Some(p) => p,
                None => self.window_part(task, lane, window).await?,
            };
            side.add(part);
        }
        Ok(side)
    }

    /// The source side of one window by itself (its sources listed as they are now: the
    /// checks' session keeps no listing).
    pub async fn window_side(&self, task: &Task, window: &Window) -> Result<SourceSide> {
        let mut side = SourceSide::default();
        for lane in lanes(task) {
            side.add(self.window_part(task, lane, window).await?);
        }
        Ok(side)
    }

    /// One lane of one window's source side, by itself.
    async fn window_part(
        &self,
        task: &Task,
        lane: Lane,
        window: &Window,
    ) -> Result<(PerWindow, Computed)> {
        let computed = |scans| Computed {
            route: ROUTE.into(),
            windows: 1,
            scans,
        };
        if lane == Lane::Reconcile {
            let src = crate::task::plan::plan_reconcile_source(&self.ctx, task, window).await?;
            let src = src.ok_or_else(|| {
                crate::error::Error::runtime("[reconcile].source was not planned")
            })?;
            if let Some((batches, how)) = in_database::collect(&src).await? {
                return Ok((PerWindow::Batches(batches), how));
            }
            let (batches, scans) = read::collect(src).await?;
            return Ok((PerWindow::Batches(batches), computed(scans)));
        }
        let planned = crate::task::plan::plan_query_window(&self.ctx, task, window).await?;
        Ok(match task.checking.default {
            Some(DefaultCheck::Content) => {
                let (fp, scans) = content::of_dataframe_scanned(planned.df).await?;
                (PerWindow::Content(fp), computed(scans))
            }
            _ => match in_database::count(&planned.df).await? {
                Some((n, how)) => (PerWindow::Rows(n), how),
                None => {
                    let (n, scans) = read::count(planned.df).await?;
                    (PerWindow::Rows(n), computed(scans))
                }
            },
        })
    }

    /// How one lane of the task's checks can be computed for many windows (decided once).
    async fn template(&self, task: &Task, lane: Lane) -> &Template {
        self.templates[lane as usize]
            .get_or_init(|| async {
                // A query the database computes whole is sent window by window: one
                // indexed statement each, nothing fetched.
                let whole = |df: &datafusion::prelude::DataFrame, lane| {
                    match lane {
                        Lane::Reconcile => crate::pipeline::sources::whole(df.logical_plan()),
                        Lane::Default => crate::pipeline::sources::whole_rows(df.logical_plan()),
                    }
                    .is_some()
                };
                let analysed = match lane {
                    Lane::Reconcile => {
                        match crate::task::plan::plan_reconcile_source_unbound(&self.ctx, task)
                            .await
                        {
                            Ok(Some(df)) if whole(&df, lane) => return Template::PerWindow,
                            Ok(Some(df)) => Grouped::new(df, Measure::Query),
                            Ok(None) => return Template::Unchecked,
                            Err(e) => Err(grouped::NotGroupable(e.to_string())),
                        }
                    }
                    Lane::Default => {
                        let measure = match task.checking.default {
                            None => return Template::Unchecked,
                            Some(DefaultCheck::Rows) => Measure::Rows,
                            Some(DefaultCheck::Content) => Measure::Content,
                        };
                        match crate::task::plan::plan_query_unbound(&self.ctx, task).await {
                            Ok(df) if measure == Measure::Rows && whole(&df, lane) => {
                                return Template::PerWindow;
                            }
                            Ok(df) => Grouped::new(df, measure),
                            Err(e) => Err(grouped::NotGroupable(e.to_string())),
                        }
                    }
                };
                match analysed {
                    Ok(g) => Template::Grouped(Box::new(g)),
                    Err(e) => {
                        tracing::info!(?lane, "the checks run window by window: {}", e.0);
                        Template::PerWindow
                    }
                }
            })
            .await
    }

    /// One lane of the source sides of `windows` from one grouped query; `None` (with the
    /// reason logged) when it cannot be grouped.
    async fn grouped_sides(&self, task: &Task, lane: Lane, windows: &[Window]) -> Option<Sides> {
        let g = match self.template(task, lane).await {
            Template::Grouped(g) => g,
            Template::Unchecked => return None,
            Template::PerWindow if windows.len() == 1 => {
                // A single window: its own check, started early.
                let w = &windows[0];
                return match self.window_part(task, lane, w).await {
                    Ok(part) => Some(Mutex::new(HashMap::from([(w.key(), part)]))),
                    Err(_) => None,
                };
            }
            Template::PerWindow => return None,
        };
        match g.evaluate(task, windows).await {
            Ok((per, scans)) => {
                tracing::debug!(
                    windows = windows.len(),
                    ?lane,
                    "the checks' source side of these windows came from one grouped query"
                );
                let computed = Computed {
                    route: ROUTE.into(),
                    windows: windows.len(),
                    scans,
                };
                let sides = windows
                    .iter()
                    .zip(per)
                    .map(|(w, p)| (w.key(), (p, computed.clone())));
                Some(Mutex::new(sides.collect()))
            }
            Err(e) => {
                tracing::info!(
                    windows = windows.len(),
                    ?lane,
                    "these windows' checks run one by one: {}",
                    e.0
                );
                None
            }
        }
    }
}

/// The landing zones the runner opened, registered on the plain route in the checks' own
/// session (see `LandingZone::plain_table`): DataFusion's listing table with the checks'
/// format settings, listing through the checks' own store client.
fn register_zones(
    ctx: &SessionContext,
    task: &Task,
    zones: &[Arc<crate::pipeline::landing::LandingZone>],
) -> Result<()> {
    use crate::pipeline::landing::{Plain, listing_options};
    for z in zones {
        let Some(source) = task.sources.iter().find(|s| s.alias == z.alias) else {
            continue;
        };
        let table = z.plain_table(listing_options(ctx, source), Plain::Checks)?;
        ctx.deregister_table(z.alias.as_str())?;
        ctx.register_table(z.alias.as_str(), table)?;
    }
    Ok(())
}
