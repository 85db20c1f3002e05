//! End to end: guards on the rate-limit layers, limiting routes without an attribute on
//! their handlers. Apps served by axum (with `ConnectInfo`), by actix-web's `HttpServer`
//! (two workers, each its own runtime) and by tonic on loopback, called by real clients, on
//! a real `redis-server` and on the memory backend. The HTTP scenarios are written once and
//! run against both HTTP servers.

mod support;

#[allow(dead_code)] // the example's `main` and client are not run here
#[path = "../examples/grpc_server.rs"]
mod grpc_server;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_ratelimit::{Guard, LimitType, Limiter, Mode, Rule};
use reqwest::{Client, Response, StatusCode};
use support::http::{assert_refused, client_from, header, Served, GENERIC_500, PROBLEM};

static ONE_A_MINUTE: [Rule; 1] = [Rule::per_minute(1)];
static TWO_A_MINUTE: [Rule; 1] = [Rule::per_minute(2)];
static THREE_A_MINUTE: [Rule; 1] = [Rule::per_minute(3)];
static FOUR_A_MINUTE: [Rule; 1] = [Rule::per_minute(4)];
static FIVE_A_MINUTE: [Rule; 1] = [Rule::per_minute(5)];
static THIRTY_A_MINUTE: [Rule; 1] = [Rule::per_minute(30)];

/// How many requests reached a handler's body.
#[derive(Clone, Default)]
struct Reached(Arc<AtomicUsize>);

impl Reached {
    fn add(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// The guard tests' HTTP app, as one framework serves it: `GET /search`, a plain handler,
/// and `GET /code`, a handler whose attribute allows 2 a minute per client IP (refusing
/// with "too many codes"); both count the requests that reach their body. Its rate-limit
/// layer holds the test's guards, believes `X-Forwarded-For` from 127.0.0.2 alone, and
/// takes the user id from the `x-user-id` header.
trait GuardedApp {
    /// Serves the app with `guards`, counting on `limiter`, on 127.0.0.1, port 0.
    fn serve(limiter: &'static Limiter, guards: Vec<Guard>, reached: Reached) -> Served;
}

/// `GET {path}` with `headers`, through `client`.
async fn get(served: &Served, client: &Client, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut request = client.get(format!("{}{path}", served.base));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("GET")
}

/// Sends `n` requests to `/search`, each admitted and given no RateLimit fields (as when
/// the guard is off, or in shadow mode).
async fn pass_undescribed(served: &Served, client: &Client, n: usize) {
    for _ in 0..n {
        let response = get(served, client, "/search", &[]).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "ratelimit"), None);
    }
}

/// Asserts that `response` is a guard's refusal under `policy`, retried in a minute.
async fn assert_refused_by_guard(response: Response, policy: &str) {
    assert_refused(response, policy, 60, "too many requests").await;
}

/// The app's two handlers, each framework's the same: `search` and `code`, whose argument
/// `$state: $ty` binds `$app`, the app's shared state (its `limiter` and `reached`).
macro_rules! handlers {
    ($state:pat => $app:ident: $ty:ty) => {
        async fn search($state: $ty) -> &'static str {
            $app.reached.add();
            "results\n"
        }

        #[redis_ratelimit::rate_limiter(
                                                                    rules("2/minute"),
                                                                    limit_type = IP,
                                                                    message = "too many codes",
                                                                    limiter = $app.limiter
                                                                )]
        async fn code($state: $ty) -> Result<&'static str, redis_ratelimit::RateLimitError> {
            $app.reached.add();
            Ok("code\n")
        }
    };
}

mod axum_app {
    use axum::extract::{Request, State};
    use axum::routing::get;
    use axum::Router;
    use redis_ratelimit::axum::RateLimitLayer;
    use redis_ratelimit::{Guard, Limiter};

    use super::{GuardedApp, Reached};
    use crate::support::http::{serve_axum, Served};

