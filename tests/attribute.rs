//! What `#[rate_limiter]` does at run time, argument by argument, on both backends.
//!
//! Every guarded function counts how often its body runs, so each scenario also proves
//! that a refused call never runs the body.

mod support;

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use redis_ratelimit::context::{self, RequestContext};
use redis_ratelimit::{rate_limiter, LimitType, Limiter, RateLimitError, Rule};

const A: &str = "203.0.113.9";
const B: &str = "198.51.100.7";

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn from_ip(text: &str) -> RequestContext {
    RequestContext::new().with_ip(ip(text))
}

fn from_user(id: &str) -> RequestContext {
    RequestContext::new().with_user_id(id)
}

/// What a `Limited` error carries; any other outcome fails the test.
#[derive(Debug)]
struct Limited {
    key: String,
    rule: Rule,
    retry_after: Duration,
    message: &'static str,
}

#[track_caller]
fn limited<T: std::fmt::Debug>(result: Result<T, RateLimitError>) -> Limited {
    match result {
        Err(RateLimitError::Limited {
            key,
            rule,
            retry_after,
            message,
        }) => Limited {
            key,
            rule,
            retry_after,
            message,
        },
        other => panic!("expected a Limited error, got {other:?}"),
    }
}

#[track_caller]
fn missing_identity<T: std::fmt::Debug>(result: Result<T, RateLimitError>) -> LimitType {
    match result {
        Err(RateLimitError::MissingIdentity { limit_type }) => limit_type,
        other => panic!("expected a MissingIdentity error, got {other:?}"),
    }
}

/// A login's error, whose refusals by the limiter are told apart from bad passwords.
#[derive(Debug)]
enum LoginError {
    BadPassword,
    Limited(RateLimitError),
}

impl From<RateLimitError> for LoginError {
    fn from(err: RateLimitError) -> Self {
        LoginError::Limited(err)
    }
}

fn ran(calls: &AtomicUsize) -> usize {
    calls.load(Ordering::SeqCst)
}

