//! Redis and memory, lock-step, on proptest-generated calls at explicit times.

use std::cell::Cell;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redis_ratelimit::{Algorithm, Calendar, Decision, Limiter, Rule};

use crate::support::RedisServer;

const ALGORITHMS: [Algorithm; 4] = Algorithm::ALL;

#[derive(Clone, Debug)]
struct Call {
    /// µs after the previous call.
    gap_us: u64,
    /// µs before the previous call instead, when not 0: a clock behind the key's state
    /// (bounded in [`run`] so that the backends' expiry still agrees).
    back_us: u64,
    /// Units the call uses, often 1, sometimes above a rule's count.
    cost: u64,
    consume: bool,
    /// Which of the case's rules the call checks (bit i: rule i; none set: all), and
    /// whether in reverse order.
    pick: u8,
    reversed: bool,
    /// When a consuming call is refused, block the key for this many µs (0: no block).
    block_us: u64,
    /// Refund an admitted consuming call at once, at the time it was checked.
    refund: bool,
    /// Settle an admitted consuming call at once at this many units (not refunded).
    settle: Option<u64>,
}

#[derive(Clone, Debug)]
struct Case {
    rules: Vec<Rule>,
    start_us: u64,
    calls: Vec<Call>,
}

impl Case {
    fn rules_of(&self, call: &Call) -> Vec<Rule> {
        let picked = |i: &usize| call.pick == 0 || call.pick & (1 << i) != 0;
        let mut rules: Vec<Rule> = (0..self.rules.len())
            .filter(picked)
            .map(|i| self.rules[i])
            .collect();
        if rules.is_empty() {
            rules = self.rules.clone();
        }
        if call.reversed {
            rules.reverse();
        }
        rules
    }
}

fn rule() -> impl Strategy<Value = Rule> {
    let us = |(count, window_us): (u64, u64)| Rule::new(count, Duration::from_micros(window_us));
    prop_oneof![
        // Microsecond windows.
        (1u64..=4, 1u64..=2_000).prop_map(us),
        // Whole units, sub-second to a minute.
        (
            1u64..=6,
            prop::sample::select(vec![1_000u64, 100_000, 250_000, 1_000_000, 60_000_000])
        )
            .prop_map(us),
        // Anything in between, including counts that never fill.
        (1u64..=200, 1u64..=5_000_000).prop_map(us),
        // count * window beyond 2^53: a day at a million.
        Just(Rule::new(1_000_000, Duration::from_secs(86_400))),
    ]
}

fn call() -> impl Strategy<Value = Call> {
    let gap = prop_oneof![
        4 => Just(0u64),
        6 => 0u64..200,
        6 => 0u64..300_000,
        3 => 0u64..10_000_000,
        1 => 0u64..200_000_000_000,
    ];
    let back = prop_oneof![
        12 => Just(0u64),
        1 => 1u64..2_000,
        1 => 1u64..5_000_000,
    ];
    let cost = prop_oneof![6 => Just(1u64), 3 => 2u64..=4, 1 => 5u64..=8];
    (gap, back, cost, prop::bool::weighted(0.8)).prop_map(|(gap_us, back_us, cost, consume)| Call {
        gap_us,
        back_us,
        cost,
        consume,
        pick: 0,
        reversed: false,
        block_us: 0,
        refund: false,
        settle: None,
    })
}

/// A call that may block the key when refused and may be refunded when admitted, on a
/// clock that never goes back (a refund can make the key's newest time older, which
/// the bounds' bookkeeping of the times calls were counted at does not follow).
fn call_with_blocks_and_refunds() -> impl Strategy<Value = Call> {
    let block = prop_oneof![
        3 => Just(0u64),
        1 => 1u64..2_000,
        1 => 1u64..5_000_000,
    ];
    (call(), block, prop::bool::weighted(0.3)).prop_map(|(call, block_us, refund)| Call {
        back_us: 0,
        block_us,
        refund,
        ..call
    })
}

/// A call checking some of the case's rules, often not all.
fn call_with_some_rules() -> impl Strategy<Value = Call> {
    (call(), 0u8..8, any::<bool>()).prop_map(|(call, pick, reversed)| Call {
        pick,
        reversed,
        ..call
    })
}

fn case() -> impl Strategy<Value = Case> {
    cases(call())
}

