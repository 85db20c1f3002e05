//! Lock-outs: once a consuming check is refused by a rule, every check of its key is
//! refused for a while. One [`Lockout`] says for how long, from the attribute's
//! `block_for` and the `block_for`/`block_schedule` of a guard or a check, down to what a
//! backend reads: a key's nth lock-out within 24 hours of the end of its previous one
//! lasts the nth duration of an escalating schedule (the last repeats).
//!
//! A check carries its lock-out [`Packed`] in one number, so that a programmatic check
//! stays small enough to move without a copy call: a duration in µs (below 2^51), or
//! `SCHEDULE` plus the index of its schedule here. Schedules are `&'static` slices,
//! interned once each (a site's or a guard's at each check: a scan of the few this
//! process uses, lock-free), so a check holds no pointer of its own for them. The key's
//! streak (which lock-out this is, when the last one ended) is kept with the block in the
//! key's state (`algorithm::Block`), so every instance sees it.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::clock;

/// The bit of a [`Packed`] lock-out that marks a schedule's index.
const SCHEDULE: u64 = 1 << 62;

/// How many distinct schedules one process may use; past it, a schedule locks out for its
/// last (longest) duration every time, with one warning.
const MAX_SCHEDULES: usize = 256;

static SCHEDULES: [OnceLock<&'static [Duration]>; MAX_SCHEDULES] =
    [const { OnceLock::new() }; MAX_SCHEDULES];
static INTERNED: AtomicUsize = AtomicUsize::new(0);
static INTERNING: Mutex<()> = Mutex::new(());

/// How long after the end of a lock-out the next one escalates: 24 hours, in µs.
pub(crate) const STREAK_US: u64 = 24 * 3600 * 1_000_000;

/// What a refusal locks its key out for. Not public API: written by `#[rate_limiter]`'s
/// expansion (`block_for = "15m"`, `block_for = ["1m", "10m", "1h"]`) and by the
/// builders' `block_for` and `block_schedule`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lockout {
    /// This long, every time.
    For(Duration),
    /// The next lock-out of the key's streak, from this schedule (at least two
    /// durations; one is [`For`](Lockout::For)).
    Escalating(&'static [Duration]),
}

impl Lockout {
    /// The lock-outs of `schedule`: its one duration, or escalating.
    ///
    /// # Panics
    ///
    /// When `schedule` is empty, or holds a duration under 1 ms or over
    /// [`Rule::MAX_WINDOW`](crate::Rule::MAX_WINDOW).
    pub(crate) fn of_schedule(schedule: &'static [Duration]) -> Lockout {
        validate(schedule);
        match schedule {
            [one] => Lockout::For(*one),
            _ => Lockout::Escalating(schedule),
        }
    }

    /// The duration of the `strikes`th lock-out (the first is 1), in µs.
    pub fn duration_us(self, strikes: u32) -> u64 {
        match self {
            Lockout::For(duration) => clock::micros(duration),
            Lockout::Escalating(schedule) => {
                let nth = (strikes.max(1) as usize).min(schedule.len());
                clock::micros(schedule[nth - 1])
            }
        }
    }

    /// The lock-out as a check carries it; `None` for one that locks nothing out.
    pub(crate) fn packed(self) -> Option<Packed> {
        let value = match self {
            Lockout::For(duration) => clock::micros(duration),
            Lockout::Escalating(schedule) => match interned(schedule) {
                Some(index) => SCHEDULE | index as u64,
                None => clock::micros(*schedule.last()?),
            },
        };
        NonZeroU64::new(value).map(Packed)
    }
}

/// A [`Lockout`] in one number (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Packed(NonZeroU64);

impl Packed {
    /// The lock-out packed.
    pub fn lockout(self) -> Lockout {
        let value = self.0.get();
        let schedule = (value & SCHEDULE != 0)
            .then(|| SCHEDULES.get((value & !SCHEDULE) as usize)?.get())
            .flatten();
        match schedule {
            Some(schedule) => Lockout::Escalating(schedule),
            None => Lockout::For(Duration::from_micros(value & !SCHEDULE)),
        }
    }
}

/// The index of `schedule`, interned at its first use; `None` when the process has too
/// many.
fn interned(schedule: &'static [Duration]) -> Option<usize> {
    position(schedule, INTERNED.load(Ordering::Acquire)).or_else(|| intern(schedule))
}

/// The index of `schedule` among the first `interned` schedules.
fn position(schedule: &'static [Duration], interned: usize) -> Option<usize> {
    SCHEDULES[..interned]
        .iter()
        .position(|s| s.get().is_some_and(|s| std::ptr::eq(*s, schedule)))
}

/// The index of `schedule`, interned now; `None` when the process has too many.
#[cold]
fn intern(schedule: &'static [Duration]) -> Option<usize> {
    let _one_at_a_time = crate::sync::lock(&INTERNING);
    let interned = INTERNED.load(Ordering::Acquire);
    if let Some(index) = position(schedule, interned) {
        return Some(index);
    }
    if interned == MAX_SCHEDULES {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            tracing::warn!(
                target: "redis_ratelimit",
                "more than {MAX_SCHEDULES} lock-out schedules in one process: the others lock \
                 out for their last duration every time"
            );
        });
        return None;
    }
    let _ = SCHEDULES[interned].set(schedule);
    INTERNED.store(interned + 1, Ordering::Release);
    Some(interned)
}

/// Panics unless every duration of `schedule` is a lock-out a backend can keep.
fn validate(schedule: &[Duration]) {
    assert!(
        !schedule.is_empty(),
        "a lock-out schedule needs at least one duration"
    );
    for &duration in schedule {
        assert!(
            duration >= Duration::from_millis(1) && duration <= crate::Rule::MAX_WINDOW,
            "a lock-out of {duration:?} cannot be kept: a lock-out lasts at least 1 ms and at \
             most 2^52 microseconds (about 142 years)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static SCHEDULE_A: [Duration; 3] = [
        Duration::from_secs(60),
        Duration::from_secs(600),
        Duration::from_secs(3600),
    ];

    #[test]
    fn a_schedules_nth_duration_is_read_back_and_the_last_repeats() {
        let lockout = Lockout::of_schedule(&SCHEDULE_A);
        assert_eq!(lockout, Lockout::Escalating(&SCHEDULE_A));
        let packed = lockout.packed().unwrap();
        assert_eq!(
            Lockout::of_schedule(&SCHEDULE_A).packed(),
            Some(packed),
            "interned once"
        );
        assert_eq!(packed.lockout(), lockout);
        let minutes: Vec<u64> = (1..=5)
            .map(|n| lockout.duration_us(n) / 60_000_000)
            .collect();
        assert_eq!(minutes, [1, 10, 60, 60, 60]);
    }

    #[test]
    fn one_duration_is_a_plain_lock_out() {
        static ONE: [Duration; 1] = [Duration::from_secs(90)];
        let lockout = Lockout::of_schedule(&ONE);
        assert_eq!(lockout, Lockout::For(Duration::from_secs(90)));
        assert_eq!(lockout.duration_us(1), 90_000_000);
        assert_eq!(lockout.packed().unwrap().lockout(), lockout);
        assert_eq!(Lockout::For(Duration::from_nanos(999)).packed(), None);
    }

    #[test]
    #[should_panic(expected = "at least one duration")]
    fn an_empty_schedule_is_refused() {
        Lockout::of_schedule(&[]);
    }
}
