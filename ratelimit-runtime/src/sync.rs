//! Locks that keep serving after a panic elsewhere.
//!
//! A panic while a lock is held poisons it, and std then refuses every later lock. No
//! data the runtime keeps behind a lock is worth refusing checks for: each lock guards
//! state that is updated in small steps (rate-limit counts, cached denials, registries,
//! connection pools), and the worst a step cut short can leave is a count or an entry
//! off by one call, which matters less than a limiter that stops answering. So every lock
//! of the runtime is taken through here, and a poisoned one is used as it is.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `mutex`, poisoned or not.
pub(crate) fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Locks `lock` for reading, poisoned or not.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn read<T: ?Sized>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// Locks `lock` for writing, poisoned or not.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn write<T: ?Sized>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_locks() {
        let mutex = Mutex::new(1);
        let _ = std::panic::catch_unwind(|| {
            let _held = mutex.lock().unwrap();
            panic!("while holding the lock");
        });
        assert!(mutex.is_poisoned());
        *lock(&mutex) += 1;
        assert_eq!(*lock(&mutex), 2);
    }
}
