//! The allowance primitive on each backend, at explicit times: a draw reserves units held
//! until they may be spent, a give-back returns what was not used and re-times what was,
//! once; and instances spending what they drew stay within each algorithm's exact bound,
//! where a naive draw (recorded when drawn) does not (`support::bound`).

mod support;

use std::time::Duration;

use ratelimit_runtime::draws::{Backend, Drawn};
use redis_ratelimit::{Algorithm, Rule};

use support::bound::check_bound;

/// A minute boundary: fixed and sliding windows of a minute start here.
const T0: u64 = 1_700_000_040_000_000;
const SEC: u64 = 1_000_000;
const ALL: [Algorithm; 4] = Algorithm::ALL;

/// A draw of 6 units over `calls` calls at `T0`, held a second.
async fn draw_a_second(
    b: &Backend,
    key: &str,
    rules: &[Rule],
    algorithm: Algorithm,
    calls: u64,
) -> Drawn {
    b.draw(key, rules, algorithm, 6, calls, Duration::from_secs(1), T0)
        .await
        .unwrap()
}

/// A fresh redis-server, a backend on it, and a connection of its own to watch it with.
fn redis_backend() -> (support::RedisServer, Backend, redis::Connection) {
    let server = support::RedisServer::start();
    let backend = Backend::redis(&server.url());
    let watch = server.connection();
    (server, backend, watch)
}

/// What `rule` alone has left at `now` (a peek).
async fn left(b: &Backend, key: &str, rule: Rule, algorithm: Algorithm, now: u64) -> u64 {
    b.check(key, &[rule], algorithm, 1, false, now)
        .await
        .unwrap()
        .1
}

