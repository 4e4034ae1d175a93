//! Reading a commit back: a group commit that landed is read by the read-back's own route
//! (its own client and log replay), in commit order but after the table's turn (see
//! [`Target::publish`]), and each window is told what it found.

use super::{Outcomes, Published, Target, overwrite, readback};
use crate::delta::partition::WindowFile;
use crate::error::{Error, Result};
use crate::task::range::WindowRange;

/// A group commit that landed, to be read back: its version, its windows and their outcome
/// channels.
pub(super) struct ReadBack {
    pub(super) version: i64,
    pub(super) windows: Vec<overwrite::WindowCommit>,
    pub(super) senders: Outcomes,
    /// The checkpoint the commit made due, written after the read-back.
    pub(super) checkpoint: Option<overwrite::Checkpoint>,
}

impl Target {
    /// Read a landed group commit back, and tell each window its outcome.
    ///
    /// The committed version is read by the read-back's own route (its own client and log
    /// replay, each window's files by its replaceWhere; not the file map the commit was built
    /// from): every live file of each window must be one this run added (their footers give
    /// the rows committed, read by each window: `Runner::overwrite_landed`). Then the
    /// checkpoint the commit made due is written, the replay already let go.
    pub(super) async fn finish(
        &self,
        mut replay: tokio::sync::MutexGuard<'_, Option<readback::LogReplay>>,
        mut job: ReadBack,
    ) {
        let expected: Vec<readback::Expected> = job
            .windows
            .iter()
            .map(|w| readback::Expected {
                predicate: w.range.replace_where(),
                adds: Some(&w.adds),
                label: &w.tags.window,
            })
            .collect();
        let checked = self.read_back(&mut replay, job.version, &expected).await;
        drop(replay);
        for (tx, i) in job.senders.take().into_iter().zip(0..) {
            let readback = match &checked {
                Ok(per_window) => per_window[i].clone(),
                Err(e) => Err(format!(
                    "read-back: version {} could not be loaded: {}",
                    job.version,
                    e.message()
                )),
            };
            let _ = tx.send(Ok(Published {
                version: job.version,
                readback,
            }));
        }
        if let Some(checkpoint) = job.checkpoint {
            checkpoint.write().await;
        }
    }

    /// Read commit `version` back for `expected` (see `readback::read_back`).
    async fn read_back(
        &self,
        replay: &mut Option<readback::LogReplay>,
        version: i64,
        expected: &[readback::Expected<'_>],
    ) -> Result<Vec<std::result::Result<Vec<WindowFile>, String>>> {
        if replay.is_none() {
            *replay = self.prefetch.take().await;
        }
        readback::read_back(
            replay,
            &self.readback,
            &self.partition_by,
            version,
            expected,
        )
        .await
    }

    /// Read a merge's commit `version` back: the live files of the window `range` (the
    /// read-back's own route, as for overwrites; a merge's own files are delta-rs's, so only
    /// where they lie is checked).
    pub async fn read_back_merge(
        &self,
        version: i64,
        range: &WindowRange,
        label: &str,
    ) -> Result<Vec<WindowFile>> {
        let mut replay = self.replay.lock().await;
        let expected = [readback::Expected {
            predicate: range.replace_where(),
            adds: None,
            label,
        }];
        let mut checked = self.read_back(&mut replay, version, &expected).await?;
        checked.remove(0).map_err(Error::unverified)
    }
}
