//! Drives one window through the pipeline: plan → execute → reconcile → publish → read back.
//!
//! Ordering is the guarantee: data files are written first (invisible), every check runs on
//! them, and only then is the single commit made. Any failure before the commit publishes
//! nothing; the commit itself is atomic; the read-back after it fails loudly if the log
//! disagrees with what was written. Nothing here reads the wall clock to decide *what* to
//! compute: the window comes from the caller.

use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use deltalake::DeltaTable;

use crate::delta::partition::{self, PartitionRange};
use crate::delta::{merge, overwrite, readback, table};
use crate::error::{Error, ErrorKind, Result};
use crate::pipeline::checks::SourceSide;
use crate::pipeline::execute::{self, Sink, Staged};
use crate::pipeline::reconcile::{self, Check};
use crate::pipeline::sources;
use crate::pipeline::stage::{check_unique_key, stage, temp_dir, temp_sink, tempdir_for_merge};
use crate::report::record::{Report, RunRecord, Status};
use crate::task::plan::{self, Planned};
use crate::task::project::Project;
use crate::task::window::Window;
use crate::task::{Mode, OnEmpty, OnMismatch, Task};

pub use crate::accel::session::{accelerated, new_session, session};

/// Background work that must end before the process does: the target table's load started
/// by [`Runner::new`] may still be running when a command finishes without needing it
/// (`backfill --missing` with nothing missing), and a runtime shut down under it made
/// delta-kernel's executor panic on stderr. The binary waits for these before exiting
/// ([`finish_background`]).
pub fn background() -> &'static tokio_util::task::TaskTracker {
    static TRACKER: std::sync::OnceLock<tokio_util::task::TaskTracker> = std::sync::OnceLock::new();
    TRACKER.get_or_init(tokio_util::task::TaskTracker::new)
}

/// Wait (at most `limit`) for the [`background`] work to end.
pub async fn finish_background(limit: std::time::Duration) {
    let tracker = background();
    tracker.close();
    if tokio::time::timeout(limit, tracker.wait()).await.is_err() {
        tracing::warn!("background work still running after {limit:?}; exiting anyway");
    }
}

/// A report for a window that has not run (yet); filled in by [`Runner::run`].
fn new_report(task: &Task, window: &Window, run_id: &str) -> Report {
    Report {
        task: task.name.clone(),
        window: window.into(),
        status: Status::Failed,
        published: false,
        rows_written: 0,
        table_version: None,
        reconciliation: Vec::new(),
        duration_ms: 0,
        error: None,
        run_id: Some(run_id.to_string()),
        sql_hash: None,
        exit_code: None,
    }
}

/// Mark `report` as failed with `e`. A report whose commit landed keeps saying so (its
/// version, rows and `published: true`): a failure after the commit is never reported as
/// "nothing published".
pub fn fail_report(report: &mut Report, e: &Error) {
    let kind = if report.published && e.kind() != ErrorKind::Unverified {
        ErrorKind::Unverified
    } else {
        e.kind()
    };
    report.status = match kind {
        ErrorKind::Mismatch => Status::Mismatch,
        ErrorKind::Unverified => Status::Unverified,
        _ => Status::Failed,
    };
    report.error = Some(if kind == ErrorKind::Unverified {
        let version = report
            .table_version
            .map(|v| format!(" at version {v}"))
            .unwrap_or_default();
        format!(
            "the window was published{version}, but a check after the commit failed: {}",
            e.message()
        )
    } else {
        e.message().to_string()
    });
    report.exit_code = Some(kind.exit_code());
    if !report.published {
        report.rows_written = 0;
        report.table_version = None;
    }
}

/// The report of a window whose run panicked (a bug): failed, exit 1, nothing known to be
/// published.
pub fn panicked_report(task: &Task, window: &Window, what: &str) -> Report {
    let mut report = new_report(task, window, &uuid::Uuid::new_v4().to_string());
    fail_report(
        &mut report,
        &Error::runtime(format!(
            "the window's run panicked (a bug in idemlake): {what}"
        )),
    );
    report
}

