//! Warned before the limit (`warn_at`): a check that takes a rule from below a share of its
//! count to at or above it warns once, decided in the backend, on every algorithm and both
//! backends; checks that do not ask never warn.

mod support;

use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use redis_ratelimit::{
    rate_limiter, Algorithm, BackendError, Calendar, Decision, Guard, Limiter, RateLimitError,
    Rule, Warning,
};

const T0: Duration = Duration::from_secs(1_700_000_000);

/// What a limiter's hook heard.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<Warning>>>);

impl Heard {
    fn take(&self) -> Vec<Warning> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    /// The rules heard of, each with what it left used.
    fn rules_used(&self) -> Vec<(Rule, u64)> {
        self.take().into_iter().map(|w| (w.rule, w.used)).collect()
    }
}

/// A check of `cost` at `T0` that warns at `percent`.
async fn warned_check(
    limiter: &Limiter,
    key: &str,
    rules: &[Rule],
    algorithm: Algorithm,
    cost: u64,
    percent: u8,
) -> Result<Decision, BackendError> {
    limiter
        .check(key, rules)
        .algorithm(algorithm)
        .cost(cost)
        .warn_at(percent)
        .at(T0)
        .await
}

/// Checks of `costs` in turn for `key` at `T0`, each warning at `percent`: asserts that
/// every one is admitted and that `heard` heard no warning of them.
async fn admit_quietly(
    limiter: &Limiter,
    heard: &Heard,
    key: &str,
    rules: &[Rule],
    algorithm: Algorithm,
    percent: u8,
    costs: &[u64],
) {
    for &cost in costs {
        let d = warned_check(limiter, key, rules, algorithm, cost, percent).await;
        assert!(d.unwrap().allowed, "{algorithm}: a check of {cost}");
    }
    assert_eq!(heard.take(), [], "{algorithm}");
}

/// A task that makes `calls` checks in a row, each warning at `percent`.
fn spawn_checks(
    limiter: &'static Limiter,
    key: &'static str,
    rules: &'static [Rule],
    algorithm: Algorithm,
    percent: u8,
    calls: usize,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for _ in 0..calls {
            limiter
                .check(key, rules)
                .algorithm(algorithm)
                .warn_at(percent)
                .await
                .unwrap();
        }
    })
}

/// `limiter` with a hook that keeps what it hears.
fn hooked(limiter: Limiter) -> (Limiter, Heard) {
    let heard = Heard::default();
    let keep = heard.clone();
    let limiter = limiter.on_warning(move |w| keep.0.lock().unwrap().push(w.clone()));
    (limiter, heard)
}

