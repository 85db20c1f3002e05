//! Reloading: the files are read every second and compared by content, so a file written
//! in place and a Kubernetes ConfigMap's symlink swap are both seen (no file-system events,
//! which a swap of `..data` does not raise on the files themselves). A configuration that
//! loads replaces the one in force whole; one that does not leaves it in force, and its
//! errors are logged at ERROR and counted in `ratelimit_server_config_errors_total`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::load::{build, read_sources, Sources};
use crate::count::Service;

/// How often the files are read.
pub const EVERY: Duration = Duration::from_secs(1);

/// Watches `path` until `stop` says to stop; `last` is what is in force.
pub async fn watch(
    service: Arc<Service>,
    path: PathBuf,
    mut last: Sources,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The errors last reported, so that a bad file is reported once, not every second.
    let mut reported: Option<String> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let read = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || read_sources(&path)).await
        };
        let Ok(read) = read else { continue };
        let outcome = match read {
            Ok(sources) if sources == last => continue,
            Ok(sources) => match build(&sources) {
                Ok(loaded) => {
                    tracing::info!(
                        files = loaded.files.len(),
                        domains = loaded.domains.len(),
                        "configuration reloaded"
                    );
                    service.config.store(Arc::new(loaded));
                    last = sources;
                    reported = None;
                    continue;
                }
                Err(errors) => errors,
            },
            Err(errors) => errors,
        };
        let text = outcome.to_string();
        if reported.as_ref() == Some(&text) {
            continue;
        }
        for error in &outcome.0 {
            tracing::error!("{error}");
        }
        tracing::error!(
            errors = outcome.0.len(),
            "the changed configuration does not load: the previous one stays in force"
        );
        service.metrics.config_errors(outcome.0.len());
        reported = Some(text);
    }
}