/// Run one window and publish it; always returns a report (errors included).
pub async fn run_window(project: &Project, task: &Task, window: &Window) -> Report {
    let started = Instant::now();
    match Runner::new(project, task).await {
        Ok(runner) => runner.run(window).await,
        Err(e) => {
            let mut report = new_report(task, window, &uuid::Uuid::new_v4().to_string());
            fail_report(&mut report, &e);
            report.duration_ms = started.elapsed().as_millis() as u64;
            report
        }
    }
}

/// Everything a task's windows share: one DataFusion session with the sources registered
/// (Delta sources pinned once), and the target table's latest known state. A backfill runs
/// many windows, concurrently, through one runner.
pub struct Runner {
    task: Task,
    url: url::Url,
    ctx: SessionContext,
    sources: Vec<sources::SourceVersion>,
    /// The independent check path (see `checks`): its own session over the same inputs.
    checker: Arc<crate::pipeline::checks::Checker>,
    /// The table and its live files by window, for commits (one committer at a time).
    target: tokio::sync::Mutex<Target>,
    /// Sources read once per chunk of windows instead of once per window (see `scan`).
    shared: Option<Arc<crate::accel::scan::Shared>>,
    /// The highest table version this runner committed (the shared state catches up lazily).
    last_commit: std::sync::atomic::AtomicI64,
    /// Staged windows waiting to be committed (see [`Runner::publish`]).
    pending: std::sync::Mutex<Vec<Pending>>,
    /// Permits to execute a window (plan, scan, stage, reconcile).
    exec: tokio::sync::Semaphore,
    /// The latest table state this runner knows, for readers that must not wait for a commit
    /// in progress (schema checks, writer settings); updated after every commit.
    view: std::sync::Mutex<DeltaTable>,
    exec_limit: std::sync::atomic::AtomicUsize,
    /// The target table's first load, started with the runner so that it overlaps the first
    /// window's source scan; awaited (once) by [`Runner::loaded`] before the table is used.
    opening: std::sync::Mutex<Option<tokio::task::JoinHandle<Result<DeltaTable>>>>,
    loaded: tokio::sync::OnceCell<()>,
    /// The task's queries planned once, bound per window (`None` if they cannot be).
    prepared: Option<crate::accel::prepared::Prepared>,
    /// Windows announced by [`Runner::share_scans`] (1 until then).
    announced: std::sync::atomic::AtomicUsize,
    /// Whether the task's queries planned unbound when the runner was created: the checks
    /// that do not depend on the window (reconcile columns) are then not repeated per window.
    validated: bool,
}

/// What the committer holds: the table (protocol, schema, configuration; its snapshot may lag
/// behind this runner's own commits) and the live files of the latest version (`None` when
/// unknown: rebuilt from a fresh snapshot before the next commit).
struct Target {
    table: DeltaTable,
    files: Option<crate::delta::filemap::FileMap>,
}

/// A staged window waiting for a commit, and where to send the outcome.
struct Pending {
    window: overwrite::WindowCommit,
    done: tokio::sync::oneshot::Sender<std::result::Result<Published, (ErrorKind, String)>>,
}

/// The outcome channels of a group commit; any still unsent when it is dropped (the
/// committing future was cancelled or panicked) are told the outcome is unknown.
struct Outcomes(Vec<Option<OutcomeSender>>);

type OutcomeSender =
    tokio::sync::oneshot::Sender<std::result::Result<Published, (ErrorKind, String)>>;

impl Outcomes {
    /// Every sender, to be used now (none is left for the drop guard).
    fn take(&mut self) -> Vec<OutcomeSender> {
        self.0.iter_mut().filter_map(Option::take).collect()
    }
}

impl Drop for Outcomes {
    fn drop(&mut self) {
        for tx in self.take() {
            let _ = tx.send(Err((
                ErrorKind::Runtime,
                "the commit of this window was interrupted: it may or may not have been published; re-running it is safe".to_string(),
            )));
        }
    }
}

/// A window whose commit landed, and what reading the committed snapshot back found: the
/// rows of every live file in the window, or why they could not be confirmed.
struct Published {
    version: i64,
    readback: std::result::Result<u64, String>,
}

/// Most windows one commit publishes.
pub const MAX_WINDOWS_PER_COMMIT: usize = 256;
/// Permits of a runner before `set_parallel`.
const DEFAULT_EXEC_PERMITS: usize = 1024;

