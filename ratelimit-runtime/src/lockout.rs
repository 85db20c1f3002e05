//! Escalating lock-outs: a key's nth lock-out within 24 hours of the end of its previous
//! one lasts the nth duration of a schedule (the last repeats).
//!
//! A check carries its lock-out in one number (`Request::block_for_us`), so that a
//! programmatic check stays small enough to move without a copy call: a duration in µs
//! (below 2^51), or [`SCHEDULE`] plus the index of its schedule here. Schedules are
//! `&'static` slices, interned once each (a site's or a guard's at each check: a scan of
//! the few this process uses, lock-free), so a check holds no pointer of its own for them.
//! The key's streak (which lock-out this is, when the last one ended) is kept with the
//! block in the key's state (`algorithm::Block`), so every instance sees it.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::clock;

/// The bit of a check's `block_for_us` that marks a schedule's index.
const SCHEDULE: u64 = 1 << 62;

/// How long after the end of a lock-out the next one escalates: 24 hours, in µs.
pub(crate) const STREAK_US: u64 = 24 * 3600 * 1_000_000;

/// How many distinct schedules one process may use; past it, a schedule locks out for its
/// last (longest) duration every time, with one warning.
const MAX_SCHEDULES: usize = 256;

static SCHEDULES: [OnceLock<&'static [Duration]>; MAX_SCHEDULES] =
    [const { OnceLock::new() }; MAX_SCHEDULES];
static INTERNED: AtomicUsize = AtomicUsize::new(0);
static INTERNING: Mutex<()> = Mutex::new(());

/// What a check's `block_for_us` asks for once a rule refuses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lockout {
    /// A lock-out of this many µs, every time.
    Fixed(u64),
    /// The next lock-out of the key's streak, from this schedule.
    Escalating(&'static [Duration]),
}

impl Lockout {
    /// The lock-out a check's `block_for_us` encodes.
    pub fn of(block_for_us: NonZeroU64) -> Lockout {
        let value = block_for_us.get();
        if value & SCHEDULE == 0 {
            return Lockout::Fixed(value);
        }
        let index = (value & !SCHEDULE) as usize;
        match SCHEDULES.get(index).and_then(OnceLock::get) {
            Some(schedule) => Lockout::Escalating(schedule),
            None => Lockout::Fixed(value & !SCHEDULE),
        }
    }

    /// The duration of the `strikes`th lock-out (the first is 1), in µs.
    pub fn duration_us(self, strikes: u32) -> u64 {
        match self {
            Lockout::Fixed(us) => us,
            Lockout::Escalating(schedule) => {
                let nth = (strikes.max(1) as usize).min(schedule.len());
                clock::micros(schedule[nth - 1])
            }
        }
    }
}

/// A check's `block_for_us` for `schedule`: its one duration, or its index here.
///
/// # Panics
///
/// When `schedule` is empty, or holds a duration under 1 ms or over
/// [`Rule::MAX_WINDOW`](crate::Rule::MAX_WINDOW).
pub(crate) fn encode(schedule: &'static [Duration]) -> Option<NonZeroU64> {
    if let [one] = schedule {
        return NonZeroU64::new(clock::micros(*one));
    }
    let interned = INTERNED.load(Ordering::Acquire);
    let found = SCHEDULES[..interned]
        .iter()
        .position(|s| s.get().is_some_and(|s| std::ptr::eq(*s, schedule)));
    match found.or_else(|| intern(schedule)) {
        Some(index) => NonZeroU64::new(SCHEDULE | index as u64),
        None => NonZeroU64::new(clock::micros(*schedule.last()?)),
    }
}

/// The index of `schedule`, interned now; `None` when the process has too many.
#[cold]
fn intern(schedule: &'static [Duration]) -> Option<usize> {
    validate(schedule);
    let _one_at_a_time = crate::sync::lock(&INTERNING);
    let interned = INTERNED.load(Ordering::Acquire);
    if let Some(index) = SCHEDULES[..interned]
        .iter()
        .position(|s| s.get().is_some_and(|s| std::ptr::eq(*s, schedule)))
    {
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
pub(crate) fn validate(schedule: &[Duration]) {
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
    fn a_schedule_is_interned_once_and_its_nth_duration_read_back() {
        let encoded = encode(&SCHEDULE_A).unwrap();
        assert_eq!(encode(&SCHEDULE_A), Some(encoded));
        let lockout = Lockout::of(encoded);
        assert_eq!(lockout, Lockout::Escalating(&SCHEDULE_A));
        let minutes: Vec<u64> = (1..=5)
            .map(|n| lockout.duration_us(n) / 60_000_000)
            .collect();
        assert_eq!(minutes, [1, 10, 60, 60, 60]);
    }

    #[test]
    fn one_duration_is_a_plain_lock_out() {
        static ONE: [Duration; 1] = [Duration::from_secs(90)];
        let encoded = encode(&ONE).unwrap();
        assert_eq!(encoded.get(), 90_000_000);
        assert_eq!(Lockout::of(encoded), Lockout::Fixed(90_000_000));
    }

    #[test]
    #[should_panic(expected = "at least one duration")]
    fn an_empty_schedule_is_refused() {
        encode(&[]);
    }
}
