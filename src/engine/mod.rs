//! Where a task's queries execute: DataFusion embedded in this process (the default), or a
//! DataFusion Ballista cluster (`[engine] kind = "ballista"`, or `--engine df://host:port`;
//! built with `--features ballista`). With Ballista the window's query and
//! `[reconcile].source` are planned here, with the window bound, and executed on the
//! cluster; their rows stream back, and idemlake writes, checks and commits them as it does
//! locally. Whatever reads this process's own output (the `[reconcile].output` tee, the
//! `[checks]`) runs here. Imports `accel` (the local session), `task`, `storage` (the S3
//! stores of a cluster process), `config` and `error`.

use datafusion::prelude::SessionContext;

use crate::error::Result;
use crate::task::Task;
pub use crate::task::engine::Engine;

#[cfg(feature = "ballista")]
pub mod ballista;

/// The engine a run of `task` uses: `--engine` (or `IDEMLAKE_ENGINE`) when given, else the
/// task's `[engine]`.
pub fn of(task: &Task) -> Result<Engine> {
    let engine = match &crate::config::get().engine {
        Some(text) => Engine::parse(text)?,
        None => task.engine.clone(),
    };
    if !engine.is_local() && task.mode == crate::task::Mode::Merge {
        return Err(crate::error::Error::input(format!(
            "task `{}`: the Ballista engine publishes overwrite windows only; run merge tasks with the local engine (--engine local)",
            task.name
        )));
    }
    Ok(engine)
}

/// The session a route's queries plan and run in on `engine`: on the local engine the
/// runner's session (see `accel::session`, `mapped` as there) or the checks'
/// (`crate::session`), or a client session of the cluster with the same settings (sources are
/// read by the cluster's executors, so never through this process's memory maps).
pub async fn session(
    engine: &Engine,
    profile: crate::session::Profile,
    mapped: bool,
) -> Result<SessionContext> {
    match (engine, profile) {
        (Engine::Local, crate::session::Profile::Runner) => crate::accel::session::session(mapped),
        (Engine::Local, profile) => crate::session::build(profile),
        #[cfg(feature = "ballista")]
        (Engine::Ballista { scheduler }, profile) => ballista::client(scheduler, profile).await,
        #[cfg(not(feature = "ballista"))]
        (Engine::Ballista { .. }, _) => {
            crate::task::engine::available()?;
            unreachable!("available() fails without the feature")
        }
    }
}

/// What `idemlake cluster executor` starts (its flags).
#[derive(Debug, Clone, clap::Args)]
pub struct ExecutorOptions {
    /// The scheduler, host:port
    #[arg(long, default_value = "127.0.0.1:50050")]
    pub scheduler: String,
    /// Host to listen on and to be reached at (advertised to the scheduler: not a wildcard)
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_host: String,
    /// Arrow Flight port (query results and shuffle data are fetched from it)
    #[arg(long, default_value_t = 50051)]
    pub flight_port: u16,
    /// gRPC port (the scheduler sends tasks to it)
    #[arg(long, default_value_t = 50052)]
    pub grpc_port: u16,
    /// Tasks run at once [default: one per core]
    #[arg(long, default_value_t = 0)]
    pub concurrent_tasks: usize,
    /// Directory for shuffle files [default: a temporary directory]
    #[arg(long)]
    pub work_dir: Option<String>,
}