/// Guarded functions as the scenarios declare them: on the scenario's limiter, and with
/// `#[counted_in(CALLS)]` adding one to `CALLS` each time the body runs, so that a scenario
/// proves a refused call never runs it. `async fn name(params);` returns `Ok(())`.
macro_rules! guarded {
    () => {};
    (
        #[rate_limiter($($arg:tt)*)]
        $(#[counted_in($calls:ident)])?
        async fn $name:ident($($params:tt)*);
        $($rest:tt)*
    ) => {
        guarded! {
            #[rate_limiter($($arg)*)]
            $(#[counted_in($calls)])?
            async fn $name($($params)*) -> Result<(), RateLimitError> {
                Ok(())
            }
            $($rest)*
        }
    };
    (
        #[rate_limiter($($arg:tt)*)]
        $(#[counted_in($calls:ident)])?
        async fn $name:ident($($params:tt)*) $(-> $ret:ty)? $body:block
        $($rest:tt)*
    ) => {
        #[rate_limiter(limiter = support::limiter(), $($arg)*)]
        async fn $name($($params)*) $(-> $ret)? {
            $($calls.fetch_add(1, Ordering::SeqCst);)?
            $body
        }
        guarded! { $($rest)* }
    };
}

backend_tests! {
    async fn rule_admits_its_count_then_refuses_without_running_the_body() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules(rule(count = 2, time = 60)), limit_type = GLOBAL)]
            #[counted_in(CALLS)]
            async fn guarded(n: u32) -> Result<u32, RateLimitError> {
                Ok(n * 2)
            }
        }

        assert_eq!(guarded(1).await.unwrap(), 2);
        assert_eq!(guarded(2).await.unwrap(), 4);
        let denied = limited(guarded(3).await);
        assert_eq!(denied.rule, Rule::new(2, Duration::from_secs(60)));
        assert!(denied.retry_after <= Duration::from_secs(60), "{denied:?}");
        assert!(denied.retry_after > Duration::from_secs(55), "{denied:?}");
        assert_eq!(denied.message, "too many requests");
        limited(guarded(4).await);
        assert_eq!(ran(&CALLS), 2);
    }

    async fn rule_units_and_rule_strings_give_the_same_rule() {
        guarded! {
            #[rate_limiter(rules(rule(count = 1, time = 2, unit = minutes)), limit_type = GLOBAL)]
            async fn by_call();
            #[rate_limiter(rules("1 per 2 minutes"), limit_type = GLOBAL)]
            async fn by_words();
            #[rate_limiter(rules("1/120s"), limit_type = GLOBAL)]
            async fn by_slash();
            #[rate_limiter(
                rules(rule(count = 1, time = 120000, unit = MILLISECONDS)),
                limit_type = GLOBAL,
            )]
            async fn by_millis();
        }

        let two_minutes = Rule::new(1, Duration::from_secs(120));
        by_call().await.unwrap();
        assert_eq!(limited(by_call().await).rule, two_minutes);
        by_words().await.unwrap();
        assert_eq!(limited(by_words().await).rule, two_minutes);
        by_slash().await.unwrap();
        assert_eq!(limited(by_slash().await).rule, two_minutes);
        by_millis().await.unwrap();
        assert_eq!(limited(by_millis().await).rule, two_minutes);
    }

    async fn a_call_refused_by_one_rule_consumes_nothing_from_the_others() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules("2 per 2 s", rule(count = 3, time = 60)), limit_type = GLOBAL)]
            #[counted_in(CALLS)]
            async fn guarded();
        }

        // Windows of seconds, not milliseconds: a loaded machine may take a while between
        // two calls, and the refusals must land within the short window.
        let short = Rule::new(2, Duration::from_secs(2));
        let long = Rule::new(3, Duration::from_secs(60));
        guarded().await.unwrap();
        guarded().await.unwrap();
        assert_eq!(limited(guarded().await).rule, short);
        assert_eq!(limited(guarded().await).rule, short);
        tokio::time::sleep(Duration::from_millis(2_100)).await;
        // Had the two refused calls counted, the per-minute rule would be exhausted.
        guarded().await.unwrap();
        assert_eq!(limited(guarded().await).rule, long);
        assert_eq!(ran(&CALLS), 3);
    }

    async fn prevent_duplicate_admits_one_call_per_five_seconds_by_default() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(prevent_duplicate = true, limit_type = CUSTOM, by = form)]
            #[counted_in(CALLS)]
            async fn submit(form: &str);
        }

        let before = Instant::now();
        submit("order-1").await.unwrap();
        let denied = limited(submit("order-1").await);
        // The first call was counted at most this long before the refusal.
        let between = before.elapsed();
        assert_eq!(denied.rule, Rule::new(1, Duration::from_secs(5)));
        assert!(denied.retry_after >= Duration::from_secs(5).saturating_sub(between), "{denied:?}");
        assert!(denied.retry_after <= Duration::from_secs(5), "{denied:?}");
        submit("order-2").await.unwrap();
        assert_eq!(ran(&CALLS), 2);
    }

    async fn prevent_duplicate_rule_replaces_the_default_and_adds_to_the_rules() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(
                rules("3/minute"),
                prevent_duplicate = true,
                prevent_duplicate_rule = rule(count = 1, time = 2000, unit = MILLISECONDS),
                limit_type = GLOBAL,
            )]
            #[counted_in(CALLS)]
            async fn submit();
        }

        let duplicate = Rule::new(1, Duration::from_secs(2));
        let pause = Duration::from_millis(2_100);
        submit().await.unwrap();
        assert_eq!(limited(submit().await).rule, duplicate);
        tokio::time::sleep(pause).await;
        submit().await.unwrap();
        tokio::time::sleep(pause).await;
        submit().await.unwrap();
        tokio::time::sleep(pause).await;
        assert_eq!(
            limited(submit().await).rule,
            Rule::new(3, Duration::from_secs(60))
        );
        assert_eq!(ran(&CALLS), 3);
    }

    async fn ip_limits_count_each_client_ip_of_the_request_context_apart() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules("1/minute"), limit_type = IP)]
            #[counted_in(CALLS)]
            async fn guarded();
        }

        context::scope(from_ip(A), guarded()).await.unwrap();
        let denied = limited(context::scope(from_ip(A), guarded()).await);
        let path = format!(
            "{}::ip_limits_count_each_client_ip_of_the_request_context_apart::guarded",
            module_path!()
        );
        assert_eq!(denied.key, format!("rate_limit:ip:{A}:{path}"));
        context::scope(from_ip(B), guarded()).await.unwrap();
        // A user id is no IP: the budget stays the IP's.
        let both = from_ip(A).with_user_id("42");
        limited(context::scope(both, guarded()).await);
        assert_eq!(ran(&CALLS), 2);
    }

    async fn ip_from_by_overrides_the_request_context() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules("1/minute"), limit_type = IP, by = peer)]
            #[counted_in(CALLS)]
            async fn guarded(peer: IpAddr);
        }

        guarded(ip(A)).await.unwrap();
        let denied = limited(context::scope(from_ip(B), guarded(ip(A))).await);
        assert!(denied.key.starts_with(&format!("rate_limit:ip:{A}:")), "{denied:?}");
        guarded(ip(B)).await.unwrap();
        let v6 = ip("2001:db8::1");
        guarded(v6).await.unwrap();
        let denied = limited(guarded(v6).await);
        assert!(denied.key.starts_with("rate_limit:ip:2001%3Adb8%3A%3A1:"), "{denied:?}");
        assert_eq!(ran(&CALLS), 3);
    }

    async fn user_id_limits_count_each_user_apart() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules("1/minute"), limit_type = USER_ID)]
            #[counted_in(CALLS)]
            async fn from_context();
            #[rate_limiter(rules("1/minute"), limit_type = USER_ID, by = user.id)]
            #[counted_in(CALLS)]
            async fn from_by(user: &User);
        }
        struct User {
            id: u64,
        }

        context::scope(from_user("42"), from_context()).await.unwrap();
        let denied = limited(context::scope(from_user("42"), from_context()).await);
        assert!(denied.key.starts_with("rate_limit:user:42:"), "{denied:?}");
        assert!(denied.key.ends_with("::from_context"), "{denied:?}");
        // Another user has a budget of its own, whatever its IP.
        context::scope(from_user("43").with_ip(ip(A)), from_context()).await.unwrap();

        from_by(&User { id: 42 }).await.unwrap();
        let denied = limited(from_by(&User { id: 42 }).await);
        assert!(denied.key.starts_with("rate_limit:user:42:"), "{denied:?}");
        assert!(denied.key.ends_with("::from_by"), "{denied:?}");
        from_by(&User { id: 7 }).await.unwrap();
        assert_eq!(ran(&CALLS), 4);
    }

    async fn custom_limits_count_each_value_of_by_apart() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules("2/minute"), limit_type = CUSTOM, by = phone)]
            #[counted_in(CALLS)]
            async fn send_code(phone: String) -> Result<String, RateLimitError> {
                Ok(format!("code sent to {phone}"))
            }
        }

        let phone = "+1 555:0100".to_owned();
        // The body still owns `phone`: `by` only borrowed it.
        assert_eq!(send_code(phone.clone()).await.unwrap(), "code sent to +1 555:0100");
        send_code(phone.clone()).await.unwrap();
        let denied = limited(context::scope(from_ip(A), send_code(phone)).await);
        let path = format!(
            "{}::custom_limits_count_each_value_of_by_apart::send_code",
            module_path!()
        );
        assert_eq!(denied.key, format!("rate_limit:custom:+1%20555%3A0100:{path}"));
        send_code("+1 555 0199".to_owned()).await.unwrap();
        assert_eq!(ran(&CALLS), 3);
    }

    async fn global_limits_count_every_caller_in_one_budget() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules("2/minute"), limit_type = GLOBAL)]
            #[counted_in(CALLS)]
            async fn status() -> Result<&'static str, RateLimitError> {
                Ok("up")
            }
        }

        context::scope(from_ip(A), status()).await.unwrap();
        context::scope(from_user("42"), status()).await.unwrap();
        let denied = limited(status().await);
        let path = format!(
            "{}::global_limits_count_every_caller_in_one_budget::status",
            module_path!()
        );
        assert_eq!(denied.key, format!("rate_limit:global:{path}"));
        limited(context::scope(from_ip(B), status()).await);
        assert_eq!(ran(&CALLS), 2);
    }

    async fn a_missing_identity_refuses_the_call_without_running_the_body() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules("100/minute"), limit_type = IP)]
            #[counted_in(CALLS)]
            async fn per_ip();
            #[rate_limiter(rules("100/minute"), limit_type = USER_ID)]
            #[counted_in(CALLS)]
            async fn per_user();
        }

        // Outside any request scope.
        assert_eq!(missing_identity(per_ip().await), LimitType::Ip);
        assert_eq!(missing_identity(per_user().await), LimitType::UserId);
        // In a scope that lacks the field the limit type needs.
        assert_eq!(
            missing_identity(context::scope(from_user("42"), per_ip()).await),
            LimitType::Ip
        );
        assert_eq!(
            missing_identity(context::scope(from_ip(A), per_user()).await),
            LimitType::UserId
        );
        assert_eq!(
            missing_identity(context::scope(RequestContext::new(), per_ip()).await),
            LimitType::Ip
        );
        assert_eq!(ran(&CALLS), 0);
        // And it was refused before reaching the limiter: the budget is untouched.
        context::scope(from_ip(A), per_ip()).await.unwrap();
        assert_eq!(ran(&CALLS), 1);
    }

    async fn key_sets_the_prefix_of_the_exact_key() {
        guarded! {
            #[rate_limiter(rules("1/minute"), key = "myprefix:")]
            async fn guarded();
        }

        context::scope(from_ip(A), guarded()).await.unwrap();
        let denied = limited(context::scope(from_ip(A), guarded()).await);
        let path = format!("{}::key_sets_the_prefix_of_the_exact_key::guarded", module_path!());
        assert_eq!(denied.key, format!("myprefix:ip:{A}:{path}"));
        // And the budget lives under that key in the limiter.
        support::limiter().reset(&denied.key).await.unwrap();
        context::scope(from_ip(A), guarded()).await.unwrap();
    }

    async fn message_is_carried_by_the_error() {
        guarded! {
            #[rate_limiter(rules("1/minute"), limit_type = GLOBAL, message = "one export a minute")]
            async fn export();
        }

        export().await.unwrap();
        let err = export().await.unwrap_err();
        assert!(err.to_string().starts_with("one export a minute: "), "{err}");
        assert_eq!(limited(Err::<(), _>(err)).message, "one export a minute");
    }

    async fn on_limit_gives_the_value_of_a_refused_call() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        fn busy(err: RateLimitError) -> String {
            match err {
                RateLimitError::Limited { rule, .. } => format!("busy ({rule})"),
                other => format!("unexpected: {other}"),
            }
        }
        guarded! {
            #[rate_limiter(rules("1/minute"), limit_type = GLOBAL, on_limit = busy)]
            #[counted_in(CALLS)]
            async fn greet(name: &str) -> String {
                format!("hello {name}")
            }
        }
        static MISSING: AtomicUsize = AtomicUsize::new(0);
        fn count_missing(err: RateLimitError) {
            if let RateLimitError::MissingIdentity { .. } = err {
                MISSING.fetch_add(1, Ordering::SeqCst);
            }
        }
        guarded! {
            #[rate_limiter(rules("1/minute"), limit_type = IP, on_limit = count_missing)]
            #[counted_in(CALLS)]
            async fn ping() {
            }
        }

        assert_eq!(greet("ann").await, "hello ann");
        assert_eq!(greet("bob").await, "busy (1 per 60s)");
        ping().await; // no identity: refused through on_limit
        assert_eq!(ran(&MISSING), 1);
        assert_eq!(ran(&CALLS), 1);
    }

    async fn limiter_selects_where_calls_are_counted() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules("1/minute"), limit_type = GLOBAL)]
            #[counted_in(CALLS)]
            async fn guarded();
        }

        guarded().await.unwrap();
        let key = limited(guarded().await).key;
        support::limiter().reset(&key).await.unwrap();
        guarded().await.unwrap();
        assert_eq!(ran(&CALLS), 2);
    }

    async fn error_types_with_from_rate_limit_error_receive_the_error() {
        #[derive(Debug)]
        enum ApiError {
            RateLimited(RateLimitError),
        }
        impl From<RateLimitError> for ApiError {
            fn from(err: RateLimitError) -> Self {
                ApiError::RateLimited(err)
            }
        }
        guarded! {
            #[rate_limiter(rules("1/minute"), limit_type = GLOBAL)]
            async fn custom() -> Result<u8, ApiError> {
                Ok(1)
            }
        }
        type BoxError = Box<dyn std::error::Error + Send + Sync>;
        guarded! {
            #[rate_limiter(rules("1/minute"), limit_type = GLOBAL)]
            async fn boxed() -> Result<u8, BoxError> {
                Ok(2)
            }
        }

        assert_eq!(custom().await.unwrap(), 1);
        let ApiError::RateLimited(err) = custom().await.unwrap_err();
        assert!(err.to_string().contains("::custom"), "{err}");
        limited(Err::<(), _>(err));
        assert_eq!(boxed().await.unwrap(), 2);
        let err = boxed().await.unwrap_err();
        let err = *err.downcast::<RateLimitError>().expect("a RateLimitError inside");
        limited(Err::<(), _>(err));
    }

    async fn methods_are_counted_under_their_impl_type() {
        struct Mailer {
            tenant: &'static str,
            sent: AtomicUsize,
        }
        impl Mailer {
            guarded! {
                #[rate_limiter(rules("1/minute"), limit_type = CUSTOM, by = self.tenant)]
                async fn send(&self, to: &str) -> Result<String, RateLimitError> {
                    self.sent.fetch_add(1, Ordering::SeqCst);
                    Ok(format!("{} -> {to}", self.tenant))
                }
                #[rate_limiter(rules("1/minute"), limit_type = GLOBAL)]
                async fn reconfigure(&mut self, tenant: &'static str) -> Result<(), RateLimitError> {
                    self.tenant = tenant;
                    Ok(())
                }
            }
        }

        let mut mailer = Mailer { tenant: "acme", sent: AtomicUsize::new(0) };
        assert_eq!(mailer.send("ann").await.unwrap(), "acme -> ann");
        let denied = limited(mailer.send("bob").await);
        let path = format!(
            "{}::methods_are_counted_under_their_impl_type::Mailer::send",
            module_path!()
        );
        assert_eq!(denied.key, format!("rate_limit:custom:acme:{path}"));
        mailer.reconfigure("initech").await.unwrap();
        let denied = limited(mailer.reconfigure("globex").await);
        assert!(denied.key.ends_with("::Mailer::reconfigure"), "{denied:?}");
        assert_eq!(mailer.tenant, "initech");
        mailer.send("bob").await.unwrap();
        assert_eq!(mailer.sent.load(Ordering::SeqCst), 2);
    }

    async fn guarded_futures_are_send_and_run_on_spawned_tasks() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        // Spawned tasks do not see the scenario's task-local limiter; `limiter` takes any
        // expression.
        static LIMITER: OnceLock<&'static Limiter> = OnceLock::new();
        LIMITER.set(support::limiter()).unwrap();
        #[rate_limiter(
            rules("3/minute"),
            limit_type = CUSTOM,
            by = job,
            limiter = LIMITER.get().unwrap()
        )]
        async fn work(job: u32) -> Result<u32, RateLimitError> {
            CALLS.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            Ok(job)
        }

        let tasks: Vec<_> = (0..5).map(|_| tokio::spawn(work(7))).collect();
        let mut passed = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(7) => passed += 1,
                other => {
                    limited(other);
                }
            }
        }
        assert_eq!(passed, 3);
        assert_eq!(ran(&CALLS), 3);
    }

    async fn algorithm_selects_how_rules_are_counted() {
        guarded! {
            #[rate_limiter(rules("2 per 4 s"), algorithm = TOKEN_BUCKET, limit_type = GLOBAL)]
            async fn bucket();
            #[rate_limiter(rules("2 per 4 s"), limit_type = GLOBAL)]
            async fn log();
        }

        for _ in 0..2 {
            bucket().await.unwrap();
            log().await.unwrap();
        }
        limited(bucket().await);
        limited(log().await);
        // A token bucket refills one call every 4 s / 2; the sliding log frees nothing
        // until the first call is 4 s old.
        tokio::time::sleep(Duration::from_millis(2_200)).await;
        bucket().await.unwrap();
        limited(log().await);
    }

    async fn cost_uses_that_many_units_and_a_denial_consumes_nothing() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(
                rules("5/minute"),
                limit_type = CUSTOM,
                by = tenant,
                cost = batch.len() as u64,
            )]
            #[counted_in(CALLS)]
            async fn upload(tenant: &str, batch: Vec<u8>) -> Result<usize, RateLimitError> {
                Ok(batch.len())
            }
        }

        assert_eq!(upload("acme", vec![1, 2]).await.unwrap(), 2);
        assert_eq!(upload("acme", vec![3, 4]).await.unwrap(), 2);
        // One unit is left: a batch of two is refused and uses none of it.
        let denied = limited(upload("acme", vec![5, 6]).await);
        assert_eq!(denied.rule, Rule::new(5, Duration::from_secs(60)));
        assert!(denied.retry_after <= Duration::from_secs(60), "{denied:?}");
        assert_eq!(upload("acme", vec![7]).await.unwrap(), 1);
        limited(upload("acme", vec![8]).await);
        // Another tenant's budget is its own.
        assert_eq!(upload("initech", vec![0; 5]).await.unwrap(), 5);
        assert_eq!(ran(&CALLS), 4);
    }

    async fn a_cost_of_zero_at_run_time_runs_the_call_unchecked() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules("1/minute"), limit_type = IP, cost = n)]
            #[counted_in(CALLS)]
            async fn guarded(n: u64);
        }

        // Not checked at all: not even the missing client IP refuses it.
        guarded(0).await.unwrap();
        context::scope(from_ip(A), guarded(0)).await.unwrap();
        context::scope(from_ip(A), guarded(0)).await.unwrap();
        // And it used nothing.
        context::scope(from_ip(A), guarded(1)).await.unwrap();
        limited(context::scope(from_ip(A), guarded(1)).await);
        assert_eq!(missing_identity(guarded(1).await), LimitType::Ip);
        assert_eq!(ran(&CALLS), 4);
    }

    async fn a_cost_above_a_rule_s_count_can_never_pass() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules("3/minute", "10/hour"), limit_type = GLOBAL, cost = n)]
            #[counted_in(CALLS)]
            async fn guarded(n: u64);
        }

        let denied = limited(guarded(4).await);
        assert_eq!(denied.rule, Rule::new(3, Duration::from_secs(60)));
        assert_eq!(denied.retry_after, Duration::MAX);
        let err = guarded(4).await.unwrap_err();
        assert!(err.to_string().contains("can never pass"), "{err}");
        // It consumed nothing: the whole count is still there.
        guarded(3).await.unwrap();
        assert_eq!(ran(&CALLS), 1);
    }

    async fn rules_per_call_give_each_caller_the_rules_of_its_plan() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        static FREE: [Rule; 1] = [Rule::per_minute(1)];
        static PRO: [Rule; 1] = [Rule::per_minute(3)];
        fn plan(pro: bool) -> &'static [Rule] {
            if pro {
                &PRO
            } else {
                &FREE
            }
        }
        guarded! {
            #[rate_limiter(rules = plan(pro), limit_type = CUSTOM, by = user)]
            #[counted_in(CALLS)]
            async fn search(user: &str, pro: bool);
        }

        search("free", false).await.unwrap();
        assert_eq!(limited(search("free", false).await).rule, FREE[0]);
        for _ in 0..3 {
            search("pro", true).await.unwrap();
        }
        assert_eq!(limited(search("pro", true).await).rule, PRO[0]);
        assert_eq!(ran(&CALLS), 4);
    }

    async fn rules_per_call_keep_the_duplicate_rule_and_an_empty_list_is_unlimited() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules = rules.clone(), prevent_duplicate = true, limit_type = GLOBAL)]
            #[counted_in(CALLS)]
            async fn submit(rules: Vec<Rule>);
            #[rate_limiter(rules = Vec::new(), limit_type = GLOBAL)]
            #[counted_in(CALLS)]
            async fn unlimited();
        }

        submit(vec![Rule::per_minute(10)]).await.unwrap();
        let denied = limited(submit(vec![Rule::per_minute(10)]).await);
        assert_eq!(denied.rule, Rule::new(1, Duration::from_secs(5)));
        for _ in 0..5 {
            unlimited().await.unwrap();
        }
        assert_eq!(ran(&CALLS), 6);
    }

    async fn charge_if_gives_back_the_units_of_the_calls_it_does_not_charge() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(
                rules("2/minute"),
                limit_type = CUSTOM,
                by = user,
                charge_if = |r: &Result<(), LoginError>| matches!(r, Err(LoginError::BadPassword)),
            )]
            #[counted_in(CALLS)]
            async fn login(user: &str, password: &str) -> Result<(), LoginError> {
                if password != "secret" {
                    return Err(LoginError::BadPassword);
                }
                Ok(())
            }
        }

        for _ in 0..5 {
            login("ann", "secret").await.unwrap();
        }
        for _ in 0..2 {
            assert!(matches!(login("ann", "guess").await, Err(LoginError::BadPassword)));
        }
        for password in ["guess", "secret"] {
            let Err(LoginError::Limited(err)) = login("ann", password).await else {
                panic!("expected the third failure to lock the user out");
            };
            limited(Err::<(), _>(err));
        }
        assert_eq!(ran(&CALLS), 7);
    }

    async fn charge_if_gives_back_the_units_under_every_algorithm() {
        guarded! {
            #[rate_limiter(rules("2/minute"), limit_type = GLOBAL, algorithm = FIXED_WINDOW,
                           charge_if = Result::is_err)]
            async fn fixed(fail: bool) -> Result<(), LoginError> {
                if fail { Err(LoginError::BadPassword) } else { Ok(()) }
            }
            #[rate_limiter(rules("2/minute"), limit_type = GLOBAL, algorithm = SLIDING_WINDOW,
                           charge_if = Result::is_err)]
            async fn sliding(fail: bool) -> Result<(), LoginError> {
                if fail { Err(LoginError::BadPassword) } else { Ok(()) }
            }
            #[rate_limiter(rules("2/minute"), limit_type = GLOBAL, algorithm = TOKEN_BUCKET,
                           charge_if = Result::is_err)]
            async fn bucket(fail: bool) -> Result<(), LoginError> {
                if fail { Err(LoginError::BadPassword) } else { Ok(()) }
            }
        }

        macro_rules! uncharged_then_charged {
            ($guarded:ident) => {
                // Successes are given back: they never use up the rule.
                for _ in 0..4 {
                    $guarded(false).await.unwrap();
                }
                for _ in 0..2 {
                    assert!(matches!($guarded(true).await, Err(LoginError::BadPassword)));
                }
                let Err(LoginError::Limited(err)) = $guarded(false).await else {
                    panic!("expected two charged failures to use up the rule");
                };
                limited(Err::<(), _>(err));
            };
        }
        uncharged_then_charged!(fixed);
        uncharged_then_charged!(sliding);
        uncharged_then_charged!(bucket);
    }

    async fn charge_if_takes_the_units_before_the_body_so_concurrent_failures_stay_within_the_rule() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        // Spawned tasks do not see the scenario's task-local limiter.
        static LIMITER: OnceLock<&'static Limiter> = OnceLock::new();
        LIMITER.set(support::limiter()).unwrap();
        #[rate_limiter(
            rules("3/minute"),
            limit_type = GLOBAL,
            charge_if = Result::is_err,
            limiter = LIMITER.get().unwrap(),
        )]
        async fn login() -> Result<(), LoginError> {
            CALLS.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            Err(LoginError::BadPassword)
        }

        let tasks: Vec<_> = (0..20).map(|_| tokio::spawn(login())).collect();
        let mut refused = 0;
        for task in tasks {
            match task.await.unwrap() {
                Err(LoginError::BadPassword) => {}
                Err(LoginError::Limited(_)) => refused += 1,
                Ok(()) => panic!("a failing login succeeded"),
            }
        }
        assert_eq!(refused, 17);
        assert_eq!(ran(&CALLS), 3);
    }

    async fn block_for_refuses_the_caller_for_the_block_after_a_refusal() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(
                rules("1 per 200 ms"),
                limit_type = CUSTOM,
                by = user,
                block_for = "1 hour",
            )]
            #[counted_in(CALLS)]
            async fn reset_password(user: &str);
        }

        reset_password("ann").await.unwrap();
        limited(reset_password("ann").await);
        // Long after the rule's window, the block still refuses, for the block's time.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let blocked = limited(reset_password("ann").await);
        assert!(blocked.retry_after > Duration::from_secs(3000), "{blocked:?}");
        // Another caller is not blocked.
        reset_password("bob").await.unwrap();
        assert_eq!(ran(&CALLS), 2);
    }

    async fn block_for_a_list_locks_a_repeat_offender_out_for_longer() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(
                rules("1 per 100 ms"),
                limit_type = CUSTOM,
                by = user,
                block_for = ["200ms", "1 hour"],
            )]
            #[counted_in(CALLS)]
            async fn sign_in(user: &str);
        }

        sign_in("ann").await.unwrap();
        let first = limited(sign_in("ann").await);
        assert!(first.retry_after <= Duration::from_millis(200), "{first:?}");
        // Past the first lock-out and the rule's window.
        tokio::time::sleep(Duration::from_millis(300)).await;
        sign_in("ann").await.unwrap();
        let second = limited(sign_in("ann").await);
        assert!(second.retry_after > Duration::from_secs(3000), "{second:?}");
        assert_eq!(ran(&CALLS), 2);
    }

    async fn wait_admits_calls_in_turn_instead_of_refusing_them() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules("1 per 300 ms"), limit_type = GLOBAL, wait = "5s")]
            #[counted_in(CALLS)]
            async fn call_partner();
            #[rate_limiter(rules("1 per 1 minute"), limit_type = GLOBAL, wait = "1s")]
            async fn too_far();
        }

        for _ in 0..3 {
            call_partner().await.unwrap();
        }
        assert_eq!(ran(&CALLS), 3);
        // A refusal whose retry_after does not fit in the wait is refused at once.
        too_far().await.unwrap();
        limited(too_far().await);
    }

    async fn shadow_counts_but_never_refuses() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        guarded! {
            #[rate_limiter(rules("1/minute"), limit_type = GLOBAL, name = "shadowed", shadow = true)]
            #[counted_in(CALLS)]
            async fn export();
            #[rate_limiter(rules("1/minute"), limit_type = GLOBAL, name = "shadowed")]
            async fn enforced();
        }

        for _ in 0..3 {
            export().await.unwrap();
        }
        assert_eq!(ran(&CALLS), 3);
        // It counted: the enforcing site sharing its key finds the budget used.
        limited(enforced().await);
    }
}
