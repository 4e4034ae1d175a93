//! `idemlake cluster scheduler|executor`: the processes of a Ballista cluster, for tasks
//! whose `[engine]` is `ballista` (see `engine`). Each runs until it is stopped (SIGTERM or
//! Ctrl-C), then exits 0; an executor first tells the scheduler and finishes its tasks.

use crate::error::Result;

/// A cluster process to run.
#[derive(Debug, Clone)]
pub enum Process {
    Scheduler { bind: std::net::SocketAddr },
    Executor(crate::engine::ExecutorOptions),
}

/// Run `process` until a stop signal; an error if it cannot start or stops by itself.
pub async fn run(process: Process) -> Result<u8> {
    crate::task::engine::available()?;
    serve(process).await
}

#[cfg(feature = "ballista")]
async fn serve(process: Process) -> Result<u8> {
    use crate::engine::ballista;
    match process {
        // The scheduler runs until a stop signal.
        Process::Scheduler { bind } => {
            tokio::select! {
                r = ballista::scheduler(bind) => r.map(|()| 0),
                _ = stop_signal() => {
                    tracing::info!("stopping on a signal");
                    Ok(0)
                }
            }
        }
        // The executor handles SIGTERM/SIGINT itself: it tells the scheduler it is stopping
        // and drains its tasks, then returns.
        Process::Executor(options) => ballista::executor(options).await.map(|()| 0),
    }
}

#[cfg(not(feature = "ballista"))]
async fn serve(_: Process) -> Result<u8> {
    unreachable!("available() fails without the feature")
}

/// SIGTERM or SIGINT.
#[cfg(feature = "ballista")]
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
