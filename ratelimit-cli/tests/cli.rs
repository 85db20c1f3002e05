//! The built `ratelimit` binary against a real `redis-server`: keys written by real checks
//! of `Limiter::redis` (every algorithm, a block), the overrides and modes a running limiter
//! reads, the exit statuses and the environment. Each test has a server of its own.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Command, Output};
use std::time::Duration;

use redis_ratelimit::{Algorithm, Calendar, Decision, Limiter, Mode, RateLimitError, Rule};
use serde_json::{json, Value};
use support::{counting_limiter, leak, RedisServer};

/// How long an override may take to reach a running limiter before a test gives up: an
/// order of magnitude more than its poll interval, for a busy machine.
const GIVE_UP_AFTER: Duration = Duration::from_secs(15);

const RULES: [Rule; 2] = [Rule::per_minute(5), Rule::per_hour(20)];

/// The binary with `args`, its environment free of the variables it reads.
fn ratelimit(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ratelimit"));
    command
        .args(args)
        .env_remove("RATELIMIT_REDIS_URL")
        .env_remove("RATELIMIT_PREFIX");
    command
}

/// A fresh server, and a fail-closed limiter on it.
fn server_and_limiter() -> (RedisServer, Limiter) {
    let server = RedisServer::start();
    let limiter = counting_limiter(&server.url());
    (server, limiter)
}

/// Runs the binary on `server` with `args`.
fn run(server: &RedisServer, args: &[&str]) -> Output {
    let url = server.url();
    let mut all = vec!["--url", url.as_str()];
    all.extend_from_slice(args);
    ratelimit(&all).output().expect("run ratelimit")
}

