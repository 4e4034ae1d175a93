//! One window through the pipeline, as a chain of typed stages:
//!
//! [`WindowPlan`] (planned) → [`StagedWindow`] → [`Reconciled`] → `Committed` (see
//! `commit`) → recorded (the report and the run log).
//!
//! Ordering is the guarantee: data files are written first (invisible), every check runs on
//! them, and only then is the single commit made. Any failure before the commit publishes
//! nothing (the staged files are discarded); the commit itself is atomic; the read-back after
//! it fails loudly if the committed snapshot disagrees with what was written, and a report
//! whose commit landed says so whatever fails afterwards. The window comes from the caller.

use std::time::Instant;

use deltalake::DeltaTable;

use crate::delta::table;
use crate::error::{Error, Result};
use crate::pipeline::checks::{data, staged};
use crate::pipeline::execute::{self, Sink};
use crate::pipeline::landing::late;
use crate::pipeline::reconcile::{self, Check};
use crate::pipeline::runner::Runner;
use crate::pipeline::stage::{stage, temp_sink, tempdir_for_merge};
use crate::pipeline::stages::{
    CommitError, Committed, Ready, Reconciled, StagedWindow, WindowPlan,
};
use crate::report::record::{DataCheckResult, Report, RunRecord, Status};
use crate::task::checks::Severity;
use crate::task::window::Window;
use crate::task::{Mode, OnEmpty, OnMismatch};

impl Runner {
    /// Run one window and publish it; the report is also written to the run log.
    pub async fn run(&self, window: &Window) -> Report {
        let started = Instant::now();
        let run_id = uuid::Uuid::new_v4().to_string();
        let mut report = Report::new(self.task(), window, &run_id);
        self.lineage_start(&mut report).await;
        if let Err(e) = self.run_inner(window, &run_id, &mut report).await {
            report.fail(&e);
        }
        report.duration_ms = started.elapsed().as_millis() as u64;
        self.lineage_end(&mut report).await;
        let store = self.target.view().log_store().object_store(None);
        crate::report::runlog::record(&store, &report, self.task().mode == Mode::Overwrite).await;
        report
    }

    /// The stage chain. `report` is filled in as the stages go, so a failure after the
    /// commit still reports the commit.
    async fn run_inner(&self, window: &Window, run_id: &str, report: &mut Report) -> Result<()> {
        // Executing windows are limited (`backfill --parallel`); waiting to commit is not.
        let permit = self.permit().await?;
        let Some(ready) = self.prepare(window, run_id, report).await? else {
            return Ok(());
        };
        let committed = match self.task().mode {
            Mode::Overwrite => {
                // Waiting for the group commit does not hold an execution slot.
                drop(permit);
                let commit = self.window_commit(&ready, window);
                let published = self
                    .target
                    .publish(&ready.plan.planned.schema, commit, &|| self.executing())
                    .await;
                self.overwrite_landed(published, &ready).await
            }
            Mode::Merge => self.commit_merge(&ready).await,
        };
        self.finish(window, ready, committed, report)
    }

    /// Windows of this runner executing now (holding an execution permit).
    fn executing(&self) -> usize {
        self.exec_limit
            .load(std::sync::atomic::Ordering::SeqCst)
            .saturating_sub(self.exec.available_permits())
    }

