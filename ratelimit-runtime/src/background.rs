//! The one kind of background task a limiter runs on its callers' runtime (the allowance
//! give-backs, the most-limited flush): at most one per owner, started on the current
//! Tokio runtime by the first work that needs it, holding its owner weakly so that it ends
//! with it, or with its runtime (the next work starts it again, on its own), and ending
//! when idle. The rule-override poller is not one: it must outlive every caller's runtime,
//! so it runs on a thread of its own (`overrides/stored.rs`).

// Only a Redis limiter has work to do in the background; the places are kept alike.
#![cfg_attr(not(feature = "redis"), allow(dead_code))]

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// The place of an owner's background task: taken while the task runs.
#[derive(Debug, Default)]
pub(crate) struct TaskPlace(AtomicBool);

impl TaskPlace {
    /// Whether a task runs.
    #[inline]
    pub fn is_taken(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Takes the place; `false` when a task has it.
    fn take(&self) -> bool {
        !self.0.swap(true, Ordering::AcqRel)
    }

    fn leave(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// An owner that keeps a [`TaskPlace`].
pub(crate) trait HasTask: Send + Sync + 'static {
    fn task_place(&self) -> &TaskPlace;
}

/// A running task's hold on its owner's place: the owner, weakly; the place is left when
/// the hold is dropped, however the task ends (its owner dropped, its runtime shut down).
pub(crate) struct TaskHold<T: HasTask> {
    owner: Weak<T>,
}

impl<T: HasTask> TaskHold<T> {
    /// The owner, while it lives.
    pub fn owner(&self) -> Option<Arc<T>> {
        self.owner.upgrade()
    }

    /// Leaves the place if `idle` still holds once it is left: `None`, the task ends.
    /// Else (work came in meanwhile, finding the place taken) the place is taken again and
    /// the task goes on with it.
    pub fn end_if_idle(self, idle: impl Fn(&T) -> bool) -> Option<Self> {
        let owner = self.owner.upgrade()?;
        let place = owner.task_place();
        place.leave();
        if idle(&owner) || !place.take() {
            // Left: dropped, the hold would leave a place another task may have taken.
            std::mem::forget(self);
            return None;
        }
        Some(self)
    }
}

impl<T: HasTask> Drop for TaskHold<T> {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.upgrade() {
            owner.task_place().leave();
        }
    }
}

/// Starts `task` on the current Tokio runtime unless `owner`'s task runs (or there is no
/// runtime: the next work tries again). The task gets its hold on the place.
pub(crate) fn start<T, F>(owner: &Arc<T>, task: impl FnOnce(TaskHold<T>) -> F)
where
    T: HasTask,
    F: Future<Output = ()> + Send + 'static,
{
    if owner.task_place().is_taken() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if !owner.task_place().take() {
        return;
    }
    runtime.spawn(task(TaskHold {
        owner: Arc::downgrade(owner),
    }));
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    #[derive(Default)]
    struct Owner {
        place: TaskPlace,
        started: AtomicU64,
        work: AtomicBool,
    }

    impl HasTask for Owner {
        fn task_place(&self) -> &TaskPlace {
            &self.place
        }
    }

    /// A task that counts its start, then waits for ever (until its runtime drops it).
    fn pending(hold: TaskHold<Owner>) -> impl Future<Output = ()> + Send + 'static {
        hold.owner().unwrap().started.fetch_add(1, Ordering::SeqCst);
        async move {
            let _hold = hold;
            std::future::pending::<()>().await;
        }
    }

    #[test]
    fn one_task_at_a_time_and_a_runtime_that_ends_frees_its_place() {
        let owner = Arc::new(Owner::default());
        for round in 1..=2 {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(async {
                start(&owner, pending);
                start(&owner, pending);
                tokio::task::yield_now().await;
            });
            assert_eq!(owner.started.load(Ordering::SeqCst), round);
            assert!(owner.place.is_taken());
            drop(runtime);
            assert!(
                !owner.place.is_taken(),
                "round {round}: the place stayed taken"
            );
        }
    }

    #[test]
    fn without_a_runtime_nothing_starts_and_the_place_stays_free() {
        let owner = Arc::new(Owner::default());
        start(&owner, pending);
        assert_eq!(owner.started.load(Ordering::SeqCst), 0);
        assert!(!owner.place.is_taken());
    }

    #[test]
    fn an_idle_task_leaves_its_place_unless_work_came_in() {
        let owner = Arc::new(Owner::default());
        assert!(owner.place.take());
        let hold = TaskHold {
            owner: Arc::downgrade(&owner),
        };
        owner.work.store(true, Ordering::SeqCst);
        let idle = |owner: &Owner| !owner.work.load(Ordering::SeqCst);
        let hold = hold
            .end_if_idle(idle)
            .expect("work came in: the task goes on");
        assert!(owner.place.is_taken());
        owner.work.store(false, Ordering::SeqCst);
        assert!(hold.end_if_idle(idle).is_none());
        assert!(!owner.place.is_taken());
    }
}
