//! OpenLineage run events for the windows idemlake runs: START when a window begins,
//! COMPLETE when it is published (or skipped), FAIL with its error and exit class. One
//! OpenLineage run per window (its run id), under the invocation's run (a backfill's) and the
//! orchestrator's (`OPENLINEAGE_PARENT_ID`, `--lineage-parent`).
//!
//! `event` builds the events from what a run knows (`assertions` its checks), `names` names
//! the datasets, `settings` resolves where they go, `transport` sends them. Sending never
//! fails a window, and delays it at most the timeout per event; what became of a window's
//! events is in its report (`lineage`). The pipeline calls [`TaskLineage`] at a window's start
//! and end.
//!
//! May import `task`, `report`, `config`, `error`.

pub mod assertions;
pub mod event;
pub mod names;
pub mod settings;
pub mod transport;

use std::sync::{Arc, OnceLock};

use crate::lineage::event::Kind;
use crate::lineage::names::DatasetName;
pub use crate::lineage::settings::{RunRef, Settings};
use crate::report::record::{LineageOutcome, Report};
use crate::task::Task;
use crate::task::project::Project;

/// Where a project's events go, and how they are named: off (`None` from [`Lineage::of`])
/// unless configured.
pub struct Lineage {
    settings: Settings,
    transport: transport::Transport,
}

impl Lineage {
    /// The lineage of `project` (the environment's settings over its project file's);
    /// `None`: off.
    pub fn of(project: &Project) -> Option<Arc<Lineage>> {
        let env = &crate::config::get().lineage;
        let settings = Settings::resolve(env, project.file.lineage.as_ref(), &project.dir)?;
        let transport = transport::Transport::new(&settings);
        tracing::debug!(
            to = %transport.describe(),
            namespace = %settings.namespace,
            "OpenLineage events are on"
        );
        Some(Arc::new(Lineage {
            settings,
            transport,
        }))
    }

    /// Send `event`, counting it in `outcome`; a failure is logged, never returned.
    async fn emit(&self, event: &serde_json::Value, outcome: &mut LineageOutcome) {
        let body = event.to_string();
        match self.transport.send(&body).await {
            Ok(()) => outcome.sent += 1,
            Err(why) => {
                outcome.failed += 1;
                let what = event["eventType"].as_str().unwrap_or("an");
                let run = event["run"]["runId"].as_str().unwrap_or_default();
                if why.starts_with("not sent") {
                    tracing::info!(
                        run,
                        "OpenLineage {what} event not sent to {}: {why}",
                        self.transport.describe()
                    );
                } else {
                    tracing::warn!(
                        run,
                        "OpenLineage {what} event not sent to {}: {why}",
                        self.transport.describe()
                    );
                }
                outcome.error.get_or_insert(why);
            }
        }
    }

    /// The namespace of idemlake's jobs.
    pub fn namespace(&self) -> &str {
        &self.settings.namespace
    }
}

/// The lineage of one task's windows: its job, its table, and the invocation run its
/// windows run under (set by a backfill).
pub struct TaskLineage {
    lineage: Arc<Lineage>,
    task: Task,
    table: DatasetName,
    invocation: OnceLock<RunRef>,
}

impl TaskLineage {
    /// `task`'s lineage in `project`, or `None` when lineage is off.
    pub fn new(project: &Project, task: &Task) -> Option<TaskLineage> {
        let lineage = Lineage::of(project)?;
        let table = match project.table_url(task) {
            Ok(u) => names::dataset(u.as_str()),
            Err(_) => names::dataset(&task.name),
        };
        Some(TaskLineage {
            lineage,
            task: task.clone(),
            table,
            invocation: OnceLock::new(),
        })
    }

    /// The parent of a window's run: the invocation's run, else the orchestrator's; and the
    /// root of them.
    fn window_place(&self) -> event::Lineage<'_> {
        let s = &self.lineage.settings;
        match self.invocation.get() {
            Some(inv) => event::Lineage {
                namespace: &s.namespace,
                parent: Some(inv),
                root: s.root.as_ref().or(Some(inv)),
            },
            None => event::Lineage {
                namespace: &s.namespace,
                parent: s.parent.as_ref(),
                root: s.root.as_ref(),
            },
        }
    }

    /// A window began: its START event (what it reads as known so far in `report.io`).
    pub async fn window_started(&self, report: &mut Report) {
        self.window_event(Kind::Start, report).await;
    }

    /// A window ended as `report` says: its COMPLETE or FAIL event.
    pub async fn window_ended(&self, report: &mut Report) {
        self.window_event(Kind::of(report), report).await;
    }

    async fn window_event(&self, kind: Kind, report: &mut Report) {
        let e = event::window_event(kind, &self.window_place(), &self.task, report, &self.table);
        let mut outcome = report.lineage.take().unwrap_or_default();
        self.lineage.emit(&e, &mut outcome).await;
        report.lineage = Some(outcome);
    }

    /// An invocation running many windows of the task began (`what`: `backfill`): its own
    /// run, job `<task>.<what>`, under the orchestrator's; the task's windows run under it from
    /// now on. Returns what became of its START event.
    pub async fn invocation_started(&self, what: &str) -> LineageOutcome {
        let run = RunRef {
            namespace: self.lineage.settings.namespace.clone(),
            name: format!("{}.{what}", self.task.name),
            run_id: uuid::Uuid::new_v4().hyphenated().to_string(),
        };
        tracing::info!(run_id = %run.run_id, job = %run.name, "OpenLineage run of this {what}");
        let run = self.invocation.get_or_init(|| run);
        self.invocation_event(Kind::Start, run, None).await
    }

    /// The invocation ended; `error`: why it failed (some windows did).
    pub async fn invocation_ended(&self, error: Option<&str>) -> LineageOutcome {
        let Some(run) = self.invocation.get() else {
            return LineageOutcome::default();
        };
        let kind = if error.is_some() {
            Kind::Fail
        } else {
            Kind::Complete
        };
        self.invocation_event(kind, run, error).await
    }

    async fn invocation_event(
        &self,
        kind: Kind,
        run: &RunRef,
        error: Option<&str>,
    ) -> LineageOutcome {
        let s = &self.lineage.settings;
        let place = event::Lineage {
            namespace: &s.namespace,
            parent: s.parent.as_ref(),
            root: s.root.as_ref(),
        };
        let e = event::invocation_event(kind, &place, &run.name, &run.run_id, error);
        let mut outcome = LineageOutcome::default();
        self.lineage.emit(&e, &mut outcome).await;
        outcome
    }
}
