//! Finding a topology's servers again (a Cluster's slot map, the master a Sentinel names),
//! once for all the calls that need it at the same time.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};

use super::failure::Failure;

/// A refresh future, boxed: refreshes are rare, and their connects (TLS included) held
/// inline would make every check's future several times larger.
pub(super) type Refreshing<'a> = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send + 'a>>;

pub(super) struct Refresh {
    /// Held by the refresh under way.
    running: tokio::sync::Mutex<()>,
    /// How many refreshes have succeeded.
    done: AtomicU64,
}

impl Refresh {
    pub fn new() -> Refresh {
        Refresh {
            running: tokio::sync::Mutex::new(()),
            done: AtomicU64::new(0),
        }
    }

    /// What a call notes before it uses what the last refresh found, to pass to
    /// [`run`](Self::run) if that fails.
    pub fn mark(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }

    /// Runs `refresh`, unless another refresh succeeded since `mark` was taken: then what
    /// failed the caller is already replaced. Calls that arrive while one runs wait for it.
    pub fn run<'a>(
        &'a self,
        mark: u64,
        refresh: impl Future<Output = Result<(), Failure>> + Send + 'a,
    ) -> Refreshing<'a> {
        Box::pin(async move {
            let _running = self.running.lock().await;
            if self.mark() != mark {
                return Ok(());
            }
            refresh.await?;
            self.done.fetch_add(1, Ordering::AcqRel);
            Ok(())
        })
    }
}