/// A call settled once admitted: at most its reservation (`excess` false), or
/// sometimes more. On a clock that never goes back, as refunds.
fn call_settled(excess: bool) -> impl Strategy<Value = Call> {
    (call(), 0u64..=100, prop::bool::weighted(0.7)).prop_map(move |(call, percent, settled)| {
        let most = if excess { call.cost * 3 } else { call.cost };
        Call {
            back_us: 0,
            settle: settled.then_some(most * percent / 100),
            ..call
        }
    })
}

/// Cases of settled calls whose rules may count calls.
fn cases_settled(excess: bool) -> impl Strategy<Value = Case> {
    let rules = prop::collection::vec(
        (rule(), prop::bool::weighted(0.3)).prop_map(|(rule, calls)| match calls {
            true => rule.calls(),
            false => rule,
        }),
        1..=3,
    );
    (
        rules,
        1_600_000_000_000_000u64..1_700_000_000_000_000,
        prop::collection::vec(call_settled(excess), 1..=60),
    )
        .prop_map(|(rules, start_us, calls)| Case {
            rules,
            start_us,
            calls,
        })
}

/// Cases whose rules may count calls (each rule, one time in two), with costs that
/// often exceed the calls rules' counts: with clocks that go back, or (never both, see
/// [`call_with_blocks_and_refunds`]) with blocks and refunds.
fn cases_counting_calls() -> impl Strategy<Value = Case> {
    let rules = prop::collection::vec(
        (rule(), any::<bool>()).prop_map(|(rule, calls)| match calls {
            true => rule.calls(),
            false => rule,
        }),
        1..=3,
    );
    let calls = prop_oneof![
        prop::collection::vec(call(), 1..=60),
        prop::collection::vec(call_with_blocks_and_refunds(), 1..=60),
    ];
    (
        rules,
        1_600_000_000_000_000u64..1_700_000_000_000_000,
        calls,
    )
        .prop_map(|(rules, start_us, calls)| Case {
            rules,
            start_us,
            calls,
        })
}

fn cases(call: impl Strategy<Value = Call>) -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(rule(), 1..=3),
        1_600_000_000_000_000u64..1_700_000_000_000_000,
        prop::collection::vec(call, 1..=60),
    )
        .prop_map(|(rules, start_us, calls)| Case {
            rules,
            start_us,
            calls,
        })
}

/// Midnight UTC on the first of each month from December 2026 to October 2028, in
/// seconds: the months of the calendar cases (written out, so that the bounds do not
/// use the arithmetic they check).
const MONTHS: [u64; 23] = [
    1_796_083_200,
    1_798_761_600,
    1_801_440_000,
    1_803_859_200,
    1_806_537_600,
    1_809_129_600,
    1_811_808_000,
    1_814_400_000,
    1_817_078_400,
    1_819_756_800,
    1_822_348_800,
    1_825_027_200,
    1_827_619_200,
    1_830_297_600,
    1_832_976_000,
    1_835_481_600,
    1_838_160_000,
    1_840_752_000,
    1_843_430_400,
    1_846_022_400,
    1_848_700_800,
    1_851_379_200,
    1_853_971_200,
];

/// The calendar period of `rule` holding `t_us`: its number among days, months or years.
fn period_of(calendar: Calendar, t_us: u64) -> u64 {
    let secs = t_us / 1_000_000;
    match calendar {
        Calendar::Day => secs / 86_400,
        Calendar::Month => {
            assert!(
                (MONTHS[0]..MONTHS[22]).contains(&secs),
                "{secs} beyond the months"
            );
            MONTHS.iter().take_while(|&&start| start <= secs).count() as u64
        }
        // January 2027 and 2028.
        Calendar::Year => [MONTHS[1], MONTHS[13]]
            .iter()
            .filter(|&&start| start <= secs)
            .count() as u64,
    }
}

/// Cases with rules counting in calendar days, months or years (one rule in two, counting
/// calls one time in three), starting up to a minute before a month's end, a leap day,
/// a February without one, or a year's end, with clocks that go back, or blocks and
/// refunds, or settles.
fn cases_in_calendar_periods() -> impl Strategy<Value = Case> {
    let calendar = (
        1u64..=8,
        prop_oneof![
            Just(Calendar::Day),
            Just(Calendar::Month),
            Just(Calendar::Year)
        ],
        prop::bool::weighted(0.3),
    )
        .prop_map(|(count, calendar, calls)| {
            let rule = Rule::per_calendar(count, calendar);
            if calls {
                rule.calls()
            } else {
                rule
            }
        });
    let rules = prop::collection::vec(prop_oneof![rule(), calendar], 1..=3);
    let boundaries = prop::sample::select(vec![
        1_801_440_000u64, // 2027-02-01
        1_803_859_200,    // 2027-03-01
        1_835_395_200,    // 2028-02-29
        1_835_481_600,    // 2028-03-01
        1_830_297_600,    // 2028-01-01
    ]);
    let calls = prop_oneof![
        prop::collection::vec(call(), 1..=60),
        prop::collection::vec(call_with_blocks_and_refunds(), 1..=60),
        prop::collection::vec(call_settled(false), 1..=60),
    ];
    (rules, boundaries, 0u64..60_000_000, calls).prop_map(|(rules, boundary, before_us, calls)| {
        Case {
            rules,
            start_us: boundary * 1_000_000 - before_us,
            calls,
        }
    })
}

