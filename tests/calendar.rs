//! Calendar quotas, on both backends (a real `redis-server`, whose scripts compute the
//! calendar in Lua, and the embedded memory backend) and every algorithm, on the test
//! clock: a rule counting in UTC days, months or years is empty again at the next one,
//! across a month's end, a leap day and a year's end, beside the site's other rules, with
//! `reset_after` and `retry_after` running to the boundary.

mod support;

use std::time::Duration;

use redis_ratelimit::{Algorithm, Calendar, Decision, KeyState, Limiter, RateLimitError, Rule};

/// Midnight UTC of each date the scenarios cross, in seconds since the epoch.
const JAN_15_2027: u64 = midnight_utc(2027, 1, 15);
const FEB_1_2027: u64 = midnight_utc(2027, 2, 1);
const FEB_28_2027: u64 = midnight_utc(2027, 2, 28);
const MAR_1_2027: u64 = midnight_utc(2027, 3, 1);
const DEC_31_2027: u64 = midnight_utc(2027, 12, 31);
const JAN_1_2028: u64 = midnight_utc(2028, 1, 1);
const FEB_28_2028: u64 = midnight_utc(2028, 2, 28);
const FEB_29_2028: u64 = midnight_utc(2028, 2, 29);
const MAR_1_2028: u64 = midnight_utc(2028, 3, 1);
const JAN_1_2029: u64 = midnight_utc(2029, 1, 1);

/// Midnight UTC of `year-month-day` (proleptic Gregorian), in seconds since the epoch:
/// the days-from-civil count (H. Hinnant's), written apart from the limiter's calendar so
/// that the scenarios check it against an independent reckoning.
const fn midnight_utc(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let (era, year_of_era) = (year / 400, year % 400);
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    (era * 146_097 + day_of_era - 719_468) * 86_400
}

#[test]
fn the_dates_are_the_calendars() {
    // Two dates read off a calendar, against the reckoning the others come from.
    assert_eq!(JAN_1_2028, 1_830_297_600);
    assert_eq!(FEB_29_2028 - FEB_28_2028, 86_400);
    assert_eq!(MAR_1_2027 - FEB_28_2027, 86_400, "2027 is no leap year");
}

const HOUR: u64 = 3_600;
const DAY: u64 = 86_400;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// 3 units a calendar month, beside 100 a minute.
static MONTHLY: [Rule; 2] = [
    Rule::per_calendar(3, Calendar::Month),
    Rule::per_minute(100),
];

async fn check(
    limiter: &Limiter,
    algorithm: Algorithm,
    key: &str,
    rules: &[Rule],
    cost: u64,
    at: Duration,
) -> Decision {
    limiter
        .check(key, rules)
        .cost(cost)
        .algorithm(algorithm)
        .at(at)
        .await
        .unwrap()
}

async fn peek(
    limiter: &Limiter,
    algorithm: Algorithm,
    key: &str,
    rules: &[Rule],
    at: Duration,
) -> Decision {
    limiter
        .peek(key, rules)
        .algorithm(algorithm)
        .at(at)
        .await
        .unwrap()
}

/// Asserts that `d` was admitted with the first rule binding, `remaining` left, and that
/// its period resets after `reset_after`.
#[track_caller]
fn assert_admitted(d: &Decision, remaining: u64, reset_after: Duration, algorithm: Algorithm) {
    assert_eq!(
        (d.allowed, d.rule_index, d.remaining),
        (true, 0, remaining),
        "{algorithm}"
    );
    assert_eq!(d.reset_after, reset_after, "{algorithm}");
}

/// Asserts that `d` was refused by the first rule, to be retried after `retry_after`.
#[track_caller]
fn assert_refused(d: &Decision, retry_after: Duration, algorithm: Algorithm) {
    assert_eq!((d.allowed, d.rule_index), (false, 0), "{algorithm}");
    assert_eq!(d.retry_after, Some(retry_after), "{algorithm}");
}

