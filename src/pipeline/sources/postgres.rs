//! PostgreSQL sources: `format = "postgres"`, `uri = "postgres://user@host:port/database"`,
//! `table = "schema.table"`, the password from `PGPASSWORD` or a `.pgpass` file (`PGPASSFILE`),
//! never from the task file, never recorded.
//!
//! The table is a DataFusion [`TableProvider`] whose scan sends one `SELECT` to the server: the
//! columns the query needs and, in its `WHERE`, every filter DataFusion's unparser can write in
//! PostgreSQL's dialect (the window's bounds among them, so a day window reads a day, by the
//! table's index). Filters are pushed as inexact: DataFusion applies them again to what comes
//! back. `explain` shows the SQL sent. The rows are read as a stream, 8,192 to a batch, on a
//! connection of the scan's own (the independent checks' scans open theirs). The session is in
//! UTC and read-only (`default_transaction_read_only`).
//!
//! **One snapshot per run.** The first scan of a database in a process exports a snapshot
//! (`pg_export_snapshot()` in a `REPEATABLE READ READ ONLY` transaction that a connection holds
//! open until the process ends); every scan of that database, the task's and the checks', reads
//! in a transaction of its own set to that snapshot (`SET TRANSACTION SNAPSHOT`). A row
//! committed while a window runs is in none of them: the extraction and its check cannot
//! disagree over it, and it is for `status` to find afterwards.
//!
//! **TLS** as the URI's `sslmode` says (`disable`, `prefer` by default, `require`,
//! `verify-full` with an optional `sslrootcert`), with rustls: see `tls`.
//!
//! Why this and not `datafusion-table-providers`' PostgreSQL crate: that crate links the
//! system's OpenSSL (`native-tls`, no other choice), which the wheel would then depend on, and
//! brings a pool, a query federation layer and a SQL builder idemlake does not use. This is
//! the client alone (`tokio-postgres`, pure Rust, TLS by `tokio-postgres-rustls`), the
//! unparser DataFusion ships, and the type mapping in `rows`.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use datafusion::prelude::SessionContext;
use futures::{StreamExt, TryStreamExt};

use crate::error::{Error, Result};
use crate::report::record::SourceVersion;
use crate::task::Source;

mod rows;
mod snapshot;
mod tls;
mod whole;
use snapshot::{in_snapshot, snapshot};
use tls::Settings;
pub use whole::{Whole, whole, whole_rows};

/// Rows per batch read from the server.
const BATCH_ROWS: usize = 8192;

/// Register `s` (a PostgreSQL source) in `ctx`: its columns read from the catalog now.
pub async fn register(ctx: &SessionContext, s: &Source) -> Result<SourceVersion> {
    let table = s.table.clone().unwrap_or_default();
    let config = config(&s.uri)?;
    let client = connect(&config).await?;
    let columns = catalog(&client, &table).await?;
    let remote = whole::remote_name(&client, &table).await?;
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(&c.name, c.arrow.clone(), true))
            .collect::<Vec<_>>(),
    ));
    let provider = PgTable {
        config,
        table,
        remote,
        columns,
        schema,
    };
    // The run's snapshot, taken now: its position goes into the run record.
    let snapshot = snapshot(&provider.config).await?;
    ctx.register_table(s.alias.as_str(), Arc::new(provider))?;
    Ok(SourceVersion {
        alias: s.alias.clone(),
        format: s.format,
        version: None,
        files: None,
        fingerprint: None,
        read: Vec::new(),
        snapshot: snapshot.position.clone(),
    })
}

/// The connection settings of `uri` (its `sslmode` and `sslrootcert` read by `tls`), with the
/// password from `PGPASSWORD` or the password file.
fn config(uri: &str) -> Result<Settings> {
    let mut settings = tls::parse(uri)?;
    let config = &mut settings.config;
    config.options("-c TimeZone=UTC -c default_transaction_read_only=on");
    if config.get_password().is_none()
        && let Some(p) = password(config)
    {
        config.password(p);
    }
    Ok(settings)
}