struct Backends {
    redis: &'static Limiter,
    memory: &'static Limiter,
}

impl Backends {
    /// Both backends' answers (Redis's, then memory's), required to be the same.
    async fn check(
        &self,
        algorithm: Algorithm,
        key: &str,
        rules: &[Rule],
        call: &Call,
        now_us: u64,
    ) -> Result<[Decision; 2], TestCaseError> {
        let (cost, consume) = (call.cost, call.consume);
        let run = |limiter: &'static Limiter| async move {
            let check = if consume {
                limiter.check(key, rules)
            } else {
                limiter.peek(key, rules)
            };
            check
                .cost(cost)
                .algorithm(algorithm)
                .block_for(Duration::from_micros(call.block_us))
                .at(Duration::from_micros(now_us))
                .await
        };
        let redis = run(self.redis).await;
        let memory = run(self.memory).await;
        let (redis, memory) = match (redis, memory) {
            (Ok(r), Ok(m)) => (r, m),
            (r, m) => return Err(TestCaseError::fail(format!("redis {r:?}, memory {m:?}"))),
        };
        prop_assert_eq!(
            redis,
            memory,
            "{:?} {} at {} (cost {}, consume {})",
            algorithm,
            key,
            now_us,
            cost,
            consume
        );
        let never = rules.iter().any(|r| !r.counts_calls() && cost > r.count());
        prop_assert_eq!(redis.allowed, redis.retry_after.is_none() && !never);
        prop_assert_eq!(redis.rule, rules[redis.rule_index]);
        Ok([redis, memory])
    }

    /// Settles each backend's decision (of `rules` for `key`) at `actual` units at
    /// `now_us`; both must answer alike.
    async fn settle(
        &self,
        key: &str,
        rules: &[Rule],
        decisions: &[Decision; 2],
        actual: u64,
        now_us: u64,
    ) -> Result<(), TestCaseError> {
        let now = Duration::from_micros(now_us);
        let mut answers = Vec::new();
        for (limiter, decision) in [self.redis, self.memory].into_iter().zip(decisions) {
            let settled = limiter.settle_at(key, rules, decision, actual, now).await;
            prop_assert!(settled.is_ok(), "settle: {:?}", settled);
            answers.push(settled.unwrap());
        }
        prop_assert_eq!(answers[0], answers[1], "settle at {} of {}", actual, key);
        Ok(())
    }

    /// Refunds each backend's decision (of `rules` for `key`) at `now_us`.
    async fn refund(
        &self,
        key: &str,
        rules: &[Rule],
        decisions: &[Decision; 2],
        now_us: u64,
    ) -> Result<(), TestCaseError> {
        let now = Duration::from_micros(now_us);
        for (limiter, decision) in [self.redis, self.memory].into_iter().zip(decisions) {
            let refunded = limiter.refund_at(key, rules, decision, now).await;
            prop_assert!(refunded.is_ok(), "refund: {:?}", refunded);
        }
        Ok(())
    }
}

/// The TTL margin (1 s) every key's expiry carries past the time its state matters.
const MARGIN_US: u64 = 1_000_000;

/// The times of a case's calls: forwards by `gap_us`, or back by `back_us`, but never
/// so far back that the backends' expiry would part. The memory backend forgets a key
/// whose expiry has passed on its explicit clock, where the Redis server (on its own
/// clock) keeps it; and a key's expiry is at least the margin past the time its state
/// matters. So once a call may have found the key expired (at least the margin after
/// the last write), no later call goes more than the margin before it: the state it
/// forgot is then stale on both sides.
struct Times {
    now: u64,
    floor: u64,
    last_write: u64,
}

impl Times {
    fn new(start_us: u64) -> Self {
        Times {
            now: start_us,
            floor: start_us,
            last_write: start_us,
        }
    }

