//! Shutdown on SIGTERM or SIGINT: health checks say the service is going away, the
//! listeners stop accepting, the calls in flight finish, every local allowance is given
//! back and the embedded backend's state file is saved; then the process exits 0.

use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

use crate::count::Service;

/// How long the calls in flight (and clients that keep their connections open after being
/// told to go away) may take once a shutdown begins: within Kubernetes' default grace
/// period of 30 s, so the state is saved before a SIGKILL.
pub const DRAIN: Duration = Duration::from_secs(20);

/// Waits for SIGTERM or SIGINT.
pub async fn signalled() -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    Ok(())
}

/// What is left once no call is in flight: allowances back, the state saved. `false` when
/// either failed (logged).
pub async fn finish(service: &Service, state_file: bool) -> bool {
    let mut clean = true;
    if let Err(e) = service.limiter.release_allowances().await {
        tracing::error!(error = %e, "could not give back every allowance");
        clean = false;
    }
    if state_file {
        match service.limiter.save_state().await {
            Ok(()) => tracing::info!("state file saved"),
            Err(e) => {
                tracing::error!(error = %e, "could not save the state file");
                clean = false;
            }
        }
    }
    clean
}
