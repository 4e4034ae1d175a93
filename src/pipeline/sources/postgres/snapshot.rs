//! The one snapshot every scan of a database reads in a process (see the parent module): the
//! first caller exports it and a connection holds it open; each scan's connection sets its
//! transaction to it.

use std::sync::Arc;

use super::{Settings, connect, failure};
use crate::error::Result;

/// The snapshot the scans of one database read (see the module documentation), and the
/// connection holding it.
pub(super) struct Snapshot {
    id: String,
    /// Its position as the server names it (see [`position`]), when the server says.
    pub(super) position: Option<String>,
    _holder: tokio_postgres::Client,
}

/// The process's snapshot of the database `config` names, exported by the first caller.
pub(super) async fn snapshot(config: &Settings) -> Result<Arc<Snapshot>> {
    type Snapshots = tokio::sync::Mutex<std::collections::HashMap<String, Arc<Snapshot>>>;
    static SNAPSHOTS: std::sync::OnceLock<Snapshots> = std::sync::OnceLock::new();
    let key = key(config);
    let mut held = SNAPSHOTS.get_or_init(Default::default).lock().await;
    if let Some(s) = held.get(&key) {
        return Ok(s.clone());
    }
    let holder = connect(config).await?;
    holder
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .map_err(failure)?;
    let id: String = holder
        .query_one("SELECT pg_export_snapshot()", &[])
        .await
        .map_err(failure)?
        .get(0);
    let position = position(&holder).await;
    tracing::debug!(snapshot = %id, ?position, "the PostgreSQL snapshot this run reads");
    let s = Arc::new(Snapshot {
        id,
        position,
        _holder: holder,
    });
    held.insert(key, s.clone());
    Ok(s)
}

/// Which database (and role) `config` reads: one snapshot each.
pub(super) fn key(config: &Settings) -> String {
    format!(
        "{:?} {:?} {:?} {:?}",
        config.config.get_hosts(),
        config.config.get_ports(),
        config.config.get_dbname(),
        config.config.get_user()
    )
}

/// Where the exported snapshot stands, as the server names it: `snapshot=<xmin:xmax:xip, as
/// txid_current_snapshot() prints it> lsn=<the write-ahead log position then>`. Best effort:
/// a server without these functions (a PostgreSQL-compatible one) records none, and the
/// snapshot stays usable (the query runs under a savepoint).
async fn position(holder: &tokio_postgres::Client) -> Option<String> {
    holder.batch_execute("SAVEPOINT position").await.ok()?;
    let row = holder
        .query_one(
            "SELECT txid_current_snapshot()::text, (CASE WHEN pg_is_in_recovery() \
             THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text",
            &[],
        )
        .await;
    match row {
        Ok(r) => {
            let _ = holder.batch_execute("RELEASE SAVEPOINT position").await;
            let lsn: Option<String> = r.get(1);
            Some(format!(
                "snapshot={} lsn={}",
                r.get::<_, String>(0),
                lsn.as_deref().unwrap_or("-")
            ))
        }
        Err(e) => {
            tracing::debug!("no snapshot position recorded: {e}");
            let _ = holder.batch_execute("ROLLBACK TO SAVEPOINT position").await;
            None
        }
    }
}

/// A connection reading in the process's snapshot of its database.
pub(super) async fn in_snapshot(config: &Settings) -> Result<tokio_postgres::Client> {
    let snapshot = snapshot(config).await?;
    let client = connect(config).await?;
    client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '{}'",
            snapshot.id
        ))
        .await
        .map_err(failure)?;
    if crate::fault::mutation("pg-insert-before-scan") {
        let sql = crate::config::get()
            .test_pg_insert
            .clone()
            .unwrap_or_default();
        let mut writer = config.clone();
        writer.config.options("-c TimeZone=UTC");
        let w = connect(&writer).await?;
        w.batch_execute(&sql).await.map_err(failure)?;
    }
    Ok(client)
}
