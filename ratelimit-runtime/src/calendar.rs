//! Calendar periods in UTC, for rules that count in them ([`Rule::per_calendar`]): where
//! the period holding a time starts and ends, with the calendar's month lengths and leap
//! years. Days and civil dates convert by Howard Hinnant's `days_from_civil` and
//! `civil_from_days` (<http://howardhinnant.github.io/date_algorithms.html>), on integers;
//! `scripts/calendar.lua` is the same arithmetic for Redis, exact in doubles.
//!
//! [`Rule::per_calendar`]: crate::Rule::per_calendar

pub use ratelimit_rule_text::Calendar;

/// Microseconds in a day.
const DAY_US: u64 = 86_400_000_000;

/// The UTC period of `calendar` holding `now_us` (µs since the epoch): its start and its
/// end (the next one's start), in µs.
#[inline]
pub(crate) fn period_us(calendar: Calendar, now_us: u64) -> (u64, u64) {
    let day = now_us / DAY_US;
    match calendar {
        Calendar::Day => (day * DAY_US, (day + 1) * DAY_US),
        Calendar::Month => {
            let (y, m, d) = civil_from_days(day as i64);
            let start = day - (d - 1);
            let (next_y, next_m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            let end = days_from_civil(next_y, next_m, 1) as u64;
            (start * DAY_US, end * DAY_US)
        }
        Calendar::Year => {
            let (y, _, _) = civil_from_days(day as i64);
            let start = days_from_civil(y, 1, 1) as u64;
            let end = days_from_civil(y + 1, 1, 1) as u64;
            (start * DAY_US, end * DAY_US)
        }
    }
}

/// Days since 1970-01-01 of the civil date `y-m-d` (proleptic Gregorian).
pub(crate) fn days_from_civil(y: i64, m: u64, d: u64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = (y - era * 400) as u64; // [0, 399]
    let mp = (m + 9) % 12; // March is 0
    let doy = (153 * mp + 2) / 5 + d - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    era * 146_097 + doe as i64 - 719_468
}

/// The civil date `(y, m, d)` of `days` since 1970-01-01 (proleptic Gregorian).
pub(crate) fn civil_from_days(days: i64) -> (i64, u64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = (z - era * 146_097) as u64; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // March is 0
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe as i64 + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// µs since the epoch of `y-m-d` at midnight UTC.
    fn midnight(y: i64, m: u64, d: u64) -> u64 {
        days_from_civil(y, m, d) as u64 * DAY_US
    }

    /// A day as `(year, month, day)`.
    type Date = (i64, u64, u64);

    /// Asserts that `calendar`'s period holding `at_us` runs from midnight of `start` to
    /// midnight of `end`.
    #[track_caller]
    fn assert_period(calendar: Calendar, at_us: u64, start: Date, end: Date) {
        let [start, end] = [start, end].map(|(y, m, d)| midnight(y, m, d));
        assert_eq!(
            period_us(calendar, at_us),
            (start, end),
            "{calendar:?} at {at_us} µs"
        );
    }

    #[test]
    fn civil_dates_and_days_agree_with_known_dates() {
        for (date, days) in [
            ((1970, 1, 1), 0),
            ((2000, 3, 1), 11_017),
            ((2024, 2, 29), 19_782),
            ((2027, 1, 31), 20_849),
            ((2027, 3, 1), 20_878),
            ((2028, 2, 29), 21_243),
            ((2100, 3, 1), 47_541),
        ] {
            assert_eq!(days_from_civil(date.0, date.1, date.2), days, "{date:?}");
            assert_eq!(civil_from_days(days), date, "{days}");
        }
        // Every day of four centuries (leap years of 2000 and 2400, not 2100), both ways.
        let mut date = (1970, 1, 1);
        for days in 0..(400 * 366) {
            assert_eq!(civil_from_days(days), date);
            assert_eq!(days_from_civil(date.0, date.1, date.2), days);
            let leap = date.0 % 4 == 0 && (date.0 % 100 != 0 || date.0 % 400 == 0);
            let length = match date.1 {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            date = match (date.1, date.2) {
                (12, 31) => (date.0 + 1, 1, 1),
                (m, d) if d == length => (date.0, m + 1, 1),
                (m, d) => (date.0, m, d + 1),
            };
        }
    }

    #[test]
    fn periods_run_from_midnight_to_midnight() {
        let last_ms = midnight(2027, 2, 1) - 1_000;
        for (at_us, start, end) in [
            (last_ms, (2027, 1, 1), (2027, 2, 1)),
            (midnight(2027, 2, 1), (2027, 2, 1), (2027, 3, 1)),
            (midnight(2028, 2, 29) + 5, (2028, 2, 1), (2028, 3, 1)),
            (midnight(2028, 1, 1) - 1, (2027, 12, 1), (2028, 1, 1)),
        ] {
            assert_period(Calendar::Month, at_us, start, end);
        }
        for (at_us, start, end) in [
            (midnight(2028, 2, 29) - 1, (2028, 2, 28), (2028, 2, 29)),
            (midnight(2028, 2, 29), (2028, 2, 29), (2028, 3, 1)),
        ] {
            assert_period(Calendar::Day, at_us, start, end);
        }
        assert_eq!(midnight(2028, 3, 1) - midnight(2028, 2, 1), 29 * DAY_US);
        assert_eq!(midnight(2027, 3, 1) - midnight(2027, 2, 1), 28 * DAY_US);
    }

    #[test]
    fn years_run_from_new_year_to_new_year() {
        // The last microsecond of a year is in it; the next one starts the next year.
        let last_us = midnight(2027, 1, 1) - 1;
        assert_period(Calendar::Year, last_us, (2026, 1, 1), (2027, 1, 1));
        assert_period(Calendar::Year, last_us + 1, (2027, 1, 1), (2028, 1, 1));
        // Leap years have 366 days (2000 and 2028, not 2100), others 365.
        for (y, days) in [(2000, 366), (2027, 365), (2028, 366), (2100, 365)] {
            let (start, end) = period_us(Calendar::Year, midnight(y, 7, 4) + 12_345);
            assert_eq!(
                (start, end),
                (midnight(y, 1, 1), midnight(y + 1, 1, 1)),
                "{y}"
            );
            assert_eq!(end - start, days * DAY_US, "{y}");
        }
        for at_us in [midnight(2028, 2, 29), midnight(2028, 12, 31) + DAY_US - 1] {
            assert_period(Calendar::Year, at_us, (2028, 1, 1), (2029, 1, 1));
        }
        assert_eq!(period_us(Calendar::Year, 0), (0, midnight(1971, 1, 1)));
    }
}
