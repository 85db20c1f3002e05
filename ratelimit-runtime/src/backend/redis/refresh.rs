//! Finding a topology's servers again (a Cluster's slot map, the master a Sentinel names),
//! once for all the calls that need it at the same time, and not at all for a cool-down
//! after it kept failing (a breaker of its own).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::{timeout_at, Instant};

use super::breaker::{Breaker, BreakerState, Health};
use super::failure::Failure;

/// A refresh future, boxed: refreshes are rare, and their connects (TLS included) held
/// inline would make every check's future several times larger.
pub(super) type Refreshing<'a> = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send + 'a>>;

pub(super) struct Refresh {
    /// Held by the refresh under way.
    running: tokio::sync::Mutex<()>,
    /// How many refreshes have succeeded.
    done: AtomicU64,
    /// Refreshes that keep failing (every seed or sentinel down) are not tried for a
    /// cool-down: the calls that need one fail at once meanwhile.
    breaker: BreakerState,
}

impl Refresh {
    /// `servers` names what a refresh asks (`the sentinels of master …`), for messages.
    pub fn new(breaker: Breaker, servers: String) -> Refresh {
        Refresh {
            running: tokio::sync::Mutex::new(()),
            done: AtomicU64::new(0),
            breaker: BreakerState::new(breaker, servers),
        }
    }

    /// What a call notes before it uses what the last refresh found, to pass to
    /// [`run`](Self::run) if that fails.
    pub fn mark(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }

    /// Runs `refresh`, unless another refresh succeeded since `mark` was taken: then what
    /// failed the caller is already replaced. Calls that arrive while one runs wait for it.
    /// Gives up at `deadline` (the caller's), counting a refresh cut short as failed.
    pub fn run<'a>(
        &'a self,
        mark: u64,
        deadline: Instant,
        refresh: impl Future<Output = Result<(), Failure>> + Send + 'a,
    ) -> Refreshing<'a> {
        Box::pin(async move {
            let Ok(_running) = timeout_at(deadline, self.running.lock()).await else {
                return Err(Failure::Timeout);
            };
            if self.mark() != mark {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Failure::Timeout);
            }
            let pass = self.breaker.admit().map_err(Failure::BreakerOpen)?;
            let result = timeout_at(deadline, refresh)
                .await
                .unwrap_or(Err(Failure::Timeout));
            pass.record(match result {
                Ok(()) => Health::Answered,
                Err(_) => Health::Failed,
            });
            result?;
            self.done.fetch_add(1, Ordering::AcqRel);
            Ok(())
        })
    }
}
