//! `EVAL`s the algorithms' scripts directly, with the shared protocol: `KEYS[1]`,
//! `ARGV[1]` = the call (0 peek, 1 consume, 2 consume and answer the time) plus 4 ×
//! block_for_us, now_us (0: server TIME), cost, count, window_us, ... as little-endian
//! doubles, and `ARGV[2]` = the check's id (read by the sliding log).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::support::RedisServer;

/// The scripts exactly as the runtime composes them (the settle scripts are run
/// through the limiter, in `differential`).
#[allow(dead_code)]
mod sources {
    include!("../../ratelimit-runtime/src/scripts/sources.rs");
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
    include!("../../ratelimit-runtime/src/algorithm/worked.rs");
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
            let reply: redis::Value = check_command(script, name, head, &[big, small], &next_id())
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
