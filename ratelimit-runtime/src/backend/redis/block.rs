//! `Limiter::block` on Redis: `scripts/block_key.lua`, sent like a check, to the key's
//! server, under the check timeout.

use std::sync::atomic::Ordering;
use std::sync::LazyLock;

use redis::Script;

use super::RedisBackend;
use crate::clock::{Clock, SystemClock};
use crate::BackendError;

/// `scripts/block_key.lua` (composed by scripts/sources.rs), hashed once per process.
static BLOCK: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCE));
const SOURCE: &str = super::script::sources::BLOCK_KEY;

impl RedisBackend {
    /// Blocks `key` for `block_for_us` from `now_us` (`None`: the server's time, or this
    /// process's on a server that refuses `TIME` in scripts), unless it is blocked longer
    /// already. Sending it twice blocks until the later end of the two, a few ms apart: it
    /// is sent again when its connection broke.
    pub(crate) async fn block(
        &self,
        key: &str,
        block_for_us: u64,
        now_us: Option<u64>,
    ) -> Result<(), BackendError> {
        let now_us = match now_us {
            Some(now_us) => now_us,
            None if self.client_clock.load(Ordering::Relaxed) => SystemClock.now_us(),
            None => 0,
        };
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(1).arg(key).arg(block_for_us).arg(now_us);
        };
        let deadline = self.deadline(self.config.timeout);
        self.run_script(key, (&BLOCK, SOURCE), args, true, deadline)
            .await
            .map(drop)
            .map_err(|failure| self.error(key, failure))
    }
}
