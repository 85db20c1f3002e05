//! Who is limited most: `Limiter::most_limited` counts each guarded site's refusals by
//! identity, across instances on Redis, bounded per site and minute; admitted checks pay
//! nothing for it.

mod support;

use std::sync::LazyLock;
use std::time::Duration;

use redis_ratelimit::{rate_limiter, Limiter, RateLimitError, Rule};

const QUARTER_HOUR: Duration = Duration::from_secs(15 * 60);

/// How long refusals may take to show (they are flushed every second); a loaded machine
/// gets far more than the 2 s they normally take.
const SHOWN_WITHIN: Duration = Duration::from_secs(30);

/// Waits until `site`'s top `n` on `limiter` is `expected`.
async fn until_top(limiter: &Limiter, site: &str, n: usize, expected: &[(&str, u64)]) {
    let expected: Vec<(String, u64)> = expected
        .iter()
        .map(|(i, c)| ((*i).to_owned(), *c))
        .collect();
    support::eventually(&format!("the top of {site}"), SHOWN_WITHIN, || {
        let expected = expected.clone();
        async move {
            let top = limiter
                .most_limited(site, QUARTER_HOUR, n)
                .await
                .map_err(|e| e.to_string())?;
            if top == expected {
                Ok(())
            } else {
                Err(format!("{top:?}"))
            }
        }
    })
    .await
}

/// Guarded sites counting `user`'s calls on the scenario's limiter (`limit_type = CUSTOM,
/// by = user`): each `name(policies);` is `async fn name(user: &str)` returning `Ok(())`.
macro_rules! user_sites {
    ($($(#[doc = $doc:literal])* $name:ident($($policy:tt)*);)*) => {$(
        $(#[doc = $doc])*
        #[rate_limiter($($policy)*, limit_type = CUSTOM, by = user, limiter = support::limiter())]
        async fn $name(user: &str) -> Result<(), RateLimitError> {
            Ok(())
        }
    )*};
}

user_sites! {
    login(rules("2/minute"), name = "login");
    preview(rules("1/minute"), name = "preview", shadow = true);
    /// A site named as programmatic checks are labelled: a site all the same.
    named_programmatic(rules("2/minute"), name = "programmatic");
}

#[rate_limiter(rules("1/minute"), limit_type = GLOBAL, name = "reindex", limiter = support::limiter())]
async fn reindex() -> Result<(), RateLimitError> {
    Ok(())
}

backend_tests! {
    async fn a_site_named_programmatic_is_counted_as_any_site() {
        for _ in 0..4 {
            let _ = named_programmatic("mallory").await;
        }
        // A programmatic check's key laid out as the site's is still no site's refusal.
        let limiter = support::limiter();
        let rules = [Rule::per_minute(1)];
        for _ in 0..3 {
            limiter.check("custom:eve:programmatic", &rules).await.unwrap();
        }
        until_top(limiter, "programmatic", 10, &[("custom:mallory", 2)]).await;
    }

    async fn the_most_refused_identities_come_first() {
        for (user, calls) in [("mallory", 7), ("trudy", 4), ("alice", 2), ("bob", 3)] {
            for _ in 0..calls {
                let _ = login(user).await;
            }
        }
        // Two of each are admitted.
        until_top(
            support::limiter(),
            "login",
            10,
            &[("custom:mallory", 5), ("custom:trudy", 2), ("custom:bob", 1)],
        )
        .await;
        until_top(support::limiter(), "login", 1, &[("custom:mallory", 5)]).await;
    }

    async fn a_global_site_is_one_identity_and_shadow_refusals_do_not_count() {
        for _ in 0..3 {
            let _ = reindex().await;
            preview("eve").await.unwrap();
        }
        until_top(support::limiter(), "reindex", 10, &[("global", 2)]).await;
        let limiter = support::limiter();
        // Programmatic checks and shadow sites refuse no one.
        let rules = [Rule::per_minute(1)];
        for _ in 0..3 {
            limiter.check("login", &rules).await.unwrap();
        }
        assert_eq!(limiter.most_limited("preview", QUARTER_HOUR, 10).await.unwrap(), []);
        assert_eq!(
            limiter.most_limited("programmatic", QUARTER_HOUR, 10).await.unwrap(),
            []
        );
    }
}

/// Two instances sharing one Redis, each refusing some of one caller's calls: the view is
/// the fleet's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_counted_across_instances() {
    let server = support::RedisServer::start();
    let instance = || support::redis_limiter(&server.url());
    let (a, b) = (support::leak(instance()), support::leak(instance()));
    #[rate_limiter(rules("1/minute"), limit_type = CUSTOM, by = user, name = "fleet", limiter = limiter)]
    async fn fleet(limiter: &'static Limiter, user: &str) -> Result<(), RateLimitError> {
        Ok(())
    }
    for _ in 0..3 {
        let _ = fleet(a, "mallory").await;
        let _ = fleet(b, "mallory").await;
    }
    until_top(a, "fleet", 10, &[("custom:mallory", 5)]).await;
    until_top(b, "fleet", 10, &[("custom:mallory", 5)]).await;
}

/// A flood answered by the deny cache costs Redis no checks, and still counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_of_the_deny_cache_count() {
    let server = support::RedisServer::start();
    let limiter = support::leak(support::redis_limiter(&server.url()).deny_cache(true));
    #[rate_limiter(rules("1/minute"), limit_type = CUSTOM, by = user, name = "cached", limiter = limiter)]
    async fn cached(limiter: &'static Limiter, user: &str) -> Result<(), RateLimitError> {
        Ok(())
    }
    let mut connection = server.connection();
    for _ in 0..10 {
        let _ = cached(limiter, "mallory").await;
    }
    // The admitted call and the first refusal reached Redis; the 8 after were the cache's.
    assert_eq!(support::command_calls(&mut connection, "evalsha"), 2);
    until_top(limiter, "cached", 10, &[("custom:mallory", 9)]).await;
}

