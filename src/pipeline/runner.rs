//! The runner: everything a task's windows share — one DataFusion session with the sources
//! registered (Delta sources pinned once), the independent checker, the accelerations chosen
//! for the task, and the target table's latest known state. A backfill runs many windows,
//! concurrently, through one runner. A window's stages are in `window`, its commit in
//! `commit`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use datafusion::prelude::SessionContext;
use deltalake::DeltaTable;

use crate::accel::planner::Planner;
use crate::accel::scan::WindowSession;
use crate::accel::session::new_session;
use crate::error::Result;
use crate::pipeline::checks::Checker;
use crate::pipeline::execute::{Sink, Staged};
use crate::pipeline::sources;
use crate::pipeline::stage::{stage, temp_dir, temp_sink};
use crate::pipeline::target::Target;
use crate::report::record::Report;
use crate::task::Task;
use crate::task::plan::{self, Planned};
use crate::task::project::Project;
use crate::task::window::Window;

/// Run one window — with its lookback windows, if the task has any (see `lookback`) — and
/// publish it; always returns the reports (errors included), oldest window first.
pub async fn run_window(project: &Project, task: &Task, window: &Window) -> Vec<Report> {
    let started = Instant::now();
    let failed = |w: &Window, e: &crate::error::Error| {
        let mut report = Report::new(task, w, &uuid::Uuid::new_v4().to_string());
        report.fail(e);
        report.duration_ms = started.elapsed().as_millis() as u64;
        report
    };
    let windows = match window.with_lookback(task.lookback) {
        Ok(w) => w,
        Err(e) => return vec![failed(window, &e)],
    };
    match Runner::new(project, task).await {
        Ok(runner) => runner.run_together(&windows).await,
        Err(e) => {
            let mut reports: Vec<Report> = windows.iter().map(|w| failed(w, &e)).collect();
            // Windows that could not start are runs that failed: START and FAIL each.
            if let Some(l) = crate::lineage::TaskLineage::new(project, task) {
                for r in &mut reports {
                    l.window_started(r).await;
                    l.window_ended(r).await;
                }
            }
            reports
        }
    }
}

/// Everything a task's windows share (see the module documentation).
pub struct Runner {
    pub(super) task: Task,
    /// The target table and its commit queue.
    pub(super) target: Target,
    ctx: SessionContext,
    /// With a remote engine, a local session for what reads this process's own output (the
    /// `[reconcile].output` tee); `None`: the runner's session is local.
    local: Option<SessionContext>,
    sources: Vec<sources::SourceVersion>,
    /// The sources that are landing zones (see `landing`): each window pins what it reads.
    pub(super) zones: Vec<Arc<crate::pipeline::landing::LandingZone>>,
    /// The independent check path (see `checks`): its own session over the same inputs.
    checker: Arc<Checker>,
    /// How windows are planned: plain, or with the accelerations (see `accel::planner`).
    pub(super) planner: Planner,
    /// Permits to execute a window (plan, scan, stage, reconcile).
    pub(super) exec: tokio::sync::Semaphore,
    pub(super) exec_limit: AtomicUsize,
    /// Windows announced by [`Runner::share_scans`] (1 until then).
    announced: AtomicUsize,
    /// The tables `[checks] relationships` compare against, pinned for the run.
    pub(super) references: crate::pipeline::checks::data::References,
    /// The `[checks]` planned once against the query's columns (see `data::validate`).
    pub(super) checks_valid: tokio::sync::OnceCell<()>,
    /// The columns the task's SQL bounds by window parameters, found once (see `pins`).
    pub(super) window_columns: tokio::sync::OnceCell<std::collections::HashSet<String>>,
    /// Where the windows' OpenLineage events go (`None`: lineage is off).
    pub(super) lineage: Option<crate::lineage::TaskLineage>,
}

/// Permits of a runner before `set_parallel`.
const DEFAULT_EXEC_PERMITS: usize = 1024;

impl Runner {
    pub async fn new(project: &Project, task: &Task) -> Result<Runner> {
        Runner::with_engine(project, task, crate::engine::of(task)?).await
    }