/// Runs the binary on `server` with `args`, which must succeed; its stdout.
fn ok(server: &RedisServer, args: &[&str]) -> String {
    let out = run(server, args);
    assert!(out.status.success(), "{args:?}: {}", describe(&out));
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Runs the binary on `server` with `args`, which must exit with `status` (2: a usage
/// error, 1: a failure); its output.
#[track_caller]
fn fails(server: &RedisServer, args: &[&str], status: i32) -> Output {
    let out = run(server, args);
    assert_eq!(
        out.status.code(),
        Some(status),
        "{args:?}: {}",
        describe(&out)
    );
    out
}

/// `ok`, read as the one JSON document it prints.
fn json(server: &RedisServer, args: &[&str]) -> Value {
    let stdout = ok(server, args);
    serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("{args:?} printed {stdout:?}: {err}"))
}

/// A check of `cost` units of `rules` for `key` with `algorithm`, which must be answered.
async fn check(
    limiter: &Limiter,
    key: &str,
    rules: &[Rule],
    algorithm: Algorithm,
    cost: u64,
) -> Decision {
    limiter
        .check(key, rules)
        .cost(cost)
        .algorithm(algorithm)
        .await
        .unwrap()
}

/// `inspect key` (with `--rules rules` when given): its JSON document and its table.
fn inspect(server: &RedisServer, key: &str, rules: Option<&str>) -> (Value, String) {
    let mut args = vec!["inspect", key];
    args.extend(rules.into_iter().flat_map(|rules| ["--rules", rules]));
    let state = json(server, &[&args[..], &["--json"]].concat());
    (state, ok(server, &args))
}

fn describe(out: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `(used, count)` of each rule of an `inspect --json` document.
fn used(state: &Value) -> Vec<(u64, u64)> {
    state["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| (r["used"].as_u64().unwrap(), r["count"].as_u64().unwrap()))
        .collect()
}

/// Asserts that each `(rule, field, value)` holds in an `inspect --json` document: its
/// rule `rule` has `field` = `value`.
#[track_caller]
fn assert_rule_fields(state: &Value, expected: &[(usize, &str, Value)], case: &str) {
    for (rule, field, value) in expected {
        let found = &state["rules"][rule][field];
        assert_eq!(found, value, "{case}: rule {rule}'s {field}");
    }
}

/// Asserts that an `inspect` table shows each of `lines`.
#[track_caller]
fn assert_shows(table: &str, lines: &[&str]) {
    for line in lines {
        assert!(table.contains(line), "{line:?} not in {table}");
    }
}

/// What `command key` answers on `server`, a number (`EXISTS`, `HLEN`).
fn number(server: &RedisServer, command: &str, key: &str) -> u64 {
    redis::cmd(command)
        .arg(key)
        .query(&mut server.connection())
        .unwrap()
}

fn hash_field(server: &RedisServer, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg("rate_limit:rules")
        .arg(field)
        .query(&mut server.connection())
        .unwrap()
}

#[tokio::test]
async fn inspect_reads_each_algorithms_key_as_its_checks_left_it() {
    let (server, limiter) = server_and_limiter();
    for algorithm in Algorithm::ALL {
        let key = format!("rate_limit:user:42:app::{}", algorithm.label());
        let d = check(&limiter, &key, &RULES, algorithm, 3).await;
        assert!(d.allowed);
        check(&limiter, &key, &RULES, algorithm, 1).await;
        // The sliding log's entries carry no rule: they are counted under --rules.
        let rules = (algorithm == Algorithm::SlidingLog).then_some("5/minute, 20/hour");
        let (state, table) = inspect(&server, &key, rules);
        assert_eq!(state["exists"], true);
        assert_eq!(state["algorithm"], algorithm.label());
        assert_eq!(used(&state), [(4, 5), (4, 20)], "{algorithm}");
        assert_eq!(state["rules"][0]["remaining"], 1, "{algorithm}");
        assert_eq!(state["block"], Value::Null);
        let reset = state["rules"][0]["reset_after_secs"].as_f64().unwrap();
        // Within the window (the sliding window's count weighs until the next one ends).
        let windows = if algorithm == Algorithm::SlidingWindow {
            2.0
        } else {
            1.0
        };
        assert!(
            reset > 0.0 && reset <= windows * 60.0,
            "{algorithm}: {reset}"
        );
        match algorithm {
            Algorithm::SlidingLog => {
                assert_eq!(state["rules_from"], "--rules");
                assert_eq!(state["log"]["entries"], 4);
            }
            _ => assert_eq!(state["rules_from"], "state", "{algorithm}"),
        }
        // The table says the same.
        assert!(table.contains(algorithm.name()), "{table}");
        assert!(
            table.contains("4 / 5") && table.contains("4 / 20"),
            "{table}"
        );
    }
}

/// Rules counting calls and a rule in debt (a cost settled past its reservation), on every
/// algorithm: `inspect` shows each rule's calls or units, and the debt.
#[tokio::test]
async fn inspect_shows_rules_counting_calls_and_debt() {
    let (server, limiter) = server_and_limiter();
    let rules = [Rule::per_minute(3).calls(), Rule::per_minute(10)];
    for algorithm in Algorithm::ALL {
        let key = format!("rate_limit:user:7:app::metered_{}", algorithm.label());
        let d = check(&limiter, &key, &rules, algorithm, 4).await;
        limiter.settle(&key, &rules, &d, 13).await.unwrap();
        let rules = (algorithm == Algorithm::SlidingLog).then_some("3 calls/minute, 10/minute");
        let (state, table) = inspect(&server, &key, rules);
        assert_eq!(used(&state), [(1, 3), (13, 10)], "{algorithm}");
        let fields = [
            (0, "counts_calls", json!(true)),
            (1, "debt", json!(3)),
            (1, "remaining", json!(0)),
        ];
        assert_rule_fields(&state, &fields, algorithm.name());
        assert_shows(&table, &["3 calls per 60s", "13 / 10 (in debt by 3)"]);
    }
}

/// Rules counting in calendar periods, on every algorithm: `inspect` shows each with its
/// units this month or day (the sliding log's without `--rules`: its counters name them).
#[tokio::test]
async fn inspect_shows_calendar_rules() {
    let (server, limiter) = server_and_limiter();
    let rules = [
        Rule::per_calendar(2_000_000, Calendar::Month),
        Rule::per_calendar(5, Calendar::Day).calls(),
    ];
    for algorithm in Algorithm::ALL {
        let key = format!("rate_limit:user:7:app::calendar_{}", algorithm.label());
        let d = check(&limiter, &key, &rules, algorithm, 1_500).await;
        assert!(d.allowed, "{algorithm}");
        let (state, table) = inspect(&server, &key, None);
        assert_eq!(used(&state), [(1_500, 2_000_000), (1, 5)], "{algorithm}");
        let fields = [
            (0, "calendar", json!("month")),
            (1, "calendar", json!("day")),
            (1, "counts_calls", json!(true)),
        ];
        assert_rule_fields(&state, &fields, algorithm.name());
        assert_shows(
            &table,
            &["2000000 per calendar month", "5 calls per calendar day"],
        );
    }
}

#[tokio::test]
async fn a_sliding_log_is_counted_under_the_rules_stored_for_its_site() {
    let (server, limiter) = server_and_limiter();
    let key = "rate_limit:ip:203.0.113.9:app::send_code";
    limiter.check(key, &RULES).cost(2).await.unwrap();
    // Without rules: the entries alone, and how to count them.
    let (state, table) = inspect(&server, key, None);
    assert_eq!(
        (state["rules_from"].clone(), state["log"]["entries"].clone()),
        (Value::Null, 2.into())
    );
    assert!(table.contains("--rules"), "{table}");
    ok(&server, &["rules", "set", "app::send_code", "3/minute"]);
    let state = json(&server, &["inspect", key, "--json"]);
    assert_eq!(state["rules_from"], "override:app::send_code");
    assert_eq!(used(&state), [(2, 3)]);
}

#[tokio::test]
async fn a_blocked_key_shows_its_block_and_reset_lifts_it() {
    let (server, limiter) = server_and_limiter();
    let rules = [Rule::per_minute(1)];
    let block = Duration::from_secs(15 * 60);
    for algorithm in Algorithm::ALL {
        let key = format!("rate_limit:custom:tom:app::blocked_{}", algorithm.label());
        // Checked until one is refused, which starts the block: two checks a fixed window
        // starts between are both admitted.
        let mut refused = false;
        for _ in 0..3 {
            let d = limiter
                .check(&key, &rules)
                .algorithm(algorithm)
                .block_for(block)
                .await
                .unwrap();
            if !d.allowed {
                refused = true;
                break;
            }
        }
        assert!(
            refused,
            "{algorithm}: the second check in a window is refused"
        );
        let (state, table) = inspect(&server, &key, Some("1/minute"));
        let ends_in = state["block"]["ends_in_secs"].as_f64().expect("a block");
        assert!(
            ends_in > 14.0 * 60.0 && ends_in <= 15.0 * 60.0,
            "{algorithm}: {ends_in}"
        );
        assert_eq!(state["block"]["rule_index"], 0);
        assert_eq!(used(&state), [(1, 1)], "{algorithm}");
        assert!(table.contains("blocked    yes, 1"), "{table}");

        ok(&server, &["reset", &key]);
        assert!(ok(&server, &["inspect", &key]).starts_with("no state"));
        let d = check(&limiter, &key, &rules, algorithm, 1).await;
        assert!(d.allowed, "{algorithm}: reset lifts the block");
    }
}

#[test]
fn an_absent_key_has_no_state() {
    let server = RedisServer::start();
    let out = ok(
        &server,
        &["inspect", "rate_limit:ip:198.51.100.1:app::never"],
    );
    assert!(out.starts_with("no state"), "{out}");
    let state = json(
        &server,
        &["inspect", "rate_limit:ip:198.51.100.1:app::never", "--json"],
    );
    assert_eq!(state["exists"], false);
}

custom_sites! {
    guarded_calendar(rules("100/minute"), name = "cli.calendar");
    guarded(rules("100/minute"), name = "cli.site");
}

/// A limiter on `server` that reads the overrides and modes every 50 ms.
fn polling_limiter(server: &RedisServer) -> &'static Limiter {
    leak(counting_limiter(&server.url()).rules_poll(Some(Duration::from_millis(50))))
}

/// Calendar rules in an override: `rules set` stores them as written, and a running
/// limiter applies them.
#[tokio::test]
async fn overrides_take_calendar_rules() {
    let server = RedisServer::start();
    let limiter = polling_limiter(&server);
    guarded_calendar(limiter, "ann").await.unwrap();
    let text = "2 per calendar day, 100 calls per calendar month";
    ok(&server, &["rules", "set", "cli.calendar", text]);
    assert_eq!(
        ok(&server, &["rules", "get", "cli.calendar"]),
        format!("cli.calendar = {text}\n")
    );
    let overridden = [
        Rule::per_calendar(2, Calendar::Day),
        Rule::per_calendar(100, Calendar::Month).calls(),
    ];
    support::until_rules_in_force(limiter, "cli.calendar", &overridden, GIVE_UP_AFTER).await;
    guarded_calendar(limiter, "bob").await.unwrap();
    guarded_calendar(limiter, "bob").await.unwrap();
    assert!(matches!(
        guarded_calendar(limiter, "bob").await,
        Err(RateLimitError::Limited { .. })
    ));
}

#[tokio::test]
async fn overrides_round_trip_and_a_running_limiter_applies_them() {
    let server = RedisServer::start();
    let limiter = polling_limiter(&server);
    guarded(limiter, "ann").await.unwrap(); // starts the limiter's reads of rate_limit:rules
    assert!(ok(&server, &["rules", "list"]).starts_with("no overrides in rate_limit:rules"));

    ok(
        &server,
        &["rules", "set", "cli.site", "1/minute, 10 per 2 hours"],
    );
    assert_eq!(
        hash_field(&server, "cli.site").as_deref(),
        Some("1/minute, 10 per 2 hours")
    );
    assert_eq!(
        ok(&server, &["rules", "get", "cli.site"]),
        "cli.site = 1/minute, 10 per 2 hours\n"
    );
    let list = json(&server, &["rules", "list", "--json"]);
    assert_eq!(list["hash"], "rate_limit:rules");
    assert_eq!(list["overrides"][0]["field"], "cli.site");
    assert_eq!(list["overrides"][0]["setting"]["rules"][1]["count"], 10);

    let overridden = [
        Rule::per_minute(1),
        Rule::new(10, Duration::from_secs(2 * 3600)),
    ];
    support::until_rules_in_force(limiter, "cli.site", &overridden, GIVE_UP_AFTER).await;
    assert!(guarded(limiter, "bob").await.is_ok());
    assert!(matches!(
        guarded(limiter, "bob").await,
        Err(RateLimitError::Limited { .. })
    ));

    ok(&server, &["mode", "cli.site", "off"]);
    assert_eq!(hash_field(&server, "cli.site#mode").as_deref(), Some("off"));
    support::eventually("the mode to reach the limiter", GIVE_UP_AFTER, || async {
        match limiter.mode_in_force("cli.site") {
            Mode::Off => Ok(()),
            mode => Err(mode.to_string()),
        }
    })
    .await;
    assert!(guarded(limiter, "bob").await.is_ok(), "off: no check");

    let cleared = ok(&server, &["rules", "clear", "cli.site"]);
    assert!(cleared.contains("cleared 2 field(s)"), "{cleared}");
    assert_eq!(hash_field(&server, "cli.site"), None);
    assert_eq!(hash_field(&server, "cli.site#mode"), None);
    assert!(ok(&server, &["rules", "get", "cli.site"]).starts_with("no override"));
}

#[tokio::test]
async fn ban_shuts_an_identity_out_of_every_instance_until_unban() {
    let server = RedisServer::start();
    let limiter = polling_limiter(&server);
    guarded(limiter, "eve").await.unwrap(); // starts the limiter's reads of rate_limit:*
    assert!(ok(&server, &["bans"]).starts_with("no bans in rate_limit:bans"));

    let banned = ok(&server, &["ban", "custom:eve", "1 hour"]);
    assert!(banned.contains("banned `custom:eve` for 1h"), "{banned}");
    ok(&server, &["ban", "ip:2001:db8::/48", "10 minutes"]);
    let bans = json(&server, &["bans", "--json"]);
    assert_eq!(bans["hash"], "rate_limit:bans");
    assert_eq!(bans["bans"][0]["identity"], "custom:eve");
    assert!(bans["bans"][0]["ends_in_ms"].as_u64().unwrap() > 3_500_000);
    assert_eq!(bans["bans"][1]["identity"], "ip:2001:db8::/48");
    let table = ok(&server, &["bans"]);
    assert!(
        table.contains("custom:eve") && table.contains("ends in"),
        "{table}"
    );

    support::eventually("the ban to reach the limiter", GIVE_UP_AFTER, || async {
        match guarded(limiter, "eve").await {
            Err(RateLimitError::Limited { retry_after, .. })
                if retry_after > Duration::from_secs(3000) =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(guarded(limiter, "ann").await.is_ok());

    ok(&server, &["unban", "custom:eve"]);
    support::eventually("the unban to reach the limiter", GIVE_UP_AFTER, || async {
        guarded(limiter, "eve").await.map_err(|err| err.to_string())
    })
    .await;

    fails(&server, &["ban", "host:eve", "1 hour"], 2);
    fails(&server, &["ban", "custom:eve", "soon"], 2);
    assert_eq!(
        json(&server, &["bans", "--json"])["bans"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// An identity keys escape is banned, listed and lifted as written, and reaches a running
/// limiter; a network wider than a ban takes is a usage error.
#[tokio::test]
async fn ban_takes_identities_as_written() {
    let server = RedisServer::start();
    let limiter = polling_limiter(&server);
    guarded(limiter, "john doe").await.unwrap(); // starts the limiter's reads
    ok(&server, &["ban", "custom:john doe", "1 hour"]);
    let bans = json(&server, &["bans", "--json"]);
    assert_eq!(bans["bans"][0]["identity"], "custom:john doe");
    support::eventually("the ban to reach the limiter", GIVE_UP_AFTER, || async {
        match guarded(limiter, "john doe").await {
            Err(RateLimitError::Limited { .. }) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    ok(&server, &["unban", "custom:john doe"]);
    support::eventually("the unban to reach the limiter", GIVE_UP_AFTER, || async {
        guarded(limiter, "john doe")
            .await
            .map_err(|err| err.to_string())
    })
    .await;

    let out = fails(&server, &["ban", "ip:1.2.3.4/0", "1 hour"], 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("too wide to ban"), "{err}");
    assert!(ok(&server, &["bans"]).starts_with("no bans"));
}

#[tokio::test]
async fn block_refuses_every_check_of_a_key_until_reset_lifts_it() {
    let (server, limiter) = server_and_limiter();
    for algorithm in Algorithm::ALL {
        let key = format!("rate_limit:out:cli.block_{}", algorithm.label());
        // A key with state, and one without: both are blocked.
        for counted in [true, false] {
            let key = format!("{key}:{counted}");
            if counted {
                let d = check(&limiter, &key, &RULES, algorithm, 1).await;
                assert!(d.allowed);
            }
            let said = ok(&server, &["block", &key, "15 minutes"]);
            assert!(
                said.contains("blocked") && said.contains("15m00s"),
                "{said}"
            );
            let refused = check(&limiter, &key, &RULES, algorithm, 1).await;
            assert!(!refused.allowed, "{algorithm}, counted: {counted}");
            let left = refused.retry_after.expect("the block's end");
            assert!(
                left > Duration::from_secs(14 * 60) && left <= Duration::from_secs(15 * 60),
                "{algorithm}: {left:?}"
            );
            let state = json(&server, &["inspect", &key, "--json", "--rules", "5/minute"]);
            let ends_in = state["block"]["ends_in_secs"].as_f64().expect("a block");
            assert!(ends_in > 14.0 * 60.0 && ends_in <= 15.0 * 60.0, "{ends_in}");
            // A shorter block leaves the longer one in place.
            ok(&server, &["block", &key, "1s"]);
            let still = check(&limiter, &key, &RULES, algorithm, 1).await;
            assert!(
                still.retry_after > Some(Duration::from_secs(14 * 60)),
                "{still:?}"
            );

            ok(&server, &["reset", &key]);
            let d = check(&limiter, &key, &RULES, algorithm, 1).await;
            assert!(d.allowed, "{algorithm}: reset lifts the block");
        }
    }
}

#[test]
fn a_malformed_block_duration_is_a_usage_error_and_blocks_nothing() {
    let server = RedisServer::start();
    for duration in ["soon", "0s", "15 fortnights"] {
        let out = fails(&server, &["block", "rate_limit:out:cli.bad", duration], 2);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(duration), "{stderr}");
    }
    let exists = number(&server, "EXISTS", "rate_limit:out:cli.bad");
    assert_eq!(exists, 0, "nothing written");
}

#[test]
fn bad_rule_text_or_mode_is_a_usage_error_and_writes_nothing() {
    let server = RedisServer::start();
    for args in [
        &["rules", "set", "cli.site", "5/fortnight"][..],
        &["rules", "set", "cli.site", "0/minute"],
        &["rules", "set", "cli.site#duplicate", "1/minute, 2/hour"],
        &["mode", "cli.site", "loud"],
        &["inspect", "k", "--rules", "often"],
    ] {
        let out = fails(&server, args, 2);
        assert!(
            !out.stderr.is_empty() && out.stdout.is_empty(),
            "{}",
            describe(&out)
        );
    }
    let stderr =
        String::from_utf8(run(&server, &["rules", "set", "cli.site", "5/fortnight"]).stderr)
            .unwrap();
    assert!(
        stderr.contains("not written") && stderr.contains("10/minute"),
        "{stderr}"
    );
    let fields = number(&server, "HLEN", "rate_limit:rules");
    assert_eq!(fields, 0, "nothing written");
}

#[test]
fn a_dead_redis_fails_with_status_1_and_says_what_to_do() {
    let mut server = RedisServer::start();
    server.kill();
    for args in [
        &["rules", "list"][..],
        &["inspect", "k"],
        &["reset", "k"],
        &["block", "k", "1 minute"],
        &["mode", "p", "off"],
    ] {
        let out = fails(&server, args, 1);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("cannot reach"), "{stderr}");
        assert!(stderr.contains("Check that Redis is running"), "{stderr}");
    }
}

#[test]
fn the_url_comes_from_ratelimit_redis_url() {
    let server = RedisServer::start();
    let out = ratelimit(&["rules", "list"])
        .env("RATELIMIT_REDIS_URL", server.url())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    // --url wins over the environment.
    let out = ratelimit(&["rules", "list", "--url", &server.url()])
        .env("RATELIMIT_REDIS_URL", "redis://127.0.0.1:1/")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let out = ratelimit(&["rules", "list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("RATELIMIT_REDIS_URL"));
    let out = ratelimit(&["rules", "list", "--url", "http://127.0.0.1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
}

#[test]
fn every_command_has_help() {
    for args in [
        &[][..],
        &["inspect"],
        &["reset"],
        &["rules"],
        &["rules", "list"],
        &["rules", "get"],
        &["rules", "set"],
        &["rules", "clear"],
        &["mode"],
        &["block"],
        &["ban"],
        &["unban"],
        &["bans"],
    ] {
        let mut all = args.to_vec();
        all.push("--help");
        let out = ratelimit(&all).output().unwrap();
        assert!(out.status.success(), "{all:?}: {}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: ratelimit"));
    }
    let out = ratelimit(&["block", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("Example: ratelimit block 'rate_limit:out:payments-api' '15 minutes'"),
        "{help}"
    );
}

#[tokio::test]
async fn inspect_shows_the_slots_in_use() {
    let (server, limiter) = server_and_limiter();
    let key = "rate_limit:user:7:app::complete";
    let a = limiter.acquire(key, 4).await.unwrap().expect("a free slot");
    let b = limiter.acquire(key, 4).await.unwrap().expect("a second");
    // Only slots, no counts yet.
    let out = ok(&server, &["inspect", key]);
    assert!(out.contains("slots in use  2"), "{out}");
    assert_eq!(
        json(&server, &["inspect", key, "--json"])["slots_in_use"],
        2
    );
    // With counts: the slots beside the rules.
    limiter
        .check(key, &RULES)
        .algorithm(Algorithm::FixedWindow)
        .await
        .unwrap();
    let state = json(&server, &["inspect", key, "--json"]);
    assert_eq!(
        (state["exists"].as_bool(), state["slots_in_use"].as_u64()),
        (Some(true), Some(2))
    );
    a.release().await.unwrap();
    let out = ok(&server, &["inspect", key]);
    assert!(out.contains("slots in use  1"), "{out}");
    b.release().await.unwrap();
    assert!(!ok(&server, &["inspect", key]).contains("slots in use"));
}

custom_sites! {
    watched(rules("1/minute"), name = "cli.top");
}

#[tokio::test]
async fn top_lists_the_most_refused_identities_of_a_site() {
    let server = RedisServer::start();
    let limiter = leak(counting_limiter(&server.url()));
    for (who, calls) in [("mallory", 6), ("trudy", 3), ("alice", 1)] {
        for _ in 0..calls {
            let _ = watched(limiter, who).await;
        }
    }
    // Refusals are sent every second.
    let document = support::eventually("the refusals to land", GIVE_UP_AFTER, || async {
        let document = json(&server, &["top", "cli.top", "--json"]);
        match document["identities"].as_array().map(Vec::len) {
            Some(2) => Ok(document),
            _ => Err(document.to_string()),
        }
    })
    .await;
    assert_eq!(
        document,
        serde_json::json!({
            "site": "cli.top",
            "since_secs": 900,
            "identities": [
                {"identity": "custom:mallory", "refusals": 5},
                {"identity": "custom:trudy", "refusals": 2},
            ],
        })
    );
    let text = ok(&server, &["top", "cli.top", "-n", "1", "--since", "5m"]);
    assert_eq!(
        text,
        "most limited at `cli.top`, last 5m, every instance\n\
         #  IDENTITY        REFUSALS\n\
         1  custom:mallory  5\n"
    );
    // More than the hour refusals are kept is a usage error; --watch needs a terminal.
    fails(&server, &["top", "cli.top", "--since", "2h"], 2);
    fails(&server, &["top", "cli.top", "--watch"], 2);
}