backend_tests! {
    async fn a_warning_and_an_escalating_lock_out_ride_one_check(limiter: Limiter) {
        // Both send an argument of their own to the scripts: each must find its own.
        static LOCKOUTS: [Duration; 2] = [Duration::from_secs(60), Duration::from_secs(600)];
        let (limiter, heard) = hooked(limiter);
        let rules = [Rule::per_minute(4)];
        for algorithm in Algorithm::ALL {
            let key = format!("warn:lock-out:{algorithm}");
            let check = |at: Duration| {
                limiter
                    .check(&key, &rules)
                    .algorithm(algorithm)
                    .warn_at(50)
                    .block_schedule(&LOCKOUTS)
                    .at(T0 + at)
            };
            for (start, lock_out) in [(Duration::ZERO, 60), (Duration::from_secs(200), 600)] {
                for n in 1..=4 {
                    let d = check(start + Duration::from_millis(n)).await.unwrap();
                    assert!(d.allowed, "{algorithm}, call {n} from {start:?}: {d:?}");
                    let warned = heard.take();
                    assert_eq!(warned.len(), usize::from(n == 2), "{algorithm}, call {n}: {warned:?}");
                }
                let refused = check(start + Duration::from_millis(5)).await.unwrap();
                assert_eq!(
                    refused.retry_after,
                    Some(Duration::from_secs(lock_out)),
                    "{algorithm}, the lock-out from {start:?}"
                );
            }
        }
    }

    async fn a_crossing_warns_once_on_every_algorithm(limiter: Limiter) {
        let (limiter, heard) = hooked(limiter);
        let rules = [Rule::per_minute(10)];
        for algorithm in Algorithm::ALL {
            let key = format!("warn:once:{algorithm}");
            let mut warned_at = Vec::new();
            for n in 1..=12u64 {
                let d = limiter
                    .check(&key, &rules)
                    .algorithm(algorithm)
                    .warn_at(80)
                    .at(T0 + Duration::from_millis(n))
                    .await
                    .unwrap();
                assert_eq!(d.allowed, n <= 10, "{algorithm}, call {n}");
                if !heard.take().is_empty() {
                    warned_at.push(n);
                }
            }
            // 80 % of 10: the 8th call crosses; the 9th, 10th and the refusals do not.
            assert_eq!(warned_at, [8], "{algorithm}");
        }
    }

    async fn a_warning_names_the_key_site_rule_and_units_used(limiter: Limiter) {
        let (limiter, heard) = hooked(limiter);
        let rules = [Rule::per_minute(10)];
        for algorithm in Algorithm::ALL {
            let key = format!("warn:what:{algorithm}");
            admit_quietly(&limiter, &heard, &key, &rules, algorithm, 50, &[4]).await;
            // From 4 used to 7: past 50 % in one check, which reports what it left used.
            let d = warned_check(&limiter, &key, &rules, algorithm, 3, 50).await;
            assert!(d.unwrap().allowed);
            assert_eq!(
                heard.take(),
                [Warning {
                    key: key.clone(),
                    site: "programmatic".into(),
                    rule: rules[0],
                    used: 7,
                }],
                "{algorithm}"
            );
        }
    }

    async fn every_rule_crossed_by_one_check_warns(limiter: Limiter) {
        let (limiter, heard) = hooked(limiter);
        let rules = [Rule::per_second(10), Rule::per_minute(100), Rule::per_minute(10).calls()];
        for algorithm in Algorithm::ALL {
            let key = format!("warn:every:{algorithm}");
            admit_quietly(&limiter, &heard, &key, &rules, algorithm, 50, &[4]).await;
            // 4 -> 5 of 10 units and 1 -> 2 of 10 calls: only the first rule.
            let d = warned_check(&limiter, &key, &rules, algorithm, 1, 50).await;
            assert!(d.unwrap().allowed);
            assert_eq!(heard.rules_used(), [(rules[0], 5)], "{algorithm}");
            // Then 5 -> 50 of 100 and 2 -> 3 calls... and the second rule crosses with the first
            // already past: one warning.
            let key = format!("warn:both:{algorithm}");
            let both = [Rule::per_second(10), Rule::per_minute(20)];
            let d = warned_check(&limiter, &key, &both, algorithm, 10, 50).await.unwrap();
            assert!(d.allowed);
            assert_eq!(heard.rules_used(), [(both[0], 10), (both[1], 10)], "{algorithm}");
        }
    }

    async fn calendar_and_calls_rules_warn(limiter: Limiter) {
        let (limiter, heard) = hooked(limiter);
        let rules = [
            Rule::per_calendar(10, Calendar::Month),
            Rule::per_hour(4).calls(),
        ];
        for algorithm in Algorithm::ALL {
            let key = format!("warn:calendar:{algorithm}");
            admit_quietly(&limiter, &heard, &key, &rules, algorithm, 75, &[2, 2]).await;
            // 4 -> 8 of 10 (75 % is 7.5) and the 3rd call of 4 (75 % is 3).
            let d = warned_check(&limiter, &key, &rules, algorithm, 4, 75).await;
            assert!(d.unwrap().allowed);
            assert_eq!(heard.rules_used(), [(rules[0], 8), (rules[1], 3)], "{algorithm}");
        }
    }

    async fn checks_that_do_not_ask_never_warn(limiter: Limiter) {
        let (limiter, heard) = hooked(limiter);
        let rules = [Rule::per_minute(10)];
        for algorithm in Algorithm::ALL {
            let key = format!("warn:quiet:{algorithm}");
            for _ in 0..10 {
                limiter.check(&key, &rules).algorithm(algorithm).at(T0).await.unwrap();
            }
            let key = format!("warn:peek:{algorithm}");
            for _ in 0..7 {
                limiter.check(&key, &rules).algorithm(algorithm).warn_at(80).at(T0).await.unwrap();
            }
            // A peek of 3 would take it past 80 %, but takes nothing.
            limiter.peek(&key, &rules).algorithm(algorithm).cost(3).at(T0).await.unwrap();
            // A refused check crosses nothing: 7 used, 4 more do not fit.
            let refused = limiter
                .check(&key, &rules)
                .algorithm(algorithm)
                .cost(4)
                .warn_at(80)
                .at(T0)
                .await
                .unwrap();
            assert!(!refused.allowed);
            assert_eq!(heard.take(), [], "{algorithm}");
        }
    }

    async fn concurrent_checks_warn_once_per_crossing(limiter: Limiter) {
        let (limiter, heard) = hooked(limiter);
        let limiter: &'static Limiter = Box::leak(Box::new(limiter));
        static RULES: [Rule; 1] = [Rule::per_hour(100)];
        for algorithm in Algorithm::ALL {
            let key: &'static str = Box::leak(format!("warn:race:{algorithm}").into_boxed_str());
            let tasks: Vec<_> = (0..8)
                .map(|_| spawn_checks(limiter, key, &RULES, algorithm, 90, 20))
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            let warnings = heard.take();
            assert_eq!(warnings.len(), 1, "{algorithm}: {warnings:?}");
            assert_eq!(warnings[0].used, 90, "{algorithm}");
        }
    }
}