impl Runner {
    pub async fn new(project: &Project, task: &Task) -> Result<Runner> {
        let t0 = Instant::now();
        let ctx = new_session()?;
        let sources = sources::register(&ctx, &task.sources).await?;
        let checker = Arc::new(crate::pipeline::checks::Checker::new(task, &sources).await?);
        let sources_ms = t0.elapsed().as_millis();
        let url = project.table_url(task)?;
        // The table loads in the background (its log replay is independent of the sources);
        // until then the runner holds it unloaded (no I/O).
        let table = table::builder(&url)?.build()?;
        let opening = {
            let url = url.clone();
            background().spawn(async move {
                let t = Instant::now();
                let table = table::open(&url).await;
                tracing::debug!(
                    ms = t.elapsed().as_millis() as u64,
                    version = ?table.as_ref().ok().and_then(|t| t.version()),
                    "target table loaded"
                );
                table
            })
        };
        // Which sources windows can share a scan of: decided once from the unbound plans. A
        // task whose SQL does not plan gets no sharing; its error surfaces in `run`.
        let mut validated = false;
        let shared = match plan::plan(&ctx, task, None).await {
            Ok(_) if !accelerated() => {
                validated = true;
                None
            }
            Ok(unbound) => {
                validated = true;
                // Only the task's query reads the shared slices: `[reconcile].source` runs on
                // the independent check path.
                let plans = vec![unbound.df.logical_plan()];
                crate::accel::scan::Shared::new(task, &ctx, &plans)
                    .await
                    .map(Arc::new)
            }
            Err(e) => {
                tracing::info!("the task does not plan unbound, so no scans are shared: {e}");
                None
            }
        };
        if let Some(s) = &shared {
            tracing::debug!(sources = ?s.shared_sources(), "windows share source scans");
        }
        let prepared = if validated && accelerated() {
            let template = match &shared {
                Some(s) => s.template_session(&ctx).await,
                None => Ok(ctx.clone()),
            };
            match template {
                Ok(t) => crate::accel::prepared::Prepared::new(&t, task)
                    .await
                    .map_err(|e| {
                        tracing::info!("queries not prepared (each window plans itself): {e}")
                    })
                    .ok(),
                Err(e) => {
                    tracing::info!("queries not prepared (each window plans itself): {e}");
                    None
                }
            }
        } else {
            None
        };
        tracing::debug!(
            sources_ms,
            total_ms = t0.elapsed().as_millis(),
            "runner ready"
        );
        Ok(Runner {
            task: task.clone(),
            url,
            ctx,
            sources,
            checker,
            view: std::sync::Mutex::new(table.clone()),
            target: tokio::sync::Mutex::new(Target { table, files: None }),
            shared,
            last_commit: std::sync::atomic::AtomicI64::new(-1),
            pending: std::sync::Mutex::new(Vec::new()),
            exec: tokio::sync::Semaphore::new(DEFAULT_EXEC_PERMITS),
            exec_limit: std::sync::atomic::AtomicUsize::new(DEFAULT_EXEC_PERMITS),
            opening: std::sync::Mutex::new(Some(opening)),
            loaded: tokio::sync::OnceCell::new(),
            announced: std::sync::atomic::AtomicUsize::new(1),
            prepared,
            validated,
        })
    }

    /// Wait for the target table's first load (started by [`Runner::new`]); a failed load
    /// is retried by the next caller.
    async fn loaded(&self) -> Result<()> {
        self.loaded
            .get_or_try_init(|| async {
                let handle = self.opening.lock().expect("not poisoned").take();
                let table = match handle {
                    Some(h) => h.await.map_err(|e| {
                        Error::runtime(format!("loading the target table failed: {e}"))
                    })??,
                    None => table::open(&self.url).await?,
                };
                *self.view.lock().expect("not poisoned") = table.clone();
                self.target.lock().await.table = table;
                Ok::<(), Error>(())
            })
            .await?;
        Ok(())
    }