    /// The time of `call`.
    fn next(&mut self, call: &Call) -> u64 {
        self.now = if call.back_us > 0 {
            self.now.saturating_sub(call.back_us).max(self.floor)
        } else {
            self.now + call.gap_us
        };
        if self.now >= self.last_write + MARGIN_US {
            self.floor = self.floor.max(self.now - MARGIN_US);
        }
        self.now
    }

    /// A call at `now_us` wrote the key.
    fn wrote(&mut self, now_us: u64) {
        self.last_write = self.last_write.max(now_us);
    }
}

/// What a case's calls did.
#[derive(Default)]
struct Ran {
    /// The admitted calls that stay counted, each as (the time it was counted at, its
    /// cost), in order.
    admitted: Vec<(u64, u64)>,
    /// Admitted calls refunded at once.
    refunded: usize,
    /// Admitted calls settled at once.
    settled: usize,
    /// Consuming calls refused.
    refused: usize,
    /// Consuming calls refused that asked for a block.
    blocking: usize,
    /// Calls on a clock behind the previous call's.
    behind: usize,
}

impl Ran {
    /// Adds `other`'s counts to these (not its admitted calls).
    fn add(&mut self, other: &Ran) {
        self.refunded += other.refunded;
        self.settled += other.settled;
        self.refused += other.refused;
        self.blocking += other.blocking;
        self.behind += other.behind;
    }
}

/// Runs one case's calls for `algorithm` on both backends and checks, on the way, that
/// `retry_after` is exact for the binding rule (unless the case blocks the key).
async fn run(
    backends: &Backends,
    algorithm: Algorithm,
    key: &str,
    case: &Case,
) -> Result<Ran, TestCaseError> {
    let mut times = Times::new(case.start_us);
    // The latest time an admitted call was counted at: a call from an older clock is
    // counted there (never before the key's stored state).
    let mut counted_at = 0;
    let mut ran = Ran::default();
    // A blocked key's refusals name the block's end, which the rules alone do not show.
    let blocks = case.calls.iter().any(|c| c.block_us > 0);
    for call in &case.calls {
        let now = times.next(call);
        ran.behind += usize::from(call.back_us > 0);
        let rules = case.rules_of(call);
        let decisions = backends.check(algorithm, key, &rules, call, now).await?;
        let d = decisions[0];
        if d.allowed {
            if call.consume {
                counted_at = counted_at.max(now);
                times.wrote(now);
                if call.refund {
                    backends.refund(key, &rules, &decisions, now).await?;
                    ran.refunded += 1;
                } else if let Some(actual) = call.settle {
                    backends
                        .settle(key, &rules, &decisions, actual, now)
                        .await?;
                    ran.settled += 1;
                    ran.admitted.push((counted_at, actual));
                } else {
                    ran.admitted.push((counted_at, call.cost));
                }
            }
            continue;
        }
        if call.consume {
            ran.refused += 1;
            ran.blocking += usize::from(call.block_us > 0);
        }
        if blocks {
            continue;
        }
        let Some(retry) = d.retry_after else {
            prop_assert!(call.cost > d.limit, "never, for a cost within the count");
            continue;
        };
        let retry = retry.as_micros() as u64;
        prop_assert!(retry > 0, "denied with retry_after 0");
        let units = if d.rule.counts_calls() { 1 } else { call.cost };
        prop_assert!(d.remaining < units, "denied with enough left");
        // The binding rule alone, on the same key: still denied a µs early, admitted on
        // time, from the same clock.
        let binding = [d.rule];
        let peek = Call {
            consume: false,
            ..call.clone()
        };
        let [early, _] = backends
            .check(algorithm, key, &binding, &peek, now + retry - 1)
            .await?;
        prop_assert!(
            !early.allowed,
            "{:?}: admitted before retry_after",
            algorithm
        );
        let [on_time, _] = backends
            .check(algorithm, key, &binding, &peek, now + retry)
            .await?;
        prop_assert!(on_time.allowed, "{:?}: denied at retry_after", algorithm);
    }
    Ok(ran)
}