    #[derive(Clone)]
    struct App {
        limiter: &'static Limiter,
        reached: Reached,
    }

    handlers!(State(app) => app: State<App>);

    /// The layer of the guard tests' app, without guards.
    pub fn layer() -> RateLimitLayer {
        RateLimitLayer::new()
            .trust_proxies(["127.0.0.2"])
            .user_id(|req: &Request| {
                let user = req.headers().get("x-user-id")?;
                user.to_str().ok().map(str::to_owned)
            })
    }

    /// The guard tests' app behind `layer`.
    pub fn app(limiter: &'static Limiter, layer: RateLimitLayer, reached: Reached) -> Router {
        Router::new()
            .route("/search", get(search))
            .route("/code", get(code))
            .with_state(App { limiter, reached })
            .layer(layer)
    }

    pub struct Axum;

    impl GuardedApp for Axum {
        fn serve(limiter: &'static Limiter, guards: Vec<Guard>, reached: Reached) -> Served {
            let layer = guards.into_iter().fold(layer(), RateLimitLayer::guard);
            serve_axum(app(limiter, layer, reached), "127.0.0.1")
        }
    }
}

mod actix_app {
    use actix_web::dev::ServiceRequest;
    use actix_web::{web, App};
    use redis_ratelimit::actix::RateLimit;
    use redis_ratelimit::{Guard, Limiter};

    use super::{GuardedApp, Reached};
    use crate::support::http::{serve_actix, Served};

    struct Shared {
        limiter: &'static Limiter,
        reached: Reached,
    }

    handlers!(app => app: web::Data<Shared>);

    pub struct Actix;

    impl GuardedApp for Actix {
        fn serve(limiter: &'static Limiter, guards: Vec<Guard>, reached: Reached) -> Served {
            let rate_limit =
                RateLimit::new()
                    .trust_proxies(["127.0.0.2"])
                    .user_id(|req: &ServiceRequest| {
                        let user = req.headers().get("x-user-id")?;
                        user.to_str().ok().map(str::to_owned)
                    });
            let rate_limit = guards.into_iter().fold(rate_limit, RateLimit::guard);
            let shared = web::Data::new(Shared { limiter, reached });
            // Two workers, each its own runtime, counting on one limiter.
            serve_actix("127.0.0.1", 2, move || {
                App::new()
                    .app_data(shared.clone())
                    .route("/search", web::get().to(search))
                    .route("/code", web::get().to(code))
                    .wrap(rate_limit.clone())
            })
        }
    }
}

/// The HTTP scenarios, each for any [`GuardedApp`].
mod scenarios {
    use super::*;

    /// Serves `A` with `guards`, counting on the suite's limiter; also returns that
    /// limiter and the count of requests that reached a handler.
    fn serve<A: GuardedApp>(
        guards: impl IntoIterator<Item = Guard>,
    ) -> (&'static Limiter, Served, Reached) {
        let limiter = support::limiter();
        let guards = guards.into_iter().map(|g| g.limiter(limiter)).collect();
        let reached = Reached::default();
        (limiter, A::serve(limiter, guards, reached.clone()), reached)
    }

