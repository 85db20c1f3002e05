//! The counting algorithms against a real redis-server.
//!
//! `scripts::*` run each Lua script with `EVAL` on hand-worked sequences and on what only
//! Redis can show (writes, TTLs, the server clock, a key of another algorithm).
//! `differential::*` drive the Redis and the memory backend through the same random calls
//! at the same explicit times and require identical decisions, and check on those calls
//! the bound each algorithm promises and that `retry_after` is exact.

mod support;

/// The public programmatic API, on each backend's own clock (Redis `TIME`, system time).
mod api {
    use std::time::Duration;

    use redis_ratelimit::{Algorithm, Rule};

    use crate::support;

    /// Windows of an hour: a run of calls never straddles a boundary that would reset a
    /// fixed window (or shift a sliding one) in a way these assertions do not expect.
    const RULES: [Rule; 2] = [Rule::per_hour(2), Rule::per_day(100)];
    /// The algorithms that keep one record per rule.
    const COUNTING: [Algorithm; 3] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
    ];

    crate::backend_tests! {
        async fn every_algorithm_limits_through_check_and_peek() {
            let l = support::limiter();
            for algorithm in COUNTING {
                let key = format!("api:{}", algorithm.name());
                let first = l.check(&key, &RULES).algorithm(algorithm).await.unwrap();
                assert!(first.allowed, "{algorithm:?}");
                assert_eq!((first.limit, first.remaining, first.rule_index), (2, 1, 0));
                // A peek tells what is left now, and whether a call of its cost would pass.
                let peek = l.peek(&key, &RULES).algorithm(algorithm).await.unwrap();
                assert_eq!((peek.allowed, peek.remaining), (true, 1), "{algorithm:?}");
                let two = l.peek(&key, &RULES).cost(2).algorithm(algorithm).await.unwrap();
                assert_eq!((two.allowed, two.remaining), (false, 1), "{algorithm:?}");
                assert!(l.check(&key, &RULES).algorithm(algorithm).await.unwrap().allowed);

                let denied = l.check(&key, &RULES).algorithm(algorithm).await.unwrap();
                assert!(!denied.allowed, "{algorithm:?}");
                assert_eq!((denied.rule, denied.remaining), (RULES[0], 0));
                let retry = denied.retry_after.expect("denied");
                assert!(retry > Duration::ZERO && retry <= Duration::from_secs(2 * 3600));
                assert!(!l.peek(&key, &RULES).algorithm(algorithm).await.unwrap().allowed);

                l.reset(&key).await.unwrap();
                let fresh = l.check(&key, &RULES).algorithm(algorithm).await.unwrap();
                assert_eq!((fresh.allowed, fresh.remaining), (true, 1), "{algorithm:?}");
            }
        }

        async fn a_clock_behind_the_key_never_discards_newer_state() {
            let l = support::limiter();
            // 1 s windows; the newer window is full, then a check reads a clock 600 ms
            // behind, in the window before. Counting it there would find that window empty.
            let rules = [Rule::new(2, Duration::from_secs(1))];
            let t = Duration::from_secs(1_700_000_000);
            for algorithm in Algorithm::ALL {
                let key = format!("behind:{}", algorithm.name());
                let at = |now| l.check(&key, &rules).algorithm(algorithm).at(now);
                let newer = t + Duration::from_millis(100);
                assert!(at(newer).await.unwrap().allowed, "{algorithm:?}");
                assert!(at(newer).await.unwrap().allowed, "{algorithm:?}");
                let behind = at(t - Duration::from_millis(500)).await.unwrap();
                assert!(!behind.allowed, "{algorithm:?} admitted a third call: {behind:?}");
                // The next call on the newer clock is still denied: nothing was lost.
                assert!(!at(newer).await.unwrap().allowed, "{algorithm:?}");
            }
        }

        async fn a_cost_uses_that_many_units_or_none() {
            let l = support::limiter();
            for algorithm in Algorithm::ALL {
                let key = format!("cost:{}", algorithm.name());
                let check = |cost| l.check(&key, &RULES).cost(cost).algorithm(algorithm);
                let too_many = check(3).await.unwrap();
                assert!(!too_many.allowed, "{algorithm:?}");
                assert_eq!(too_many.retry_after, None, "{algorithm:?}: never");
                assert_eq!((too_many.remaining, too_many.rule), (2, RULES[0]));
                let both = check(2).await.unwrap();
                assert_eq!((both.allowed, both.remaining), (true, 0), "{algorithm:?}");
                let denied = check(1).await.unwrap();
                assert!(!denied.allowed && denied.retry_after.is_some(), "{algorithm:?}");
                let peek = l.peek(&key, &[RULES[1]]).algorithm(algorithm).await.unwrap();
                assert_eq!(peek.remaining, 98, "{algorithm:?}: 2 units of the day's 100");
            }
        }

        async fn a_refund_gives_back_exactly_that_decision_s_units_once() {
            let l = support::limiter();
            for algorithm in Algorithm::ALL {
                let key = format!("refund:{}", algorithm.name());
                let left = || async {
                    let peek = l.peek(&key, &RULES).algorithm(algorithm).await.unwrap();
                    peek.remaining
                };
                assert!(l.check(&key, &RULES).algorithm(algorithm).await.unwrap().allowed);
                let taken = l.check(&key, &RULES).algorithm(algorithm).await.unwrap();
                assert_eq!((taken.allowed, taken.remaining), (true, 0), "{algorithm:?}");
                l.refund(&key, &RULES, &taken).await.unwrap();
                assert_eq!(left().await, 1, "{algorithm:?}: its unit is back");
                // Twice: nothing more comes back.
                l.refund(&key, &RULES, &taken).await.unwrap();
                assert_eq!(left().await, 1, "{algorithm:?}: given back once");
                // A refusal took nothing, so its refund gives nothing.
                assert!(l.check(&key, &RULES).algorithm(algorithm).await.unwrap().allowed);
                let refused = l.check(&key, &RULES).algorithm(algorithm).await.unwrap();
                assert!(!refused.allowed, "{algorithm:?}");
                l.refund(&key, &RULES, &refused).await.unwrap();
                assert_eq!(left().await, 0, "{algorithm:?}: a refusal's refund is a no-op");
            }
        }

        async fn a_key_counted_by_one_algorithm_refuses_another() {
            let l = support::limiter();
            let all = Algorithm::ALL;
            for owner in all {
                let key = format!("owned:{}", owner.name());
                assert!(l.check(&key, &RULES).algorithm(owner).await.unwrap().allowed);
                for other in all.into_iter().filter(|a| *a != owner) {
                    let err = l.check(&key, &RULES).algorithm(other).await.unwrap_err();
                    assert!(err.to_string().contains(&key), "{owner:?} then {other:?}: {err}");
                    assert!(l.peek(&key, &RULES).algorithm(other).await.is_err());
                }
                // The owner's state is untouched by the refused calls.
                let again = l.check(&key, &RULES).algorithm(owner).await.unwrap();
                assert_eq!((again.allowed, again.remaining), (true, 0), "{owner:?}");
            }
        }
    }
}