/// The bound `algorithm` promises for `rule`, over the admitted calls, each as (the
/// time it was counted at, its cost), in order.
fn within_bound(algorithm: Algorithm, rule: Rule, admitted: &[(u64, u64)]) -> Result<(), String> {
    let (count, w) = (rule.count(), rule.window().as_micros() as u64);
    // A rule counting calls takes one of each.
    let of = |cost: u64| if rule.counts_calls() { 1 } else { cost };
    let units = |calls: &[(u64, u64)]| calls.iter().map(|c| of(c.1)).sum::<u64>();
    if let Some(calendar) = rule.calendar() {
        // At most `count` units per calendar period, on every algorithm.
        for (i, &(a, _)) in admitted.iter().enumerate() {
            let period = period_of(calendar, a);
            let same = admitted[i..]
                .iter()
                .take_while(|c| period_of(calendar, c.0) == period)
                .count();
            let used = units(&admitted[i..i + same]);
            if used > count {
                return Err(format!("{used} units in the calendar period of {a}"));
            }
        }
        return Ok(());
    }
    for (i, &(a, _)) in admitted.iter().enumerate() {
        match algorithm {
            // At most `count` units in any window [t, t + w).
            Algorithm::SlidingLog => {
                let within = admitted[i..].iter().take_while(|c| c.0 < a + w).count();
                let used = units(&admitted[i..i + within]);
                if used > count {
                    return Err(format!("{used} units within {w} µs from {a}"));
                }
            }
            // At most `count` units per aligned window.
            Algorithm::FixedWindow | Algorithm::SlidingWindow => {
                let same = admitted[i..]
                    .iter()
                    .take_while(|c| c.0 / w == a / w)
                    .count();
                let used = units(&admitted[i..i + same]);
                if used > count {
                    return Err(format!("{used} units in the window starting {}", a / w * w));
                }
            }
            // At most count + floor(t / T) units in any interval of length t.
            Algorithm::TokenBucket => {
                let interval = w.div_ceil(count);
                for j in i..admitted.len() {
                    let (b, used) = (admitted[j].0, units(&admitted[i..=j]));
                    if used > count + (b - a) / interval {
                        return Err(format!("{used} units within {} µs", b - a));
                    }
                }
            }
        }
    }
    Ok(())
}

/// [`run`]s one case's calls, then requires every rule's bound to hold over the
/// admitted ones.
async fn run_within_bounds(
    backends: &Backends,
    algorithm: Algorithm,
    key: &str,
    case: &Case,
) -> Result<Ran, TestCaseError> {
    let ran = run(backends, algorithm, key, case).await?;
    for rule in &case.rules {
        if let Err(violation) = within_bound(algorithm, *rule, &ran.admitted) {
            return Err(TestCaseError::fail(format!(
                "{algorithm:?} broke {rule}: {violation}"
            )));
        }
    }
    Ok(ran)
}

/// Runs every case of `cases` through each of `algorithms`, on a key of its own named
/// after `name`, then requires every rule's bound to hold unless `changing_rules` (the
/// case's calls check different rules); what the calls did, summed.
fn run_cases(
    (runtime, backends, runner): (&tokio::runtime::Runtime, &Backends, &mut TestRunner),
    cases: impl Strategy<Value = Case>,
    algorithms: &[Algorithm],
    name: &str,
    changing_rules: bool,
) -> Ran {
    let case_no = Cell::new(0u64);
    let total = std::cell::RefCell::new(Ran::default());
    runner
        .run(&cases, |case| {
            case_no.set(case_no.get() + 1);
            runtime.block_on(async {
                for &algorithm in algorithms {
                    let key = format!("{name}:{}:{}", case_no.get(), algorithm.name());
                    let ran = match changing_rules {
                        true => run(backends, algorithm, &key, &case).await?,
                        false => run_within_bounds(backends, algorithm, &key, &case).await?,
                    };
                    total.borrow_mut().add(&ran);
                }
                Ok(())
            })
        })
        .unwrap();
    total.into_inner()
}

/// What a differential test drives: a fresh redis-server, a runtime, a limiter on it and
/// one in memory, and a proptest runner of `cases` cases.
/// A current-thread runtime for driving the cases.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A runner of `cases` cases, persisting no failures.
fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// [`run_cases`] on `cases` cases of `strategy`, comparing a fresh `redis-server` with
/// the memory backend.
fn differential(
    cases: u32,
    strategy: impl Strategy<Value = Case>,
    algorithms: &[Algorithm],
    name: &str,
    changing_rules: bool,
) -> Ran {
    let server = RedisServer::start();
    let backends = Backends {
        // Generous: a loaded machine must not turn a slow reply into a failure.
        redis: Box::leak(Box::new(
            Limiter::redis(&server.url())
                .unwrap()
                .timeout(Duration::from_secs(10)),
        )),
        memory: Box::leak(Box::new(Limiter::memory())),
    };
    let drive = (&runtime(), &backends, &mut runner(cases));
    run_cases(drive, strategy, algorithms, name, changing_rules)
}