    /// A runner whose queries execute in this process whatever the task's engine: for the
    /// commands that read the published table with delta-rs next to the source (`audit`,
    /// `repair`, `check`, `verify --against-table`), which a cluster cannot plan.
    pub async fn new_local(project: &Project, task: &Task) -> Result<Runner> {
        Runner::with_engine(project, task, crate::engine::Engine::Local).await
    }

    async fn with_engine(
        project: &Project,
        task: &Task,
        engine: crate::engine::Engine,
    ) -> Result<Runner> {
        let t0 = Instant::now();
        let config = crate::config::get();
        let (ctx, local) = match &engine {
            crate::engine::Engine::Local => (new_session()?, None),
            remote => {
                let ctx =
                    crate::engine::session(remote, crate::session::Profile::Runner, false).await?;
                tracing::info!(engine = %remote.describe(), "the task's queries execute on the cluster");
                (ctx, Some(crate::accel::session::session(false)?))
            }
        };
        let (sources, zones) = sources::register_with_zones(&ctx, &task.sources, &engine).await?;
        let url = project.table_url(task)?;
        let checker = Arc::new(Checker::new(task, (&sources, &zones), &engine, &url).await?);
        let sources_ms = t0.elapsed().as_millis();
        // The table loads in the background (its log replay is independent of the sources);
        // until then the runner holds it unloaded (no I/O).
        let target = Target::open(&url, task)?;
        // The accelerations hold sources and plans in this process: a cluster gets plain plans.
        let planner = Planner::new(task, &ctx, config.accelerate && engine.is_local()).await;
        tracing::debug!(
            sources_ms,
            total_ms = t0.elapsed().as_millis(),
            "runner ready"
        );
        Ok(Runner {
            task: task.clone(),
            target,
            ctx,
            local,
            sources,
            zones,
            checker,
            planner,
            exec: tokio::sync::Semaphore::new(DEFAULT_EXEC_PERMITS),
            exec_limit: AtomicUsize::new(DEFAULT_EXEC_PERMITS),
            announced: AtomicUsize::new(1),
            references: Default::default(),
            checks_valid: tokio::sync::OnceCell::new(),
            window_columns: tokio::sync::OnceCell::new(),
            lineage: crate::lineage::TaskLineage::new(project, task),
        })
    }

    /// Execute at most `n` windows at once (windows waiting for their commit do not count).
    pub fn set_parallel(&self, n: usize) {
        let n = n.clamp(1, DEFAULT_EXEC_PERMITS);
        let was = self.exec_limit.swap(n, Ordering::SeqCst);
        if n > was {
            self.exec.add_permits(n - was);
        } else if n < was {
            // Called before windows run: every permit is free and can be forgotten.
            let left = was - n - self.exec.forget_permits(was - n);
            if left > 0 {
                tracing::debug!("{left} execution permits were in use and stay available");
            }
        }
    }

    /// Announce the windows a backfill is about to run (in order), so sources are read once
    /// per chunk of them, and the checks' sources once per batch of them.
    pub fn share_scans(&self, windows: &[Window]) {
        self.share_scans_only(windows);
        Checker::announce(&self.checker, &self.task, windows);
    }

    /// [`Runner::share_scans`] without starting the windows' checks (`verify`, which stages
    /// windows without checking them).
    pub fn share_scans_only(&self, windows: &[Window]) {
        self.announced.store(windows.len(), Ordering::SeqCst);
        self.planner.announce(windows);
    }

    /// Partitions of a window session over in-memory slices: the session's share of the
    /// cores when several windows execute at once (splitting a slice further only adds
    /// planning and merging work per window), all of them for a single window.
    fn window_partitions(&self) -> usize {
        let at_once = self
            .exec_limit
            .load(Ordering::SeqCst)
            .min(self.announced.load(Ordering::SeqCst))
            .max(1);
        (self.ctx.copied_config().target_partitions() / at_once).max(1)
    }