/// `EVAL`s the algorithms' scripts directly, with the shared protocol: `KEYS[1]`,
/// `ARGV[1]` = the call (0 peek, 1 consume, 2 consume and answer the time) plus 4 ×
/// block_for_us, now_us (0: server TIME), cost, count, window_us, ... as little-endian
/// doubles, and `ARGV[2]` = the check's id (read by the sliding log).
mod scripts {
    use std::sync::atomic::{AtomicU64, Ordering};

    use crate::support::RedisServer;

    /// The scripts exactly as the runtime composes them (the settle scripts are run
    /// through the limiter, in `differential`).
    #[allow(dead_code)]
    mod sources {
        include!("../ratelimit-runtime/src/scripts/sources.rs");
    }
    use sources::{
        FIXED_WINDOW, FIXED_WINDOW_REFUND, SLIDING_LOG, SLIDING_WINDOW, SLIDING_WINDOW_REFUND,
        TOKEN_BUCKET, TOKEN_BUCKET_REFUND,
    };
    const ALL: [(&str, &str); 3] = [
        ("fixed_window", FIXED_WINDOW),
        ("sliding_window", SLIDING_WINDOW),
        ("token_bucket", TOKEN_BUCKET),
    ];

    /// A realistic "now" (µs since the epoch), a whole minute.
    const NOW: u64 = 1_700_000_040_000_000;

    /// A value as the scripts store it: the algorithm's name, the key's expiry (µs), then
    /// per rule `count`, `window_us` and the algorithm's own numbers, each a little-endian
    /// double.
    fn value(name: &str, expires_us: u64, records: &[&[u64]]) -> Vec<u8> {
        let mut value = name.as_bytes().to_vec();
        for n in std::iter::once(&expires_us).chain(records.iter().copied().flatten()) {
            value.extend_from_slice(&(*n as f64).to_le_bytes());
        }
        value
    }

    /// The numbers of a value stored by the script `name`: the expiry, then the records.
    fn numbers(value: &[u8], name: &str) -> Vec<u64> {
        let rest = value
            .strip_prefix(name.as_bytes())
            .expect("the algorithm's name");
        assert_eq!(rest.len() % 8, 0, "{value:?}");
        let double = |b: &[u8]| f64::from_le_bytes(b.try_into().unwrap());
        rest.chunks(8).map(|b| double(b) as u64).collect()
    }

    fn get(conn: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
        redis::cmd("GET").arg(key).query(conn).unwrap()
    }

    fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
        redis::cmd("PTTL").arg(key).query(conn).unwrap()
    }

    /// A sliding-log check id not used before in this process.
    fn next_id() -> [u8; 8] {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        NEXT_ID.fetch_add(1, Ordering::Relaxed).to_le_bytes()
    }

    /// The EVAL of one check of cost `cost`, as the runtime encodes it.
    fn command(
        script: &str,
        key: &str,
        consume: bool,
        now_us: u64,
        cost: u64,
        rules: &[(u64, u64)],
        id: &[u8],
    ) -> redis::Cmd {
        check_command(
            script,
            key,
            [u64::from(consume), now_us, cost, 0],
            rules,
            id,
        )
    }

    /// The EVAL of one check of `[call, now_us, cost, block_for_us]`: the call 0 to peek,
    /// 1 to consume, or 2 to also answer the time the check was counted at.
    fn check_command(
        script: &str,
        key: &str,
        [call, now_us, cost, block_for_us]: [u64; 4],
        rules: &[(u64, u64)],
        id: &[u8],
    ) -> redis::Cmd {
        let head = [call + 4 * block_for_us, now_us, cost];
        let mut eval = redis::cmd("EVAL");
        eval.arg(script)
            .arg(1)
            .arg(key)
            .arg(doubles(head.into_iter(), rules))
            .arg(id);
        eval
    }

    /// `head`, then each rule's count and window, as little-endian doubles.
    fn doubles(head: impl Iterator<Item = u64>, rules: &[(u64, u64)]) -> Vec<u8> {
        head.chain(
            rules
                .iter()
                .flat_map(|&(count, window_us)| [count, window_us]),
        )
        .flat_map(|n| (n as f64).to_le_bytes())
        .collect()
    }

    /// A reply as `[allowed, rule_index, remaining, reset_after_us, retry_after_us]`,
    /// the short form of an admitted call spelled out, and "never" (-1) as `u64::MAX`;
    /// with the time the check was counted at, when the reply has it (a consuming check
    /// of a string-state algorithm: the short form and the time as two doubles, or a
    /// sixth number).
    fn answer(
        reply: redis::Value,
        rules: &[(u64, u64)],
    ) -> redis::RedisResult<([u64; 5], Option<u64>)> {
        let short = |short: u64| {
            let rule_index = short % 64;
            let base = rules[rule_index as usize].0 + 1;
            [1, rule_index, short / 64 % base, short / 64 / base, 0]
        };
        Ok(match reply {
            redis::Value::Int(n) => (short(u64::try_from(n).expect("not negative")), None),
            redis::Value::BulkString(bytes) => {
                let [n, at] = [&bytes[..8], &bytes[8..]]
                    .map(|b| f64::from_le_bytes(b.try_into().expect("two doubles")) as u64);
                (short(n), Some(at))
            }
            long => {
                let numbers: Vec<i64> = redis::FromRedisValue::from_redis_value(long)?;
                let mut numbers: Vec<u64> = numbers
                    .into_iter()
                    .map(|n| if n == -1 { u64::MAX } else { n as u64 })
                    .collect();
                let at = (numbers.len() == 6).then(|| numbers.pop().unwrap());
                (numbers.try_into().expect("five numbers"), at)
            }
        })
    }

    /// [`answer`] without the time.
    fn spelled_out(reply: redis::Value, rules: &[(u64, u64)]) -> redis::RedisResult<[u64; 5]> {
        answer(reply, rules).map(|(figures, _)| figures)
    }

    /// The script's reply as `[allowed, rule_index, remaining, reset_after_us,
    /// retry_after_us]`, the short form of an admitted call spelled out.
    fn eval(
        conn: &mut redis::Connection,
        script: &str,
        key: &str,
        consume: bool,
        now_us: u64,
        rules: &[(u64, u64)],
    ) -> redis::RedisResult<[u64; 5]> {
        let reply = command(script, key, consume, now_us, 1, rules, &next_id()).query(conn)?;
        spelled_out(reply, rules)
    }

    /// The hand-worked sequences the memory backend's unit tests run too.
    mod worked {
        include!("../ratelimit-runtime/src/algorithm/worked.rs");
    }

    /// What a refund of a decision needs: whether it took anything, the check's id (the
    /// sliding log's members), its cost, and the time it was counted at (the other
    /// algorithms' answer).
    struct Taken {
        admitted: bool,
        id: [u8; 8],
        cost: u64,
        at_us: Option<u64>,
    }

    /// One key of a redis-server, for the hand-worked sequences.
    struct Key<'c> {
        conn: &'c mut redis::Connection,
        key: String,
    }

    impl worked::Runner for Key<'_> {
        type Receipt = Taken;

        fn check(&mut self, check: &worked::Check<'_>) -> ([u64; 5], Taken) {
            // Every consuming check asks for the time it was counted at, for its refund.
            let call = 2 * u64::from(check.consume);
            let id = next_id();
            let head = [call, check.now_us, check.cost, check.block_for_us];
            let reply = check_command(script(check.algorithm), &self.key, head, check.rules, &id)
                .query(self.conn)
                .unwrap();
            let (answer, at_us) = answer(reply, check.rules).unwrap();
            let taken = Taken {
                admitted: check.consume && answer[0] == 1,
                id,
                cost: check.cost,
                at_us,
            };
            (answer, taken)
        }

        /// As the runtime sends it: a ZREM of the sliding log's members, or the
        /// algorithm's refund script.
        fn refund(&mut self, algorithm: &str, rules: &[(u64, u64)], taken: &Taken, now_us: u64) {
            if !taken.admitted {
                return;
            }
            let source = match algorithm {
                "fixed_window" => FIXED_WINDOW_REFUND,
                "sliding_window" => SLIDING_WINDOW_REFUND,
                "token_bucket" => TOKEN_BUCKET_REFUND,
                _ => {
                    let mut zrem = redis::cmd("ZREM");
                    zrem.arg(&self.key).arg(&taken.id[..]);
                    for k in 2..=taken.cost {
                        zrem.arg([&taken.id[..], k.to_string().as_bytes()].concat());
                    }
                    let _: u64 = zrem.query(self.conn).unwrap();
                    return;
                }
            };
            let at = taken.at_us.expect("a check asked for its time answers it");
            let _: u64 = redis::cmd("EVAL")
                .arg(source)
                .arg(1)
                .arg(&self.key)
                .arg(doubles([at, taken.cost, now_us].into_iter(), rules))
                .query(self.conn)
                .unwrap();
        }

        fn reset(&mut self) {
            let _: () = redis::cmd("DEL").arg(&self.key).query(self.conn).unwrap();
        }

        fn start(&mut self, n: usize) {
            self.key = format!("worked:{n}");
        }
    }

    /// The check script of the algorithm of that metrics spelling.
    fn script(algorithm: &str) -> &'static str {
        match algorithm {
            "sliding_log" => SLIDING_LOG,
            name => {
                ALL.iter()
                    .find(|(n, _)| *n == name)
                    .expect("an algorithm")
                    .1
            }
        }
    }

    #[test]
    fn hand_worked_sequences_are_answered_exactly() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        worked::replay(&mut Key {
            conn: &mut conn,
            key: String::new(),
        });
    }

    #[test]
    fn a_full_current_and_a_full_previous_window_bind_the_lowest_index() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        // Sliding window: a full current window and a full previous one free together.
        let rules = [(1, 1_000), (1, 2_000)];
        let state = value(
            "sliding_window",
            0,
            &[&[1, 1_000, NOW, 1, 0], &[1, 2_000, NOW, 0, 1]],
        );
        let _: () = redis::cmd("SET")
            .arg("sw")
            .arg(state)
            .query(&mut conn)
            .unwrap();
        let denied = eval(&mut conn, SLIDING_WINDOW, "sw", true, NOW + 100, &rules);
        assert_eq!(denied.unwrap(), [0, 0, 0, 1_900, 1_900]);
    }

    #[test]
    fn peeks_and_denials_write_nothing() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        for (name, script) in ALL {
            let rules = [(1, 60_000_000)];
            let peek = eval(&mut conn, script, name, false, NOW, &rules).unwrap();
            assert_eq!(peek[0], 1, "{name}: a peek at an empty key is allowed");
            let exists: bool = redis::cmd("EXISTS").arg(name).query(&mut conn).unwrap();
            assert!(!exists, "{name}: a peek created the key");

            assert_eq!(
                eval(&mut conn, script, name, true, NOW, &rules).unwrap()[0],
                1
            );
            let before = get(&mut conn, name).expect("written");
            let ttl_before = pttl(&mut conn, name);
            for consume in [true, false] {
                let denied = eval(&mut conn, script, name, consume, NOW + 1, &rules).unwrap();
                assert_eq!(denied[0], 0, "{name}");
            }
            let after = get(&mut conn, name).expect("still there");
            assert_eq!(before, after, "{name}: a denial changed the state");
            assert!(
                pttl(&mut conn, name) <= ttl_before,
                "{name}: a denial extended the TTL"
            );
            // The name, the expiry, then count, window and the algorithm's numbers.
            let stored = numbers(&before, name);
            assert_eq!(stored[1..3], [1, 60_000_000], "{name}: {stored:?}");
        }
    }

    #[test]
    fn every_write_sets_the_ttl_the_state_needs() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        // 0.5 s before a minute boundary (NOW is one), with a 1 ms rule beside it.
        let now = NOW + 59_500_000;
        let rules = [(5, 1_000), (5, 60_000_000)];
        // ceil(needed_us / 1000) + 1000 ms: fixed window until the minute's end, sliding
        // window until the end of the next minute, token bucket for its longest burst span
        // (60 s), which covers every tat an admitted call can leave.
        for (name, script, expected_ms) in [
            ("fixed_window", FIXED_WINDOW, 500 + 1_000),
            ("sliding_window", SLIDING_WINDOW, 60_500 + 1_000),
            ("token_bucket", TOKEN_BUCKET, 60_000 + 1_000),
        ] {
            eval(&mut conn, script, name, true, now, &rules).unwrap();
            let ttl = pttl(&mut conn, name);
            assert!(
                (expected_ms - 200..=expected_ms).contains(&ttl),
                "{name}: PTTL {ttl}, expected about {expected_ms}"
            );
            // The value records the expiry, in the script's clock.
            let stored = numbers(&get(&mut conn, name).unwrap(), name);
            assert_eq!(stored[0], now + expected_ms as u64 * 1_000, "{name}");
        }
    }

    #[test]
    fn the_expiry_moves_only_when_a_write_would_outlive_it() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        let mut write = |script, key, now| {
            eval(&mut conn, script, key, true, now, &[(100, 60_000_000)]).unwrap();
            let ttl = pttl(&mut conn, key);
            let expires = numbers(&get(&mut conn, key).unwrap(), key)[0];
            (ttl, expires)
        };
        // Fixed window: counting in the same minute keeps the expiry; the next minute moves it.
        let (ttl, expires) = write(FIXED_WINDOW, "fixed_window", NOW + 59_000_000);
        assert!((1_800..=2_000).contains(&ttl), "{ttl}");
        assert_eq!(expires, NOW + 61_000_000);
        let (kept, same) = write(FIXED_WINDOW, "fixed_window", NOW + 59_500_000);
        assert!(kept <= ttl && same == expires, "{kept} {same}");
        let (moved, later) = write(FIXED_WINDOW, "fixed_window", NOW + 60_000_000);
        assert!((60_800..=61_000).contains(&moved), "{moved}");
        assert_eq!(later, NOW + 121_000_000);

        // Token bucket, T = 600 ms: the first write's expiry covers the whole burst span
        // (60 s) plus the margin, so later writes keep it until a tat comes within the
        // margin of it.
        let (ttl, expires) = write(TOKEN_BUCKET, "token_bucket", NOW);
        assert!((60_800..=61_000).contains(&ttl), "{ttl}");
        assert_eq!(expires, NOW + 61_000_000);
        let (kept, same) = write(TOKEN_BUCKET, "token_bucket", NOW + 59_400_000); // tat: 60 s
        assert!(kept <= ttl && same == expires, "{kept} {same}");
        let (moved, later) = write(TOKEN_BUCKET, "token_bucket", NOW + 59_400_001);
        assert!((60_800..=61_000).contains(&moved), "{moved}");
        assert_eq!(later, NOW + 59_400_001 + 61_000_000);
    }

    #[test]
    fn a_write_stores_the_rules_it_checked_in_their_order() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        let (a, b, c) = ((3, 1_000_000), (5, 60_000_000), (7, 3_600_000_000));
        eval(&mut conn, FIXED_WINDOW, "k", true, NOW, &[a, b]).unwrap();
        // b, found out of place, keeps its count; c starts; a is no longer stored.
        let reply = eval(&mut conn, FIXED_WINDOW, "k", true, NOW, &[c, b]).unwrap();
        assert_eq!(reply, [1, 1, 3, 60_000_000, 0]);
        let stored = numbers(&get(&mut conn, "k").unwrap(), "fixed_window");
        let hour = NOW / 3_600_000_000 * 3_600_000_000;
        assert_eq!(
            stored[1..],
            [7, 3_600_000_000, hour, 1, 5, 60_000_000, NOW, 2]
        );
        // a starts over.
        let reply = eval(&mut conn, FIXED_WINDOW, "k", false, NOW, &[a]).unwrap();
        assert_eq!(reply, [1, 0, 3, 1_000_000, 0]);
    }

    #[test]
    fn a_key_holding_another_algorithms_state_is_an_error() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        let rules = [(3, 1_000_000)];
        for (owner, owner_script) in ALL {
            eval(&mut conn, owner_script, owner, true, NOW, &rules).unwrap();
            for (other, script) in ALL.into_iter().filter(|(n, _)| *n != owner) {
                for consume in [true, false] {
                    let err = eval(&mut conn, script, owner, consume, NOW, &rules).unwrap_err();
                    let text = err.to_string();
                    assert!(
                        text.contains(&format!("holds {owner} state, not {other}")),
                        "{text}"
                    );
                }
            }
        }
        // A sliding log's sorted set is refused by Redis itself.
        let _: () = redis::cmd("ZADD")
            .arg("log")
            .arg(1)
            .arg("a")
            .query(&mut conn)
            .unwrap();
        for (name, script) in ALL {
            let err = eval(&mut conn, script, "log", true, NOW, &rules).unwrap_err();
            assert!(err.to_string().contains("WRONGTYPE"), "{name}: {err}");
        }
        // A string the limiter did not write is named so, and left alone.
        let _: () = redis::cmd("SET")
            .arg("text")
            .arg("fixed_window, but not ours")
            .query(&mut conn)
            .unwrap();
        for (name, script) in ALL {
            let err = eval(&mut conn, script, "text", true, NOW, &rules).unwrap_err();
            let expected = format!("holds a value the limiter did not write, not {name}");
            assert!(err.to_string().contains(&expected), "{err}");
        }
        let text = get(&mut conn, "text").unwrap();
        assert_eq!(text, b"fixed_window, but not ours");
    }

    #[test]
    fn an_admitted_call_answers_in_one_number_when_it_fits() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        // The short form, (reset_after * count + remaining) * 64 + rule_index, must stay
        // below 2^53: it does for 100 per minute, not for 2^40 per 2^50 µs. A check that
        // asks for the time it was counted at (consume 2) gets the short form and that
        // time as two doubles, or that time as a sixth number of the long form.
        let (small, big) = ((100, 60_000_000), (1 << 40, 1 << 50));
        for (name, script) in ALL.into_iter().chain([("sliding_log", SLIDING_LOG)]) {
            for (consume, remaining) in [(0, 100), (1, 99), (2, 98)] {
                let head = [consume, NOW, 1, 0];
                let reply: redis::Value =
                    check_command(script, name, head, &[big, small], &next_id())
                        .query(&mut conn)
                        .unwrap();
                let one_number = match reply {
                    redis::Value::BulkString(ref b) => consume == 2 && b.len() == 16,
                    redis::Value::Int(_) => consume < 2,
                    _ => false,
                };
                assert!(one_number, "{name}, consume {consume}: {reply:?}");
                let (figures, at) = answer(reply, &[big, small]).unwrap();
                assert_eq!(figures[..3], [1, 1, remaining], "{name}");
                assert_eq!(at, (consume == 2).then_some(NOW), "{name}");
            }

            for consume in [1, 2] {
                let key = format!("{name}:big:{consume}");
                let head = [consume, NOW, 1, 0];
                let reply: redis::Value = check_command(script, &key, head, &[big], &next_id())
                    .query(&mut conn)
                    .unwrap();
                let redis::Value::Array(items) = reply else {
                    panic!("{name}: {reply:?}")
                };
                let numbers: Vec<u64> =
                    redis::FromRedisValue::from_redis_value(redis::Value::Array(items)).unwrap();
                assert_eq!(numbers[..3], [1, 0, (1 << 40) - 1], "{name}");
                assert_eq!(numbers.get(5), (consume == 2).then_some(&NOW), "{name}");
            }
        }
    }

    #[test]
    fn a_short_answer_at_the_edge_of_exact_doubles_loses_nothing() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        // Rule 1 binds the first call with 3 remaining and reset_after * 5 = 2^47 - 3, so
        // reset_after * (count + 1) + remaining = 2^47 exactly: times 64 plus the rule
        // index 1, 2^53 + 1, which a double cannot hold. The script must answer in full.
        let reset: u64 = ((1 << 47) - 3) / 5;
        let per_second = (1_000, 1_000_000);
        let half = reset.div_ceil(2);
        for (name, script, window, now) in [
            // reset_after: the window.
            ("sliding_log", SLIDING_LOG, reset, NOW),
            // reset_after: what is left of the aligned window, here all but 1 µs.
            ("fixed_window", FIXED_WINDOW, reset + 1, reset + 2),
            // reset_after: 2w - e, the window after this one too; 1 µs into a window.
            ("sliding_window", SLIDING_WINDOW, half, half + 1),
            // reset_after: the emission interval, window / count.
            ("token_bucket", TOKEN_BUCKET, 4 * reset, NOW),
        ] {
            let rules = [per_second, (4, window)];
            let reply = eval(&mut conn, script, name, true, now, &rules).unwrap();
            assert_eq!(reply, [1, 1, 3, reset, 0], "{name}");
        }
    }

    #[test]
    fn now_zero_reads_the_server_clock() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        let server_now = |conn: &mut redis::Connection| -> u64 {
            let (s, us): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
            s * 1_000_000 + us
        };
        // 250 ms windows: the reply places the server's time within the window.
        let window = 250_000;
        for (name, script) in ALL {
            let before = server_now(&mut conn);
            let reply = eval(&mut conn, script, name, true, 0, &[(2, window)]).unwrap();
            let after = server_now(&mut conn);
            assert_eq!(reply[0], 1, "{name}");
            let end = |now: u64| now - now % window + window;
            match name {
                // Time to the end of the window holding the script's `now`.
                "fixed_window" => {
                    assert!(reply[3] > 0 && reply[3] <= window);
                    if end(before) == end(after) {
                        let range = (end(after) - after)..=(end(before) - before);
                        assert!(range.contains(&reply[3]), "{} not in {range:?}", reply[3]);
                    }
                }
                "sliding_window" => assert!(reply[3] > window && reply[3] <= 2 * window),
                // Independent of `now` when fresh; written as an absolute tat.
                _ => {
                    assert_eq!(reply[3], window / 2);
                    let tat = numbers(&get(&mut conn, name).unwrap(), name)[3];
                    assert!((before + window / 2..=after + window / 2).contains(&tat));
                }
            }
        }
    }

    /// The sliding log's entries, as (member, score).
    fn entries(conn: &mut redis::Connection, key: &str) -> Vec<(Vec<u8>, u64)> {
        redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(conn)
            .unwrap()
    }

    #[test]
    fn a_block_is_kept_in_the_key_as_long_as_it_lasts() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        let rules = [(1, 1_000_000)];
        let hour = 3_600_000_000;
        for (name, script) in ALL.into_iter().chain([("sliding_log", SLIDING_LOG)]) {
            let run = |conn: &mut redis::Connection, call, at| {
                let head = [call, NOW + at, 1, hour];
                let reply = check_command(script, name, head, &rules, &next_id())
                    .query(conn)
                    .unwrap();
                spelled_out(reply, &rules).unwrap()
            };
            assert_eq!(run(&mut conn, 1, 0)[0], 1, "{name}");
            assert_eq!(run(&mut conn, 1, 10), [0, 0, 0, hour, hour], "{name}");
            // The key lives as long as the block, not just as long as the rule's second.
            let ttl = pttl(&mut conn, name);
            assert!(ttl > 3_590_000, "{name}: PTTL {ttl}");
            match name {
                "sliding_log" => {
                    let members: Vec<(Vec<u8>, String)> = redis::cmd("ZRANGE")
                        .arg(name)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query(&mut conn)
                        .unwrap();
                    // An entry, then the block: scored +inf, named 'B' and its end and rule.
                    assert_eq!(members.len(), 2, "{members:?}");
                    let (block, score) = &members[1];
                    assert_eq!(score, "inf");
                    let block_numbers: Vec<u64> = block[1..]
                        .chunks(8)
                        .map(|b| f64::from_le_bytes(b.try_into().unwrap()) as u64)
                        .collect();
                    assert_eq!(block_numbers, [NOW + 10 + hour, 0]);
                }
                // A string state under a block is named in capitals, with what it counted.
                _ => {
                    let value = get(&mut conn, name).unwrap();
                    let upper = name.to_ascii_uppercase();
                    let stored = numbers(&value, &upper);
                    // The expiry, the rule's record, then the block's.
                    assert_eq!(stored[1..3], [1, 1_000_000], "{name}");
                    let block = &stored[stored.len() - name_size(name) / 8..];
                    assert_eq!(block[..3], [0, NOW + 10 + hour, 0], "{name}");
                }
            }
            // Peeks and checks under the block write nothing.
            let before = redis::cmd("DUMP")
                .arg(name)
                .query::<Vec<u8>>(&mut conn)
                .unwrap();
            assert_eq!(run(&mut conn, 0, 20)[4], hour - 10, "{name}");
            assert_eq!(run(&mut conn, 1, 20)[4], hour - 10, "{name}");
            let after = redis::cmd("DUMP")
                .arg(name)
                .query::<Vec<u8>>(&mut conn)
                .unwrap();
            assert_eq!(before, after, "{name}");
        }
    }

    /// A record's bytes in the value of the string-state algorithm `name`.
    fn name_size(name: &str) -> usize {
        match name {
            "fixed_window" => 32,
            "sliding_window" => 40,
            _ => 24,
        }
    }

    #[test]
    fn a_re_sent_sliding_log_check_under_a_block_answers_as_it_did() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        let rules = [(1, 1_000_000)];
        let run = |conn: &mut redis::Connection, at, id: &[u8]| {
            let head = [1, NOW + at, 1, 60_000_000];
            let reply = check_command(SLIDING_LOG, "k", head, &rules, id)
                .query(conn)
                .unwrap();
            spelled_out(reply, &rules).unwrap()
        };
        let first = run(&mut conn, 0, b"id-0000000000001");
        assert_eq!(first, [1, 0, 0, 1_000_000, 0]);
        // Another check is refused and blocks the key.
        assert_eq!(run(&mut conn, 10, b"id-0000000000002")[0], 0);
        // The first check, re-sent: admitted, as it was, and counted once.
        assert_eq!(run(&mut conn, 20, b"id-0000000000001"), first);
        assert_eq!(
            redis::cmd("ZCARD")
                .arg("k")
                .query::<u64>(&mut conn)
                .unwrap(),
            2
        );
        // A fresh check is still refused by the block.
        assert_eq!(run(&mut conn, 30, b"id-0000000000003")[0], 0);
    }

    #[test]
    fn a_re_sent_sliding_log_check_is_counted_once_and_answered_alike() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        let rules = [(3, 60_000_000), (10, 3_600_000_000)];
        let run = |conn: &mut redis::Connection, cost, at, id: &[u8]| {
            let cmd = command(SLIDING_LOG, "k", true, NOW + at, cost, &rules, id);
            spelled_out(cmd.query(conn).unwrap(), &rules).unwrap()
        };
        let first = run(&mut conn, 1, 0, b"id-0000000000001");
        assert_eq!(first, [1, 0, 2, 60_000_000, 0]);
        // The same command again, as a connection layer re-sends it: nothing more counted.
        assert_eq!(run(&mut conn, 1, 0, b"id-0000000000001"), first);
        assert_eq!(entries(&mut conn, "k").len(), 1);
        // A cost of 2 takes the last two units; re-run later, it still answers admitted
        // (a fresh check would be denied now) and adds nothing.
        let second = run(&mut conn, 2, 10, b"id-0000000000002");
        assert_eq!(second, [1, 0, 0, 60_000_000, 0]);
        assert_eq!(run(&mut conn, 2, 10, b"id-0000000000002"), second);
        assert_eq!(run(&mut conn, 2, 20, b"id-0000000000002"), second);
        let members: Vec<Vec<u8>> = entries(&mut conn, "k").into_iter().map(|e| e.0).collect();
        assert_eq!(
            members,
            [
                &b"id-0000000000001"[..],
                b"id-0000000000002",
                b"id-00000000000022"
            ]
        );
        assert_eq!(run(&mut conn, 1, 30, b"id-0000000000003")[0], 0);
        assert_eq!(entries(&mut conn, "k").len(), 3);
    }

    /// A calendar rule (its window -1, a UTC day, as `Rule::script_window` sends it): a
    /// re-sent check whose first run took the day's last units answers as it did, its
    /// reset at midnight.
    #[test]
    fn a_re_sent_sliding_log_check_of_a_calendar_rule_answers_as_it_did() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        let day_us = 86_400_000_000;
        let midnight = NOW / day_us * day_us + day_us;
        let run = |conn: &mut redis::Connection, id: &[u8]| {
            let numbers: Vec<u8> = [1.0, NOW as f64, 2.0, 2.0, -1.0]
                .iter()
                .flat_map(|n: &f64| n.to_le_bytes())
                .collect();
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(SLIDING_LOG).arg(1).arg("k").arg(numbers).arg(id);
            spelled_out(cmd.query(conn).unwrap(), &[(2, day_us)]).unwrap()
        };
        let first = run(&mut conn, b"id-0000000000001");
        assert_eq!(first, [1, 0, 0, midnight - NOW, 0]);
        assert_eq!(run(&mut conn, b"id-0000000000001"), first);
        let fresh = run(&mut conn, b"id-0000000000002");
        assert_eq!(fresh, [0, 0, 0, midnight - NOW, midnight - NOW]);
    }

    #[test]
    fn a_cost_above_a_count_answers_never_and_writes_nothing() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        let rules = [(10, 1_000_000), (3, 60_000_000)];
        for (name, script) in ALL.into_iter().chain([("sliding_log", SLIDING_LOG)]) {
            let reply = command(script, name, true, NOW, 4, &rules, b"one-id-for-never")
                .query(&mut conn)
                .unwrap();
            let reply = spelled_out(reply, &rules).unwrap();
            assert_eq!(reply[..3], [0, 1, 3], "{name}");
            assert_eq!(reply[4], u64::MAX, "{name}: retry_after -1");
            let exists: bool = redis::cmd("EXISTS").arg(name).query(&mut conn).unwrap();
            assert!(!exists, "{name}");
        }
    }

    /// The weighted count `ceil(prev * (w - e) / w)` and the retry times, as documented in
    /// `algorithm/sliding_window.rs`, in u128.
    fn sliding_window_reference(count: u64, w: u64, e: u64, curr: u64, prev: u64) -> [u64; 5] {
        let mul_div = |a: u64, b: u64, d: u64| (a as u128 * b as u128 / d as u128) as u64;
        let weighted = (prev as u128 * (w - e) as u128).div_ceil(w as u128) as u64;
        // A peek: what is left now.
        if curr + 1 + weighted <= count {
            return [1, 0, count - curr - weighted, 2 * w - e, 0];
        }
        let retry = if curr < count {
            w - mul_div(w, count - curr - 1, prev) - e
        } else {
            (w - e) + w - mul_div(w, count - 1, curr)
        };
        let reset = if curr > 0 { 2 * w - e } else { w - e };
        [0, 0, 0, reset, retry]
    }

    /// `a^-1 mod m`, for `a` coprime to `m`.
    fn inverse(a: u64, m: u64) -> u64 {
        let (mut r0, mut r1) = (a as i128, m as i128);
        let (mut s0, mut s1) = (1i128, 0i128);
        while r1 != 0 {
            let q = r0 / r1;
            (r0, r1) = (r1, r0 - q * r1);
            (s0, s1) = (s1, s0 - q * s1);
        }
        assert_eq!(r0, 1, "{a} and {m} are not coprime");
        s0.rem_euclid(m as i128) as u64
    }

    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }

    #[test]
    fn sliding_window_stays_exact_where_products_pass_2_pow_53() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        // count * window far beyond 2^53 (~9.007e15).
        let cases = [
            (1_000_000u64, 86_400_000_000u64),
            (3_000_000_007, 3_600_000_000),
        ];
        let mut next = crate::support::xorshift(0x2545_f491_4f6c_dd1d);
        let mut checked = 0;
        for (count, w) in cases {
            // (elapsed, curr, prev)
            let mut samples = Vec::new();
            // Around where the weight crosses a whole call.
            for _ in 0..50 {
                let prev = count - next(count / 10 + 1);
                let curr = if next(4) == 0 {
                    count
                } else {
                    next(count / 10 + 1)
                };
                let k = count.saturating_sub(curr + 1).min(prev);
                let boundary = w - (w as u128 * k as u128 / prev as u128) as u64;
                samples.push((
                    (boundary + next(3)).saturating_sub(1).min(w - 1),
                    curr,
                    prev,
                ));
            }
            // Products one off a multiple of the divisor, which doubles cannot hold: the
            // weight `prev * (w - e) = k * w + 1` (ceil is k + 1), and for the retry
            // `w * k = q * prev - 1` (floor is q - 1).
            let coprime = (1..count).map(|j| count - j).filter(|p| gcd(*p, w) == 1);
            for prev in coprime.take(10) {
                samples.push((w - inverse(prev, w), 0, prev));
                let k = prev - inverse(w % prev, prev);
                samples.push((0, count - 1 - k, prev));
            }
            let start = NOW / w * w;
            for (e, curr, prev) in samples {
                let state = value("sliding_window", 0, &[&[count, w, start, curr, prev]]);
                let _: () = redis::cmd("SET")
                    .arg("sw")
                    .arg(state)
                    .query(&mut conn)
                    .unwrap();
                let rules = [(count, w)];
                let got = eval(&mut conn, SLIDING_WINDOW, "sw", false, start + e, &rules).unwrap();
                let expected = sliding_window_reference(count, w, e, curr, prev);
                assert_eq!(
                    got, expected,
                    "count {count}, w {w}, e {e}, curr {curr}, prev {prev}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 2 * (50 + 20));
    }
}

/// Redis and memory, lock-step, on proptest-generated calls at explicit times.
mod differential {
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
        let us =
            |(count, window_us): (u64, u64)| Rule::new(count, Duration::from_micros(window_us));
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
        (gap, back, cost, prop::bool::weighted(0.8)).prop_map(|(gap_us, back_us, cost, consume)| {
            Call {
                gap_us,
                back_us,
                cost,
                consume,
                pick: 0,
                reversed: false,
                block_us: 0,
                refund: false,
                settle: None,
            }
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
        (rules, boundaries, 0u64..60_000_000, calls).prop_map(
            |(rules, boundary, before_us, calls)| Case {
                rules,
                start_us: boundary * 1_000_000 - before_us,
                calls,
            },
        )
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
    fn within_bound(
        algorithm: Algorithm,
        rule: Rule,
        admitted: &[(u64, u64)],
    ) -> Result<(), String> {
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
}
