//! The target table as this process knows it, and its commit queue.
//!
//! The table's first load starts with the runner (in the background, overlapping the first
//! window's source scan) and is awaited before first use. Every staged window of an
//! overwrite task queues here; whichever waiter takes the table lock commits *all* queued
//! windows (distinct windows, up to [`MAX_WINDOWS_PER_COMMIT`]) in one commit, then reads
//! that commit back once. While one commit is being written the next group forms, so a
//! backfill's commits — whose cost grows with the table, not with the group — are amortised
//! over many windows. Each window is still replaced whole by exactly one commit, and a
//! window whose commit landed is told so whatever happens afterwards.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use deltalake::DeltaTable;

use crate::delta::filemap::FileMap;
use crate::delta::{overwrite, readback, table};
use crate::error::{Error, ErrorKind, Result};
use crate::task::Task;

mod background;
mod landed;
mod prefetch;
mod queue;
use background::open_in_background;
pub use background::{background, finish_background};
use landed::ReadBack;

/// The target table and its commit queue (one per runner).
pub struct Target {
    url: url::Url,
    /// The read-back's own route to the table (see `readback::Route`).
    pub(super) readback: readback::Route,
    partition_by: String,
    name: String,
    /// The table and its live files by window, for commits (one committer at a time).
    state: tokio::sync::Mutex<State>,
    /// Staged windows waiting to be committed (see [`Target::publish`]).
    pending: std::sync::Mutex<Vec<Pending>>,
    /// The highest table version this process committed (the shared state catches up lazily).
    last_commit: AtomicI64,
    /// The latest table state known, for readers that must not wait for a commit in
    /// progress (schema checks, writer settings); updated after every commit.
    view: std::sync::Mutex<DeltaTable>,
    /// The version the first load found, once it ended (see `background::open_in_background`).
    loaded_version: tokio::sync::watch::Receiver<Option<Option<u64>>>,
    /// The first load, started by [`Target::open`]; awaited (once) by [`Target::loaded`].
    opening: std::sync::Mutex<Option<tokio::task::JoinHandle<Result<DeltaTable>>>>,
    loaded: tokio::sync::OnceCell<()>,
    /// `[target] on_schema_change`, for a table another writer created first.
    on_schema_change: crate::task::OnSchemaChange,
    /// The last metadata this process committed (as JSON): windows planned against the table
    /// before that commit carry the same schema change, which is not committed twice.
    metadata_committed: std::sync::Mutex<Option<String>>,
    /// The read-back's first replay, opened early (see `prefetch`).
    prefetch: prefetch::Prefetch,
    /// The read-back's own replay of the log (`None` until first needed, or after it failed).
    /// Read-backs take it in commit order, after the table's turn (see [`Target::publish`]).
    replay: tokio::sync::Mutex<Option<readback::LogReplay>>,
}

/// What the committer holds: the table (protocol, schema, configuration; its snapshot may lag
/// behind this process's own commits) and the live files of the latest version (`None` when
/// unknown: rebuilt from a fresh snapshot before the next commit).
struct State {
    table: DeltaTable,
    files: Option<FileMap>,
}

/// A staged window waiting for a commit, and where to send the outcome.
struct Pending {
    window: overwrite::WindowCommit,
    done: OutcomeSender,
}

/// The outcome channels of a group commit; any still unsent when it is dropped (the
/// committing future was cancelled or panicked) are told the outcome is unknown.
struct Outcomes(Vec<Option<OutcomeSender>>);

/// A window's commit outcome as sent: published, or the error's kind and message.
type Outcome = std::result::Result<Published, (ErrorKind, String)>;

type OutcomeSender = tokio::sync::oneshot::Sender<Outcome>;

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
/// window's live files (exactly the ones the run added), or why they could not be confirmed.
pub struct Published {
    pub version: i64,
    pub readback: std::result::Result<Vec<crate::delta::partition::WindowFile>, String>,
}

/// How long a group commit waits for windows still executing (`Target::gather`).
pub const GATHER: std::time::Duration = std::time::Duration::from_millis(10);

