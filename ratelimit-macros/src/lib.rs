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
/// | `calendar = DAY / MONTH` in `rule` | the rule counts everything since the start of the current UTC day or month, and is empty again at the next one (instead of `time` and `unit`, which it cannot be given with); in a string: `"2000000 per calendar month"`, `"5000 per calendar day"`. Combines with `calls = true`. See `Rule::per_calendar` | none |
/// | `prevent_duplicate = bool` | add the duplicate-submission rule | `false` |
/// | `prevent_duplicate_rule = rule(...)` | that rule (only with `prevent_duplicate = true`) | `rule(count = 1, time = 5)` |
/// | `limit_type = IP / USER_ID / GLOBAL / CUSTOM` | whose budget is counted (any case) | `IP` |
/// | `by = <expr>` | the identity: any expression in the function's scope whose value is `Display`, e.g. `by = phone`, `by = self.tenant`, `by = addr.ip()`. Required for `CUSTOM`; for `IP` and `USER_ID` it overrides the request context; not allowed with `GLOBAL` | the request context |
/// | `key = "prefix:"` | key prefix | `"rate_limit:"` |
/// | `message = "..."` | text carried by [`RateLimitError::Limited`] | `"too many requests"` |
/// | `algorithm = SLIDING_LOG / FIXED_WINDOW / SLIDING_WINDOW / TOKEN_BUCKET` | how rules are counted (any case) | `SLIDING_LOG` |
/// | `on_limit = path` | a `fn(RateLimitError) -> R`, `R` the function's return type, called for a refused call; required when the return type is not a `Result` | none |
/// | `limiter = <expr>` | the limiter to use instead of the global one: an expression giving a `&Limiter` (or anything that derefs to a `Limiter`, such as an `Arc<Limiter>` or a `LazyLock<Limiter>`) | the global limiter |
/// | `crate = path` | path to `redis-ratelimit`, when it is re-exported under another name | `::redis_ratelimit` |
/// | `name = "..."` | the `path` part of the keys, instead of the function's path (see [Keys](#keys)): stable across refactors and compilers, and the way to share one budget between functions on purpose | the function's path |
/// | `cost = <expr>` | how many units of every rule a call uses: any `u64` expression in the function's scope, e.g. `cost = batch.len() as u64`, evaluated once before the body; a call that costs 0 is not checked at all (it uses nothing, needs no identity and is never refused); a literal `0` is a compile error | `1` |
/// | `rules = <expr>` | the rules, chosen per call (see [Policies](#policies)): any expression in the function's scope whose value derefs to `[Rule]`, evaluated once before the body; not with `rules(...)` | none |
/// | `charge_if = <expr>` | a `Fn(&R) -> bool`, `R` the function's return type: the call's units are given back when it answers `false` for the call's result | every call is charged |
/// | `settle = <expr>` | a `Fn(&R) -> u64`, `R` the function's return type: the call's actual cost, from its result; the `cost` taken before the body is a reservation, settled to it when the body returns (given back or, past the count, taken as debt; rules counting calls keep their one; with `charge_if`, a call it rejects gives everything back). See `Limiter::settle` | the `cost` stays |
/// | `block_for = "<duration>"` | once a call is refused, every call of that caller at this site is refused for that long | no block |
/// | `wait = "<duration>"` | a call that would be refused waits up to that long for room instead | refused at once |
/// | `shadow = bool` | count and report, never refuse | `false` |
///
/// Rule strings take the forms `N/unit`, `N/<k><unit>`, `N per unit` and `N per k units`,
/// with units `ms`/`millisecond(s)`, `s`/`sec(s)`/`second(s)`, `m`/`min(s)`/`minute(s)`,
/// `h`/`hour(s)`, `d`/`day(s)` in any case. Rules are turned into constant data at compile
/// time: nothing is parsed per call.
///
/// A call of `cost = n` uses `n` units of every rule at once, or none: a refused call
/// consumes nothing. A cost above a rule's count can never pass; it is refused with
/// `retry_after: Duration::MAX`.
///
/// # Policies
///
/// `rules = <expr>` chooses the rules per call, e.g. by the caller's plan. The expression
/// is evaluated once, before the body, and may give anything that derefs to `[Rule]`: a
/// `&'static [Rule]`, a `&Vec<Rule>`, a `Vec<Rule>`, an `Arc<[Rule]>`. An empty list runs
/// the call unchecked. `prevent_duplicate = true` still adds its rule, and an operator's
/// override of the site's rules wins over the expression.
///
/// ```
/// use redis_ratelimit::{rate_limiter, RateLimitError, Rule};
///
/// static FREE: [Rule; 1] = [Rule::per_minute(2)];
/// static PRO: [Rule; 1] = [Rule::per_minute(100)];
///
/// struct User {
///     id: u64,
///     pro: bool,
/// }
///
/// fn plan_rules(user: &User) -> &'static [Rule] {
///     if user.pro { &PRO } else { &FREE }
/// }
///
/// #[rate_limiter(rules = plan_rules(user), limit_type = USER_ID, by = user.id)]
/// async fn search(user: &User) -> Result<(), RateLimitError> {
///     Ok(())
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let (free, pro) = (User { id: 1, pro: false }, User { id: 2, pro: true });
/// for _ in 0..2 {
///     search(&free).await.unwrap();
///     search(&pro).await.unwrap();
/// }
/// assert!(search(&free).await.is_err());
/// assert!(search(&pro).await.is_ok());
/// # }
/// ```
///
/// `charge_if = <expr>` counts only the calls it says to count: a function or closure
/// `Fn(&R) -> bool`, `R` being the function's return type (`Result::is_err`,
/// `|r: &Result<Session, LoginError>| matches!(r, Err(LoginError::BadPassword))`). The
/// call's units are taken before the body runs, so that concurrent calls never exceed a
/// rule; when the body returns (by its end, a `return` or a `?`) and `charge_if` answers
/// `false`, exactly those units are given back. A refund that cannot reach the backend
/// leaves them used, and a call whose future is dropped before the body returns keeps them.
/// The expression is evaluated after the body, which has taken the function's arguments:
/// it sees the call only through the result it is given.
///
/// ```
/// use redis_ratelimit::{rate_limiter, RateLimitError};
///
/// #[derive(Debug)]
/// enum LoginError {
///     BadPassword,
///     Limited(RateLimitError),
/// }
///
/// impl From<RateLimitError> for LoginError {
///     fn from(err: RateLimitError) -> Self {
///         LoginError::Limited(err)
///     }
/// }
///
/// /// Three failed logins a minute per user; successful ones are not counted.
/// #[rate_limiter(
///     rules("3/minute"),
///     limit_type = CUSTOM,
///     by = user,
///     charge_if = |r: &Result<(), LoginError>| matches!(r, Err(LoginError::BadPassword)),
/// )]
/// async fn login(user: &str, password: &str) -> Result<(), LoginError> {
///     if password != "secret" {
///         return Err(LoginError::BadPassword);
///     }
///     Ok(())
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// for _ in 0..5 {
///     login("ann", "secret").await.unwrap();
/// }
/// for _ in 0..3 {
///     assert!(matches!(login("ann", "guess").await, Err(LoginError::BadPassword)));
/// }
/// assert!(matches!(login("ann", "secret").await, Err(LoginError::Limited(_))));
/// # }
/// ```
///
/// `block_for = "<duration>"` locks a caller out of the site once one of its calls is
/// refused: every call of that caller is then refused until the refusal's time plus the
/// duration, with `retry_after` the block's remaining time; blocked calls consume nothing,
/// and `Limiter::reset` of the key lifts the block. `wait = "<duration>"` makes a call that
/// would be refused wait for room, when the refusal's `retry_after` fits in what is left of
/// that time (plus a little jitter), and check again; it is refused once the time is spent,
/// and at once when it could never pass. Durations take the rules' units: `"15 minutes"`,
/// `"900s"`, `"1 hour"`, `"500ms"`; a duration of 0 or a malformed one is a compile error.
///
/// `shadow = true` counts the calls exactly as enforcing would, but never refuses one: a
/// would-be refusal is reported (metrics outcome `shadow_limited` and a throttled `info`
/// event) and the body runs. It is the way to roll a limit out; operators can switch a
/// site between enforcing, shadow and off at run time, and their choice wins over the
/// attribute's.
///
/// ```
/// use redis_ratelimit::{rate_limiter, RateLimitError};
///
/// #[rate_limiter(rules("1/minute"), limit_type = GLOBAL, shadow = true)]
/// async fn export() -> Result<(), RateLimitError> {
///     Ok(())
/// }
///
/// #[rate_limiter(rules("2/second"), limit_type = GLOBAL, wait = "2s")]
/// async fn call_partner_api() -> Result<(), RateLimitError> {
///     Ok(())
/// }
///
/// #[rate_limiter(rules("5/minute"), limit_type = CUSTOM, by = user, block_for = "15 minutes")]
/// async fn reset_password(user: &str) -> Result<(), RateLimitError> {
///     Ok(())
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// for _ in 0..3 {
///     export().await.unwrap(); // over the limit from the second call on, never refused
/// }
/// for _ in 0..3 {
///     call_partner_api().await.unwrap(); // the third waits for room
/// }
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
/// `GLOBAL`), where `path` is the function's full path, so that two functions never share a
/// budget by accident:
///
/// | function | `path` |
/// |---|---|
/// | `async fn send_code` in module `my_app::handlers` | `my_app::handlers::send_code` |
/// | a method of `impl Svc` (or `impl models::Svc` in any other module) | `my_app::models::Svc::send` |
/// | a method of `impl<T> Gen<T>`, for every `T` | `my_app::models::Gen::get` |
/// | a method of `impl A for Svc` | `<my_app::models::Svc as my_app::A>::go` |
/// | a method of `impl A for Gen<u8>` | `<my_app::models::Gen<u8> as my_app::A>::go` |
/// | a method of the blanket `impl<T: Marked> Audit for T`, for every `T` | `<_ as my_app::Audit>::audit` |
///
/// A method names its impl's self type wherever the impl block stands, and a trait method
/// its trait too: `<Svc as A>::go`, `<Svc as B>::go` and `Svc::go` count apart. The
/// impl's own generic parameters are dropped, so every instantiation of a generic function
/// shares one budget; type arguments the impl writes out (`Gen<u8>`) are kept. For example
/// `rate_limit:ip:203.0.113.9:my_app::handlers::send_code`.
///
/// The path is read from the compiler's type names, whose text Rust does not promise to
/// keep across compiler versions. `name = "..."` replaces it with a path of your own:
/// stable across refactors and toolchains, and the way to share a budget between functions
/// on purpose. A name is one or more segments of ASCII letters, digits, `_`, `.` and `-`,
/// separated by `::` or `/` (`"billing::send_invoice"`, `"api/v2/orders"`): no whitespace,
/// no braces (which would make a Redis Cluster hash tag), no lone `:`.
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
/// of one attribute are reported together: a function that is not `async` (or is `const` or
/// `extern`), an unknown or repeated argument, a count or time of 0, a window too long to
/// count, an unknown unit, limit type or algorithm, an unparsable rule string, `by` with
/// `GLOBAL`, `CUSTOM` without `by`, `prevent_duplicate_rule` without
/// `prevent_duplicate = true`, no rule at all, a non-`Result` return type without
/// `on_limit`, an empty or malformed `name`, `cost = 0`, `rules = <expr>` together with
/// `rules(...)`, `shadow` or `prevent_duplicate` given anything but `true` or `false`, and a
/// `block_for` or `wait` duration that is 0, too long or malformed. An error type without
/// `From<RateLimitError>` is reported at that type, a `cost` that is not a `u64`, a
/// `rules = <expr>` that does not deref to `[Rule]` and a `charge_if` that is not a
/// `Fn(&R) -> bool` for the function's return type at their expressions.
///
/// [`RateLimitError::Limited`]: https://docs.rs/redis-ratelimit/*/redis_ratelimit/enum.RateLimitError.html#variant.Limited
/// [`RateLimitError::MissingIdentity`]: https://docs.rs/redis-ratelimit/*/redis_ratelimit/enum.RateLimitError.html#variant.MissingIdentity
/// [`RateLimitError::Backend`]: https://docs.rs/redis-ratelimit/*/redis_ratelimit/enum.RateLimitError.html#variant.Backend
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
