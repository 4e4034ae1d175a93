//! Stage 4, the commit: an overwrite queued for a group commit on the target (`target`), or a
//! window-pruned merge; either way the commit is read back, and a commit that landed is
//! reported as published whatever fails afterwards.

use std::sync::Arc;

use datafusion::prelude::{DataFrame, ParquetReadOptions};

use crate::delta::{actions, merge, overwrite, readback, table};
use crate::error::{Error, Result};
use crate::pipeline::reconcile::Check;
use crate::pipeline::runner::Runner;
use crate::pipeline::stage::check_unique_key;
use crate::pipeline::stages::{CommitError, Committed, Landed, Ready, Reconciled, WindowPlan};
use crate::pipeline::target::Published;
use crate::task::window::Window;

impl Runner {
    /// Stage 4, overwrite: what the group commit publishes for the window (see `target`).
    pub(super) fn window_commit(&self, ready: &Ready, window: &Window) -> overwrite::WindowCommit {
        overwrite::WindowCommit {
            range: ready.plan.range.clone(),
            adds: ready.reconciled.window.staged.adds.clone(),
            tags: overwrite::RunTags {
                run_id: ready.record.run_id.clone(),
                window: window.label(),
                sql_hash: ready.plan.planned.sql_hash.clone(),
                inputs: {
                    let pinned: std::collections::BTreeMap<&str, i64> = ready
                        .record
                        .sources
                        .iter()
                        .filter_map(|s| Some((s.alias.as_str(), s.version?)))
                        .collect();
                    (!pinned.is_empty())
                        .then(|| serde_json::to_string(&pinned).expect("serialisable"))
                },
                checks: Some(
                    ready
                        .reconciled
                        .checks
                        .iter()
                        .filter(|c| c.ok)
                        .map(|c| c.check.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                ),
            },
            record: serde_json::to_value(&ready.record).expect("serialisable"),
            metadata: ready.plan.columns.metadata.clone(),
        }
    }

    /// Stage 4, overwrite, once the group commit is done: the commit landed (or not), and
    /// what reading the committed snapshot back found.
    pub(super) async fn overwrite_landed(
        &self,
        published: Result<Published>,
        ready: &Ready,
    ) -> std::result::Result<Committed, CommitError> {
        let published = published.map_err(|e| (e, None))?;
        let landed = || {
            Some(Landed {
                version: published.version,
                checks: Vec::new(),
            })
        };
        crate::fault::hit("after-commit", None).map_err(|e| (e, landed()))?;
        let files = published
            .readback
            .map_err(|e| (Error::unverified(e), landed()))?;
        // The rows committed, from the committed files' own footers (read-back's own client).
        let store = self.target.readback.root.clone();
        let committed_rows = readback::footer_rows(&store, &files)
            .await
            .map_err(|e| (Error::unverified(e.message().to_string()), landed()))?;
        Ok(Committed {
            version: published.version,
            checks: Vec::new(),
            expected_rows: ready.reconciled.window.staged.rows,
            committed_rows,
        })
    }

    /// Stage 4, merge: upsert the staged rows on the key within the window's partitions,
    /// then check the merge's counts and read the window back from the log.
    pub(super) async fn commit_merge(
        &self,
        ready: &Ready,
    ) -> std::result::Result<Committed, CommitError> {
        let (plan, r, record) = (&ready.plan, &ready.reconciled, &ready.record);
        let task = self.task();
        let ctx = self.session();
        let rows = r.window.staged.rows;
        let range = &plan.range;
        let table = self
            .target
            .merge_target(&plan.planned.schema)
            .await
            .map_err(|e| (e, None))?;
        let source = self.merge_source(plan, r).await.map_err(|e| (e, None))?;
        let columns: Vec<String> = plan
            .planned
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let base = table.version().map(|v| v as i64).unwrap_or(-1);
        let spec = merge::MergeSpec {
            columns: &columns,
            key: &task.key,
            range,
            add_columns: !plan.columns.added.is_empty(),
        };
        let merged = match merge::merge(
            table,
            Arc::new(ctx.state()),
            source,
            spec,
            record.app_metadata(),
        )
        .await
        {
            Ok(m) => m,
            Err(e) => return Err(self.merge_failed(e, base, &record.run_id).await),
        };
        let v = merged
            .table
            .version()
            .ok_or_else(|| (Error::runtime("merge produced no version"), None))?
            as i64;
        self.target.note_commit(v);
        let landed = |checks: Vec<Check>| Some(Landed { version: v, checks });
        crate::fault::hit("after-commit", None).map_err(|e| (e, landed(Vec::new())))?;
        let upserted = Check::counts("rows_upserted", rows, merged.inserted + merged.updated);
        if !upserted.ok {
            return Err((
                Error::unverified(format!(
                    "merge inserted {} and updated {} rows for {} produced rows",
                    merged.inserted, merged.updated, rows
                )),
                landed(vec![upserted]),
            ));
        }
        // Read the window back by the read-back's own route: the log on storage, the
        // window's files by its replaceWhere, their footers.
        let label = window_label(ready);
        let committed_rows = async {
            let files = self.target.read_back_merge(v, range, &label).await?;
            readback::footer_rows(&self.target.readback.root, &files).await
        }
        .await
        .map_err(|e| (e, landed(vec![upserted.clone()])))?;
        Ok(Committed {
            version: v,
            checks: vec![upserted],
            expected_rows: merged.rows_before + merged.inserted,
            committed_rows,
        })
    }

    /// The staged rows of a merge, read back from its temp dir; their keys must be unique
    /// and not NULL.
    async fn merge_source(&self, plan: &WindowPlan, r: &Reconciled) -> Result<DataFrame> {
        let dir = r
            .window
            .temp
            .as_ref()
            .expect("merge stages into a temp dir");
        let source = self
            .session()
            .read_parquet(
                dir.path().to_string_lossy().as_ref(),
                ParquetReadOptions::default().schema(&plan.planned.schema),
            )
            .await?;
        check_unique_key(source.clone(), &self.task().key).await?;
        Ok(source)
    }

    /// delta-rs can fail after writing a merge's commit (its post-commit snapshot update or
    /// checkpoint): look for this run in the log, so the report tells the truth.
    async fn merge_failed(&self, e: Error, base: i64, run_id: &str) -> CommitError {
        let found = match table::open(self.target.url()).await {
            Ok(t) => actions::find_run_commit(&t, base, run_id).await,
            Err(why) => Err(why),
        };
        match found {
            Ok(Some(v)) => {
                self.target.note_commit(v);
                (
                    Error::unverified(e.message().to_string()),
                    Some(Landed {
                        version: v,
                        checks: Vec::new(),
                    }),
                )
            }
            Ok(None) => (e, None),
            Err(why) => (
                Error::runtime(format!(
                    "{}; the log could not be read back ({why}): the window may or may not have been published; re-running it is safe",
                    e.message()
                )),
                None,
            ),
        }
    }
}

/// The label of the window `ready` is for (its run record's).
fn window_label(ready: &Ready) -> String {
    ready.record.window.label.clone()
}
