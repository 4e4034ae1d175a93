//! Sources whose rows in a published window changed since the run that published it
//! (`stale_inputs`): for a task reading a PostgreSQL table, or a Delta table that is not
//! another task's (one whose version moved since the version the publishing run read), the
//! window's default check is computed again now (`source_rows`, or `source_content` with
//! `[reconcile] default = "content"`: the task's query over the sources as they are) and
//! compared with the value the publishing run recorded. A row inserted or deleted in the
//! window (and with `content`, a row updated) makes the window stale, named; a Delta commit
//! that changed no row of the window does not. It reads each such window's rows once: `status`
//! of a year of windows over a database reads the year; over a Delta source, the windows
//! published before its last commit.

use datafusion::prelude::SessionContext;

use crate::error::Result;
use crate::report::states::WindowStatus;
use crate::task::window::Window;
use crate::task::{Format, Task};

/// The session `status` computes the checks again in, made on first use, and the versions of
/// the task's Delta sources it reads.
#[derive(Default)]
pub(super) struct Recheck {
    ctx: Option<(SessionContext, Vec<crate::report::record::SourceVersion>)>,
}

/// Whether `s` is read again by [`Recheck`]: a PostgreSQL table, or a Delta table that is not
/// another task's (those are compared by their publishes, see `upstream`).
fn rechecked(s: &crate::task::Source) -> bool {
    s.format == Format::Postgres || (s.format == Format::Delta && s.upstream.is_none())
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
        let sources: Vec<&crate::task::Source> =
            task.sources.iter().filter(|s| rechecked(s)).collect();
        if sources.is_empty() {
            return Ok(Vec::new());
        }
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
        let Some((check, recorded)) = recorded else {
            return Ok(Vec::new());
        };
        if self.ctx.is_none() {
            let ctx = crate::session::build(crate::session::Profile::Checks)?;
            let local = crate::engine::Engine::Local;
            let now = crate::pipeline::sources::register(&ctx, &task.sources, &local).await?;
            self.ctx = Some((ctx, now));
        }
        let (ctx, now) = self.ctx.as_ref().expect("just made");
        let moved = moved(&sources, &record, now);
        if moved.is_empty() {
            return Ok(Vec::new());
        }
        let window = Window::parse(&st.window.label, task.grain, &task.timezone)?;
        let df = crate::task::plan::plan_query_window(ctx, task, &window)
            .await?
            .df;
        let again = match check.as_str() {
            "source_content" => crate::pipeline::checks::content::of_dataframe(df)
                .await?
                .to_string(),
            _ => match crate::pipeline::checks::in_database::count(&df).await? {
                Some((n, _)) => n.to_string(),
                None => df.count().await?.to_string(),
            },
        };
        Ok(match again == recorded {
            true => Vec::new(),
            false => vec![format!(
                "{}: the window's rows {}changed since it was published ({check} {recorded} then, {again} now)",
                moved.iter().map(|(a, _)| *a).collect::<Vec<_>>().join(", "),
                match moved.as_slice() {
                    [(_, how)] => how.as_str(),
                    _ => "",
                }
            )],
        })
    }
}

/// Each of `sources` to read again for a window whose run `record` says what it read, and what
/// it says of itself (where the rows are, or how the table moved): a database always, a Delta
/// table only when it moved since the version the run read (`now`: the versions now).
fn moved<'a>(
    sources: &[&'a crate::task::Source],
    record: &serde_json::Value,
    now: &[crate::report::record::SourceVersion],
) -> Vec<(&'a str, String)> {
    let then = |alias: &str| -> Option<i64> {
        record.get("sources")?.as_array()?.iter().find_map(|s| {
            (s.get("alias")?.as_str()? == alias).then(|| s.get("version")?.as_i64())?
        })
    };
    sources
        .iter()
        .filter_map(|s| match s.format {
            Format::Postgres => Some((s.alias.as_str(), "in the database ".to_string())),
            _ => {
                let current = now.iter().find(|v| v.alias == s.alias)?.version?;
                let read = then(&s.alias);
                (read != Some(current)).then(|| {
                    let read = read.map_or("?".to_string(), |v| v.to_string());
                    let how = format!("in the table (version {read} then, {current} now) ");
                    (s.alias.as_str(), how)
                })
            }
        })
        .collect()
}