/// `PGPASSWORD`, else the first matching line of `PGPASSFILE` (or `~/.pgpass`):
/// `host:port:database:user:password`, `*` matching anything.
fn password(config: &tokio_postgres::Config) -> Option<String> {
    if let Ok(p) = std::env::var("PGPASSWORD") {
        return Some(p);
    }
    let file = std::env::var_os("PGPASSFILE")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".pgpass")))?;
    let text = std::fs::read_to_string(file).ok()?;
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "localhost".into(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let want = [
        host.as_str(),
        port.as_str(),
        config.get_dbname().unwrap_or_default(),
        config.get_user().unwrap_or_default(),
    ];
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.splitn(5, ':').collect();
        let [h, p, d, u, password] = fields.as_slice() else {
            return None;
        };
        let ok = [h, p, d, u]
            .iter()
            .zip(want)
            .all(|(f, w)| **f == "*" || **f == w);
        ok.then(|| password.to_string())
    })
}

/// A connection of its own (TLS as `sslmode` says), its driver running beside it.
async fn connect(s: &Settings) -> Result<tokio_postgres::Client> {
    match tls::client_config(s)? {
        None => start(&s.config, tokio_postgres::NoTls).await,
        Some(tls) => {
            start(
                &s.config,
                tokio_postgres_rustls::MakeRustlsConnect::new(tls),
            )
            .await
        }
    }
}

async fn start<T>(config: &tokio_postgres::Config, tls: T) -> Result<tokio_postgres::Client>
where
    T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>,
    T::Stream: Send + 'static,
{
    let (client, connection) = config.connect(tls).await.map_err(|e| {
        if tls::certificate_refused(&e) {
            let why = std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default();
            Error::input(format!(
                "PostgreSQL: the server's certificate was refused ({why}): with sslmode=verify-full it must be signed by a CA of sslrootcert (or of the system) for the URL's host name"
            ))
        } else {
            failure(e)
        }
    })?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("PostgreSQL connection ended: {e}");
        }
    });
    Ok(client)
}

/// A server error as idemlake's: the user's mistakes (authentication, a missing table or
/// column, a type the query cannot use) exit 2; the server unreachable, a timeout or a lost
/// connection exit 1, retryable.
pub fn failure(e: tokio_postgres::Error) -> Error {
    use tokio_postgres::error::SqlState;
    let Some(code) = e.code() else {
        let source = std::error::Error::source(&e)
            .map(|s| format!(": {s}"))
            .unwrap_or_default();
        return Error::runtime(format!("PostgreSQL: {e}{source}"));
    };
    let message = e
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string());
    let user = [
        SqlState::INVALID_PASSWORD,
        SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
        SqlState::UNDEFINED_TABLE,
        SqlState::UNDEFINED_COLUMN,
        SqlState::INVALID_SCHEMA_NAME,
        SqlState::INSUFFICIENT_PRIVILEGE,
        SqlState::UNDEFINED_DATABASE,
    ];
    if user.contains(code) {
        Error::input(format!("PostgreSQL: {message}"))
    } else {
        Error::runtime(format!("PostgreSQL: {message} ({})", code.code()))
    }
}

