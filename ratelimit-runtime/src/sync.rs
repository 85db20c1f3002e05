//! Locks that keep serving after a panic elsewhere.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, also when a thread panicked while holding it.
///
/// Everything this crate keeps behind a lock (rate-limit state, caches, registries) is
/// still usable after such a panic: at worst a count is off by the call that panicked,
/// which matters less than refusing every later call.
pub(crate) fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