/// Two instances (two limiters, as two processes have) sharing one Redis: a crossing is
/// the backend's to decide, so exactly one of them warns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_never_both_warn_for_one_crossing() {
    let server = support::RedisServer::start();
    let instance = || hooked(support::redis_limiter(&server.url()));
    let ((a, heard_a), (b, heard_b)) = (instance(), instance());
    let (a, b): (&'static Limiter, &'static Limiter) =
        (Box::leak(Box::new(a)), Box::leak(Box::new(b)));
    static RULES: [Rule; 2] = [Rule::per_minute(50), Rule::per_hour(60)];
    for algorithm in Algorithm::ALL {
        let key: &'static str = Box::leak(format!("warn:fleet:{algorithm}").into_boxed_str());
        let run = |limiter| spawn_checks(limiter, key, &RULES, algorithm, 50, 40);
        let (ta, tb) = (run(a), run(b));
        ta.await.unwrap();
        tb.await.unwrap();
        let mut warnings: Vec<(Rule, u64)> = heard_a
            .take()
            .into_iter()
            .chain(heard_b.take())
            .map(|w| (w.rule, w.used))
            .collect();
        warnings.sort_by_key(|(rule, _)| rule.count());
        // 80 calls, 50 admitted: 50 % of 50 crossed at 25, 50 % of 60 at 30.
        assert_eq!(warnings, [(RULES[0], 25), (RULES[1], 30)], "{algorithm}");
    }
}

/// The warnings every guarded test below heard, from one `static` limiter shared by all of
/// them, as an application shares one.
static HEARD: LazyLock<Heard> = LazyLock::new(Heard::default);
static SHARED: LazyLock<Limiter> = LazyLock::new(|| {
    let heard = HEARD.clone();
    support::redis_limiter(support::process_server_url())
        .on_warning(move |w| heard.0.lock().unwrap().push(w.clone()))
});

/// What the shared limiter heard of `key`.
fn heard_of(key_part: &str) -> Vec<Warning> {
    HEARD
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|w| w.key.contains(key_part))
        .cloned()
        .collect()
}

#[rate_limiter(
    rules("10/minute"),
    limit_type = CUSTOM,
    by = tenant,
    warn_at = 80,
    limiter = &*SHARED
)]
async fn search(tenant: &str) -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(
    rules("4/minute"),
    limit_type = CUSTOM,
    by = tenant,
    algorithm = TOKEN_BUCKET,
    warn_at = 50,
    name = "exports",
    limiter = &*SHARED
)]
async fn export(tenant: &str) -> Result<(), RateLimitError> {
    Ok(())
}

#[tokio::test]
async fn a_guarded_site_warns_once_with_its_site() {
    for _ in 0..12 {
        let _ = search("tenant-a").await;
    }
    let warnings = heard_of("tenant-a");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].used, 8);
    assert!(
        warnings[0].site.ends_with("::search"),
        "{}",
        warnings[0].site
    );
    assert_eq!(
        warnings[0].key,
        format!("rate_limit:custom:tenant-a:{}", warnings[0].site)
    );
}

#[tokio::test]
async fn a_named_site_warns_by_its_name() {
    for _ in 0..4 {
        export("tenant-b").await.unwrap();
    }
    let warnings = heard_of("tenant-b");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(
        (warnings[0].site.as_str(), warnings[0].used),
        ("exports", 2)
    );
}

#[tokio::test]
async fn a_guard_warns_once_with_its_name() {
    use redis_ratelimit::axum::RateLimitLayer;
    use redis_ratelimit::LimitType;

    static API: [Rule; 1] = [Rule::per_minute(5)];
    let guard = Guard::new("warned-guard", &API)
        .limit_type(LimitType::Global)
        .warn_at(60)
        .limiter(&SHARED);
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { "ok" }))
        .layer(RateLimitLayer::new().guard(guard));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = reqwest::Client::new();
    for _ in 0..6 {
        client.get(&base).send().await.unwrap();
    }
    let warnings = heard_of("warned-guard");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(
        (warnings[0].site.as_str(), warnings[0].used),
        ("warned-guard", 3)
    );
    assert_eq!(warnings[0].key, "rate_limit:global:warned-guard");
}