/// Spends a period of 3 units, counted by the first of `rules`, on `key`: 2 at noon on
/// January 15th 2027, then the last one at the period's last instant, `last` before its
/// `end`, and a refusal there until the end. Asserts every answer.
async fn spend_to_the_last_instant(
    limiter: &Limiter,
    algorithm: Algorithm,
    key: &str,
    rules: &[Rule],
    end: Duration,
    last: Duration,
) {
    let mid_january = secs(JAN_15_2027 + 12 * HOUR);
    let d = check(limiter, algorithm, key, rules, 2, mid_january).await;
    assert_admitted(&d, 1, end - mid_january, algorithm);
    let d = check(limiter, algorithm, key, rules, 1, end - last).await;
    assert_admitted(&d, 0, last, algorithm);
    let d = check(limiter, algorithm, key, rules, 1, end - last).await;
    assert_refused(&d, last, algorithm);
    assert_eq!((d.remaining, d.reset_after), (0, last), "{algorithm}");
}

#[test]
fn calendar_rules_are_written_and_read_back_as_text() {
    let month = Rule::per_calendar(2_000_000, Calendar::Month);
    assert_eq!(month.to_string(), "2000000 per calendar month");
    assert_eq!("2000000 per calendar month".parse::<Rule>().unwrap(), month);
    let day = Rule::per_calendar(100, Calendar::Day).calls();
    assert_eq!(day.to_string(), "100 calls per calendar day");
    assert_eq!(day.to_string().parse::<Rule>().unwrap(), day);
    assert_eq!(
        Rule::parse_list("60 calls/minute, 5000 per calendar day").unwrap(),
        [
            Rule::per_minute(60).calls(),
            Rule::per_calendar(5_000, Calendar::Day)
        ]
    );
    assert_eq!(month.calendar(), Some(Calendar::Month));
    assert_eq!(month.window(), Duration::from_secs(31 * DAY));
    assert_ne!(Rule::per_calendar(1, Calendar::Day), Rule::per_day(1));
    let year = Rule::per_calendar(1_000, Calendar::Year);
    assert_eq!(year.to_string(), "1000 per calendar year");
    assert_eq!("1000 per calendar year".parse::<Rule>().unwrap(), year);
    assert_eq!(
        year.calls().to_string().parse::<Rule>().unwrap(),
        year.calls()
    );
    assert_eq!(year.calendar(), Some(Calendar::Year));
    assert_eq!(year.window(), Duration::from_secs(366 * DAY));
    assert_ne!(year, Rule::new(1_000, year.window()));
}

metered_sites! {
    metered(
        rules(
            rule(count = 2, calendar = DAY, calls = true),
            "10 per calendar month",
            rule(count = 1000, calendar = YEAR)
        ),
        name = "calendar.attribute"
    );
}

/// What `key` holds after the check `d` wrote it, asserting that it expires when `d`
/// resets, less what the round trip took: at the end of the calendar period.
async fn written_until_reset(
    limiter: &Limiter,
    key: &str,
    d: &Decision,
    algorithm: Algorithm,
) -> KeyState {
    let state = limiter.inspect(key).await.unwrap().expect("written");
    let expires_in = state.expires_in().expect("an expiry");
    let reset_after = d.reset_after;
    assert!(
        expires_in + secs(1) >= reset_after,
        "{algorithm}: {expires_in:?} < {reset_after:?}"
    );
    assert!(
        expires_in <= reset_after + secs(2),
        "{algorithm}: {expires_in:?}"
    );
    state
}

/// The shape users write: one `static` limiter with a calendar quota, shared by tests
/// running in parallel (each on its own key, at the backend's own clock).
static SHARED: std::sync::LazyLock<Limiter> = std::sync::LazyLock::new(Limiter::memory);
static DAILY: [Rule; 2] = [Rule::per_calendar(3, Calendar::Day), Rule::per_second(100)];

async fn spend_the_day(key: &str) {
    for _ in 0..3 {
        assert!(SHARED.check(key, &DAILY).await.unwrap().allowed);
    }
    let refused = SHARED.check(key, &DAILY).await.unwrap();
    assert_eq!((refused.allowed, refused.rule_index), (false, 0));
    // Until midnight UTC: at most a day.
    let retry = refused.retry_after.expect("tomorrow");
    assert!(retry > Duration::ZERO && retry <= secs(DAY), "{retry:?}");
}

#[tokio::test]
async fn a_shared_limiter_counts_a_daily_quota_per_key_for_parallel_tests_a() {
    spend_the_day("calendar:shared:a").await;
}

#[tokio::test]
async fn a_shared_limiter_counts_a_daily_quota_per_key_for_parallel_tests_b() {
    spend_the_day("calendar:shared:b").await;
}

