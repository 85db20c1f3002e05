//! Who is limited most, on Redis (see `limiter/most_limited.rs`): a flush of one site's
//! minute of refusals (`scripts/most_limited_add.lua`) and the read of a site's minutes
//! (`scripts/most_limited_read.lua`).

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::Script;

use super::{Failure, RedisBackend};
use crate::most_limited_keys::{minute_key, CAP, KEPT_MINUTES};
use crate::BackendError;

const ADD: &str = include_str!("../../scripts/most_limited_add.lua");
const READ: &str = include_str!("../../scripts/most_limited_read.lua");
static ADD_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ADD));
static READ_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(READ));

impl RedisBackend {
    /// Adds `counts` (identity -> refusals) to `site`'s `minute` under `prefix`.
    pub(crate) async fn add_refusals(
        &self,
        prefix: &str,
        site: &str,
        minute: u64,
        counts: &HashMap<String, u64>,
    ) -> Result<(), BackendError> {
        let key = minute_key(prefix, site, minute);
        let expires_at = (minute + 1 + KEPT_MINUTES) * 60;
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(1).arg(&key).arg(CAP).arg(expires_at);
            for (identity, n) in counts {
                cmd.arg(identity).arg(*n);
            }
        };
        // Not harmless: run twice, it would add the refusals twice.
        self.operate_script(&key, (&ADD_SCRIPT, ADD), args, false)
            .await?;
        Ok(())
    }

    /// The `n` identities of `site` under `prefix` with the most refusals over `minutes`,
    /// most first.
    pub(crate) async fn most_limited(
        &self,
        prefix: &str,
        site: &str,
        minutes: impl Iterator<Item = u64>,
        n: usize,
    ) -> Result<Vec<(String, u64)>, BackendError> {
        let keys: Vec<String> = minutes.map(|m| minute_key(prefix, site, m)).collect();
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(keys.len()).arg(&keys).arg(n);
        };
        let key = &keys[0];
        let reply = self
            .operate_script(key, (&READ_SCRIPT, READ), args, true)
            .await?;
        let unexpected = |what: String| self.error(key, Failure::Unexpected(what.into()));
        let pairs: Vec<(String, u64)> = redis::from_redis_value(reply.clone())
            .map_err(|err| unexpected(format!("the read answered {reply:?}: {err}")))?;
        Ok(pairs)
    }
}