backend_tests! {
    memory = support::leak(Backend::memory()),
    redis = |url: &str| support::leak(Backend::redis(url));

    async fn a_draw_given_back_leaves_the_key_counting_what_was_used(b: &Backend) {
        let units = Rule::per_minute(10);
        let calls = Rule::per_minute(5).calls();
        let rules = [units, calls];
        for algorithm in ALL {
            let key = format!("used:{algorithm}");
            let drawn = draw_a_second(b, &key, &rules, algorithm, 3).await;
            assert!(drawn.allowed, "{algorithm:?}");
            assert_eq!((drawn.at_us, drawn.hold_us), (T0, SEC), "{algorithm:?}");
            b.give_back(&drawn, 1, 2, T0 + SEC / 2, T0 + SEC).await.unwrap();
            // At the hold's end, as if 2 units and 1 call had been checked one by one.
            let r = T0 + SEC;
            assert_eq!(left(b, &key, units, algorithm, r).await, 8, "{algorithm:?}");
            assert_eq!(left(b, &key, calls, algorithm, r).await, 4, "{algorithm:?}");
        }
    }

    async fn a_give_back_sent_again_after_a_like_draw_gives_back_once(b: &Backend) {
        // The token bucket's draws leave its frontier where an earlier draw of as many
        // units left it once that one is given back: a give-back sent again then (a
        // re-send after a broken connection) must find its own draw gone, not that one.
        let rule = Rule::per_minute(60);
        let (rules, algorithm, key) = ([rule], Algorithm::TokenBucket, "again:token_bucket");
        // Spent first, so that the frontier stands ahead of the draws.
        assert!(b.check(key, &rules, algorithm, 10, true, T0).await.unwrap().0);
        let hold = Duration::from_secs(1);
        let first = b.draw(key, &rules, algorithm, 6, 1, hold, T0).await.unwrap();
        b.give_back(&first, 0, 0, T0, T0 + 1).await.unwrap();
        let second = b.draw(key, &rules, algorithm, 6, 1, hold, T0 + 2).await.unwrap();
        assert!(second.allowed);
        assert_eq!(left(b, key, rule, algorithm, T0 + 3).await, 44, "the second's units");
        b.give_back(&first, 0, 0, T0, T0 + 3).await.unwrap();
        assert_eq!(left(b, key, rule, algorithm, T0 + 3).await, 44, "still the second's");
        // The second's own give-back returns its units.
        b.give_back(&second, 0, 0, T0 + 2, T0 + 4).await.unwrap();
        assert_eq!(left(b, key, rule, algorithm, T0 + 4).await, 50);
    }

    async fn a_give_back_sent_twice_changes_the_key_once(b: &Backend) {
        let rules = [Rule::per_minute(10), Rule::per_minute(5).calls()];
        for algorithm in ALL {
            let key = format!("twice:{algorithm}");
            let drawn = draw_a_second(b, &key, &rules, algorithm, 3).await;
            for _ in 0..2 {
                b.give_back(&drawn, 1, 2, T0 + SEC / 2, T0 + SEC).await.unwrap();
                let r = T0 + SEC;
                assert_eq!(left(b, &key, rules[0], algorithm, r).await, 8, "{algorithm:?}");
                assert_eq!(left(b, &key, rules[1], algorithm, r).await, 4, "{algorithm:?}");
            }
        }
    }

    async fn a_draw_s_unused_calls_go_back_to_a_calendar_rule_once(b: &Backend) {
        let calls = Rule::per_calendar(5, redis_ratelimit::Calendar::Day).calls();
        let rules = [Rule::per_minute(10), calls];
        for algorithm in ALL {
            let key = format!("calendar-calls:{algorithm}");
            let drawn = draw_a_second(b, &key, &rules, algorithm, 3).await;
            for _ in 0..2 {
                b.give_back(&drawn, 1, 2, T0 + SEC / 2, T0 + SEC).await.unwrap();
                assert_eq!(left(b, &key, calls, algorithm, T0 + SEC).await, 4, "{algorithm:?}");
            }
        }
    }

    async fn the_used_units_of_a_sliding_log_draw_leave_a_window_after_their_last_spend(b: &Backend) {
        let rule = Rule::per_minute(10);
        let algorithm = Algorithm::SlidingLog;
        let drawn = draw_a_second(b, "retimed", &[rule], algorithm, 1).await;
        b.give_back(&drawn, 1, 2, T0 + SEC / 2, T0 + SEC).await.unwrap();
        let leave = T0 + SEC / 2 + 60 * SEC;
        assert_eq!(left(b, "retimed", rule, algorithm, leave - 1).await, 8);
        assert_eq!(left(b, "retimed", rule, algorithm, leave).await, 10);
    }

    async fn a_sliding_log_draw_s_used_units_count_beside_checks_in_every_answer(b: &Backend) {
        // On Redis a draw of 120 units is one weighted entry among the checks' members, one
        // of 6 a member per unit (scripts/sliding_log.lua): in both, `n` stands for 1 or 20.
        let algorithm = Algorithm::SlidingLog;
        let at = |tenths: u64| T0 + tenths * SEC / 10;
        for n in [1, 20] {
            let (key, rules) = (format!("drawn:{n}"), [Rule::per_minute(10 * n)]);
            let hold = Duration::from_secs(1);
            let drawn = b.draw(&key, &rules, algorithm, 6 * n, 1, hold, T0).await.unwrap();
            b.give_back(&drawn, 1, 4 * n, at(5), at(5)).await.unwrap();
            assert!(b.check(&key, &rules, algorithm, 3 * n, true, at(6)).await.unwrap().0);
            // 4n units spent until 0.5 s, and 3n checked at 0.6 s (the key's newest write).
            assert_eq!(left(b, &key, rules[0], algorithm, at(7)).await, 3 * n, "{n}");
            let retry = |cost| b.retry_after_us(&key, &rules, algorithm, cost, at(7));
            // 8n units wait for the (2n + 1)th newest to leave (checked), 5n for the
            // (5n + 1)th (drawn).
            assert_eq!(retry(8 * n).await.unwrap(), at(6) + 60 * SEC - at(7), "{n}");
            assert_eq!(retry(5 * n).await.unwrap(), at(5) + 60 * SEC - at(7), "{n}");
            let gone = at(5) + 60 * SEC;
            assert_eq!(left(b, &key, rules[0], algorithm, gone).await, 7 * n, "{n}");
        }
    }

    async fn held_units_are_counted_by_every_other_check(b: &Backend) {
        let rules = [Rule::per_minute(10)];
        for algorithm in ALL {
            let key = format!("held:{algorithm}");
            let drawn = draw_a_second(b, &key, &rules, algorithm, 1).await;
            assert!(drawn.allowed && drawn.remaining <= 4, "{algorithm:?}: {drawn:?}");
            let now = T0 + SEC / 10;
            let more = drawn.remaining + 1;
            let (allowed, _) = b.check(&key, &rules, algorithm, more, true, now).await.unwrap();
            assert!(!allowed, "{algorithm:?}: the held units were not counted");
            let (allowed, remaining) =
                b.check(&key, &rules, algorithm, drawn.remaining, true, now).await.unwrap();
            assert_eq!((allowed, remaining), (true, 0), "{algorithm:?}");
        }
    }

    async fn a_draw_that_would_not_conform_is_refused_and_takes_nothing(b: &Backend) {
        let rules = [Rule::per_minute(10)];
        let hold = Duration::from_secs(1);
        for algorithm in ALL {
            let key = format!("refused:{algorithm}");
            let never = b.draw(&key, &rules, algorithm, 11, 1, hold, T0).await.unwrap();
            assert!(!never.allowed, "{algorithm:?}");
            assert!(b.check(&key, &rules, algorithm, 6, true, T0).await.unwrap().0);
            let refused = b.draw(&key, &rules, algorithm, 5, 1, hold, T0).await.unwrap();
            assert!(!refused.allowed, "{algorithm:?}");
            assert!(refused.retry_after_us > 0, "{algorithm:?}");
            // It took nothing: what is left is still there for a check.
            assert_eq!(left(b, &key, rules[0], algorithm, T0).await, 4, "{algorithm:?}");
        }
    }

    async fn a_token_bucket_draw_conforms_with_its_units_charged_at_its_hold(b: &Backend) {
        // T = 6 s, burst span 60 s: a draw held 15 s must fit its units in the 45 s left.
        let rules = [Rule::per_minute(10)];
        let (algorithm, hold) = (Algorithm::TokenBucket, Duration::from_secs(15));
        assert!(!b.draw("tb:8", &rules, algorithm, 8, 1, hold, T0).await.unwrap().allowed);
        assert!(b.draw("tb:7", &rules, algorithm, 7, 1, hold, T0).await.unwrap().allowed);
    }

    async fn a_give_back_after_a_reset_makes_no_room_it_did_not_take(b: &Backend) {
        let rules = [Rule::per_minute(10)];
        for algorithm in ALL {
            let key = format!("reset:{algorithm}");
            // A draws 6, the key is reset, B fills the window: A's give-back of the 4 it
            // did not use finds none of its units counted, and gives nothing back.
            let drawn = draw_a_second(b, &key, &rules, algorithm, 3).await;
            b.reset(&key).await.unwrap();
            for n in 1..=10 {
                let (admitted, _) = b.check(&key, &rules, algorithm, 1, true, T0 + n).await.unwrap();
                assert!(admitted, "{algorithm:?}: check {n} after the reset");
            }
            b.give_back(&drawn, 1, 2, T0 + SEC / 2, T0 + SEC).await.unwrap();
            assert_eq!(left(b, &key, rules[0], algorithm, T0 + SEC).await, 0, "{algorithm:?}");
        }
    }

    async fn a_hold_never_outlives_a_quarter_window_nor_the_window_or_period_it_started_in(b: &Backend) {
        let rules = [Rule::per_minute(100), Rule::per_calendar(1_000, redis_ratelimit::Calendar::Day)];
        let hold = Duration::from_secs(30);
        for algorithm in ALL {
            let key = format!("hold:{algorithm}");
            let late = T0 + 50 * SEC;
            let drawn = b.draw(&key, &rules, algorithm, 1, 1, hold, late).await.unwrap();
            let expected = match algorithm {
                // The aligned window ends at T0 + 60 s.
                Algorithm::FixedWindow | Algorithm::SlidingWindow => 10 * SEC - 1,
                _ => 15 * SEC,
            };
            assert_eq!(drawn.hold_us, expected, "{algorithm:?}");
        }
    }

    async fn instances_spending_held_draws_keep_the_bound_and_naive_ones_break_it(b: &Backend) {
        for algorithm in ALL {
            let rules = [Rule::per_second(20), Rule::per_minute(1_000)];
            let held = simulate(b, algorithm, &rules, false, &format!("fleet:{algorithm}")).await;
            check_bound(algorithm, &rules, &held).unwrap();
            let naive = simulate(b, algorithm, &rules, true, &format!("naive:{algorithm}")).await;
            // The sliding log's entries leave before they are spent; the fixed window's
            // units are spent in the next window. (The sliding window's estimate and the
            // token bucket's burst leave this workload room.)
            let breaks = matches!(algorithm, Algorithm::SlidingLog | Algorithm::FixedWindow);
            assert_eq!(
                check_bound(algorithm, &rules, &naive).is_err(),
                breaks,
                "{algorithm:?}: the naive draw"
            );
        }
    }
}