backend_tests! {
    async fn a_key_lives_until_its_calendar_period_ends() {
        let limiter = support::limiter();
        let rules = [Rule::per_calendar(10, Calendar::Month), Rule::per_second(50)];
        for algorithm in Algorithm::ALL {
            let key = format!("calendar:expiry:{algorithm}");
            // At the backend's own clock, which the key's expiry counts from.
            let d = limiter.check(&key, &rules).algorithm(algorithm).await.unwrap();
            assert_eq!((d.allowed, d.rule_index), (true, 0), "{algorithm}");
            // The month's end; never a second's window.
            let state = written_until_reset(limiter, &key, &d, algorithm).await;
            assert_eq!(state.rule(rules[0]).used, 1, "{algorithm}");
        }
    }


    async fn a_year_s_key_lives_until_new_year_and_inspect_reads_its_count() {
        let limiter = support::limiter();
        let rules = [Rule::per_calendar(1_000, Calendar::Year).calls(), Rule::per_second(5_000)];
        for algorithm in Algorithm::ALL {
            let key = format!("calendar:year-expiry:{algorithm}");
            let d = limiter.check(&key, &rules).cost(3).algorithm(algorithm).await.unwrap();
            assert_eq!((d.allowed, d.rule_index, d.remaining), (true, 0, 999), "{algorithm}");
            assert!(d.reset_after <= secs(366 * DAY), "{algorithm}: {:?}", d.reset_after);
            let state = written_until_reset(limiter, &key, &d, algorithm).await;
            assert_eq!(state.rule(rules[0]).used, 1, "{algorithm}: one call");
        }
    }

    async fn a_month_is_empty_again_on_the_first_and_its_reset_runs_to_midnight() {
        let limiter = support::limiter();
        for algorithm in Algorithm::ALL {
            let key = format!("calendar:month:{algorithm}");
            // The last millisecond of January: the last unit, then none.
            let ms = Duration::from_millis(1);
            spend_to_the_last_instant(limiter, algorithm, &key, &MONTHLY, secs(FEB_1_2027), ms).await;
            // February 1st, midnight: the whole month again, 28 days of it in 2027.
            let d = check(limiter, algorithm, &key, &MONTHLY, 3, secs(FEB_1_2027)).await;
            assert_admitted(&d, 0, secs(MAR_1_2027 - FEB_1_2027), algorithm);
            assert_eq!(MAR_1_2027 - FEB_1_2027, 28 * DAY);
            // A cost above the count never passes.
            let d = check(limiter, algorithm, &key, &MONTHLY, 4, secs(FEB_1_2027 + DAY)).await;
            assert_eq!((d.allowed, d.retry_after), (false, None), "{algorithm}");
        }
    }

    async fn a_leap_day_is_a_day_of_february_and_march_starts_empty() {
        let limiter = support::limiter();
        let rules = [Rule::per_calendar(2, Calendar::Day), Rule::per_calendar(5, Calendar::Month)];
        for algorithm in Algorithm::ALL {
            let key = format!("calendar:leap:{algorithm}");
            let d = check(limiter, algorithm, &key, &rules, 2, secs(FEB_28_2028 + 10 * HOUR)).await;
            assert_admitted(&d, 0, secs(14 * HOUR), algorithm);
            let d = check(limiter, algorithm, &key, &rules, 1, secs(FEB_28_2028 + 23 * HOUR)).await;
            // Refused until the leap day.
            assert_refused(&d, secs(HOUR), algorithm);
            // February 29th: a new day, the same month (2 of 5 used).
            let d = check(limiter, algorithm, &key, &rules, 2, secs(FEB_29_2028)).await;
            assert_admitted(&d, 0, secs(DAY), algorithm);
            // The month has 1 left and runs to March 1st, 12 hours after noon.
            let month = peek(limiter, algorithm, &key, &rules[1..], secs(FEB_29_2028 + 12 * HOUR)).await;
            assert_eq!((month.allowed, month.remaining), (true, 1), "{algorithm}");
            assert_eq!(month.reset_after, secs(12 * HOUR), "{algorithm}");
            let d = check(limiter, algorithm, &key, &rules[1..], 2, secs(FEB_29_2028 + 12 * HOUR)).await;
            assert_eq!((d.allowed, d.remaining), (false, 1), "{algorithm}");
            assert_eq!(d.retry_after, Some(secs(12 * HOUR)), "{algorithm}");
            // March 1st: both empty.
            let d = check(limiter, algorithm, &key, &rules, 2, secs(MAR_1_2028)).await;
            assert_eq!((d.allowed, d.rule_index, d.remaining), (true, 0, 0), "{algorithm}");
            let month = peek(limiter, algorithm, &key, &rules[1..], secs(MAR_1_2028)).await;
            assert_eq!(month.remaining, 3, "{algorithm}");
            assert_eq!(month.reset_after, secs(31 * DAY), "{algorithm}");
        }
    }

    async fn a_february_without_a_leap_day_ends_on_the_28th() {
        let limiter = support::limiter();
        let rules = [Rule::per_calendar(1, Calendar::Month)];
        for algorithm in Algorithm::ALL {
            let key = format!("calendar:common:{algorithm}");
            let noon = secs(FEB_28_2027 + 12 * HOUR);
            assert!(check(limiter, algorithm, &key, &rules, 1, noon).await.allowed, "{algorithm}");
            let d = check(limiter, algorithm, &key, &rules, 1, noon).await;
            assert!(!d.allowed, "{algorithm}");
            assert_eq!(d.retry_after, Some(secs(12 * HOUR)), "{algorithm}");
            assert_eq!(d.reset_after, secs(12 * HOUR), "{algorithm}");
            assert!(check(limiter, algorithm, &key, &rules, 1, secs(MAR_1_2027)).await.allowed, "{algorithm}");
        }
    }

    /// The backend's clock stepping back over a period's start (a failover to a server
    /// whose clock is behind) counts the check in the later period, which it has seen:
    /// one period's count is never admitted twice. The token bucket, which keeps no latest
    /// time, once forgot the later period here.
    async fn a_clock_stepped_back_over_midnight_counts_in_the_day_it_has_seen() {
        let limiter = support::limiter();
        let rules = [Rule::per_calendar(1, Calendar::Day)];
        for algorithm in Algorithm::ALL {
            let key = format!("calendar:stepped_back:{algorithm}");
            let midnight = Duration::from_secs(MAR_1_2028);
            let before = midnight - Duration::from_micros(1);
            assert!(check(limiter, algorithm, &key, &rules, 1, midnight).await.allowed, "{algorithm}");
            let d = check(limiter, algorithm, &key, &rules, 1, before).await;
            assert!(!d.allowed, "{algorithm}: the day of March 1st holds its one unit");
            // Until the end of March 1st, from the caller's own clock.
            assert_eq!(d.retry_after, Some(secs(DAY) + Duration::from_micros(1)), "{algorithm}");
        }
    }

    async fn a_year_end_empties_a_monthly_calls_rule_and_a_daily_one() {
        let limiter = support::limiter();
        let rules = [Rule::per_calendar(1, Calendar::Month).calls(), Rule::per_calendar(1000, Calendar::Day)];
        for algorithm in Algorithm::ALL {
            let key = format!("calendar:year:{algorithm}");
            let d = check(limiter, algorithm, &key, &rules, 10, secs(DEC_31_2027 + 23 * HOUR + 1800)).await;
            assert_admitted(&d, 0, secs(1800), algorithm);
            let d = check(limiter, algorithm, &key, &rules, 10, secs(JAN_1_2028 - 60)).await;
            assert_refused(&d, secs(60), algorithm);
            // The days' units: 10 of 1000 on December 31st.
            let day = peek(limiter, algorithm, &key, &rules[1..], secs(JAN_1_2028 - 60)).await;
            assert_eq!(day.remaining, 990, "{algorithm}");
            let d = check(limiter, algorithm, &key, &rules, 10, secs(JAN_1_2028)).await;
            assert_admitted(&d, 0, secs(31 * DAY), algorithm);
            let day = peek(limiter, algorithm, &key, &rules[1..], secs(JAN_1_2028)).await;
            assert_eq!(day.remaining, 990, "{algorithm}: a new day");
        }
    }

    async fn a_year_is_empty_again_on_january_1_and_a_leap_year_has_366_days() {
        let limiter = support::limiter();
        // A calendar year beside a calendar month on one key: two records, one per period.
        let rules = [Rule::per_calendar(3, Calendar::Year), Rule::per_calendar(100, Calendar::Month)];
        assert_eq!(JAN_1_2028 - JAN_15_2027, 351 * DAY);
        assert_eq!(JAN_1_2029 - JAN_1_2028, 366 * DAY);
        for algorithm in Algorithm::ALL {
            let key = format!("calendar:years:{algorithm}");
            // December 31st, 23:59:59.999999: the year's last unit, then none.
            let us = Duration::from_micros(1);
            spend_to_the_last_instant(limiter, algorithm, &key, &rules, secs(JAN_1_2028), us).await;
            // December's month counted the one unit it admitted.
            let month = peek(limiter, algorithm, &key, &rules[1..], secs(JAN_1_2028) - us).await;
            assert_eq!(month.remaining, 99, "{algorithm}");
            // January 1st, midnight: the whole year again, 366 days of it in 2028.
            let d = check(limiter, algorithm, &key, &rules, 3, secs(JAN_1_2028)).await;
            assert_admitted(&d, 0, secs(366 * DAY), algorithm);
            // The leap day is in the year: refused until 2029.
            let d = check(limiter, algorithm, &key, &rules, 1, secs(FEB_29_2028)).await;
            assert_refused(&d, secs(JAN_1_2029 - FEB_29_2028), algorithm);
            let d = check(limiter, algorithm, &key, &rules, 1, secs(JAN_1_2029)).await;
            // 2029 is not a leap year.
            assert_admitted(&d, 2, secs(365 * DAY), algorithm);
        }
    }

    async fn settle_and_refund_adjust_the_period_the_reservation_was_counted_in() {
        let limiter = support::limiter();
        let rules = [Rule::per_calendar(100, Calendar::Month), Rule::per_minute(1000)];
        for algorithm in Algorithm::ALL {
            let key = format!("calendar:settle:{algorithm}");
            let month = |at| peek(limiter, algorithm, &key, &rules[..1], at);
            let evening = secs(FEB_1_2027 - 2 * HOUR);
            // 40 reserved, 10 used: 90 left in January.
            let d = check(limiter, algorithm, &key, &rules, 40, evening).await;
            let settled = limiter.settle_at(&key, &rules, &d, 10, evening).await.unwrap();
            assert_eq!((settled.allowed, settled.remaining), (true, 90), "{algorithm}");
            assert_eq!(month(evening).await.remaining, 90, "{algorithm}");
            // 10 reserved, 95 used: 5 in debt; refused until February.
            let later = evening + secs(HOUR);
            let d = check(limiter, algorithm, &key, &rules, 10, later).await;
            limiter.settle_at(&key, &rules, &d, 95, later).await.unwrap();
            let refused = check(limiter, algorithm, &key, &rules, 1, later).await;
            assert_eq!((refused.allowed, refused.rule_index, refused.remaining), (false, 0, 0), "{algorithm}");
            assert_eq!(refused.retry_after, Some(secs(HOUR)), "{algorithm}");
            // February starts empty; a refund gives February's units back to February.
            let february = secs(FEB_1_2027 + HOUR);
            let d = check(limiter, algorithm, &key, &rules, 30, february).await;
            assert_eq!((d.allowed, d.remaining), (true, 70), "{algorithm}");
            limiter.refund_at(&key, &rules, &d, february).await.unwrap();
            assert_eq!(month(february).await.remaining, 100, "{algorithm}: refunded");
            // A January reservation settled in February gives nothing to February.
            let key = format!("calendar:settle-across:{algorithm}");
            let month = |at| peek(limiter, algorithm, &key, &rules[..1], at);
            let january = check(limiter, algorithm, &key, &rules, 10, later).await;
            let d = check(limiter, algorithm, &key, &rules, 30, february).await;
            assert_eq!((d.allowed, d.remaining), (true, 70), "{algorithm}");
            limiter.settle_at(&key, &rules, &january, 0, february).await.unwrap();
            assert_eq!(month(february).await.remaining, 70, "{algorithm}: January's");
            limiter.settle_at(&key, &rules, &d, 5, february).await.unwrap();
            assert_eq!(month(february).await.remaining, 95, "{algorithm}: February's");
        }
    }

    async fn the_attribute_takes_calendar_day_month_and_year_with_calls() {
        // At the backend's own clock: 2 calls a day, 10 units a month.
        assert!(metered("ann", 4).await.is_ok());
        assert!(metered("ann", 4).await.is_ok());
        let err = metered("ann", 1).await.unwrap_err();
        assert!(matches!(err, RateLimitError::Limited { .. }), "{err:?}");
        assert!(metered("bob", 11).await.is_err(), "above the month's count");
    }
}