#[tokio::test]
async fn a_warning_is_an_info_event() {
    let (logs, _guard) = support::capture_logs();
    let limiter = Limiter::memory();
    let rules = [Rule::per_minute(2)];
    for _ in 0..2 {
        limiter
            .check("warn:event", &rules)
            .warn_at(50)
            .await
            .unwrap();
    }
    let text = logs.text();
    assert_eq!(text.matches("rate limit warning").count(), 1, "{text}");
    assert!(text.contains("INFO"), "{text}");
    assert!(
        text.contains("key=\"warn:event\"") || text.contains("key=warn:event"),
        "{text}"
    );
}

#[test]
#[should_panic(expected = "from 1 to 99")]
fn a_share_outside_1_to_99_panics() {
    let limiter = Limiter::memory();
    drop(limiter.check("k", &[]).warn_at(100));
}

// Allowances: the crossing is decided by the draw that takes a rule over the share, and
// told to the check that drew (0.5 dropped it there: no warning at all).

/// `fleet` with allowances of 250 ms, each hook telling `heard`.
fn with_allowances(fleet: Vec<Limiter>, heard: &Heard) -> Vec<Limiter> {
    fleet
        .into_iter()
        .map(|limiter| {
            let keep = heard.clone();
            limiter
                .allowance(Duration::from_millis(250))
                .on_warning(move |w| keep.0.lock().unwrap().push(w.clone()))
        })
        .collect()
}

/// Checks of 1,000 per minute warning at 80 % by `fleet` in turn, `gap` apart on `clock`
/// (none: the real one), until one is refused: exactly one warning, at or above 800 used.
async fn a_fleet_with_allowances_warns_once(
    fleet: &[Limiter],
    key: &str,
    algorithm: Algorithm,
    clock: Option<&redis_ratelimit::clock::ManualClock>,
    heard: &Heard,
) {
    static PER_MINUTE: [Rule; 1] = [Rule::per_minute(1_000)];
    let mut admitted = 0;
    for n in 0.. {
        if let Some(clock) = clock {
            clock.advance(Duration::from_micros(50));
        }
        let limiter = &fleet[n % fleet.len()];
        let check = limiter
            .check(key, &PER_MINUTE)
            .algorithm(algorithm)
            .warn_at(80);
        if !check.await.unwrap().allowed {
            break;
        }
        admitted += 1;
        assert!(admitted <= 1_000, "{algorithm}: over the limit");
    }
    let draws: u64 = fleet.iter().map(Limiter::allowance_draws).sum();
    assert!(
        draws < admitted / 2,
        "{algorithm}: {draws} round trips, no allowance spent"
    );
    let warned = heard.take();
    assert_eq!(
        warned.len(),
        1,
        "{algorithm}, {} instances: {warned:?}",
        fleet.len()
    );
    assert!(warned[0].used >= 800, "{algorithm}: {warned:?}");
}

#[tokio::test]
async fn a_crossing_spent_from_an_allowance_warns_once_fleet_wide() {
    use redis_ratelimit::clock::ManualClock;
    for algorithm in Algorithm::ALL {
        for instances in [1, 4] {
            let clock = ManualClock::new(T0);
            let heard = Heard::default();
            let first = Limiter::remote_memory_with_clock(clock.clone());
            let others: Vec<Limiter> = (1..instances)
                .map(|_| first.sharing_backend(clock.clone()))
                .collect();
            let fleet = with_allowances(others.into_iter().chain([first]).collect(), &heard);
            let key = format!("warn:allowance:{algorithm}:{instances}");
            a_fleet_with_allowances_warns_once(&fleet, &key, algorithm, Some(&clock), &heard).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_crossing_spent_from_an_allowance_warns_once_fleet_wide() {
    let server = support::RedisServer::start();
    for instances in [1, 4] {
        let heard = Heard::default();
        let fleet = (0..instances).map(|_| Limiter::redis(&server.url()).unwrap());
        let fleet = with_allowances(fleet.collect(), &heard);
        // The sliding log: no aligned window for the real clock to cross midway.
        let key = format!("warn:allowance:{instances}");
        a_fleet_with_allowances_warns_once(&fleet, &key, Algorithm::SlidingLog, None, &heard).await;
    }
}