/// Once a sliding-log draw has left its longest window, its key is checked as one that
/// never drew: the script runs the same Redis commands (a key holding a draw keeps a clock
/// of its own and reads the draws' weighted entries, which costs a check a few more
/// commands while they count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_its_draws_left_the_window_a_key_costs_what_a_key_that_never_drew_costs() {
    let (_server, b, mut redis) = redis_backend();
    let b = &b;
    let rules = [Rule::per_minute(10)];
    let algorithm = Algorithm::SlidingLog;
    let drawn = draw_a_second(b, "drew", &rules, algorithm, 1).await;
    b.give_back(&drawn, 1, 2, T0 + SEC / 2, T0 + SEC)
        .await
        .unwrap();
    b.check("never", &rules, algorithm, 2, true, T0)
        .await
        .unwrap();
    let mut costs = Vec::new();
    for key in ["drew", "never"] {
        // The first checks after the window (the first trims the draw, the second finds
        // nothing held), then the one measured.
        for late in [62, 63] {
            b.check(key, &rules, algorithm, 1, true, T0 + late * SEC)
                .await
                .unwrap();
        }
        let check = async {
            b.check(key, &rules, algorithm, 1, true, T0 + 64 * SEC)
                .await
                .unwrap();
        };
        costs.push(commands_run_by_scripts(&mut redis, check).await);
    }
    assert_eq!(
        costs[0], costs[1],
        "commands of a check of a key that drew, and of one that never did"
    );
}