/// How long a commit that lost a race waits for the runner's executing windows
/// (`Target::gather`).
const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

/// Most windows one commit publishes.
pub const MAX_WINDOWS_PER_COMMIT: usize = 256;

impl Target {
    /// The target of `task` at `url`: unloaded (no I/O) until its background load ends.
    pub fn open(url: &url::Url, task: &Task) -> Result<Target> {
        let table = table::builder(url)?.build()?;
        let (loaded_tx, loaded_version) = tokio::sync::watch::channel(None);
        Ok(Target {
            url: url.clone(),
            readback: readback::Route::new(url, &table)?,
            partition_by: task.partition_by.clone(),
            name: task.name.clone(),
            view: std::sync::Mutex::new(table.clone()),
            state: tokio::sync::Mutex::new(State { table, files: None }),
            replay: tokio::sync::Mutex::new(None),
            pending: std::sync::Mutex::new(Vec::new()),
            last_commit: AtomicI64::new(-1),
            loaded_version,
            opening: std::sync::Mutex::new(Some(open_in_background(url, loaded_tx))),
            loaded: tokio::sync::OnceCell::new(),
            on_schema_change: task.on_schema_change,
            metadata_committed: std::sync::Mutex::new(None),
            prefetch: prefetch::Prefetch::default(),
        })
    }

