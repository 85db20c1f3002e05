//! The `#[rate_limiter]` attribute of [`redis-ratelimit`](https://docs.rs/redis-ratelimit).
//! Use it through that crate, which re-exports it together with the runtime it expands to.

#![warn(missing_docs)]

mod args;
mod errors;
mod expand;
mod item;

use proc_macro::TokenStream;

use crate::args::RawArgs;
use crate::errors::Errors;
use crate::item::ItemFn;

/// Rate-limits an `async fn`: before the body runs, every rule of this call site is checked
/// for the caller, atomically, in one round trip to the limiter's backend. When a rule is
/// exceeded the body does not run and the function returns the error.
///
/// ```
/// use redis_ratelimit::{rate_limiter, RateLimitError};
///
/// /// At most 3 codes a minute and 1 every 5 seconds per phone number.
/// #[rate_limiter(rules("3/minute"), prevent_duplicate = true, limit_type = CUSTOM, by = phone)]
/// async fn send_code(phone: &str) -> Result<String, RateLimitError> {
///     Ok(format!("code sent to {phone}"))
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// assert!(send_code("+1 555 0100").await.is_ok());
/// let err = send_code("+1 555 0100").await.unwrap_err();
/// assert!(matches!(err, RateLimitError::Limited { .. }));
/// # }
/// ```
///
/// It goes on an `async fn`: a free function or a method (`&self`, `&mut self`, `self`), with
/// generics, lifetimes, `impl Trait` arguments and where-clauses. The signature, doc comments,
/// other attributes and visibility are kept as written, and the returned future is `Send`
/// whenever the body's is.
///
/// On a trait impl's method under `#[async_trait]`, write it below `#[async_trait]`'s (on
/// the method, as with tracing's `#[instrument]`): the check then runs in the boxed future
/// the method returns, when it is awaited.
///
/// ```
/// use async_trait::async_trait;
/// use redis_ratelimit::{rate_limiter, RateLimitError};
///
/// #[async_trait]
/// trait Codes {
///     async fn send(&self, phone: &str) -> Result<(), RateLimitError>;
/// }
///
/// struct Sms;
///
/// #[async_trait]
/// impl Codes for Sms {
///     #[rate_limiter(rules("1/minute"), limit_type = CUSTOM, by = phone)]
///     async fn send(&self, phone: &str) -> Result<(), RateLimitError> {
///         Ok(())
///     }
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # Sms.send("+1 555 0100").await.unwrap();
/// # assert!(Sms.send("+1 555 0100").await.is_err());
/// # }
/// ```
///
/// A request the application marked exempt
/// ([`RequestContext::with_exempt`](https://docs.rs/redis-ratelimit/*/redis_ratelimit/struct.RequestContext.html#method.with_exempt))
/// skips the check entirely.
///
/// # Arguments
///
/// All are optional, but at least one rule (`rules(...)` or `rules = <expr>`) or
/// `prevent_duplicate = true` is required.
///
/// | argument | meaning | default |
/// |---|---|---|
/// | `rules(...)` | one or more rules, each `rule(count = N, time = T, unit = U)` or a string: `"10/minute"`, `"10/60s"`, `"20 per 2 minutes"`, `"5/second"`, `"1000/day"` | none |
/// | `unit` in `rule` | `MILLISECONDS`, `SECONDS`, `MINUTES`, `HOURS`, `DAYS` (any case) | `SECONDS` |
/// | `calls = bool` in `rule` | the rule counts calls (one per admitted call, whatever its `cost`) rather than units; in a string, the word `calls` after the count: `"60 calls/minute"` | `false` |
/// | `calendar = DAY / MONTH / YEAR` in `rule` | the rule counts everything since the start of the current UTC day, month or year, and is empty again at the next one (instead of `time` and `unit`, which it cannot be given with); in a string: `"2000000 per calendar month"`, `"5000 per calendar day"`, `"1000 per calendar year"`. Combines with `calls = true`. See `Rule::per_calendar` | none |
/// | `prevent_duplicate = bool` | add the duplicate-submission rule | `false` |
/// | `prevent_duplicate_rule = rule(...)` | that rule (only with `prevent_duplicate = true`) | `rule(count = 1, time = 5)` |
/// | `limit_type = IP / USER_ID / GLOBAL / CUSTOM` | whose budget is counted (any case); see [the request context] | `IP` |
/// | `by = <expr>` | the identity: any expression in the function's scope whose value is `Display`, e.g. `by = phone`, `by = self.tenant`, `by = addr.ip()`. Required for `CUSTOM`; for `IP` and `USER_ID` it overrides the request context; not allowed with `GLOBAL` | the request context |
/// | `key = "prefix:"` | key prefix | `"rate_limit:"` |
/// | `message = "..."` | text carried by [`RateLimitError::Limited`] | `"too many requests"` |
/// | `algorithm = SLIDING_LOG / FIXED_WINDOW / SLIDING_WINDOW / TOKEN_BUCKET` | how rules are counted (any case); see [algorithms] | `SLIDING_LOG` |
/// | `on_limit = path` | a `fn(RateLimitError) -> R`, `R` the function's return type, called for a refused call; required when the return type is not a `Result` | none |
/// | `limiter = <expr>` | the limiter to use instead of the global one: an expression giving a `&Limiter` (or anything that derefs to a `Limiter`, such as an `Arc<Limiter>` or a `LazyLock<Limiter>`) | the global limiter |
/// | `crate = path` | path to `redis-ratelimit`, when it is re-exported under another name | `::redis_ratelimit` |
/// | `name = "..."` | the `path` part of the keys, instead of the function's path (see [Keys](#keys)): stable across refactors and compilers, and the way to share one budget between functions on purpose | the function's path |
/// | `cost = <expr>` | how many units of every rule a call uses: any `u64` expression in the function's scope, e.g. `cost = batch.len() as u64`, evaluated once before the body; a call that costs 0 is not checked at all (it uses nothing, needs no identity and is never refused); a literal `0` is a compile error. On `SLIDING_LOG` (one entry per unit) a call costs at most `Algorithm::SLIDING_LOG_MAX_COST` (10,000): a call above it is refused with `RateLimitError::Backend` (`BackendErrorKind::CostTooLarge`), even `fail_open`; meter bytes or tokens with `TOKEN_BUCKET`, `FIXED_WINDOW` or `SLIDING_WINDOW`, which take any cost up to `Rule::MAX_COUNT` | `1` |
/// | `rules = <expr>` | the rules, chosen per call (see [Policies](#policies)): any expression in the function's scope whose value derefs to `[Rule]`, evaluated once before the body; not with `rules(...)` | none |
/// | `charge_if = <expr>` | a `Fn(&R) -> bool`, `R` the function's return type: the call's units are given back when it answers `false` for the call's result | every call is charged |
/// | `settle = <expr>` | a `Fn(&R) -> u64`, `R` the function's return type: the call's actual cost, from its result; the `cost` taken before the body is a reservation, settled to it when the body returns (given back or, past the count, taken as debt; rules counting calls keep their one; with `charge_if`, a call it rejects gives everything back). See `Limiter::settle` | the `cost` stays |
/// | `block_for = "<duration>"` | once a call is refused, every call of that caller at this site is refused for that long | no block |
/// | `block_for = ["1m", "10m", "1h"]` | escalating lock-outs: the nth in a row (each within 24 hours of the end of the previous one) lasts the nth duration; the last repeats | no block |
/// | `wait = "<duration>"` | a call that would be refused waits up to that long for room instead | refused at once |
/// | `concurrency = N` | at most N calls of this caller at this site run at once: a slot, taken with the rules in the same round trip (all or nothing) and released when the body's future completes or is dropped; the call after the Nth is refused (`retry_after` a short hint, `Slot::RETRY_HINT`) or, with `wait`, waits for a slot | no limit |
/// | `lease = "<duration>"` | how long a slot outlives its holder's last renewal (a running call renews it every third of it): the time a crashed process's slots stay taken; needs `concurrency` | `"30s"` |
/// | `warn_at = P` | an integer literal from 1 to 99: when a call takes a rule from below P % of its count to at or above it, the limiter's `on_warning` hook runs once, fleet-wide (decided in the backend), with an `INFO` event and counter `ratelimit_warnings_total` | no warning |
/// | `shadow = bool` | count and report, never refuse | `false` |
/// | `allowance = "<duration>"` | a local allowance living up to that long: a part of the key's budget reserved in one round trip, the calls that follow in this process admitted from it without one, what is left given back (see [allowances]); the bound stays exact | the limiter's (`Limiter::allowance`), none by default |
///
/// Rule strings take the forms `N/unit`, `N/<k><unit>`, `N per unit` and `N per k units`,
/// with units `ms`/`msec(s)`/`millisecond(s)`, `s`/`sec(s)`/`second(s)`,
/// `m`/`min(s)`/`minute(s)`, `h`/`hr(s)`/`hour(s)`, `d`/`day(s)` in any case; the same
/// grammar reads the rules operators store in Redis. Rules are turned into constant data
/// at compile time: nothing is parsed per call.
///
/// A call of `cost = n` uses `n` units of every rule at once, or none: a refused call
/// consumes nothing. A cost above a rule's count can never pass; it is refused with
/// `retry_after: Duration::MAX`.
///
/// # Policies
///
/// `rules = <expr>`, `charge_if`, `block_for`, `wait` and `shadow` are explained, with
/// examples, in the [policies chapter] of the guide. In short: `rules = <expr>` is
/// evaluated once before the body and an empty list runs the call unchecked
/// (`prevent_duplicate = true` still adds its rule, and an operator's override of the site
/// wins over the expression); `charge_if` takes the units before the body and gives them
/// back when it answers `false` for the call's result (it runs after the body, which has
/// taken the function's arguments, so it sees the call only through its result);
/// `block_for` refuses the caller at this site for that long once one of its calls is
/// refused; `wait` sleeps for room when the refusal's `retry_after` fits in what is left
/// of its budget; `shadow = true` counts but never refuses. Durations take the rules'
/// units: `"15 minutes"`, `"900s"`, `"1 hour"`, `"500ms"`. Operators can switch a site
/// between enforcing, shadow and off at run time ([modes]); their choice wins over
/// `shadow`.
///
/// ```
/// use redis_ratelimit::{rate_limiter, RateLimitError};
///
/// #[rate_limiter(rules("5/minute"), limit_type = CUSTOM, by = user, block_for = "15 minutes")]
/// async fn reset_password(user: &str) -> Result<(), RateLimitError> {
///     Ok(())
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// for _ in 0..5 {
///     reset_password("ann").await.unwrap();
/// }
/// assert!(reset_password("ann").await.is_err());
/// # }
/// ```
///
/// # What a refused call returns
///
/// When the identity is missing ([`RateLimitError::MissingIdentity`]), a rule is exceeded
/// ([`RateLimitError::Limited`]) or a fail-closed limiter's backend fails
/// ([`RateLimitError::Backend`]), the function returns `Err(From::from(err))`, so any error
/// type with `From<RateLimitError>` works: `RateLimitError` itself,
/// `Box<dyn Error + Send + Sync>`, `anyhow::Error`, or your own. The return type counts as a
/// `Result` only when it is written `Result<..>` or `path::Result<..>` (`Result<T, E>`,
/// `std::result::Result<T, E>`, `anyhow::Result<T>`, an alias `api::Result<T>` of yours):
/// a type whose name merely ends in `Result` (a `QueryResult` struct, an `ApiResult<T>`
/// alias) is not taken for one. Any other return type needs `on_limit`, whose result is
/// returned instead:
///
/// ```
/// use redis_ratelimit::{rate_limiter, RateLimitError};
///
/// fn busy(err: RateLimitError) -> String {
///     format!("try again later ({err})")
/// }
///
/// #[rate_limiter(rules("1/minute"), limit_type = GLOBAL, on_limit = busy)]
/// async fn greet() -> String {
///     "hello".to_owned()
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// assert_eq!(greet().await, "hello");
/// assert!(greet().await.starts_with("try again later"));
/// # }
/// ```
///
/// # Keys
///
/// Each call is counted under `{prefix}{type}:{identity}:{path}` (`{prefix}global:{path}` for
/// `GLOBAL`), e.g. `rate_limit:ip:203.0.113.9:my_app::handlers::send_code`, where `path` is
/// the function's full path: a method names its impl's self type wherever the impl block
/// stands, and a trait method its trait too, so two functions never share a budget by
/// accident. The [keys chapter] of the guide gives the path of every kind of function and
/// how identities are escaped.
///
/// The path is read from the compiler's type names, whose text Rust does not promise to
/// keep across compiler versions. `name = "..."` replaces it with a path of your own:
/// stable across refactors and toolchains, and the way to share a budget between functions
/// on purpose. A name is one or more segments of ASCII letters, digits, `_`, `.` and `-`,
/// separated by `::` or `/` (`"billing::send_invoice"`, `"api/v2/orders"`): no whitespace,
/// no braces (which would make a Redis Cluster hash tag), no lone `:`. It is also the
/// site's name for operators: its metrics label and the field of its overrides.
///
/// ```
/// use redis_ratelimit::{rate_limiter, RateLimitError};
///
/// /// One budget of 100 units an hour per tenant, shared by both functions.
/// #[rate_limiter(rules("100/hour"), limit_type = CUSTOM, by = tenant, name = "exports")]
/// async fn export_csv(tenant: &str) -> Result<(), RateLimitError> {
///     Ok(())
/// }
///
/// #[rate_limiter(
///     rules("100/hour"),
///     limit_type = CUSTOM,
///     by = tenant,
///     name = "exports",
///     cost = rows.len() as u64,
/// )]
/// async fn export_rows(tenant: &str, rows: Vec<u64>) -> Result<usize, RateLimitError> {
///     Ok(rows.len())
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # export_csv("acme").await.unwrap();
/// # assert_eq!(export_rows("acme", vec![1, 2, 3]).await.unwrap(), 3);
/// # }
/// ```
///
/// Two call sites that still resolve to one path (the same `name`, or two copies of a
/// function made by a macro) but count it with different rules, algorithm, limit type or
/// key prefix are reported by one `tracing` warning, naming both, the first time the
/// second one runs.
///
/// # Errors at compile time
///
/// Misuse is a compile error on the offending token, saying what is allowed, and all errors
/// of one attribute are reported together:
///
/// ```text
/// error: unknown limit_type `PER_IP`; expected one of IP, USER_ID, GLOBAL, CUSTOM
///  --> src/handlers.rs:3:44
///   |
/// 3 | #[rate_limiter(rules("10/minute"), limit_type = PER_IP)]
///   |                                                 ^^^^^^
/// ```
///
/// - the item: a function that is not `async`, is `const` or `extern`, or has no body;
/// - the arguments: an unknown or repeated argument; no rule at all (neither `rules` nor
///   `prevent_duplicate = true`) or an empty `rules()`; `rules = <expr>` together with
///   `rules(...)`; `prevent_duplicate_rule` without `prevent_duplicate = true`; `shadow` or
///   `prevent_duplicate` given anything but the literal `true` or `false`;
/// - the rules: a count or time of 0, a count too large or a window too long to count, a
///   missing `count` or `time`, an unknown unit or `rule` argument, an unparsable rule
///   string;
/// - the identity: an unknown limit type, `by` with `GLOBAL`, `CUSTOM` without `by`;
/// - the rest: an unknown algorithm, an empty or malformed `name`, a literal `cost = 0`, a
///   `block_for`, `wait` or `allowance` that is not a duration string, or is 0, too long
///   or malformed (leave `allowance` out to take the limiter's default); `block_for = []`
///   (an empty list) or a list holding anything but duration strings;
///   a return type that is not a `Result` without `on_limit`.
///
/// Type errors are reported at the user's tokens: an error type without
/// `From<RateLimitError>` at that type; a `cost` that is not a `u64`, a `rules = <expr>`
/// that does not deref to `[Rule]`, a `charge_if` that is not a `Fn(&R) -> bool` for the
/// function's return type, and a `limiter` that is not a `Limiter` at their expressions.
///
/// [`RateLimitError::Limited`]: https://docs.rs/redis-ratelimit/*/redis_ratelimit/enum.RateLimitError.html#variant.Limited
/// [`RateLimitError::MissingIdentity`]: https://docs.rs/redis-ratelimit/*/redis_ratelimit/enum.RateLimitError.html#variant.MissingIdentity
/// [`RateLimitError::Backend`]: https://docs.rs/redis-ratelimit/*/redis_ratelimit/enum.RateLimitError.html#variant.Backend
/// [policies chapter]: https://docs.rs/redis-ratelimit/*/redis_ratelimit/guide/policies/index.html
/// [keys chapter]: https://docs.rs/redis-ratelimit/*/redis_ratelimit/guide/keys/index.html
/// [modes]: https://docs.rs/redis-ratelimit/*/redis_ratelimit/guide/operating/index.html#modes
/// [algorithms]: https://docs.rs/redis-ratelimit/*/redis_ratelimit/guide/algorithms/index.html
/// [allowances]: https://docs.rs/redis-ratelimit/*/redis_ratelimit/guide/allowances/index.html
/// [the request context]: https://docs.rs/redis-ratelimit/*/redis_ratelimit/guide/keys/index.html#the-request-context
#[proc_macro_attribute]
pub fn rate_limiter(args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    match rate_limit(args.into(), item.clone()) {
        Ok(expanded) => expanded.into(),
        // The function is kept as written, so that only the real error shows and IDEs still
        // see it.
        Err(err) => {
            let mut unchanged = item;
            unchanged.extend(err.into_compile_error());
            unchanged.into()
        }
    }
}

fn rate_limit(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> syn::Result<proc_macro2::TokenStream> {
    let item: ItemFn = syn::parse2(item)?;
    let mut errors = Errors::default();
    item.check(&mut errors);
    let returns = item.returns();
    let args = errors.ok(syn::parse2::<RawArgs>(args).and_then(|raw| raw.validate(returns)));
    errors.into_result()?;
    let args = args.expect("no errors, so arguments");
    Ok(expand::expand(&args, &item))
}
