//! The exact bound of each algorithm, checked on what was admitted: the times (µs since
//! the epoch) and costs of every admitted call of one key, however they were admitted (a
//! round trip per check, or locally from an allowance). Used by the differential tests of
//! allowances: the per-check path passes it, so must every fleet of instances spending
//! allowances, and a naive draw that records its units when drawn fails it.
//!
//! Per rule (a rule counting calls counts 1 per admitted call, whatever its cost; a rule
//! counting in calendar periods counts per period, as a fixed window of the period):
//! - sliding log: no window `(t - w, t]` holds more than `count`;
//! - fixed window: no aligned window `[k w, (k + 1) w)` holds more than `count`;
//! - sliding window: at every admission time `t`, the current aligned window's units up to
//!   `t` plus the previous window's weighted by the part of it the sliding window still
//!   overlaps, rounded up (`ceil(prev * (w - e) / w)`, `e = t mod w`), is at most `count`;
//! - token bucket (emission interval `T = ceil(w / count)`): between any two admissions at
//!   `s <= t`, the units admitted in `[s, t]` are at most `count + floor((t - s) / T)`.

use redis_ratelimit::{Algorithm, Calendar, Rule};

/// Checks `admitted` (time in µs, cost) against `algorithm`'s bound for every rule of
/// `rules`; the error says which rule, where, and by how much.
pub fn check_bound(
    algorithm: Algorithm,
    rules: &[Rule],
    admitted: &[(u64, u64)],
) -> Result<(), String> {
    let mut calls: Vec<(u64, u64)> = admitted.to_vec();
    calls.sort_unstable();
    for rule in rules {
        let units: Vec<(u64, u64)> = calls
            .iter()
            .map(|&(t, cost)| (t, if rule.counts_calls() { 1 } else { cost }))
            .collect();
        let result = match rule.calendar() {
            Some(calendar) => periods(&units, rule.count(), |t| period_start(calendar, t)),
            None => {
                let w = rule.window().as_micros() as u64;
                match algorithm {
                    Algorithm::SlidingLog => sliding_log(&units, rule.count(), w),
                    Algorithm::FixedWindow => periods(&units, rule.count(), |t| t / w * w),
                    Algorithm::SlidingWindow => sliding_window(&units, rule.count(), w),
                    Algorithm::TokenBucket => token_bucket(&units, rule.count(), w),
                }
            }
        };
        result.map_err(|e| format!("{algorithm:?}, rule {rule}: {e}"))?;
    }
    Ok(())
}

/// No window `(t - w, t]` holds more than `count`: checked with `t` at each admission.
fn sliding_log(units: &[(u64, u64)], count: u64, w: u64) -> Result<(), String> {
    let (mut from, mut inside) = (0, 0);
    for (i, &(t, n)) in units.iter().enumerate() {
        inside += n;
        while units[from].0 + w <= t {
            inside -= units[from].1;
            from += 1;
        }
        // Admissions at the same time as later ones: the window ending at the last.
        let last_at_t = units.get(i + 1).is_none_or(|&(next, _)| next > t);
        if last_at_t && inside > count {
            return Err(format!(
                "{inside} in the window ({}, {t}]",
                t.saturating_sub(w)
            ));
        }
    }
    Ok(())
}

/// No period (the one `start` gives of a time) holds more than `count`.
fn periods(units: &[(u64, u64)], count: u64, start: impl Fn(u64) -> u64) -> Result<(), String> {
    let mut current = (u64::MAX, 0);
    for &(t, n) in units {
        let s = start(t);
        current = match current.0 == s {
            true => (s, current.1 + n),
            false => (s, n),
        };
        if current.1 > count {
            return Err(format!("{} in the window starting at {s}", current.1));
        }
    }
    Ok(())
}

/// The weighted estimate at each admission time stays within `count`.
fn sliding_window(units: &[(u64, u64)], count: u64, w: u64) -> Result<(), String> {
    for (i, &(t, _)) in units.iter().enumerate() {
        if units.get(i + 1).is_some_and(|&(next, _)| next == t) {
            continue;
        }
        let start = t / w * w;
        let sum = |from: u64, to: u64| -> u64 {
            units[..=i]
                .iter()
                .filter(|&&(s, _)| s >= from && s < to)
                .map(|&(_, n)| n)
                .sum()
        };
        let curr = sum(start, t + 1);
        let prev = match start.checked_sub(w) {
            Some(prev_start) => sum(prev_start, start),
            None => 0,
        };
        let weighed =
            (u128::from(prev) * u128::from(w - (t - start))).div_ceil(u128::from(w)) as u64;
        if curr + weighed > count {
            return Err(format!("estimate {curr} + {weighed} at {t}"));
        }
    }
    Ok(())
}

/// Between any two admissions at `s <= t`: at most `count + floor((t - s) / T)`.
fn token_bucket(units: &[(u64, u64)], count: u64, w: u64) -> Result<(), String> {
    let interval = w.div_ceil(count);
    for i in 0..units.len() {
        let mut sum = 0;
        for &(t, n) in &units[i..] {
            sum += n;
            let allowed = count + (t - units[i].0) / interval;
            if sum > allowed {
                return Err(format!("{sum} in [{}, {t}], at most {allowed}", units[i].0));
            }
        }
    }
    Ok(())
}

/// The start (µs) of the UTC day, month or year holding `t`.
fn period_start(calendar: Calendar, t: u64) -> u64 {
    const DAY: u64 = 86_400_000_000;
    let day = t / DAY;
    match calendar {
        Calendar::Day => day * DAY,
        Calendar::Month | Calendar::Year => {
            // Days since the epoch of the first of the month holding `day` (civil-from-days).
            let z = day as i64 + 719_468;
            let era = z.div_euclid(146_097);
            let doe = z - era * 146_097;
            let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
            let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
            let mp = (5 * doy + 2) / 153;
            let d = doy - (153 * mp + 2) / 5 + 1;
            if calendar == Calendar::Month {
                return (day - (d as u64 - 1)) * DAY;
            }
            // `doy` counts from March 1st: January 1st is its day 306, of this March-based
            // year in January and February, else 59 days (60 in a leap year) before March.
            let y = yoe + era * 400;
            let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
            let jan_1 = match mp >= 10 {
                true => day as i64 - (doy - 306),
                false => day as i64 - doy - 59 - i64::from(leap),
            };
            jan_1 as u64 * DAY
        }
    }
}