/// Admitted checks send nothing but themselves; refusals one flush a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_checks_add_no_round_trip() {
    let server = support::RedisServer::start();
    let limiter = support::leak(support::redis_limiter(&server.url()));
    #[rate_limiter(rules("1/minute"), limit_type = CUSTOM, by = user, name = "quiet", limiter = limiter)]
    async fn quiet(limiter: &'static Limiter, user: &str) -> Result<(), RateLimitError> {
        Ok(())
    }
    let mut connection = server.connection();
    for user in 0..50 {
        quiet(limiter, &user.to_string()).await.unwrap();
    }
    let calls = |connection: &mut redis::Connection| {
        ["evalsha", "eval", "zincrby"].map(|c| support::command_calls(connection, c))
    };
    // One EVALSHA per check (the first also sends EVAL, the server not knowing the
    // script yet), and no other command.
    let [evalsha, eval, zincrby] = calls(&mut connection);
    assert_eq!((evalsha, eval, zincrby), (50, 1, 0));
    for _ in 0..50 {
        quiet(limiter, "0").await.unwrap_err();
    }
    until_top(limiter, "quiet", 10, &[("custom:0", 50)]).await;
    // The refusals of one identity in one minute were sent as one increment per flush.
    let [_, _, zincrby] = calls(&mut connection);
    assert!((1..=3).contains(&zincrby), "{zincrby} increments");
}

/// Past 1,000 refused identities in a minute, the heaviest are kept, exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_keeps_its_heaviest_thousand_identities_a_minute() {
    let server = support::RedisServer::start();
    for limiter in [Limiter::memory(), support::redis_limiter(&server.url())] {
        let limiter = support::leak(limiter);
        #[rate_limiter(rules("1/minute"), limit_type = IP, by = ip, name = "scan", limiter = limiter)]
        async fn scan(limiter: &'static Limiter, ip: String) -> Result<(), RateLimitError> {
            Ok(())
        }
        let started = this_minute();
        // Three heavy hitters first, then 1,200 addresses refused once each.
        for heavy in ["198.51.100.1", "198.51.100.2", "198.51.100.3"] {
            for _ in 0..6 {
                let _ = scan(limiter, heavy.to_owned()).await;
            }
        }
        for n in 0..1_200u32 {
            let ip = format!("10.0.{}.{}", n / 250, n % 250);
            let _ = scan(limiter, ip.clone()).await;
            let _ = scan(limiter, ip).await;
        }
        until_top(
            limiter,
            "scan",
            3,
            &[
                ("ip:198.51.100.1", 5),
                ("ip:198.51.100.2", 5),
                ("ip:198.51.100.3", 5),
            ],
        )
        .await;
        // The heavy hitters' refusals may be sent before the others': wait for those too.
        let all = support::eventually("the refused addresses", SHOWN_WITHIN, || async {
            let all = limiter
                .most_limited("scan", QUARTER_HOUR, 5_000)
                .await
                .map_err(|e| e.to_string())?;
            match all.len() > 900 {
                true => Ok(all),
                false => Err(format!("{} identities kept", all.len())),
            }
        })
        .await;
        // 1,000 a minute: a run across a minute's end has two minutes of them.
        let minutes = this_minute() - started + 1;
        assert!(
            all.len() as u64 <= 1_000 * minutes,
            "{} identities kept",
            all.len()
        );
    }
}

/// The minute (UTC) of now.
fn this_minute() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60
}

/// One `static` limiter shared by parallel tests, as an application shares one.
static SHARED: LazyLock<Limiter> =
    LazyLock::new(|| support::redis_limiter(support::process_server_url()));

#[rate_limiter(rules("1/minute"), limit_type = USER_ID, by = user, limiter = &*SHARED)]
async fn upload(user: u64) -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("1/minute"), limit_type = USER_ID, by = user, limiter = &*SHARED)]
async fn download(user: u64) -> Result<(), RateLimitError> {
    Ok(())
}

#[tokio::test]
async fn a_shared_limiter_counts_each_site_apart_uploads() {
    for _ in 0..3 {
        let _ = upload(7).await;
    }
    until_top(&SHARED, "most_limited::upload", 10, &[("user:7", 2)]).await;
}

#[tokio::test]
async fn a_shared_limiter_counts_each_site_apart_downloads() {
    for _ in 0..4 {
        let _ = download(7).await;
    }
    until_top(&SHARED, "most_limited::download", 10, &[("user:7", 3)]).await;
}