/// The table's columns, in order, each mapped or refused (see `rows`).
async fn catalog(client: &tokio_postgres::Client, table: &str) -> Result<Vec<rows::Column>> {
    let listed = client
        .query(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typtype = 'e' \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&table],
        )
        .await
        .map_err(failure)?;
    listed
        .iter()
        .map(|r| rows::column(table, r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// A PostgreSQL table as a DataFusion table (see the module documentation).
#[derive(Debug)]
struct PgTable {
    config: Settings,
    table: String,
    /// Its schema and name as the catalog spells them (for a query sent whole, see `whole`).
    remote: datafusion::common::TableReference,
    columns: Vec<rows::Column>,
    schema: SchemaRef,
}

/// `e` in PostgreSQL's SQL, its columns unqualified; `None` when the unparser cannot write it
/// (or it holds a parameter not bound yet).
fn remote_sql(e: &Expr) -> Option<String> {
    let unqualified = e
        .clone()
        .transform_up(|e| match e {
            Expr::Column(c) => Ok(Transformed::yes(Expr::Column(c.name.into()))),
            other => Ok(Transformed::no(other)),
        })
        .ok()?
        .data;
    let mut volatile = false;
    let _ = unqualified.apply(|e| {
        volatile |= matches!(e, Expr::ScalarFunction(f) if f.func.signature().volatility != datafusion::logical_expr::Volatility::Immutable)
            || matches!(e, Expr::Placeholder(_) | Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_));
        Ok(TreeNodeRecursion::Continue)
    });
    if volatile {
        return None;
    }
    let dialect = datafusion::sql::unparser::dialect::PostgreSqlDialect {};
    let unparser = datafusion::sql::unparser::Unparser::new(&dialect);
    unparser
        .expr_to_sql(&unqualified)
        .ok()
        .map(|s| s.to_string())
}

#[async_trait]
impl TableProvider for PgTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::error::Result<Vec<TableProviderFilterPushDown>> {
        // A prepared plan (planned once, bound per window) asks with the window's bounds
        // still parameters: a filter the server could take once they are values is pushed,
        // so each window's scan, planned after binding, sends its bounds.
        let bound = |f: &Expr| {
            f.clone()
                .transform_up(|e| match e {
                    Expr::Placeholder(p) => Ok(Transformed::yes(Expr::Literal(
                        p.field
                            .as_ref()
                            .and_then(|f| ScalarValue::try_from(f.data_type()).ok())
                            .unwrap_or(ScalarValue::Null),
                        None,
                    ))),
                    other => Ok(Transformed::no(other)),
                })
                .map(|t| t.data)
        };
        Ok(filters
            .iter()
            .map(|f| bound(f))
            .collect::<datafusion::error::Result<Vec<_>>>()?
            .iter()
            .map(|f| match remote_sql(f) {
                Some(_) => TableProviderFilterPushDown::Inexact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let indices: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.columns.len()).collect(),
        };
        let columns: Vec<rows::Column> = indices.iter().map(|i| self.columns[*i].clone()).collect();
        let schema = Arc::new(self.schema.project(&indices)?);
        let select = if columns.is_empty() {
            "1".to_string()
        } else {
            columns
                .iter()
                .map(|c| c.select.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut sql = format!("SELECT {select} FROM {}", self.table);
        let pushed: Vec<String> = filters.iter().filter_map(remote_sql).collect();
        if !pushed.is_empty() {
            sql.push_str(&format!(" WHERE {}", pushed.join(" AND ")));
        }
        if let Some(n) = limit {
            sql.push_str(&format!(" LIMIT {n}"));
        }
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Ok(Arc::new(PgScan {
            config: self.config.clone(),
            sql,
            columns,
            schema,
            properties: Arc::new(properties),
            metrics: Default::default(),
        }))
    }
}

/// One `SELECT` sent to the server, its rows streamed as batches.
#[derive(Debug)]
struct PgScan {
    config: Settings,
    sql: String,
    columns: Vec<rows::Column>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    /// Its rows out, for the checks' report of what they read.
    metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet,
}

impl DisplayAs for PgScan {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "PostgresScan: sql={}", self.sql)
    }
}

impl ExecutionPlan for PgScan {
    fn name(&self) -> &'static str {
        "PostgresScan"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> datafusion::error::Result<TreeNodeRecursion>,
    ) -> datafusion::error::Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn metrics(&self) -> Option<datafusion::physical_plan::metrics::MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> datafusion::error::Result<SendableRecordBatchStream> {
        let counted =
            datafusion::physical_plan::metrics::BaselineMetrics::new(&self.metrics, partition);
        let (config, sql) = (self.config.clone(), self.sql.clone());
        let (schema, columns) = (self.schema.clone(), self.columns.clone());
        let out = schema.clone();
        tracing::debug!(sql = %self.sql, "PostgreSQL query sent");
        let stream = futures::stream::once(async move {
            let external = |e: Error| datafusion::error::DataFusionError::External(Box::new(e));
            let client = in_snapshot(&config).await.map_err(external)?;
            let rows = client
                .query_raw(sql.as_str(), std::iter::empty::<i32>())
                .await
                .map_err(|e| external(failure(e)))?;
            let batches = rows
                .map_err(failure)
                .try_chunks(BATCH_ROWS)
                .map(move |chunk| {
                    let chunk = chunk.map_err(|e| e.1)?;
                    counted.record_output(chunk.len());
                    rows::batch(&schema, &columns, &chunk)
                })
                // The client lives as long as its rows are read.
                .map(move |b| {
                    let _ = &client;
                    b.map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))
                });
            Ok::<_, datafusion::error::DataFusionError>(batches)
        })
        .map(|r: datafusion::error::Result<_>| match r {
            Ok(s) => s.boxed(),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        })
        .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(out, stream)))
    }
}
