//! The Ballista engine (`--features ballista`): the client session a task's queries run in,
//! and the cluster's two kinds of processes for `idemlake cluster scheduler|executor`
//! (Ballista's scheduler and executor as libraries, so a cluster needs nothing but this
//! binary on each machine).
//!
//! Sources on S3: the scheduler (which plans the physical query, listing the source's files)
//! and every executor (which reads them) resolve an `s3://bucket/` location the way idemlake
//! itself does (`storage::store_for`: the standard `AWS_*` environment of *that* process), so
//! each cluster process needs the same S3 environment as the client; credentials never travel
//! with the query.

use std::net::SocketAddr;
use std::sync::Arc;

use ballista::prelude::SessionContextExt;
use datafusion::prelude::SessionContext;

pub use super::ExecutorOptions;
use crate::error::{Error, Result};

/// A client session of the scheduler at `scheduler` (`host:port`) with idemlake's SQL
/// settings; DataFusion plans here, Ballista's planner sends the plan to the cluster when it
/// runs. Connecting is lazy: an unreachable scheduler fails the first query.
pub async fn client(scheduler: &str, profile: crate::session::Profile) -> Result<SessionContext> {
    let local = crate::session::build(profile)?;
    SessionContext::remote_with_state(&format!("df://{scheduler}"), local.state())
        .await
        .map_err(|e| {
            Error::runtime(format!(
                "cannot make a session of the Ballista scheduler df://{scheduler}: {e}"
            ))
        })
}

/// An object-store registry that makes the store of an `s3://` location on first use, from
/// this process's environment (`storage::store_for`), and otherwise behaves as DataFusion's.
#[derive(Debug, Default)]
struct StoresFromEnv(datafusion::execution::object_store::DefaultObjectStoreRegistry);

impl datafusion::execution::object_store::ObjectStoreRegistry for StoresFromEnv {
    fn register_store(
        &self,
        url: &url::Url,
        store: Arc<dyn object_store::ObjectStore>,
    ) -> Option<Arc<dyn object_store::ObjectStore>> {
        self.0.register_store(url, store)
    }

    fn deregister_store(
        &self,
        url: &url::Url,
    ) -> datafusion::common::Result<Arc<dyn object_store::ObjectStore>> {
        self.0.deregister_store(url)
    }

    fn get_store(
        &self,
        url: &url::Url,
    ) -> datafusion::common::Result<Arc<dyn object_store::ObjectStore>> {
        if let Ok(store) = self.0.get_store(url) {
            return Ok(store);
        }
        match crate::storage::store_for(url) {
            Ok(Some((bucket, store))) => {
                self.0.register_store(&bucket, store.clone());
                Ok(store)
            }
            Ok(None) => self.0.get_store(url),
            Err(e) => Err(datafusion::error::DataFusionError::External(Box::new(e))),
        }
    }
}

/// The runtime of a cluster process's sessions: S3 stores from the environment, spill files
/// under `spill` when given.
fn runtime(
    registry: &Arc<StoresFromEnv>,
    spill: Option<&str>,
) -> datafusion::common::Result<Arc<datafusion::execution::runtime_env::RuntimeEnv>> {
    let mut b = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
        .with_object_store_registry(registry.clone());
    if let Some(dir) = spill {
        b = b.with_temp_file_path(dir);
    }
    Ok(Arc::new(b.build()?))
}

/// Run a scheduler listening on `bind` until the process is stopped.
pub async fn scheduler(bind: SocketAddr) -> Result<()> {
    use ballista_scheduler::cluster::BallistaCluster;
    use ballista_scheduler::config::SchedulerConfig;
    // The scheduler plans the physical query, so it lists the sources: its sessions get
    // Ballista's defaults with the S3-aware runtime.
    let registry = Arc::new(StoresFromEnv::default());
    let sessions: ballista_scheduler::scheduler_server::SessionBuilder = Arc::new(move |config| {
        let state = ballista_core::utils::default_session_builder(config)?;
        Ok(
            datafusion::execution::SessionStateBuilder::new_from_existing(state)
                .with_runtime_env(runtime(&registry, None)?)
                .build(),
        )
    });
    let config = SchedulerConfig {
        bind_host: bind.ip().to_string(),
        bind_port: bind.port(),
        external_host: bind.ip().to_string(),
        override_session_builder: Some(sessions),
        ..Default::default()
    };
    let cluster = BallistaCluster::new_from_config(&config)
        .await
        .map_err(|e| Error::runtime(format!("cannot start the scheduler: {e}")))?;
    tracing::info!(%bind, "Ballista scheduler listening");
    ballista_scheduler::scheduler_process::start_server(cluster, bind, Arc::new(config))
        .await
        .map_err(|e| Error::runtime(format!("the scheduler stopped: {e}")))
}

/// Run an executor registered with its scheduler until the process is stopped.
pub async fn executor(o: ExecutorOptions) -> Result<()> {
    use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
    let (host, port) = o
        .scheduler
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
        .ok_or_else(|| {
            Error::input(format!("--scheduler `{}`: expected host:port", o.scheduler))
        })?;
    if o.bind_host == "0.0.0.0" || o.bind_host == "::" {
        return Err(Error::input(
            "--bind-host must be an address the scheduler and clients can reach (it is advertised to them), not a wildcard",
        ));
    }
    let mut config = ExecutorProcessConfig {
        bind_host: o.bind_host.clone(),
        external_host: Some(o.bind_host.clone()),
        port: o.flight_port,
        grpc_port: o.grpc_port,
        scheduler_host: host,
        scheduler_port: port,
        work_dir: o.work_dir.clone(),
        ..Default::default()
    };
    let registry = Arc::new(StoresFromEnv::default());
    let spill = o.work_dir.clone();
    config.override_runtime_producer =
        Some(Arc::new(move |_| runtime(&registry, spill.as_deref())));
    if o.concurrent_tasks > 0 {
        config.vcores = o.concurrent_tasks;
    }
    tracing::info!(scheduler = %o.scheduler, flight = o.flight_port, grpc = o.grpc_port, "Ballista executor starting");
    start_executor_process(Arc::new(config))
        .await
        .map_err(|e| Error::runtime(format!("the executor stopped: {e}")))
}