/// A sliding-log draw is one entry whatever its size: drawing a million units (for as many
/// calls, which no rule counts) and giving half of them back runs the Redis commands that
/// a hundred do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_log_draw_costs_redis_the_same_whatever_its_size() {
    let (_server, b, mut redis) = redis_backend();
    let b = &b;
    let (rule, algorithm) = (Rule::per_minute(10_000_000), Algorithm::SlidingLog);
    let rules = [rule];
    let hold = Duration::from_secs(1);
    let mut costs = Vec::new();
    for units in [100, 1_000_000] {
        let key = format!("size:{units}");
        let draw_and_give_back = async {
            let drawn = b.draw(&key, &rules, algorithm, units, units, hold, T0);
            let drawn = drawn.await.unwrap();
            assert!(drawn.allowed, "{units} units");
            let half = units / 2;
            let give_back = b.give_back(&drawn, half, half, T0 + SEC / 2, T0 + SEC / 2);
            give_back.await.unwrap();
        };
        costs.push(commands_run_by_scripts(&mut redis, draw_and_give_back).await);
        let left = left(b, &key, rule, algorithm, T0 + SEC).await;
        assert_eq!(left, 10_000_000 - units / 2, "{units} units");
    }
    assert_eq!(
        costs[0], costs[1],
        "commands of a draw of 100 units and of a million"
    );
}

/// The commands the scripts ran while `work` ran, from `INFO commandstats` reset before it
/// (scripts' and the test's own commands left out).
async fn commands_run_by_scripts(
    redis: &mut redis::Connection,
    work: impl std::future::Future<Output = ()>,
) -> u64 {
    redis::cmd("CONFIG").arg("RESETSTAT").exec(redis).unwrap();
    work.await;
    let stats: String = redis::cmd("INFO").arg("commandstats").query(redis).unwrap();
    stats
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_")?.split_once(":calls="))
        .filter(|(command, _)| !["evalsha", "eval", "info", "config"].contains(command))
        .map(|(_, rest)| rest.split(',').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// One instance's allowance: what it drew, spent and when.
struct Held {
    drawn: ratelimit_runtime::draws::Drawn,
    left: u64,
    used: u64,
    last: u64,
    /// Spent until then.
    until: u64,
}

/// Four instances calling one key at random paced times for 20 s, in bursts around each
/// second's start (each call one unit and one call), each admitting from its allowance while it lasts, else giving it back and
/// drawing another (4 units, held 60 ms; 1 when 4 are refused). `naive`: the draw is
/// recorded when drawn (no hold) yet spent for as long. Returns the admitted calls.
async fn simulate(
    b: &Backend,
    algorithm: Algorithm,
    rules: &[Rule],
    naive: bool,
    key: &str,
) -> Vec<(u64, u64)> {
    const HOLD_US: u64 = 60_000;
    let mut random = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random
    };
    let mut instances: Vec<Option<Held>> = (0..4).map(|_| None).collect();
    let (mut now, mut admitted) = (T0 + 123, Vec::new());
    while now < T0 + 20 * SEC {
        // Heavy around each second's start, light in between: the per-second rule fills
        // at the end of one window and again at the start of the next.
        let phase = (now - T0) % SEC;
        now += match !(SEC * 3 / 100..SEC * 97 / 100).contains(&phase) {
            true => next() % 1_000,
            false => next() % 200_000,
        };
        let i = (next() % 4) as usize;
        if let Some(h) = &mut instances[i] {
            if h.left > 0 && now <= h.until {
                h.left -= 1;
                h.used += 1;
                h.last = now;
                admitted.push((now, 1));
                continue;
            }
        }
        if let Some(h) = instances[i].take() {
            b.give_back(&h.drawn, h.used, h.used, h.last, now)
                .await
                .unwrap();
        }
        let hold = Duration::from_micros(if naive { 0 } else { HOLD_US });
        for size in [4, 1] {
            let drawn = b
                .draw(key, rules, algorithm, size, size, hold, now)
                .await
                .unwrap();
            if drawn.allowed {
                let until = drawn.at_us + if naive { HOLD_US } else { drawn.hold_us };
                admitted.push((now, 1));
                instances[i] = Some(Held {
                    drawn,
                    left: size - 1,
                    used: 1,
                    last: now,
                    until,
                });
                break;
            }
        }
    }
    admitted
}
