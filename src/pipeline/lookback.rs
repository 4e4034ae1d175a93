//! A window and its lookback windows (`[window] lookback = N`), published together.
//!
//! Late rows are the main reason windows get re-run, so a `run` of window W also re-publishes
//! W-1 … W-N. Each window goes through stages 1–3 on its own (its own plan, staged files and
//! reconciliation, its own report), and in overwrite mode all of them are then published in
//! **one commit**: readers never see W new and W-1 old. If any window fails before the commit,
//! none is published and the others' staged files are discarded. A merge task publishes its
//! windows one merge each (a MERGE is one window's operation), oldest first.

use std::time::Instant;

use crate::error::{Error, Result};
use crate::pipeline::execute;
use crate::pipeline::runner::Runner;
use crate::pipeline::stages::Ready;
use crate::report::record::Report;
use crate::task::Mode;
use crate::task::window::Window;

impl Runner {
    /// Run `windows` (oldest first: a window and its lookback windows) and publish them
    /// together; one report per window, in the same order, each also in the run log.
    pub async fn run_together(&self, windows: &[Window]) -> Vec<Report> {
        if windows.len() <= 1 || self.task().mode == Mode::Merge {
            self.start_checks(windows);
            let mut reports = Vec::with_capacity(windows.len());
            for w in windows {
                reports.push(self.run(w).await);
            }
            return reports;
        }
        let started = Instant::now();
        // Shared sources are read once for all of them.
        self.share_scans(windows);
        let prepared = futures::future::join_all(windows.iter().map(|w| self.prepare_one(w))).await;
        let mut reports = match prepared.iter().find_map(|(r, ready)| {
            ready
                .as_ref()
                .err()
                .map(|e| format!("{} failed: {}", r.window.label, e.message()))
        }) {
            Some(why) => self.publish_none(prepared, &why).await,
            None => self.publish_all(windows, prepared).await,
        };
        let store = self.target.view().log_store().object_store(None);
        let overwrite = self.task().mode == crate::task::Mode::Overwrite;
        for report in &mut reports {
            report.duration_ms = started.elapsed().as_millis() as u64;
            self.lineage_end(report).await;
            crate::report::runlog::record(&store, report, overwrite).await;
        }
        reports
    }

    /// Stages 1–3 of one window, with its own run id and report.
    async fn prepare_one(&self, window: &Window) -> (Report, Result<Option<Ready>>) {
        let run_id = uuid::Uuid::new_v4().to_string();
        let mut report = Report::new(self.task(), window, &run_id);
        self.lineage_start(&mut report).await;
        let ready = match self.permit().await {
            Ok(_permit) => self.prepare(window, &run_id, &mut report).await,
            Err(e) => Err(e),
        };
        (report, ready)
    }

    /// A window failed before the commit: nothing is published, staged files are discarded,
    /// and every other report says why.
    async fn publish_none(
        &self,
        prepared: Vec<(Report, Result<Option<Ready>>)>,
        why: &str,
    ) -> Vec<Report> {
        let mut reports = Vec::with_capacity(prepared.len());
        for (mut report, ready) in prepared {
            match ready {
                Err(e) => report.fail(&e),
                Ok(Some(r)) => {
                    let w = &r.reconciled.window;
                    execute::discard(&w.store, &w.staged.adds).await;
                    report.fail(&Error::runtime(format!(
                        "not published: it is published together with its lookback windows, and window {why}"
                    )));
                }
                // Skipped (an empty result): nothing to publish either way.
                Ok(None) => {}
            }
            reports.push(report);
        }
        reports
    }

    /// Every window passed stages 1–3: one commit for all that have rows to publish.
    async fn publish_all(
        &self,
        windows: &[Window],
        prepared: Vec<(Report, Result<Option<Ready>>)>,
    ) -> Vec<Report> {
        let ready: Vec<(&Window, Report, Option<Ready>)> = windows
            .iter()
            .zip(prepared)
            .map(|(w, (report, ready))| (w, report, ready.ok().flatten()))
            .collect();
        let commits: Vec<_> = ready
            .iter()
            .filter_map(|(w, _, r)| r.as_ref().map(|r| self.window_commit(r, w)))
            .collect();
        let Some(schema) = ready
            .iter()
            .find_map(|(_, _, r)| r.as_ref().map(|r| r.plan.planned.schema.clone()))
        else {
            // Every window was skipped.
            return ready.into_iter().map(|(_, report, _)| report).collect();
        };
        let mut published = self
            .target
            .publish_together(&schema, commits)
            .await
            .into_iter();
        let mut reports = Vec::with_capacity(ready.len());
        for (w, mut report, r) in ready {
            if let Some(r) = r {
                let outcome = published.next().expect("one outcome per commit");
                let committed = self.overwrite_landed(outcome, &r).await;
                if let Err(e) = self.finish(w, r, committed, &mut report) {
                    report.fail(&e);
                }
            }
            reports.push(report);
        }
        reports
    }
}