    /// The session `window` runs in: shared sources as in-memory slices of a chunk scan.
    pub(super) async fn session_for(&self, window: &Window) -> Result<WindowSession> {
        self.planner
            .session_for(&self.ctx, window, self.window_partitions())
            .await
    }

    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The target table as this runner knows it.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The target table, at least at the version of this runner's last commit.
    pub async fn table(&self) -> Result<DeltaTable> {
        self.target.table().await
    }

    /// Bring the runner's table state up to the latest version.
    pub async fn refresh(&self) -> Result<()> {
        self.target.refresh().await
    }

    /// Plan the task for `window` in this runner's session.
    pub async fn plan(&self, window: &Window) -> Result<Planned> {
        plan::plan(&self.ctx, &self.task, Some(window)).await
    }

    /// Execute the window into a private temporary directory without publishing anything,
    /// by the route `run` publishes it by: the window's session from the planner (shared
    /// sources as slices of a chunk scan — the chunk announced by [`Runner::share_scans`],
    /// or a chunk of this one window), the prepared plans bound to it, memory maps; the same
    /// window check and reconciliation tee as a run. For `verify`.
    pub async fn stage_to_temp(&self, window: &Window) -> Result<(tempfile::TempDir, Staged)> {
        // The files the window reaches, as `run` lists them (a file off the zone's layout is
        // an error here too).
        self.pin_window(window).await?;
        let session = self.session_for(window).await?;
        let planned = self
            .planner
            .plan(self.session(), &session, &self.task, window)
            .await?;
        let dir = temp_dir("idemlake-verify-")?;
        let (store, config) = temp_sink(&dir, &planned.planned)?;
        let staged = stage(
            self.output_session(&planned.session),
            &self.task,
            planned.planned.window_range()?,
            (&planned.planned, planned.plans.as_ref()),
            Sink {
                store,
                config,
                adapt: None,
            },
        )
        .await?;
        Ok((dir, staged))
    }

    /// [`Runner::stage_to_temp`] by the plain twin: the task's SQL planned for the window on
    /// its own in the checker's session (sources read directly through object_store's plain
    /// stores: no shared scans, prepared or derived plans, memory maps). For `verify`.
    pub async fn stage_plain_to_temp(
        &self,
        window: &Window,
    ) -> Result<(tempfile::TempDir, Staged, Planned)> {
        let ctx = self.checker.session();
        let planned = plan::plan(ctx, &self.task, Some(window)).await?;
        let dir = temp_dir("idemlake-verify-")?;
        let (store, config) = temp_sink(&dir, &planned)?;
        let staged = stage(
            self.output_session(ctx),
            &self.task,
            planned.window_range()?,
            (&planned, None),
            Sink {
                store,
                config,
                adapt: None,
            },
        )
        .await?;
        Ok((dir, staged, planned))
    }

    /// How this runner plans its windows: `"accelerated"` or `"plain"`.
    pub fn route(&self) -> &'static str {
        self.planner.kind()
    }

    /// Start the independent checks of `windows` now (see [`Checker::announce`]).
    pub fn start_checks(&self, windows: &[Window]) {
        Checker::announce(&self.checker, &self.task, windows);
    }

    /// The independent check path (its own session over the same inputs).
    /// The tables `[checks] relationships` compare against, pinned for this runner.
    pub fn references(&self) -> &crate::pipeline::checks::data::References {
        &self.references
    }

    pub fn checker(&self) -> &crate::pipeline::checks::Checker {
        &self.checker
    }

    /// The session the runner plans in (sources registered).
    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// The session a query over this process's own output runs in: `window_session` (the
    /// window's, from the planner) with the local engine, a local one with a remote engine.
    pub(super) fn output_session<'a>(
        &'a self,
        window_session: &'a SessionContext,
    ) -> &'a SessionContext {
        self.local.as_ref().unwrap_or(window_session)
    }

    /// What the runner pinned/fingerprinted of each source when it was created.
    pub fn source_versions(&self) -> &[sources::SourceVersion] {
        &self.sources
    }
}
