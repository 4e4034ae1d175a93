//! The one way a window is planned for a run, in one of two kinds:
//!
//! - **plain**: the window's session is the runner's (every source read directly) and the
//!   task's SQL is planned for the window on its own, like any DataFusion query;
//! - **accelerated**: sources shared across windows are in-memory slices of a chunk scan
//!   (`scan`), and the task's queries, planned once, are bound to the window (`prepared`,
//!   with physical plans derived by `reuse`); whatever the accelerations cannot take falls
//!   back to the plain planning of that window.
//!
//! [`crate::config::Config::accelerate`] chooses the kind. Both give the same rows; the
//! differential tests run both against an oracle outside idemlake, and the independent
//! checks (`pipeline::checks`) never use this planner at all.

use std::sync::Arc;

use datafusion::prelude::SessionContext;

use crate::accel::prepared::{Prepared, WindowPlans};
use crate::accel::scan::{Shared, WindowSession};
use crate::error::Result;
use crate::task::Task;
use crate::task::plan::{self, Planned};
use crate::task::window::Window;

/// A window planned for execution: the plan, the prepared plans bound to it (if any), and
/// the session to execute it in.
pub struct WindowPlanned {
    pub planned: Planned,
    pub plans: Option<WindowPlans>,
    pub session: SessionContext,
}

/// How a runner plans its windows (see the module documentation).
pub struct Planner {
    /// Whether the task's queries planned unbound when the planner was made: the checks that
    /// do not depend on the window (reconcile columns) are then not repeated per window.
    validated: bool,
    /// Sources read once per chunk of windows (accelerated only).
    shared: Option<Arc<Shared>>,
    /// The task's queries planned once, bound per window (accelerated only).
    prepared: Option<Prepared>,
    accelerated: bool,
}

impl Planner {
    /// The planner for `task` in session `ctx`: accelerated when the configuration says so.
    pub async fn new(task: &Task, ctx: &SessionContext, accelerated: bool) -> Planner {
        let unbound = match plan::plan(ctx, task, None).await {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::info!("the task does not plan unbound, so no scans are shared: {e}");
                None
            }
        };
        let validated = unbound.is_some();
        let (shared, prepared) = match unbound {
            Some(unbound) if accelerated => {
                // Only the task's query reads the shared slices: `[reconcile].source` runs
                // on the independent check path.
                let shared = Shared::new(task, ctx, &[unbound.df.logical_plan()])
                    .await
                    .map(Arc::new);
                if let Some(s) = &shared {
                    tracing::debug!(sources = ?s.shared_sources(), "windows share source scans");
                }
                let prepared = prepare(task, ctx, shared.as_deref()).await;
                (shared, prepared)
            }
            _ => (None, None),
        };
        Planner {
            validated,
            shared,
            prepared,
            accelerated,
        }
    }

    /// `"accelerated"` or `"plain"`.
    pub fn kind(&self) -> &'static str {
        if self.accelerated {
            "accelerated"
        } else {
            "plain"
        }
    }

    /// Announce the windows about to run, in order, so shared sources are read once per
    /// chunk of them.
    pub fn announce(&self, windows: &[Window]) {
        if let Some(s) = &self.shared {
            s.plan_windows(windows);
        }
    }

    /// The session `window` runs in: `base`, with shared sources as in-memory slices split
    /// into `partitions`.
    pub async fn session_for(
        &self,
        base: &SessionContext,
        window: &Window,
        partitions: usize,
    ) -> Result<WindowSession> {
        match &self.shared {
            None => Ok(WindowSession::base(base)),
            Some(s) => {
                let ws = s.session_for(base, window, partitions).await?;
                tracing::debug!(window = %window.label(), shared = ?ws.shared, "window session");
                Ok(ws)
            }
        }
    }

    /// `task` planned for `window` in `session` (see [`Planner::session_for`]): bound from
    /// the prepared plans when they fit the session, planned on its own otherwise.
    /// `[reconcile].source` is never planned here: it runs on the independent path.
    pub async fn plan(
        &self,
        base: &SessionContext,
        session: &WindowSession,
        task: &Task,
        window: &Window,
    ) -> Result<WindowPlanned> {
        if let Some(p) = &self.prepared {
            match p.bind(session, task, window).await {
                Ok(Some((planned, plans))) => {
                    tracing::debug!(window = %window.label(), "bound the prepared plans");
                    return Ok(WindowPlanned {
                        planned,
                        plans: Some(plans),
                        session: base.clone(),
                    });
                }
                Ok(None) => {}
                Err(e) => tracing::info!("prepared plans not used for {}: {e}", window.label()),
            }
        }
        let ctx = session.context().await?;
        let planned = if self.validated {
            plan::plan_query_window(&ctx, task, window).await?
        } else {
            plan::plan_window(&ctx, task, window, true).await?
        };
        Ok(WindowPlanned {
            planned,
            plans: None,
            session: ctx,
        })
    }
}

/// The task's queries planned once, to be bound per window (`None`: each window plans
/// itself).
async fn prepare(task: &Task, ctx: &SessionContext, shared: Option<&Shared>) -> Option<Prepared> {
    let template = match shared {
        Some(s) => s.template_session(ctx).await,
        None => Ok(ctx.clone()),
    };
    let sliced: Vec<String> = shared
        .map(|s| s.shared_sources().into_iter().map(|(a, _)| a).collect())
        .unwrap_or_default();
    let prepared = match template {
        Ok(t) => Prepared::new(&t, task).await.map(|p| p.sliced(sliced)),
        Err(e) => Err(e),
    };
    prepared
        .map_err(|e| tracing::info!("queries not prepared (each window plans itself): {e}"))
        .ok()
}