    /// Wait for the table's first load (started by [`Target::open`]); a failed load is
    /// retried by the next caller.
    pub async fn loaded(&self) -> Result<()> {
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
                self.state.lock().await.table = table;
                Ok::<(), Error>(())
            })
            .await?;
        Ok(())
    }

    /// The table as last seen, at least at the version of this process's last commit
    /// (refresh with [`Target::refresh`] to see other writers' commits).
    pub async fn table(&self) -> Result<DeltaTable> {
        self.loaded().await?;
        let mut t = self.view();
        let last = self.last_commit.load(Ordering::SeqCst);
        if t.version().is_some_and(|v| (v as i64) < last)
            && t.update_incremental(Some(last as u64)).await.is_ok()
        {
            *self.view.lock().expect("not poisoned") = t.clone();
        }
        Ok(t)
    }

    /// The table as last loaded, possibly behind this runner's own commits: for its schema,
    /// configuration and storage, which those commits do not change.
    pub fn view(&self) -> DeltaTable {
        self.view.lock().expect("not poisoned").clone()
    }

    /// Bring the table state up to the latest version.
    pub async fn refresh(&self) -> Result<()> {
        self.loaded().await?;
        let mut t = self.state.lock().await;
        if t.table.version().is_some() {
            t.table.update_state().await?;
        } else {
            t.table = table::open(&self.url).await?;
        }
        t.files = None;
        *self.view.lock().expect("not poisoned") = t.table.clone();
        Ok(())
    }

    /// Where the target table lives.
    pub fn url(&self) -> &url::Url {
        &self.url
    }

    /// The highest table version this process committed (-1: none yet).
    pub fn last_commit(&self) -> i64 {
        self.last_commit.load(Ordering::SeqCst)
    }

    /// Remember a version this process committed.
    pub fn note_commit(&self, version: i64) {
        self.last_commit.fetch_max(version, Ordering::SeqCst);
    }

    /// Commit a staged window; returns its version and the rows read back for it (an `Err`
    /// only if the commit did not land).
    ///
    /// Group commit: every staged window queues here, and whichever waiter takes the table
    /// lock commits *all* queued windows (distinct windows, up to
    /// [`MAX_WINDOWS_PER_COMMIT`]) in one commit, then reads that commit back once. While one
    /// commit is being written the next group forms, so a backfill's commits — whose cost
    /// grows with the table, not with the group — are amortised over many windows. A group
    /// whose commit loses a race to another writer takes in the windows queued meanwhile
    /// before it is rebuilt (see `Target::joinable`). Each window is still replaced whole by
    /// exactly one commit.
    pub async fn publish(
        &self,
        schema: &SchemaRef,
        window: overwrite::WindowCommit,
        executing: &(dyn Fn() -> usize + Sync),
    ) -> Result<Published> {
        self.loaded().await?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.pending
            .lock()
            .expect("not poisoned")
            .push(Pending { window, done: tx });
        let landed = {
            let mut state = self.state.lock().await;
            self.gather(executing, false).await;
            let batch = self.take_group();
            self.commit_now(&mut state, schema, batch, executing).await
        };
        if let Some((job, replay)) = landed {
            self.finish(replay, job).await;
        }
        outcome(rx).await
    }

    /// Commit exactly `windows` (distinct windows of the task) in one commit, bypassing the
    /// queue: a window published together with its lookback windows. The outcomes are in
    /// the order of `windows`.
    pub async fn publish_together(
        &self,
        schema: &SchemaRef,
        windows: Vec<overwrite::WindowCommit>,
    ) -> Vec<Result<Published>> {
        if let Err(e) = self.loaded().await {
            return windows
                .iter()
                .map(|_| Err(Error::new(e.kind(), e.message())))
                .collect();
        }
        let (group, receivers): (Vec<_>, Vec<_>) = windows
            .into_iter()
            .map(|window| {
                let (done, rx) = tokio::sync::oneshot::channel();
                (Pending { window, done }, rx)
            })
            .unzip();
        let landed = {
            let mut state = self.state.lock().await;
            self.commit_now(&mut state, schema, group, &|| 0).await
        };
        if let Some((job, replay)) = landed {
            self.finish(replay, job).await;
        }
        let mut out = Vec::with_capacity(receivers.len());
        for rx in receivers {
            out.push(outcome(rx).await);
        }
        out
    }

    /// Commit `group` (the table created first if needed). A failed commit's windows learn
    /// their outcome now; a landed one is returned to be read back, with the read-back's
    /// replay, taken while the table's turn is still held: read-backs go in commit order, but
    /// after the turn, so the next commit need not wait for this one's read-back.
    async fn commit_now(
        &self,
        state: &mut State,
        schema: &SchemaRef,
        group: Vec<Pending>,
        executing: &(dyn Fn() -> usize + Sync),
    ) -> Option<(
        ReadBack,
        tokio::sync::MutexGuard<'_, Option<readback::LogReplay>>,
    )> {
        if group.is_empty() {
            return None;
        }
        match self.ensure_table(state, schema).await {
            Ok(()) => {
                let job = self.commit_group(state, group, executing).await?;
                Some((job, self.replay.lock().await))
            }
            Err(e) => {
                for p in group {
                    let _ = p.done.send(Err((e.kind(), e.message().to_string())));
                }
                None
            }
        }
    }

    /// Before a group commit: while other windows of the runner are still executing, wait
    /// for them to queue too, up to [`GATHER`] (accelerated only). A commit costs the same
    /// whatever its group's size and a backfill's windows finish ~1 ms apart, so a few ms
    /// here make the groups several times larger and the commits (log files, read-backs,
    /// checkpoints) as many times fewer. A single window, or the last ones of a backfill,
    /// commit at once: nothing else is executing. A caller whose window went out with an
    /// earlier group only waits if others are queued (it then commits them).
    ///
    /// After a race lost to another worker (`lost`) the commit being rebuilt is the caller's,
    /// and it waits up to [`SETTLE`] even with nothing queued yet: the table is contended, and
    /// the fewer and larger the commits, the fewer races.
    async fn gather(&self, executing: &(dyn Fn() -> usize + Sync), lost: bool) {
        if !crate::config::get().accelerate {
            return;
        }
        let (started, bound) = (Instant::now(), if lost { SETTLE } else { GATHER });
        loop {
            let busy = executing();
            let queued = self.pending.lock().expect("not poisoned").len();
            // Nothing queued: this caller's window went out with the previous group.
            if (queued == 0 && !lost)
                || busy == 0
                || queued >= MAX_WINDOWS_PER_COMMIT
                || started.elapsed() >= bound
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    /// Create the table on first use (the schema check follows creation by someone else).
    async fn ensure_table(&self, target: &mut State, schema: &SchemaRef) -> Result<()> {
        if target.table.version().is_none() {
            target.table =
                table::ensure_exists(target.table.clone(), schema, &self.partition_by, &self.name)
                    .await?;
            table::schema_plan(
                &target.table,
                schema,
                &self.partition_by,
                self.on_schema_change,
            )?;
            target.files = None;
            *self.view.lock().expect("not poisoned") = target.table.clone();
        }
        Ok(())
    }

    /// The table a merge applies to: created on first use, caught up with this runner's
    /// commits, and the file map dropped (a merge commits behind its back).
    pub async fn merge_target(&self, schema: &SchemaRef) -> Result<DeltaTable> {
        let mut t = self.state.lock().await;
        self.ensure_table(&mut t, schema).await?;
        self.catch_up(&mut t.table).await?;
        t.files = None;
        Ok(t.table.clone())
    }

    /// Catch the table's snapshot up with this process's last commit (before a merge,
    /// which reads the snapshot).
    async fn catch_up(&self, table: &mut DeltaTable) -> Result<()> {
        let last = self.last_commit();
        if table.version().is_some_and(|v| (v as i64) < last) {
            table.update_incremental(Some(last as u64)).await?;
        }
        Ok(())
    }

    async fn commit_group(
        &self,
        target: &mut State,
        group: Vec<Pending>,
        executing: &(dyn Fn() -> usize + Sync),
    ) -> Option<ReadBack> {
        let (mut windows, senders): (Vec<_>, Vec<_>) =
            group.into_iter().map(|p| (p.window, p.done)).unzip();
        let json = |m: &deltalake::kernel::Metadata| serde_json::to_string(m).ok();
        {
            let done = self.metadata_committed.lock().expect("not poisoned");
            for w in &mut windows {
                if w.metadata
                    .as_ref()
                    .and_then(json)
                    .is_some_and(|m| Some(&m) == done.as_ref())
                {
                    w.metadata = None;
                }
            }
        }
        let metadata = windows
            .iter()
            .find_map(|w| w.metadata.as_ref().and_then(json));
        // Should this future be dropped or panic before every window has its outcome, the
        // waiting windows learn that it is unknown (not "nothing published").
        let mut senders = Outcomes(senders.into_iter().map(Some).collect());
        let fail = |e: &Error| (e.kind(), e.message().to_string());
        // Each rejoin restarts the commit's attempts: bounded by the same limit.
        let mut rejoins = 0;
        let committed = loop {
            let waiting = || {
                rejoins < overwrite::REBASE_ATTEMPTS
                    && (executing() > 0 || self.joinable(&windows, false).is_some())
            };
            let attempt = overwrite::commit_or_rejoin(
                &mut target.table,
                &mut target.files,
                &self.partition_by,
                &windows,
                &waiting,
            )
            .await;
            match attempt {
                Ok(Some(c)) => break c,
                // A race lost while other windows were staged: they join the rebuilt commit.
                Ok(None) => {
                    rejoins += 1;
                    self.gather(executing, true).await;
                    for p in self.joinable(&windows, true).unwrap_or_default() {
                        windows.push(p.window);
                        senders.0.push(Some(p.done));
                    }
                }
                Err(e) => {
                    for tx in senders.take() {
                        let _ = tx.send(Err(fail(&e)));
                    }
                    return None;
                }
            }
        };
        self.note_commit(committed.version);
        if metadata.is_some() {
            *self.metadata_committed.lock().expect("not poisoned") = metadata;
        }
        if windows.len() > 1 {
            tracing::debug!(
                windows = windows.len(),
                version = committed.version,
                "committed a group of windows"
            );
        }
        Some(ReadBack {
            version: committed.version,
            windows,
            senders,
            checkpoint: committed.checkpoint,
        })
    }
}

/// What a window waiting for a commit is told.
async fn outcome(rx: tokio::sync::oneshot::Receiver<Outcome>) -> Result<Published> {
    match rx.await {
        Ok(r) => r.map_err(|(kind, message)| Error::new(kind, message)),
        Err(_) => Err(Error::runtime("the commit of this window was abandoned")),
    }
}