    /// An execution permit (see [`Runner::set_parallel`]).
    pub(super) async fn permit(&self) -> Result<tokio::sync::SemaphorePermit<'_>> {
        self.exec
            .acquire()
            .await
            .map_err(|e| Error::runtime(format!("runner closed: {e}")))
    }

    /// Stages 1–3 and the pre-commit checks: the window ready to commit (`None`: skipped, empty).
    pub(super) async fn prepare(
        &self,
        window: &Window,
        run_id: &str,
        report: &mut Report,
    ) -> Result<Option<Ready>> {
        self.target.prefetch_readback(); // beside the scans (see `target::prefetch`)
        crate::fault::pause("before-pins").await;
        let pins = self.pin_window(window).await?;
        self.landed(window, &pins)?;
        let plan = self.plan_stage(window, report).await?;
        let staged = self.stage_window(&plan, window).await?;
        let schema = plan.planned.schema.clone();
        let reconciled = self
            .reconcile_window(staged, (window, &schema, &pins), report)
            .await?;
        if self.skip_empty(&reconciled, &plan.table, window, report)? {
            return Ok(None);
        }
        let data_checks = self.data_checks(&plan, &reconciled, window, report).await?;
        self.check_inputs(&reconciled.window, &pins).await?;
        crate::fault::hit("before-commit", None)?;
        let staged = &reconciled.window;
        let paths: Vec<String> = staged.staged.adds.iter().map(|a| a.path.clone()).collect();
        crate::fault::shrink_staged(&staged.store, &paths).await?;
        let mut record = RunRecord::new(self.task(), window, run_id, &plan.planned.sql_hash);
        record.sources = self.window_sources(&pins);
        report.io.sources = record.sources.clone();
        record.rows_written = reconciled.window.staged.rows;
        record.reconciliation = reconciled.checks.clone();
        // Offending rows stay in the report and the run log, out of the Delta log, which
        // keeps them after the data itself is vacuumed.
        record.data_checks = data_checks
            .into_iter()
            .map(|mut c| {
                c.sample.clear();
                c
            })
            .collect();
        Ok(Some(Ready {
            plan,
            reconciled,
            record,
        }))
    }

    /// After stage 4: the report says what landed — the version, rows and checks, also when
    /// something failed after the commit — and the read-back check joins it.
    pub(super) fn finish(
        &self,
        window: &Window,
        ready: Ready,
        committed: std::result::Result<Committed, CommitError>,
        report: &mut Report,
    ) -> Result<()> {
        Self::note_written(&ready, report);
        let rows = ready.reconciled.window.staged.rows;
        let mut checks = ready.reconciled.checks;
        match committed {
            Ok(c) => self.record(window, c, checks, ready.reconciled.warn, rows, report),
            Err((e, landed)) => {
                if let Some(v) = landed {
                    report.published = true;
                    report.table_version = Some(v.version);
                    report.rows_written = rows;
                    checks.extend(v.checks);
                    report.reconciliation = checks;
                }
                Err(e)
            }
        }
    }

    /// Stage 1. The session `window` runs in (shared sources as in-memory slices of a chunk
    /// scan), the task bound from the prepared plans when they fit that session or planned
    /// on its own otherwise, and the target's schema checked against it.
    async fn plan_stage(&self, window: &Window, report: &mut Report) -> Result<WindowPlan> {
        let session = self.session_for(window).await?;
        let planned = self
            .planner
            .plan(self.session(), &session, self.task(), window)
            .await?;
        report.sql_hash = Some(planned.planned.sql_hash.clone());
        self.checks_valid
            .get_or_try_init(|| async {
                crate::pipeline::independent::validate(self.task(), &planned.planned.schema)?;
                data::validate(
                    self.checker().session(),
                    self.task(),
                    &planned.planned.schema,
                    &self.references,
                )
                .await
            })
            .await?;
        self.target.loaded().await?;
        let table = self.target.view();
        let task = self.task();
        let columns = table::schema_plan(
            &table,
            &planned.planned.schema,
            &task.partition_by,
            task.on_schema_change,
        )?;
        if !columns.added.is_empty() {
            tracing::info!(
                window = %window.label(),
                columns = ?columns.added,
                "this window adds columns to the table (in its commit)"
            );
        }
        crate::storage::probe_conditional_put(self.target.url()).await?;
        Ok(WindowPlan {
            range: planned.planned.window_range()?.clone(),
            planned: planned.planned,
            plans: planned.plans,
            session: planned.session,
            table,
            columns,
        })
    }

    /// Stage 2. Stage the rows — into the table's own directory (overwrite) or a private
    /// temp dir (merge) — while the source side of the checks runs beside it, by its own
    /// route (see `checks`).
    async fn stage_window(&self, plan: &WindowPlan, window: &Window) -> Result<StagedWindow> {
        let task = self.task();
        let temp = tempdir_for_merge(task)?;
        let (store, config) = match &temp {
            None => (
                plan.table.log_store().object_store(None),
                table::writer_config(&plan.table, plan.columns.target.clone(), &task.partition_by)?,
            ),
            Some(dir) => temp_sink(dir, &plan.planned)?,
        };
        // Overwrite files are written in the table's columns (order, widened types, added
        // columns); a merge's staged rows keep the query's and delta-rs merges them by name.
        let adapt = (temp.is_none() && plan.columns.target != plan.planned.schema)
            .then(|| plan.columns.target.clone());
        let sink = Sink {
            store: store.clone(),
            config,
            adapt,
        };
        let (staged, source_side) = tokio::join!(
            stage(
                self.output_session(&plan.session),
                task,
                &plan.range,
                (&plan.planned, plan.plans.as_ref()),
                sink
            ),
            async {
                crate::fault::pause("before-source-checks").await;
                self.checker()
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
        Ok(StagedWindow {
            staged,
            source_side,
            store,
            temp,
        })
    }

    /// Stage 3. The checks before anything is published: the files hold the rows the query
    /// produced, and the output agrees with the independent source side. A failure discards
    /// the staged files.
    async fn reconcile_window(
        &self,
        mut w: StagedWindow,
        (window, schema, pins): (
            &Window,
            &arrow::datatypes::SchemaRef,
            &[crate::pipeline::pins::Pin],
        ),
        report: &mut Report,
    ) -> Result<Reconciled> {
        let task = self.task();
        let mut checks = vec![Check::counts(
            "rows_staged",
            w.staged.rows,
            execute::rows_in(&w.staged.adds)?,
        )];
        let mut attempt = 0;
        let rc = loop {
            let compared = crate::pipeline::independent::compare(self.checker(), task, &w, schema);
            let (rc, on_mismatch) = match compared.await {
                Ok(r) => r,
                Err(e) => {
                    execute::discard(&w.store, &w.staged.adds).await;
                    return Err(e);
                }
            };
            if !(rc.iter().any(|c| !c.ok) && on_mismatch == OnMismatch::Fail) {
                break rc;
            }
            report.reconciliation = checks.iter().chain(&rc).cloned().collect();
            // A source that changed while the window ran explains a mismatch: retryable.
            if let Err(e) = self.inputs_unchanged(pins).await {
                execute::discard(&w.store, &w.staged.adds).await;
                return Err(e);
            }
            // The window's files are as it pinned them, but the checks may have listed the
            // source before a file the window read had landed (a backfill's grouped check
            // lists every window's directories first): once more, afresh, by their own route.
            attempt += 1;
            if attempt > 1 {
                execute::discard(&w.store, &w.staged.adds).await;
                return Err(Error::mismatch(format!(
                    "reconciliation failed, nothing was published: {}",
                    reconcile::describe_failures(&rc)
                )));
            }
            tracing::info!(window = %window.label(), "a check failed with the window's files unchanged: the checks compute the source side again");
            w.source_side = match self.checker().window_side(task, window).await {
                Ok(side) => side,
                Err(e) => {
                    execute::discard(&w.store, &w.staged.adds).await;
                    return Err(e);
                }
            };
        };
        let failed = rc.iter().any(|c| !c.ok);
        checks.extend(rc);
        report.reconciliation = checks.clone();
        if !checks[0].ok {
            execute::discard(&w.store, &w.staged.adds).await;
            return Err(Error::runtime(format!(
                "the files written hold {} rows but the query produced {}; nothing was published",
                checks[0].output, checks[0].source
            )));
        }
        tracing::info!(window = %window.label(), checks = checks.len(), warn = failed, "reconciled");
        Ok(Reconciled {
            window: w,
            checks,
            warn: failed,
        })
    }

    /// The `[checks]` on the rows the commit will publish (see `checks::data`) and each zone's
    /// `late_rows` (`landing::late`): a failed check with `severity = "error"` discards the
    /// staged files (exit 6, nothing published); failed `warn` checks publish and are reported.
    async fn data_checks(
        &self,
        plan: &WindowPlan,
        r: &Reconciled,
        window: &Window,
        report: &mut Report,
    ) -> Result<Vec<DataCheckResult>> {
        let late = late::late_rows(self.checker().session(), self.task(), window);
        let results = match (late.await, self.task().checks.is_empty()) {
            (Ok(late), false) => self
                .task_checks(plan, r, window)
                .await
                .map(|c| [c, late].concat()),
            (other, _) => other,
        };
        let w = &r.window;
        if results.is_err() {
            execute::discard(&w.store, &w.staged.adds).await;
        }
        let results = results?;
        report.data_checks = results.clone();
        if let Some(failed) = data::describe(&results, Severity::Error) {
            execute::discard(&w.store, &w.staged.adds).await;
            return Err(Error::rejected(format!(
                "data checks failed, nothing was published: {failed}"
            )));
        }
        if let Some(warned) = data::describe(&results, Severity::Warn) {
            tracing::warn!(window = %window.label(), checks = %warned, "data checks warned; publishing");
        }
        Ok(results)
    }

    /// The task's own `[checks]` over the window's rows as readers will see them.
    async fn task_checks(
        &self,
        plan: &WindowPlan,
        r: &Reconciled,
        window: &Window,
    ) -> Result<Vec<DataCheckResult>> {
        let task = self.task();
        let w = &r.window;
        let own = data::session(self.checker().session(), task).await?;
        let schema = &plan.planned.schema;
        let (files, registered) = staged::table(
            &own,
            w.store.clone(),
            &w.staged.adds,
            schema,
            &task.partition_by,
        )
        .await?;
        let output = match task.mode {
            Mode::Overwrite => Ok(files),
            Mode::Merge => match self.target.table().await {
                Ok(table) => data::merged_window(&own, &table, task, window, files).await,
                Err(e) => Err(e),
            },
        }
        .and_then(|o| data::shaped(&own, o, schema));
        let results = match output {
            Ok(o) => data::evaluate(&own, task, window, o, &self.references).await,
            Err(e) => Err(e),
        };
        staged::release(&own, registered);
        results
    }

    /// An empty result under `[write].on_empty`: `true` when the run ends here (skipped:
    /// nothing committed), an error for `fail`, `false` to go on and clear the window.
    fn skip_empty(
        &self,
        r: &Reconciled,
        table: &DeltaTable,
        window: &Window,
        report: &mut Report,
    ) -> Result<bool> {
        let task = self.task();
        if r.window.staged.rows > 0 {
            return Ok(false);
        }
        match task.on_empty {
            OnEmpty::Fail => Err(Error::runtime(format!(
                "the query returned no rows for window {} and [write].on_empty = \"fail\"; nothing was published",
                window.label()
            ))),
            // `clear` goes on: the commit removes the window's files and adds none.
            OnEmpty::Clear if task.mode == Mode::Overwrite => Ok(false),
            // A merge upserts the rows produced: none leaves the window as it is, whatever
            // `on_empty` says (`clear` cannot apply to upsert semantics). Nothing is
            // committed, and the run is recorded as skipped, not as the window's publisher.
            OnEmpty::Skip | OnEmpty::Clear => {
                report.status = Status::Skipped;
                report.error = None;
                let last = self.target.last_commit();
                report.table_version = table.version().map(|v| (v as i64).max(last));
                if task.mode == Mode::Merge {
                    tracing::info!(
                        window = %window.label(),
                        "merge with an empty result: the window is left as it is"
                    );
                }
                Ok(true)
            }
        }
    }

    /// The last stage: the read-back check joins the report, which says published and ok
    /// (or mismatch when a check only warned).
    fn record(
        &self,
        window: &Window,
        c: Committed,
        mut checks: Vec<Check>,
        warn: bool,
        rows: u64,
        report: &mut Report,
    ) -> Result<()> {
        let readback = Check::counts("rows_committed", c.expected_rows, c.committed_rows);
        checks.extend(c.checks);
        checks.push(readback.clone());
        report.published = true;
        report.reconciliation = checks;
        report.table_version = Some(c.version);
        report.rows_written = rows;
        tracing::info!(
            window = %window.label(),
            version = c.version,
            rows_committed = c.committed_rows,
            "published in one commit; read back from the log"
        );
        if !readback.ok {
            return Err(Error::unverified(format!(
                "read-back mismatch: version {} holds {} rows for window {}, expected {}",
                c.version,
                c.committed_rows,
                window.label(),
                c.expected_rows
            )));
        }
        report.status = if warn {
            Status::Mismatch
        } else if report.data_checks.iter().any(|c| !c.ok) {
            Status::Warned
        } else {
            Status::Ok
        };
        Ok(())
    }
}