    /// Execute at most `n` windows at once (windows waiting for their commit do not count).
    pub fn set_parallel(&self, n: usize) {
        use std::sync::atomic::Ordering;
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

    /// Commit a staged window; returns its version and the rows read back for it (an `Err`
    /// only if the commit did not land).
    ///
    /// Group commit: every staged window queues here, and whichever waiter takes the table
    /// lock commits *all* queued windows (distinct windows, up to
    /// [`MAX_WINDOWS_PER_COMMIT`]) in one commit, then reads that commit back once. While one
    /// commit is being written the next group forms, so a backfill's commits — whose cost
    /// grows with the table, not with the group — are amortised over many windows. Each
    /// window is still replaced whole by exactly one commit.
    async fn publish(
        &self,
        schema: &SchemaRef,
        window: overwrite::WindowCommit,
    ) -> Result<Published> {
        self.loaded().await?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.pending
            .lock()
            .expect("not poisoned")
            .push(Pending { window, done: tx });
        {
            let mut target = self.target.lock().await;
            let batch = self.take_group();
            if !batch.is_empty() {
                match self.ensure_table(&mut target, schema).await {
                    Ok(()) => self.commit_group(&mut target, batch).await,
                    Err(e) => {
                        for p in batch {
                            let _ = p.done.send(Err((e.kind(), e.message().to_string())));
                        }
                    }
                }
            }
        }
        match rx.await {
            Ok(r) => r.map_err(|(kind, message)| Error::new(kind, message)),
            Err(_) => Err(Error::runtime("the commit of this window was abandoned")),
        }
    }

    /// Queued windows for one commit: distinct windows, oldest first.
    fn take_group(&self) -> Vec<Pending> {
        let mut pending = self.pending.lock().expect("not poisoned");
        let mut seen = std::collections::HashSet::new();
        let mut group = Vec::new();
        let mut rest = Vec::new();
        for p in pending.drain(..) {
            if group.len() < MAX_WINDOWS_PER_COMMIT && seen.insert(p.window.tags.window.clone()) {
                group.push(p);
            } else {
                rest.push(p);
            }
        }
        *pending = rest;
        group
    }

    /// Create the table on first use (the schema check follows creation by someone else).
    async fn ensure_table(&self, target: &mut Target, schema: &SchemaRef) -> Result<()> {
        if target.table.version().is_none() {
            target.table = table::ensure_exists(
                target.table.clone(),
                schema,
                &self.task.partition_by,
                &self.task.name,
            )
            .await?;
            table::check_schema(&target.table, schema, &self.task.partition_by)?;
            target.files = None;
            *self.view.lock().expect("not poisoned") = target.table.clone();
        }
        Ok(())
    }

    /// Catch the table's snapshot up with this runner's last commit (before a merge, which
    /// reads the snapshot).
    async fn catch_up(&self, table: &mut DeltaTable) -> Result<()> {
        let last = self.last_commit.load(std::sync::atomic::Ordering::SeqCst);
        if table.version().is_some_and(|v| (v as i64) < last) {
            table.update_incremental(Some(last as u64)).await?;
        }
        Ok(())
    }

    async fn commit_group(&self, target: &mut Target, group: Vec<Pending>) {
        let (windows, senders): (Vec<_>, Vec<_>) =
            group.into_iter().map(|p| (p.window, p.done)).unzip();
        // Should this future be dropped or panic before every window has its outcome, the
        // waiting windows learn that it is unknown (not "nothing published").
        let mut senders = Outcomes(senders.into_iter().map(Some).collect());
        let fail = |e: &Error| (e.kind(), e.message().to_string());
        let committed = match overwrite::commit_windows(
            &mut target.table,
            &mut target.files,
            &self.task.partition_by,
            &windows,
        )
        .await
        {
            Ok(c) => c,
            Err(e) => {
                for tx in senders.take() {
                    let _ = tx.send(Err(fail(&e)));
                }
                return;
            }
        };
        self.last_commit
            .fetch_max(committed.version, std::sync::atomic::Ordering::SeqCst);
        if windows.len() > 1 {
            tracing::debug!(
                windows = windows.len(),
                version = committed.version,
                "committed a group of windows"
            );
        }
        // Read the committed snapshot back from storage (the log replayed by delta-rs up to
        // this version, not the file map the commit was built from): every live file of each
        // window must be one this run added, and their statistics give the rows committed.
        let snapshot = readback::snapshot_at(&mut target.table, committed.version).await;
        if let Ok(t) = &snapshot {
            *self.view.lock().expect("not poisoned") = t.clone();
        }
        for (w, tx) in windows.iter().zip(senders.take()) {
            let readback = match &snapshot {
                Ok(t) => readback::read_back(t, &self.task.partition_by, w)
                    .map_err(|e| e.message().to_string()),
                Err(e) => Err(format!(
                    "read-back: version {} could not be loaded: {}",
                    committed.version,
                    e.message()
                )),
            };
            let _ = tx.send(Ok(Published {
                version: committed.version,
                readback,
            }));
        }
    }

    /// Announce the windows a backfill is about to run (in order), so sources are read once
    /// per chunk of them.
    pub fn share_scans(&self, windows: &[Window]) {
        self.announced
            .store(windows.len(), std::sync::atomic::Ordering::SeqCst);
        if let Some(s) = &self.shared {
            s.plan_windows(windows);
        }
    }

    /// Partitions of a window session over in-memory slices: the session's share of the
    /// cores when several windows execute at once (splitting a slice further only adds
    /// planning and merging work per window), all of them for a single window.
    fn window_partitions(&self) -> usize {
        use std::sync::atomic::Ordering;
        let at_once = self
            .exec_limit
            .load(Ordering::SeqCst)
            .min(self.announced.load(Ordering::SeqCst))
            .max(1);
        (self.ctx.copied_config().target_partitions() / at_once).max(1)
    }

    /// The session `window` runs in: shared sources as in-memory slices of a chunk scan.
    async fn session_for(&self, window: &Window) -> Result<crate::accel::scan::WindowSession> {
        match &self.shared {
            None => Ok(crate::accel::scan::WindowSession::base(&self.ctx)),
            Some(s) => {
                let ws = s
                    .session_for(&self.ctx, window, self.window_partitions())
                    .await?;
                tracing::debug!(window = %window.label(), shared = ?ws.shared, "window session");
                Ok(ws)
            }
        }
    }

    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The table as last seen by this runner, at least at the version of its last commit
    /// (refresh with [`Runner::refresh`] to see other writers' commits).
    pub async fn table(&self) -> Result<DeltaTable> {
        self.loaded().await?;
        let mut t = self.view();
        let last = self.last_commit.load(std::sync::atomic::Ordering::SeqCst);
        if t.version().is_some_and(|v| (v as i64) < last)
            && t.update_incremental(Some(last as u64)).await.is_ok()
        {
            *self.view.lock().expect("not poisoned") = t.clone();
        }
        Ok(t)
    }

    /// The table as last loaded, possibly behind this runner's own commits: for its schema,
    /// configuration and storage, which those commits do not change.
    fn view(&self) -> DeltaTable {
        self.view.lock().expect("not poisoned").clone()
    }

    /// Bring the runner's table state up to the latest version.
    pub async fn refresh(&self) -> Result<()> {
        self.loaded().await?;
        let mut t = self.target.lock().await;
        if t.table.version().is_some() {
            t.table.update_state().await?;
        } else {
            t.table = table::open(&self.url).await?;
        }
        t.files = None;
        *self.view.lock().expect("not poisoned") = t.table.clone();
        Ok(())
    }

    /// The task planned for `window` in its session: bound from the prepared plans when the
    /// session matches them, planned on its own otherwise (see `prepared`).
    /// The task planned for `window`, and the session to execute it in: the prepared plans
    /// bound to the window's tables, or (if they do not fit) the window planned on its own.
    async fn plan_in(
        &self,
        session: &crate::accel::scan::WindowSession,
        window: &Window,
    ) -> Result<(
        Planned,
        Option<crate::accel::prepared::WindowPlans>,
        SessionContext,
    )> {
        if let Some(p) = &self.prepared {
            match p.bind(session, &self.task, window).await {
                Ok(Some((planned, plans))) => {
                    tracing::debug!(window = %window.label(), "bound the prepared plans");
                    return Ok((planned, Some(plans), self.ctx.clone()));
                }
                Ok(None) => {}
                Err(e) => tracing::info!("prepared plans not used for {}: {e}", window.label()),
            }
        }
        let ctx = session.context().await?;
        // `[reconcile].source` is not planned here: it runs on the independent path.
        let planned = if self.validated {
            plan::plan_query_window(&ctx, &self.task, window).await?
        } else {
            plan::plan_window(&ctx, &self.task, window, true).await?
        };
        Ok((planned, None, ctx))
    }

    /// Plan the task for `window` in this runner's session.
    pub async fn plan(&self, window: &Window) -> Result<Planned> {
        plan::plan(&self.ctx, &self.task, Some(window)).await
    }

    /// Run one window and publish it.
    pub async fn run(&self, window: &Window) -> Report {
        let started = Instant::now();
        let run_id = uuid::Uuid::new_v4().to_string();
        let mut report = new_report(&self.task, window, &run_id);
        if let Err(e) = self.run_inner(window, &run_id, &mut report).await {
            fail_report(&mut report, &e);
        }
        report.duration_ms = started.elapsed().as_millis() as u64;
        let store = self.view().log_store().object_store(None);
        crate::report::runlog::record(&store, &report).await;
        report
    }

    async fn run_inner(&self, window: &Window, run_id: &str, report: &mut Report) -> Result<()> {
        let task = &self.task;
        let ctx = &self.ctx;
        let url = &self.url;
        // Executing windows are limited (`backfill --parallel`); waiting to commit is not.
        let permit = self
            .exec
            .acquire()
            .await
            .map_err(|e| Error::runtime(format!("runner closed: {e}")))?;
        let session = self.session_for(window).await?;
        let (planned, plans, session) = self.plan_in(&session, window).await?;
        report.sql_hash = Some(planned.sql_hash.clone());
        self.loaded().await?;
        let table = self.view();
        if table.version().is_some() {
            table::check_schema(&table, &planned.schema, &task.partition_by)?;
        }
        crate::storage::probe_conditional_put(url).await?;

        let mut record = RunRecord::new(task, window, run_id, &planned.sql_hash);
        record.sources = self.sources.clone();

        // Stage the rows: into the table's own directory (overwrite) or a private temp dir (merge).
        let temp = tempdir_for_merge(task)?;
        let (store, config) = match &temp {
            None => (
                table.log_store().object_store(None),
                table::writer_config(&table, planned.schema.clone(), &task.partition_by)?,
            ),
            Some(dir) => temp_sink(dir, &planned)?,
        };
        // The source side of the checks runs beside the staging, by its own route.
        let (staged, source_side) = tokio::join!(
            stage(
                &session,
                task,
                window,
                (&planned, plans.as_ref()),
                Sink {
                    store: store.clone(),
                    config,
                },
            ),
            async {
                self.checker
                    .source_side(task, window)
                    .await
                    .map_err(|e| e.context("the independent source check failed"))
            }
        );
        let staged = staged?;
        let source_side = match source_side {
            Ok(s) => s,
            Err(e) => {
                execute::discard(&store, &staged.adds).await;
                return Err(e);
            }
        };
        tracing::info!(
            window = %window.label(),
            rows = staged.rows,
            files = staged.adds.len(),
            "staged the window's rows (not visible to readers yet)"
        );

        // Checks, before anything is published.
        let mut checks = vec![Check::counts(
            "rows_staged",
            staged.rows,
            execute::rows_in(&staged.adds)?,
        )];
        let mut warn = false;
        let (rc, on_mismatch) = match (&task.reconcile, source_side) {
            (Some(r), SourceSide::Reconcile(source_rows)) => {
                let out = staged.output_aggregates.as_deref().unwrap_or_default();
                (
                    reconcile::compare(&source_rows, out, &r.tolerance)?,
                    r.on_mismatch,
                )
            }
            (_, SourceSide::Rows(n)) => (
                vec![Check::counts("source_rows", n, staged.rows)],
                OnMismatch::Fail,
            ),
            (Some(_), _) => return Err(Error::runtime("[reconcile].source was not planned")),
            (None, _) => (Vec::new(), OnMismatch::Fail),
        };
        {
            if rc.iter().any(|c| !c.ok) {
                match on_mismatch {
                    OnMismatch::Fail => {
                        execute::discard(&store, &staged.adds).await;
                        report.reconciliation = checks.iter().chain(&rc).cloned().collect();
                        return Err(Error::mismatch(format!(
                            "reconciliation failed, nothing was published: {}",
                            reconcile::describe_failures(&rc)
                        )));
                    }
                    OnMismatch::Warn => warn = true,
                }
            }
            checks.extend(rc);
        }
        if !checks[0].ok {
            execute::discard(&store, &staged.adds).await;
            report.reconciliation = checks.clone();
            return Err(Error::runtime(format!(
                "the files written hold {} rows but the query produced {}; nothing was published",
                checks[0].output, checks[0].source
            )));
        }
        report.reconciliation = checks.clone();
        tracing::info!(window = %window.label(), checks = checks.len(), warn, "reconciled");

        if staged.rows == 0 {
            match task.on_empty {
                OnEmpty::Fail => {
                    return Err(Error::runtime(format!(
                        "the query returned no rows for window {} and [write].on_empty = \"fail\"; nothing was published",
                        window.label()
                    )));
                }
                // A merge upserts the rows produced: none leaves the window as it is, whatever
                // `on_empty` says (`clear` cannot apply to upsert semantics). Nothing is
                // committed, and the run is recorded as skipped, not as the window's publisher.
                OnEmpty::Skip | OnEmpty::Clear if task.mode == Mode::Merge => {
                    report.status = Status::Skipped;
                    report.error = None;
                    let last = self.last_commit.load(std::sync::atomic::Ordering::SeqCst);
                    report.table_version = table.version().map(|v| (v as i64).max(last));
                    tracing::info!(
                        window = %window.label(),
                        "merge with an empty result: the window is left as it is"
                    );
                    return Ok(());
                }
                OnEmpty::Skip => {
                    report.status = Status::Skipped;
                    let last = self.last_commit.load(std::sync::atomic::Ordering::SeqCst);
                    report.table_version = table.version().map(|v| (v as i64).max(last));
                    return Ok(());
                }
                OnEmpty::Clear => {}
            }
        }

        // The inputs must still be the ones the run started with (file sources are not
        // versioned: a file rewritten while the window ran may have been read half old, half
        // new). Checked after the checks, right before the commit.
        let mut changed =
            sources::changed_since(self.checker.session(), &task.sources, &self.sources).await?;
        if crate::accel::mapped::truncated() && changed.is_empty() {
            changed.push("(a memory-mapped source file was truncated)".to_string());
        }
        if !changed.is_empty() {
            execute::discard(&store, &staged.adds).await;
            return Err(Error::runtime(format!(
                "source(s) {} changed while the window ran (files, sizes or modification times differ from the start of the run); nothing was published — re-run once the sources are stable",
                changed.join(", ")
            )));
        }
        crate::fault::hit("before-commit", None)?;
        record.rows_written = staged.rows;
        record.reconciliation = checks.clone();
        let range = PartitionRange::of(task, window);
        let (version, expected_rows, committed_rows) = match task.mode {
            Mode::Overwrite => {
                drop(permit);
                let published = self
                    .publish(
                        &planned.schema,
                        overwrite::WindowCommit {
                            range,
                            predicate: plan::replace_where(task, window),
                            adds: staged.adds,
                            tags: overwrite::RunTags {
                                run_id: run_id.to_string(),
                                window: window.label(),
                                sql_hash: planned.sql_hash.clone(),
                            },
                            record: serde_json::to_value(&record).expect("serialisable"),
                        },
                    )
                    .await?;
                report.published = true;
                report.table_version = Some(published.version);
                report.rows_written = staged.rows;
                report.reconciliation = checks.clone();
                crate::fault::hit("after-commit", None)?;
                let committed_rows = published.readback.map_err(Error::unverified)?;
                (published.version, staged.rows, committed_rows)
            }
            Mode::Merge => {
                let table = {
                    let mut t = self.target.lock().await;
                    self.ensure_table(&mut t, &planned.schema).await?;
                    self.catch_up(&mut t.table).await?;
                    // The merge commits behind the file map's back.
                    t.files = None;
                    t.table.clone()
                };
                // A private copy at the pre-commit version, to read the commit back from storage.
                let mut before = table.clone();
                let dir = temp.as_ref().expect("merge stages into a temp dir");
                let source = ctx
                    .read_parquet(
                        dir.path().to_string_lossy().as_ref(),
                        ParquetReadOptions::default().schema(&planned.schema),
                    )
                    .await?;
                check_unique_key(source.clone(), &task.key).await?;
                let columns: Vec<String> = planned
                    .schema
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect();
                let base = table.version().map(|v| v as i64).unwrap_or(-1);
                let merged = match merge::merge(
                    table,
                    Arc::new(ctx.state()),
                    source,
                    merge::MergeSpec {
                        columns: &columns,
                        key: &task.key,
                        partition_by: &task.partition_by,
                        range,
                    },
                    record.app_metadata(),
                )
                .await
                {
                    Ok(m) => m,
                    Err(e) => {
                        // delta-rs can fail after writing the commit (its post-commit
                        // snapshot update or checkpoint): look for this run in the log.
                        let found = match table::open(url).await {
                            Ok(t) => readback::find_run_commit(&t, base, run_id).await,
                            Err(why) => Err(why),
                        };
                        match found {
                            Ok(Some(v)) => {
                                report.published = true;
                                report.table_version = Some(v);
                                report.rows_written = staged.rows;
                                report.reconciliation = checks.clone();
                                self.last_commit
                                    .fetch_max(v, std::sync::atomic::Ordering::SeqCst);
                                return Err(Error::unverified(e.message().to_string()));
                            }
                            Ok(None) => return Err(e),
                            Err(why) => {
                                return Err(Error::runtime(format!(
                                    "{}; the log could not be read back ({why}): the window may or may not have been published; re-running it is safe",
                                    e.message()
                                )));
                            }
                        }
                    }
                };
                let v = merged
                    .table
                    .version()
                    .ok_or_else(|| Error::runtime("merge produced no version"))?
                    as i64;
                self.last_commit
                    .fetch_max(v, std::sync::atomic::Ordering::SeqCst);
                report.published = true;
                report.table_version = Some(v);
                report.rows_written = staged.rows;
                crate::fault::hit("after-commit", None)?;
                let upserted = Check::counts(
                    "rows_upserted",
                    staged.rows,
                    merged.inserted + merged.updated,
                );
                checks.push(upserted.clone());
                if !upserted.ok {
                    report.reconciliation = checks.clone();
                    return Err(Error::unverified(format!(
                        "merge inserted {} and updated {} rows for {} produced rows",
                        merged.inserted, merged.updated, staged.rows
                    )));
                }
                // Read the window back from the log on storage (statistics only).
                if before.version().is_none_or(|b| (b as i64) < v) {
                    before.update_incremental(Some(v as u64)).await?;
                }
                let committed_rows = partition::window_rows(&partition::window_files(
                    &before,
                    &task.partition_by,
                    range,
                )?)?;
                (v, merged.rows_before + merged.inserted, committed_rows)
            }
        };
        let readback = Check::counts("rows_committed", expected_rows, committed_rows);
        checks.push(readback.clone());
        report.reconciliation = checks;
        report.table_version = Some(version);
        report.rows_written = staged.rows;
        tracing::info!(
            window = %window.label(),
            version,
            rows_committed = committed_rows,
            "published in one commit; read back from the log"
        );
        if !readback.ok {
            return Err(Error::unverified(format!(
                "read-back mismatch: version {version} holds {committed_rows} rows for window {}, expected {expected_rows}",
                window.label()
            )));
        }
        report.status = if warn { Status::Mismatch } else { Status::Ok };
        Ok(())
    }
}

impl Runner {
    /// Execute the window into a private temporary directory without publishing anything
    /// (same plan, window check and reconciliation tee as a run). For `verify`.
    pub async fn stage_to_temp(
        &self,
        window: &Window,
    ) -> Result<(tempfile::TempDir, Staged, Planned)> {
        let planned = self.plan(window).await?;
        let dir = temp_dir("idemlake-verify-")?;
        let (store, config) = temp_sink(&dir, &planned)?;
        let staged = stage(
            &self.ctx,
            &self.task,
            window,
            (&planned, None),
            Sink { store, config },
        )
        .await?;
        Ok((dir, staged, planned))
    }

    /// The independent check path (its own session over the same inputs).
    pub fn checker(&self) -> &crate::pipeline::checks::Checker {
        &self.checker
    }

    /// The session the runner plans in (sources registered).
    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// What the runner pinned/fingerprinted of each source when it was created.
    pub fn source_versions(&self) -> &[sources::SourceVersion] {
        &self.sources
    }
}
