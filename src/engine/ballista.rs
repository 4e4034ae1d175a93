//! The Ballista engine (`--features ballista`): the client session a task's queries run in,
//! and the cluster's two kinds of processes for `idemlake cluster scheduler|executor`
//! (Ballista's scheduler and executor as libraries, so a cluster needs nothing but this
//! binary on each machine).

use std::net::SocketAddr;
use std::sync::Arc;

use ballista::prelude::SessionContextExt;
use datafusion::prelude::SessionContext;

pub use super::ExecutorOptions;
use crate::error::{Error, Result};

/// A client session of the scheduler at `scheduler` (`host:port`) with idemlake's SQL
/// settings; DataFusion plans here, Ballista's planner sends the plan to the cluster when it
/// runs. Connecting is lazy: an unreachable scheduler fails the first query.
pub async fn client(scheduler: &str, pushdown: bool) -> Result<SessionContext> {
    let local = crate::accel::session::session(false, pushdown)?;
    SessionContext::remote_with_state(&format!("df://{scheduler}"), local.state())
        .await
        .map_err(|e| {
            Error::runtime(format!(
                "cannot make a session of the Ballista scheduler df://{scheduler}: {e}"
            ))
        })
}

/// Run a scheduler listening on `bind` until the process is stopped.
pub async fn scheduler(bind: SocketAddr) -> Result<()> {
    use ballista_scheduler::cluster::BallistaCluster;
    use ballista_scheduler::config::SchedulerConfig;
    let config = SchedulerConfig {
        bind_host: bind.ip().to_string(),
        bind_port: bind.port(),
        external_host: bind.ip().to_string(),
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
    if o.concurrent_tasks > 0 {
        config.vcores = o.concurrent_tasks;
    }
    tracing::info!(scheduler = %o.scheduler, flight = o.flight_port, grpc = o.grpc_port, "Ballista executor starting");
    start_executor_process(Arc::new(config))
        .await
        .map_err(|e| Error::runtime(format!("the executor stopped: {e}")))
}