#[test]
fn backends_agree_and_every_algorithm_keeps_its_bound() {
    let ran = differential(64, case(), &ALGORITHMS, "differential", false);
    // The generated calls must reach denials, or the retry checks prove nothing.
    assert!(ran.refused > 300, "only {} denials", ran.refused);
}

/// Rules counting calls beside rules counting units: both backends take one of every
/// calls rule and the cost of every other, all or nothing, exactly alike, and every
/// algorithm keeps each rule's bound (in calls, or in units).
#[test]
fn backends_agree_on_rules_counting_calls() {
    let ran = differential(48, cases_counting_calls(), &ALGORITHMS, "calls", false);
    assert!(ran.refused > 200, "only {} denials", ran.refused);
    assert!(ran.refunded > 30, "only {} refunds", ran.refunded);
}

/// Settles within the reservation: both backends give back exactly alike, answer the
/// settle alike, and every algorithm keeps each rule's bound over the settled costs
/// (calls rules keeping their one).
#[test]
fn backends_agree_on_settles_and_every_algorithm_keeps_its_bound() {
    let ran = differential(48, cases_settled(false), &ALGORITHMS, "settled", false);
    assert!(ran.settled > 300, "only {} settles", ran.settled);
    assert!(ran.refused > 100, "only {} denials", ran.refused);
}

/// Settles past the reservation (debt): both backends take the excess exactly alike,
/// and refuse and answer alike after it (no bound: an excess may pass a count).
#[test]
fn backends_agree_on_settles_past_the_reservation() {
    let ran = differential(48, cases_settled(true), &ALGORITHMS, "debt", true);
    assert!(ran.settled > 300, "only {} settles", ran.settled);
}

/// Rules counting in calendar days and months, beside the others, across a month's end,
/// a leap day and a year's end: both backends count, refund, settle and forget exactly
/// alike (the Lua's calendar is the Rust's), `retry_after` is exact, and no calendar
/// period holds more than its count, on every algorithm.
#[test]
fn backends_agree_on_calendar_rules_across_their_boundaries() {
    let cases = cases_in_calendar_periods();
    let ran = differential(48, cases, &ALGORITHMS, "calendar", false);
    assert!(ran.refused > 200, "only {} denials", ran.refused);
    assert!(ran.refunded > 20, "only {} refunds", ran.refunded);
    assert!(ran.settled > 20, "only {} settles", ran.settled);
}

/// Blocks and refunds: both backends block, refund and forget exactly alike, and every
/// algorithm keeps its bound over the calls that stay counted.
#[test]
fn backends_agree_on_blocks_and_refunds() {
    let cases = cases(call_with_blocks_and_refunds());
    let ran = differential(32, cases, &ALGORITHMS, "policies", false);
    // The generated calls must refund and block, or the agreement proves nothing.
    assert!(ran.refunded > 100, "only {} refunds", ran.refunded);
    assert!(ran.blocking > 20, "only {} blocks started", ran.blocking);
}

/// The memory arithmetic alone, on many more cases: every algorithm keeps its bound
/// and an exact `retry_after` through clocks that go back and forth. (Two memory
/// limiters stand in for the two backends, so their answers are compared too.)
#[test]
fn memory_keeps_every_bound_through_clocks_that_go_back() {
    let backends = Backends {
        redis: Box::leak(Box::new(Limiter::memory())),
        memory: Box::leak(Box::new(Limiter::memory())),
    };
    let drive = (&runtime(), &backends, &mut runner(256));
    let ran = run_cases(drive, case(), &ALGORITHMS, "memory", false);
    // Counted once per algorithm.
    assert!(
        ran.behind > 4 * 500,
        "only {} clocks behind",
        ran.behind / 4
    );
}

/// One key checked with changing subsets of its rules, in changing order (a deploy
/// that changes a call site's rules, or a key shared by two rule sets): both backends
/// keep, start and forget exactly the same counts.
#[test]
fn backends_agree_when_the_rules_of_a_key_change() {
    // Not the sliding log: its TTL, set for the rules of each write, drops entries
    // that other rules still count, so the backends part when explicit times outrun
    // the Redis server's clock.
    let cases = cases(call_with_some_rules());
    let ran = differential(32, cases, &ALGORITHMS[1..], "changing", true);
    assert!(ran.refused > 100, "only {} denials", ran.refused);
}
