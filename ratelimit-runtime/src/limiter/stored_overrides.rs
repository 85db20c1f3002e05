//! The rule overrides and modes stored in Redis, as operators read and write them (the
//! `ratelimit` command): [`Limiter::stored_overrides`].

use super::Store;
use crate::backend::redis::RedisBackend;
use crate::overrides::stored::read_field;
use crate::overrides::{path_of, Setting, DUPLICATE_SUFFIX, MODE_SUFFIX};
use crate::{BackendError, BackendErrorKind, Limiter, Mode};

impl Limiter {
    /// The rule overrides and modes stored in Redis for every instance at once, in the
    /// hash `{prefix}rules` (see [`rules_poll`](Self::rules_poll)): list, read, write
    /// and clear them as the instances will read them. Needs a Redis limiter.
    ///
    /// ```no_run
    /// use redis_ratelimit::{Limiter, Mode};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Limiter::redis("redis://127.0.0.1:6379")?;
    /// let stored = limiter.stored_overrides("rate_limit:");
    /// stored.set("my_app::send_code", "5/minute, 20/hour").await?;
    /// stored.set_mode("my_app::send_code", Mode::Shadow).await?;
    /// for field in stored.list().await? {
    ///     println!("{} = {}", field.field, field.value);
    /// }
    /// stored.clear("my_app::send_code").await?; // its rules and its mode
    /// # Ok(()) }
    /// ```
    pub fn stored_overrides(&self, prefix: &str) -> StoredOverrides<'_> {
        StoredOverrides {
            limiter: self,
            hash: format!("{prefix}rules"),
        }
    }
}

/// The `{prefix}rules` hash of one key prefix ([`Limiter::stored_overrides`]).
///
/// Its fields: `{path}` (the site's rules, in the attribute's rule text, e.g.
/// `"5/minute, 20/hour"`), `{path}#duplicate` (the duplicate-submission rule, or
/// `none`) and `{path}#mode` (`enforce`, `shadow` or `off`). Instances apply a change
/// within their poll interval ([`Limiter::rules_poll`]).
#[derive(Debug)]
pub struct StoredOverrides<'a> {
    limiter: &'a Limiter,
    hash: String,
}

/// One field of the `{prefix}rules` hash.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredOverride {
    /// The hash field: `{path}`, `{path}#duplicate` or `{path}#mode`.
    pub field: String,
    /// The site's path (the field without its suffix).
    pub path: String,
    /// The value as stored.
    pub value: String,
    /// What the instances make of it; an error (saying why) when they ignore it as
    /// malformed, keeping the compiled rules or mode.
    pub setting: Result<Setting, String>,
}

/// Why an override was not written.
#[derive(Debug)]
#[non_exhaustive]
pub enum OverrideError {
    /// The value is not one the field takes; nothing was written.
    Invalid {
        /// The field.
        field: String,
        /// Why the instances would ignore it.
        reason: String,
    },
    /// Redis failed.
    Backend(BackendError),
}

impl std::fmt::Display for OverrideError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OverrideError::Invalid { field, reason } => {
                write!(f, "not written: `{field}` cannot hold that value: {reason}")
            }
            OverrideError::Backend(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for OverrideError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OverrideError::Backend(err) => Some(err),
            OverrideError::Invalid { .. } => None,
        }
    }
}

impl From<BackendError> for OverrideError {
    fn from(err: BackendError) -> Self {
        OverrideError::Backend(err)
    }
}

impl StoredOverrides<'_> {
    /// The hash's key: `{prefix}rules`.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    fn redis(&self) -> Result<&RedisBackend, BackendError> {
        match &self.limiter.store {
            Store::Redis(redis) => Ok(redis),
            Store::Memory(_) => Err(BackendError::new(
                BackendErrorKind::Misconfigured,
                "overrides are stored in Redis: use a limiter made with `Limiter::redis`",
            )),
            Store::Misconfigured(err) => Err(super::misconfigured(err)),
        }
    }

    /// Every field of the hash, ordered by field.
    pub async fn list(&self) -> Result<Vec<StoredOverride>, BackendError> {
        let mut fields: Vec<StoredOverride> = self
            .redis()?
            .hash_fields(&self.hash)
            .await?
            .into_iter()
            .map(|(field, value)| StoredOverride {
                path: path_of(&field).to_owned(),
                setting: read_field(&field, &value),
                field,
                value,
            })
            .collect();
        fields.sort_by(|a, b| a.field.cmp(&b.field));
        Ok(fields)
    }

    /// The fields of the site `path` (`{path}`, `{path}#duplicate`, `{path}#mode`),
    /// those that are set.
    pub async fn get(&self, path: &str) -> Result<Vec<StoredOverride>, BackendError> {
        let path = path_of(path);
        let mut fields = self.list().await?;
        fields.retain(|field| field.path == path);
        Ok(fields)
    }

    /// Sets `field` (`{path}`, `{path}#duplicate` or `{path}#mode`) to `value` after
    /// reading it as every instance will (the attribute's rule grammar for rules):
    /// a value they would ignore is refused and nothing is written.
    ///
    /// # Errors
    ///
    /// [`OverrideError::Invalid`] for such a value, [`OverrideError::Backend`] when
    /// Redis fails.
    pub async fn set(&self, field: &str, value: &str) -> Result<Setting, OverrideError> {
        let setting = read_field(field, value).map_err(|reason| OverrideError::Invalid {
            field: field.to_owned(),
            reason,
        })?;
        self.redis()?.hash_set(&self.hash, field, value).await?;
        Ok(setting)
    }

    /// Sets the [`Mode`] of the site `path`: field `{path}#mode`.
    pub async fn set_mode(&self, path: &str, mode: Mode) -> Result<(), BackendError> {
        let field = format!("{}{MODE_SUFFIX}", path_of(path));
        self.redis()?
            .hash_set(&self.hash, &field, mode.as_str())
            .await
    }

    /// Clears the site `path`'s rules, duplicate-submission rule and mode (its compiled
    /// ones are back in force), or, for a field ending in `#duplicate` or `#mode`, that
    /// field alone, as [`Limiter::clear_override`] does in process. How many fields
    /// were set.
    pub async fn clear(&self, path: &str) -> Result<u64, BackendError> {
        let fields = match path_of(path).len() == path.len() {
            true => [DUPLICATE_SUFFIX, MODE_SUFFIX]
                .iter()
                .map(|suffix| format!("{path}{suffix}"))
                .chain([path.to_owned()])
                .collect(),
            false => vec![path.to_owned()],
        };
        self.redis()?.hash_delete(&self.hash, &fields).await
    }
}
