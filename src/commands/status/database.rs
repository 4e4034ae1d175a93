//! Database sources whose rows in a published window changed since the run that published it
//! (`stale_inputs`): for a task reading a PostgreSQL table, the window's default check is
//! computed again now (`source_rows`, or `source_content` with `[reconcile] default =
//! "content"`: the task's query over the table as it is) and compared with the value the
//! publishing run recorded. A row inserted or deleted in the window (and with `content`, a row
//! updated) makes the window stale, named. It reads each published window's rows from the
//! database once: `status` of a year of windows reads the year.

use datafusion::prelude::SessionContext;

use crate::error::Result;
use crate::report::states::WindowStatus;
use crate::task::window::Window;
use crate::task::{Format, Task};

/// The session `status` computes the checks again in, made on first use.
#[derive(Default)]
pub(super) struct Recheck {
    ctx: Option<SessionContext>,
}

impl Recheck {
    /// What changed in the database in `st`'s window since its publishing run, as one line
    /// naming the check and both values; empty when nothing did (or nothing was recorded).
    pub(super) async fn changed_rows(
        &mut self,
        table: &deltalake::DeltaTable,
        task: &Task,
        st: &WindowStatus,
    ) -> Result<Vec<String>> {
        let Some(source) = task.sources.iter().find(|s| s.format == Format::Postgres) else {
            return Ok(Vec::new());
        };
        let (Some(version), Some(run)) = (st.table_version, st.run_id.as_deref()) else {
            return Ok(Vec::new());
        };
        let Some(record) = crate::delta::actions::run_record(table, version, run).await? else {
            return Ok(Vec::new());
        };
        let recorded = record
            .get("reconciliation")
            .and_then(|r| r.as_array())
            .into_iter()
            .flatten()
            .find_map(|c| {
                let name = c.get("check")?.as_str()?;
                matches!(name, "source_rows" | "source_content")
                    .then(|| Some((name.to_string(), c.get("source")?.as_str()?.to_string())))?
            });
        let Some((check, then)) = recorded else {
            return Ok(Vec::new());
        };
        if self.ctx.is_none() {
            let ctx = crate::session::build(crate::session::Profile::Checks)?;
            let local = crate::engine::Engine::Local;
            crate::pipeline::sources::register(&ctx, &task.sources, &local).await?;
            self.ctx = Some(ctx);
        }
        let ctx = self.ctx.as_ref().expect("just made");
        let window = Window::parse(&st.window.label, task.grain, &task.timezone)?;
        let df = crate::task::plan::plan_query_window(ctx, task, &window)
            .await?
            .df;
        let now = match check.as_str() {
            "source_content" => crate::pipeline::checks::content::of_dataframe(df)
                .await?
                .to_string(),
            _ => df.count().await?.to_string(),
        };
        Ok(match now == then {
            true => Vec::new(),
            false => vec![format!(
                "{}: the window's rows in the database changed since it was published ({check} {then} then, {now} now)",
                source.alias
            )],
        })
    }
}