    pub async fn a_refused_request_never_reaches_the_handler<A: GuardedApp>() {
        let guard = Guard::new("guards::search", &TWO_A_MINUTE);
        let (_, served, reached) = serve::<A>([guard]);
        let client = client_from("127.0.0.1");

        for remaining in [1, 0] {
            let allowed = get(&served, &client, "/search", &[]).await;
            assert_eq!(allowed.status(), StatusCode::OK);
            assert_eq!(
                header(&allowed, "ratelimit-policy"),
                Some(r#""p1";q=2;w=60"#)
            );
            let limit = format!(r#""p1";r={remaining};t=60"#);
            assert_eq!(header(&allowed, "ratelimit"), Some(limit.as_str()));
            assert_eq!(allowed.text().await.unwrap(), "results\n");
        }
        let refused = get(&served, &client, "/search", &[]).await;
        assert_refused_by_guard(refused, r#""p1";q=2;w=60"#).await;
        assert_eq!(reached.count(), 2);

        // Another client IP, another budget.
        let other = get(&served, &client_from("127.0.0.3"), "/search", &[]).await;
        assert_eq!(other.status(), StatusCode::OK);
        assert_eq!(reached.count(), 3);
    }

    pub async fn several_guards_are_one_check_and_a_refusal_consumes_nothing_from_the_others<
        A: GuardedApp,
    >() {
        let per_ip = Guard::new("guards::per_ip", &THREE_A_MINUTE);
        let everyone = Guard::new("guards::everyone", &FOUR_A_MINUTE).limit_type(LimitType::Global);
        let (limiter, served, reached) = serve::<A>([per_ip, everyone]);
        let (a, b) = (client_from("127.0.0.1"), client_from("127.0.0.3"));

        for _ in 0..3 {
            assert_eq!(
                get(&served, &a, "/search", &[]).await.status(),
                StatusCode::OK
            );
        }
        // Refused by the per-IP guard: the global one counts nothing.
        let refused = get(&served, &a, "/search", &[]).await;
        assert_refused_by_guard(refused, r#""p1";q=3;w=60"#).await;
        // So the global budget's last unit is B's; it binds harder than B's per-IP 2 left.
        let last = get(&served, &b, "/search", &[]).await;
        assert_eq!(last.status(), StatusCode::OK);
        assert_eq!(header(&last, "ratelimit-policy"), Some(r#""p1";q=4;w=60"#));
        assert_eq!(header(&last, "ratelimit"), Some(r#""p1";r=0;t=60"#));
        // Refused by the global guard: B's per-IP budget, checked with it as one, keeps
        // its unit (the guards are one check_all).
        let refused = get(&served, &b, "/search", &[]).await;
        assert_refused_by_guard(refused, r#""p1";q=4;w=60"#).await;
        assert_eq!(reached.count(), 4);
        let b_per_ip = limiter
            .peek("rate_limit:ip:127.0.0.3:guards::per_ip", &THREE_A_MINUTE)
            .await
            .unwrap();
        assert_eq!(b_per_ip.remaining, 2);
    }

    pub async fn a_guard_and_an_attribute_on_one_request_describe_the_most_restrictive<
        A: GuardedApp,
    >() {
        let guard = Guard::new("guards::compose", &FIVE_A_MINUTE);
        let (_, served, reached) = serve::<A>([guard]);
        let client = client_from("127.0.0.1");
        let guard_policy = r#""p1";q=5;w=60"#;
        let code_policy = r#""p1";q=2;w=60"#;

        // (path, status, policy, limit) of each request: the guard allows 5, `/code`'s
        // attribute 2; each response describes the decision that binds hardest.
        for (path, status, policy, limit) in [
            ("/code", StatusCode::OK, code_policy, r#""p1";r=1;t=60"#),
            ("/search", StatusCode::OK, guard_policy, r#""p1";r=3;t=60"#),
            ("/code", StatusCode::OK, code_policy, r#""p1";r=0;t=60"#),
            // The guard admits it (1 left); the attribute's refusal binds harder.
            (
                "/code",
                StatusCode::TOO_MANY_REQUESTS,
                code_policy,
                r#""p1";r=0;t=60"#,
            ),
            ("/search", StatusCode::OK, guard_policy, r#""p1";r=0;t=60"#),
        ] {
            let response = get(&served, &client, path, &[]).await;
            assert_eq!(response.status(), status, "{path}");
            assert_eq!(
                header(&response, "ratelimit-policy"),
                Some(policy),
                "{path}"
            );
            assert_eq!(header(&response, "ratelimit"), Some(limit), "{path}");
            if status == StatusCode::TOO_MANY_REQUESTS {
                assert_eq!(header(&response, "retry-after"), Some("60"));
                let body = response.text().await.unwrap();
                assert!(
                    body.contains(r#""detail":"too many codes (the limit of"#),
                    "{body}"
                );
            }
        }
        // Refused by the guard, before the attribute is asked.
        let refused = get(&served, &client, "/code", &[]).await;
        assert_refused_by_guard(refused, guard_policy).await;
        assert_eq!(reached.count(), 4);
    }

    pub async fn a_spoofed_x_forwarded_for_from_an_untrusted_peer_is_ignored<A: GuardedApp>() {
        let guard = Guard::new("guards::spoof", &ONE_A_MINUTE);
        let (_, served, reached) = serve::<A>([guard]);
        let client = client_from("127.0.0.1");

        let first = get(
            &served,
            &client,
            "/search",
            &[("x-forwarded-for", "198.51.100.1")],
        )
        .await;
        assert_eq!(first.status(), StatusCode::OK);
        // 127.0.0.1 is not a trusted proxy: it is the client, whatever it claims.
        for spoof in ["198.51.100.2", "garbage", "198.51.100.3, 127.0.0.2"] {
            let again = get(&served, &client, "/search", &[("x-forwarded-for", spoof)]).await;
            assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS, "{spoof}");
        }
        // From the trusted proxy, the forwarded client is counted, once.
        let proxy = client_from("127.0.0.2");
        let forwarded = [("x-forwarded-for", "198.51.100.1")];
        let first = get(&served, &proxy, "/search", &forwarded).await;
        assert_eq!(first.status(), StatusCode::OK);
        let again = get(&served, &proxy, "/search", &forwarded).await;
        assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(reached.count(), 2);
    }

    pub async fn operators_switch_a_guard_off_or_to_shadow_by_its_name<A: GuardedApp>() {
        let name = "guards::modes";
        let (limiter, served, reached) = serve::<A>([Guard::new(name, &ONE_A_MINUTE)]);
        let client = client_from("127.0.0.1");
        // Known to the limiter from the moment the layer holds it.
        assert_eq!(limiter.rules_in_force(name), ONE_A_MINUTE);
        assert_eq!(limiter.mode_in_force(name), Mode::Enforce);

        assert_eq!(
            get(&served, &client, "/search", &[]).await.status(),
            StatusCode::OK
        );
        let refused = get(&served, &client, "/search", &[]).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);

        // Off: nothing is checked, nothing described.
        limiter.override_mode(name, Mode::Off);
        pass_undescribed(&served, &client, 3).await;
        // Shadow: checked and reported, never refused, nothing described to the client.
        limiter.override_mode(name, Mode::Shadow);
        pass_undescribed(&served, &client, 1).await;
        assert_eq!(reached.count(), 5);

        // Enforcing again: off and shadow consumed nothing, the caller is still over.
        limiter.override_mode(name, Mode::Enforce);
        let refused = get(&served, &client, "/search", &[]).await;
        assert_refused_by_guard(refused, r#""p1";q=1;w=60"#).await;
        limiter.clear_override(name);
        assert_eq!(limiter.mode_in_force(name), Mode::Enforce);
        assert_eq!(reached.count(), 5);
    }

    pub async fn a_shadow_guard_counts_but_never_refuses<A: GuardedApp>() {
        let name = "guards::shadow";
        let guard = Guard::new(name, &ONE_A_MINUTE).shadow(true);
        let (limiter, served, reached) = serve::<A>([guard]);
        let client = client_from("127.0.0.1");
        assert_eq!(limiter.mode_in_force(name), Mode::Shadow);

        pass_undescribed(&served, &client, 3).await;
        assert_eq!(reached.count(), 3);
        // It counted the first request as enforcing would have: enforced, it refuses now.
        limiter.override_mode(name, Mode::Enforce);
        let refused = get(&served, &client, "/search", &[]).await;
        assert_refused_by_guard(refused, r#""p1";q=1;w=60"#).await;
    }

    pub async fn a_user_id_guard_counts_each_user_and_answers_500_without_one<A: GuardedApp>() {
        let guard = Guard::new("guards::per_user", &TWO_A_MINUTE).limit_type(LimitType::UserId);
        let (_, served, reached) = serve::<A>([guard]);
        let client = client_from("127.0.0.1");
        let as_user = |user| [("x-user-id", user)];

        for _ in 0..2 {
            let allowed = get(&served, &client, "/search", &as_user("42")).await;
            assert_eq!(allowed.status(), StatusCode::OK);
        }
        let refused = get(&served, &client, "/search", &as_user("42")).await;
        assert_refused_by_guard(refused, r#""p1";q=2;w=60"#).await;
        // Same address, another user: another budget.
        let other = get(&served, &client, "/search", &as_user("43")).await;
        assert_eq!(other.status(), StatusCode::OK);
        assert_eq!(header(&other, "ratelimit"), Some(r#""p1";r=1;t=60"#));

        let anonymous = get(&served, &client, "/search", &[]).await;
        assert_eq!(anonymous.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(header(&anonymous, "content-type"), Some(PROBLEM));
        assert_eq!(header(&anonymous, "ratelimit"), None);
        assert_eq!(anonymous.text().await.unwrap(), GENERIC_500);
        assert_eq!(reached.count(), 3);
    }

    pub async fn a_guard_with_an_allowance_admits_in_process_and_counts_exactly<A: GuardedApp>() {
        static THOUSAND: [Rule; 1] = [Rule::per_minute(1000)];
        let guard = Guard::new("guards::allowance", &THOUSAND).allowance(Duration::from_secs(5));
        let (limiter, served, reached) = serve::<A>([guard]);
        let client = client_from("127.0.0.1");
        // Only this guard's checks have an allowance (on the embedded backend, none draws).
        let draws = limiter.allowance_draws();
        for _ in 0..100 {
            let response = get(&served, &client, "/search", &[]).await;
            assert_eq!(response.status(), StatusCode::OK);
        }
        let round_trips = limiter.allowance_draws() - draws;
        assert!(
            round_trips <= 5,
            "{round_trips} round trips for 100 requests"
        );
        limiter.release_allowances().await.unwrap();
        // The next answer, the backend's after the release, counts the 100 and itself.
        let response = get(&served, &client, "/search", &[]).await;
        let fields = header(&response, "ratelimit")
            .unwrap_or_default()
            .to_owned();
        assert!(fields.starts_with(r#""p1";r=899;"#), "{fields}");
        assert_eq!(reached.count(), 101);
    }

    pub async fn concurrent_requests_are_counted_exactly<A: GuardedApp>() {
        let guard = Guard::new("guards::concurrent", &THIRTY_A_MINUTE);
        let (_, served, reached) = serve::<A>([guard]);
        // Separate clients: separate connections, spread over the workers.
        let clients: Vec<Client> = (0..8).map(|_| client_from("127.0.0.1")).collect();
        let mut calls = tokio::task::JoinSet::new();
        for n in 0..90 {
            let client = clients[n % clients.len()].clone();
            let url = format!("{}/search", served.base);
            calls.spawn(async move { client.get(url).send().await.expect("GET").status() });
        }
        let (mut ok, mut refused) = (0, 0);
        while let Some(status) = calls.join_next().await {
            match status.unwrap() {
                StatusCode::OK => ok += 1,
                StatusCode::TOO_MANY_REQUESTS => refused += 1,
                other => panic!("unexpected {other}"),
            }
        }
        assert_eq!((ok, refused), (30, 60));
        assert_eq!(reached.count(), 30);
    }
}

/// The HTTP scenarios against the app served by `$app`, on each backend.
macro_rules! guard_tests {
    ($app:ty; $($scenario:ident,)*) => {
        $crate::backend_tests! {
            $(
                async fn $scenario() {
                    $crate::scenarios::$scenario::<$app>().await;
                }
            )*
        }
    };
}

macro_rules! http_guard_tests {
    ($($scenario:ident,)*) => {
        mod axum_server {
            guard_tests!(crate::axum_app::Axum; $($scenario,)*);

            /// A layer whose server records no peer address cannot tell clients apart.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_ip_guard_on_a_server_without_connect_info_answers_a_generic_500() {
                use crate::support::http::{client_from, header, listen_tokio, PROBLEM};
                use redis_ratelimit::{Guard, Limiter};

                let limiter: &'static Limiter = Box::leak(Box::new(Limiter::memory()));
                let guard = Guard::new("guards::no_peer", &crate::ONE_A_MINUTE).limiter(limiter);
                let reached = crate::Reached::default();
                let layer = crate::axum_app::layer().guard(guard);
                let app = crate::axum_app::app(limiter, layer, reached.clone());
                let (listener, base) = listen_tokio("127.0.0.1");
                // Served without `into_make_service_with_connect_info`.
                tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });

                let client = client_from("127.0.0.1");
                let response = client.get(format!("{base}/search")).send().await.unwrap();
                assert_eq!(response.status(), reqwest::StatusCode::INTERNAL_SERVER_ERROR);
                assert_eq!(header(&response, "content-type"), Some(PROBLEM));
                assert_eq!(response.text().await.unwrap(), crate::GENERIC_500);
                assert_eq!(reached.count(), 0);
            }
        }
        mod actix_server {
            guard_tests!(crate::actix_app::Actix; $($scenario,)*);
        }
    };
}

http_guard_tests! {
    a_refused_request_never_reaches_the_handler,
    several_guards_are_one_check_and_a_refusal_consumes_nothing_from_the_others,
    a_guard_and_an_attribute_on_one_request_describe_the_most_restrictive,
    a_spoofed_x_forwarded_for_from_an_untrusted_peer_is_ignored,
    operators_switch_a_guard_off_or_to_shadow_by_its_name,
    a_shadow_guard_counts_but_never_refuses,
    a_user_id_guard_counts_each_user_and_answers_500_without_one,
    concurrent_requests_are_counted_exactly,
    a_guard_with_an_allowance_admits_in_process_and_counts_exactly,
}

/// tonic: a counting `Sms` service (or the example's guarded one) behind the tonic layer.
mod tonic_server {
    use redis_ratelimit::tonic::RateLimitLayer;
    use tonic::transport::server::TcpIncoming;
    use tonic::transport::Server;
    use tonic::{Code, Request, Response, Status};

    use super::*;
    use crate::grpc_server::{send_code, CodeReply, CodeRequest, Sms, SmsServer};
    use crate::support::http::{grpc_channel_from, listen_tokio, metadata_field};

    /// Sends codes, counting the calls that reach it.
    struct CountingSms(Reached);

    #[tonic::async_trait]
    impl Sms for CountingSms {
        async fn send_code(
            &self,
            _request: Request<CodeRequest>,
        ) -> Result<Response<CodeReply>, Status> {
            self.0.add();
            Ok(Response::new(CodeReply {
                message: "code sent".into(),
            }))
        }
    }

    /// Serves `service` behind `layer` on 127.0.0.1, port 0, until the test ends; returns
    /// the base URL.
    fn serve<T: Sms>(layer: RateLimitLayer, service: T) -> String {
        let (listener, base) = listen_tokio("127.0.0.1");
        let incoming = TcpIncoming::from(listener);
        tokio::spawn(async move {
            Server::builder()
                .layer(layer)
                .add_service(SmsServer::new(service))
                .serve_with_incoming(incoming)
                .await
                .expect("serve");
        });
        base
    }

    backend_tests! {
        async fn a_refused_call_never_reaches_the_method() {
            let limiter = support::limiter();
            let guard = Guard::new("guards::grpc", &ONE_A_MINUTE).limiter(limiter);
            let reached = Reached::default();
            let base = serve(RateLimitLayer::new().guard(guard), CountingSms(reached.clone()));
            let channel = grpc_channel_from(&base, "127.0.0.1").await;

            let allowed = send_code(channel.clone(), "+1 555 0100", &[]).await.unwrap();
            let metadata = allowed.metadata();
            assert_eq!(metadata_field(metadata, "ratelimit-policy"), Some(r#""p1";q=1;w=60"#));
            assert_eq!(metadata_field(metadata, "ratelimit"), Some(r#""p1";r=0;t=60"#));

            let refused = send_code(channel, "+1 555 0100", &[]).await.unwrap_err();
            assert_eq!(refused.code(), Code::ResourceExhausted);
            assert_eq!(refused.message(), "too many requests");
            let metadata = refused.metadata();
            assert_eq!(metadata_field(metadata, "retry-after"), Some("60"));
            assert_eq!(metadata_field(metadata, "ratelimit-policy"), Some(r#""p1";q=1;w=60"#));
            assert_eq!(metadata_field(metadata, "ratelimit"), Some(r#""p1";r=0;t=60"#));
            assert_eq!(reached.count(), 1);
        }

        async fn the_guard_and_the_method_s_attribute_compose() {
            let limiter = support::limiter();
            let guard = Guard::new("guards::grpc_compose", &TWO_A_MINUTE).limiter(limiter);
            let service = crate::grpc_server::SmsService { limiter };
            let base = serve(RateLimitLayer::new().guard(guard), service);
            let channel = grpc_channel_from(&base, "127.0.0.1").await;

            // The method's duplicate rule, spent, binds harder than the guard's 1 left.
            let allowed = send_code(channel.clone(), "+1 555 0100", &[]).await.unwrap();
            let ratelimit = metadata_field(allowed.metadata(), "ratelimit");
            assert_eq!(ratelimit, Some(r#""dup";r=0;t=5"#));
            // However the method answers the second call, the guard counted it: the third
            // is refused by the guard, before the method.
            let _ = send_code(channel.clone(), "+1 555 0100", &[]).await;
            let refused = send_code(channel, "+1 555 0100", &[]).await.unwrap_err();
            assert_eq!(refused.code(), Code::ResourceExhausted);
            assert_eq!(refused.message(), "too many requests");
            let policy = metadata_field(refused.metadata(), "ratelimit-policy");
            assert_eq!(policy, Some(r#""p1";q=2;w=60"#));
        }

        async fn a_spoofed_x_forwarded_for_from_an_untrusted_peer_is_ignored() {
            let limiter = support::limiter();
            let guard = Guard::new("guards::grpc_spoof", &ONE_A_MINUTE).limiter(limiter);
            let layer = RateLimitLayer::new().trust_proxies(["127.0.0.2"]).guard(guard);
            let reached = Reached::default();
            let base = serve(layer, CountingSms(reached.clone()));
            let channel = grpc_channel_from(&base, "127.0.0.1").await;

            let forwarded = |ip| [("x-forwarded-for", ip)];
            send_code(channel.clone(), "+1 555 0100", &forwarded("198.51.100.1"))
                .await
                .unwrap();
            for spoof in ["198.51.100.2", "garbage"] {
                let again = send_code(channel.clone(), "+1 555 0100", &forwarded(spoof)).await;
                assert_eq!(again.unwrap_err().code(), Code::ResourceExhausted, "{spoof}");
            }
            // From the trusted proxy, the forwarded client is counted.
            let proxy = grpc_channel_from(&base, "127.0.0.2").await;
            send_code(proxy, "+1 555 0100", &forwarded("198.51.100.1"))
                .await
                .unwrap();
            assert_eq!(reached.count(), 2);
        }
    }
}
