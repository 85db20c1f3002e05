//! Code generation. Everything here has been validated: no user error is reported here.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;

use crate::args::{Args, Limited, Rule, Rules};
use crate::item::ItemFn;
use ratelimit_rule_text::Calendar;

/// The function with the check before its body (for a method `#[async_trait]` has
/// rewritten, in the async block its body returns).
pub fn expand(args: &Args, item: &ItemFn) -> TokenStream {
    item.guarded(|body| guard(args, item, body))
}

/// The statements that check the call, return early when it is limited, run `body`, and
/// with `charge_if` give the call's units back when it answers `false`.
fn guard(args: &Args, item: &ItemFn, body: TokenStream) -> TokenStream {
    let permit = check(args);
    // A call that `charge_if` may give back, that settles its cost, or that holds a slot
    // (`concurrency`) keeps its permit until the body ends, and then finishes it.
    if args.charge_if.is_none() && args.settle.is_none() && args.policies.concurrency.is_none() {
        // Without `charge_if` the units stay used: the permit is dropped at once. The body
        // keeps a block of its own, so that it reads exactly as written: its items and
        // statements come first in their block, as they did.
        return quote! {
            let _ = #permit;
            { #body }
        };
    }
    let output = item.output();
    let result = quote!(__ratelimit_result);
    // Spanned at the user's expression, so that a `charge_if` that is not an
    // `Fn(&R) -> bool` for the function's return type `R` is reported there.
    let charged = match &args.charge_if {
        Some(charge_if) => quote_spanned! {charge_if.span()=>
            __ratelimit_charged::<#output, _>(#charge_if, &#result)
        },
        None => quote!(true),
    };
    // Likewise for a `settle` that is not an `Fn(&R) -> u64`.
    let finish = match &args.settle {
        Some(settle) => {
            let actual = quote_spanned! {settle.span()=>
                __ratelimit_settled::<#output, _>(#settle, &#result)
            };
            quote! {
                fn __ratelimit_settled<R, F: ::core::ops::Fn(&R) -> u64>(
                    settle: F,
                    result: &R,
                ) -> u64 {
                    settle(result)
                }
                let __ratelimit_charged = #charged;
                __ratelimit_permit
                    .settle_cost(__ratelimit_charged, #actual)
                    .await;
            }
        }
        None => quote!(__ratelimit_permit.settle(#charged).await;),
    };
    quote! {
        let __ratelimit_permit = #permit;
        // An async block of its own, so that the body's `return`s and `?`s end the block,
        // not the function: `charge_if` sees every result. The unreachable `return` types
        // the block as the function before the body's own `return`s, as the function's
        // signature did (tracing-attributes does the same).
        let #result: #output = async move {
            #[allow(
                unreachable_code,
                clippy::diverging_sub_expression,
                clippy::let_unit_value,
                clippy::unreachable
            )]
            if false {
                let __ratelimit_declared: #output = ::core::unreachable!();
                return __ratelimit_declared;
            }
            #body
        }
        .await;
        if let ::core::option::Option::Some(__ratelimit_permit) = __ratelimit_permit {
            #[allow(dead_code)]
            fn __ratelimit_charged<R, F: ::core::ops::Fn(&R) -> bool>(
                charge_if: F,
                result: &R,
            ) -> bool {
                charge_if(result)
            }
            #finish
        }
        #result
    }
}

/// A block that checks the call site's rules and gives the call's permit, `None` when the
/// call is not checked, or returns early when the call is limited.
///
/// It is a block of its own so that none of its names are visible to the body.
fn check(args: &Args) -> TokenStream {
    let krate = &args.krate;
    let private = quote!(#krate::__private);

    let (compiled, dynamic_rules) = match &args.rules {
        Rules::Listed(rules) => (&rules[..], false),
        Rules::PerCall(_) => (&[][..], true),
    };
    let rules = compiled.iter().chain(&args.duplicate_rule).map(
        |&Rule {
             count,
             window_ms,
             calls,
             calendar,
         }| {
            let rule = match calendar {
                Some(Calendar::Day) => {
                    quote!(#private::Rule::per_calendar(#count, #private::Calendar::Day))
                }
                Some(Calendar::Month) => {
                    quote!(#private::Rule::per_calendar(#count, #private::Calendar::Month))
                }
                Some(Calendar::Year) => {
                    quote!(#private::Rule::per_calendar(#count, #private::Calendar::Year))
                }
                None => quote! {
                    #private::Rule::new(#count, ::core::time::Duration::from_millis(#window_ms))
                },
            };
            match calls {
                true => quote!(#rule.calls()),
                false => rule,
            }
        },
    );
    let duplicate_rule = args.duplicate_rule.is_some();
    let algorithm = args.algorithm;
    let limit_type = args.limit_type;
    let prefix = match &args.prefix {
        Some(prefix) => quote!(#prefix),
        None => {
            let prefix = ratelimit_rule_text::DEFAULT_PREFIX;
            quote!(#prefix)
        }
    };
    let message = match &args.message {
        Some(message) => quote!(#message),
        None => {
            let message = ratelimit_rule_text::DEFAULT_MESSAGE;
            quote!(#message)
        }
    };

    let shadow = args.policies.shadow;
    let lockout = match args.policies.block_for_ms.as_deref() {
        None => quote!(::core::option::Option::None),
        Some([ms]) => quote! {
            ::core::option::Option::Some(#private::Lockout::For(
                ::core::time::Duration::from_millis(#ms)
            ))
        },
        Some(schedule) => quote! {
            ::core::option::Option::Some(#private::Lockout::Escalating(
                &[#(::core::time::Duration::from_millis(#schedule)),*]
            ))
        },
    };
    let wait = duration(args.policies.wait_ms);
    let allowance = duration(args.policies.allowance_ms);
    // Only a site that may give units back or settle them keeps what a call took.
    let refunds = args.charge_if.is_some() || args.settle.is_some();
    let concurrency = match args.policies.concurrency {
        Some((max, lease_ms)) => {
            let lease = match lease_ms {
                Some(ms) => quote!(::core::time::Duration::from_millis(#ms)),
                None => quote!(#private::DEFAULT_LEASE),
            };
            quote!(::core::option::Option::Some(#private::Concurrency::new(#max, #lease)))
        }
        None => quote!(::core::option::Option::None),
    };

    let warn_at = args.policies.warn_at.unwrap_or(0);
    let (limited, err) = limited(&args.limited);
    let key = match &args.by {
        Some(by) => {
            // Spanned at `by`, so a value that is not `Display` is reported there.
            let identity = quote_spanned!(by.span()=> &(#by));
            quote! {
                ::core::option::Option::Some(
                    __RATELIMIT_SITE.key_by(__ratelimit_probe_name, #identity)
                )
            }
        }
        // `None`: no identity, but the site is off, so none is needed.
        None => quote! {
            match __RATELIMIT_SITE.key_from_context(__ratelimit_probe_name, __ratelimit_limiter) {
                ::core::result::Result::Ok(__ratelimit_key) => __ratelimit_key,
                ::core::result::Result::Err(#err) => #limited,
            }
        },
    };
    let limiter = match &args.limiter {
        Some(limiter) => quote!(&*(#limiter)),
        None => quote!(#private::global()),
    };

    // Rules chosen per call are evaluated once, before the key, and lent to the check.
    // Spanned at the expression, so that a value that does not deref to `[Rule]` is
    // reported there (the local too, with one hygiene for its binding and its use). An
    // empty list (and no duplicate-submission rule) runs the call unchecked: no identity
    // is needed and no key is touched.
    let (per_call_rules, rules_of_the_call, unchecked) = match &args.rules {
        Rules::PerCall(expr) => {
            let span = expr.span();
            let local = Ident::new("__ratelimit_rules", span);
            let unchecked = match duplicate_rule {
                true => quote!(false),
                false => quote_spanned!(span=> <[_]>::is_empty(&*#local)),
            };
            (
                quote!(let #local = #expr;),
                quote_spanned!(span=> ::core::option::Option::Some(&*#local)),
                unchecked,
            )
        }
        Rules::Listed(_) => (
            quote!(),
            quote!(::core::option::Option::None),
            quote!(false),
        ),
    };

    let named = args.name.as_ref().map(|name| quote!(.named(#name)));
    let cost = match &args.cost {
        Some(_) => quote!(__ratelimit_cost),
        None => quote!(::core::num::NonZeroU64::MIN),
    };
    let check = quote! {
        // `by` is borrowed only to build the (owned) key, so it is not held across the
        // `.await` and does not affect whether the future is `Send`.
        #per_call_rules
        if #unchecked {
            ::core::option::Option::None
        } else {
            let __ratelimit_limiter: &#private::Limiter = #limiter;
            // Its own statement: the temporaries of `by` end here, before the `.await`.
            let __ratelimit_key = #key;
            match __ratelimit_key {
                ::core::option::Option::None => ::core::option::Option::None,
                ::core::option::Option::Some(__ratelimit_key) => {
                    let __ratelimit_guarded = __RATELIMIT_SITE
                        .check(__ratelimit_limiter, __ratelimit_key, #cost, #rules_of_the_call);
                    // An answer at hand is taken as it is; only a waiting one is awaited.
                    let __ratelimit_answer = match __ratelimit_guarded {
                        #private::Guarded::Ready(__ratelimit_answer) => __ratelimit_answer,
                        #private::Guarded::Waiting(__ratelimit_waiting) => {
                            __ratelimit_waiting.await
                        }
                    };
                    match __ratelimit_answer {
                        ::core::result::Result::Ok(__ratelimit_permit) => {
                            ::core::option::Option::Some(__ratelimit_permit)
                        }
                        ::core::result::Result::Err(#err) => #limited,
                    }
                }
            }
        }
    };
    // A cost is evaluated once, before the body, into a plain `u64`: it holds no borrow
    // across the `.await`. A call that costs 0 uses nothing and is not checked; the runtime
    // takes any other as a `NonZeroU64`.
    let check = match &args.cost {
        Some(cost) => quote! {
            let __ratelimit_cost: u64 = #cost;
            match ::core::num::NonZeroU64::new(__ratelimit_cost) {
                ::core::option::Option::None => ::core::option::Option::None,
                ::core::option::Option::Some(__ratelimit_cost) => {
                    #check
                }
            }
        },
        None => check,
    };

    quote! {
        {
            static __RATELIMIT_SITE: #private::CallSite = #private::CallSite::new(
                #private::SiteConfig {
                    rules: &[#(#rules),*],
                    duplicate_rule: #duplicate_rule,
                    dynamic_rules: #dynamic_rules,
                    algorithm: #private::Algorithm::#algorithm,
                    limit_type: #private::LimitType::#limit_type,
                    prefix: #prefix,
                    message: #message,
                    shadow: #shadow,
                    lockout: #lockout,
                    wait: #wait,
                    refunds: #refunds,
                    concurrency: #concurrency,
                    warn_at: #warn_at,
                    allowance: #allowance,
                },
            )
            #named
            .defined_at(::core::concat!(
                ::core::file!(), ":", ::core::line!(), ":", ::core::column!()
            ));
            // Its type name is the guarded function's full path, impl type included.
            fn __ratelimit_probe() {}
            let __ratelimit_probe_name = ::core::any::type_name_of_val(&__ratelimit_probe);
            // An exempt request (the application's decision, e.g. a health checker) skips
            // everything: no identity is needed, nothing is counted or refused.
            if #private::RequestContext::current_is_exempt() {
                ::core::option::Option::None
            } else {
                #check
            }
        }
    }
}

/// `Some(Duration)` of a duration argument, or `None`.
fn duration(ms: Option<u64>) -> TokenStream {
    match ms {
        Some(ms) => quote! {
            ::core::option::Option::Some(::core::time::Duration::from_millis(#ms))
        },
        None => quote!(::core::option::Option::None),
    }
}

/// `return ...` of a limited call, and the name it reads the `RateLimitError` from, for the
/// pattern that binds it.
///
/// The name has the span of the user's tokens it is reported with, at its binding too: one
/// hygiene for both, also when those tokens come from a user's `macro_rules!` fragment.
fn limited(limited: &Limited) -> (TokenStream, Ident) {
    match limited {
        Limited::OnLimit(on_limit) => {
            let span = first_span(on_limit);
            let err = Ident::new("__ratelimit_err", span);
            (quote_spanned!(span=> return #on_limit(#err)), err)
        }
        // Spanned at the user's error type, so that a missing `From<RateLimitError>` is
        // reported there. Being user-spanned, it is linted as user code: the conversion is
        // the identity when the error type is `RateLimitError` itself.
        Limited::Err { error_span } => {
            let err = Ident::new("__ratelimit_err", *error_span);
            let limited = quote_spanned! {*error_span=>
                {
                    #[allow(clippy::useless_conversion)]
                    return ::core::result::Result::Err(::core::convert::From::from(#err));
                }
            };
            (limited, err)
        }
    }
}

fn first_span(tokens: impl quote::ToTokens) -> Span {
    tokens
        .into_token_stream()
        .into_iter()
        .next()
        .map_or_else(Span::call_site, |tt| tt.span())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::RawArgs;
    use syn::parse_quote;

    fn expand_str(args: TokenStream, item: TokenStream) -> String {
        let item: ItemFn = syn::parse2(item).unwrap();
        let args = syn::parse2::<RawArgs>(args)
            .unwrap()
            .validate(item.returns())
            .unwrap();
        expand(&args, &item).to_string()
    }

    /// The expansion of `async fn f() -> Result<(), E> { Ok(()) }` under `args`.
    fn expand_simple(args: TokenStream) -> String {
        expand_str(
            args,
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        )
    }

    /// The expansion of `args` on a function of a `user`.
    fn expand_for_user(args: TokenStream) -> String {
        expand_str(
            args,
            quote!(
                async fn f(user: User) -> Result<(), E> {
                    Ok(())
                }
            ),
        )
    }

    #[test]
    fn rules_are_static_data_in_milliseconds_with_the_duplicate_rule_last() {
        let out = expand_simple(quote!(
            rules("10/minute", rule(count = 2, time = 3, unit = HOURS)),
            prevent_duplicate = true
        ));
        let rule = |count: u64, ms: u64| {
            quote!(::redis_ratelimit::__private::Rule::new(
                #count,
                ::core::time::Duration::from_millis(#ms)
            ))
            .to_string()
        };
        let rules = format!(
            "rules : & [{} , {} , {}] , duplicate_rule : true ,",
            rule(10, 60_000),
            rule(2, 10_800_000),
            rule(1, 5_000)
        );
        assert!(out.contains(&rules), "{out}");
        assert!(out.contains("static __RATELIMIT_SITE"), "{out}");
        assert!(out.contains("prefix : \"rate_limit:\""), "{out}");
        assert!(out.contains("message : \"too many requests\""), "{out}");
    }

    #[test]
    fn the_signature_and_body_are_kept_and_runtime_paths_use_the_crate_argument() {
        let original: syn::ItemFn = parse_quote! {
            /// Docs.
            #[inline]
            pub(crate) async fn f<'a, T>(x: &'a T) -> Result<&'a T, E> where T: Sync {
                #![allow(unused)]
                fn helper() {}
                Ok(x)
            }
        };
        let out = expand_str(
            quote!(
                rules("1/s"),
                crate = ::facade,
                limit_type = GLOBAL,
                algorithm = TOKEN_BUCKET
            ),
            quote!(#original),
        );
        let expanded: syn::ItemFn = syn::parse_str(&out).unwrap();
        assert_eq!(expanded.attrs, original.attrs);
        assert_eq!(expanded.vis, original.vis);
        assert_eq!(expanded.sig, original.sig);
        let [syn::Stmt::Local(guard), syn::Stmt::Expr(syn::Expr::Block(body), None)] =
            &expanded.block.stmts[..]
        else {
            panic!("expected the guard then the body block: {out}");
        };
        assert_eq!(body.block.stmts, original.block.stmts);
        let guard = quote!(#guard).to_string();
        assert!(
            guard.contains("static __RATELIMIT_SITE : :: facade :: __private :: CallSite"),
            "{guard}"
        );
        assert!(!guard.contains("redis_ratelimit"), "{guard}");
        assert!(guard.contains("Algorithm :: TokenBucket"), "{guard}");
        assert!(guard.contains("LimitType :: Global"), "{guard}");
        assert!(guard.contains("key_from_context"), "{guard}");
        assert!(
            guard.contains(
                "if :: facade :: __private :: RequestContext :: current_is_exempt () \
                 { :: core :: option :: Option :: None }"
            ),
            "{guard}"
        );
    }

    /// A method returning `Result<u8, E>` as `#[async_trait]` leaves it.
    fn async_trait_method() -> TokenStream {
        quote!(
            fn go<'life0, 'async_trait>(
                &'life0 self,
            ) -> ::core::pin::Pin<
                Box<dyn ::core::future::Future<Output = Result<u8, E>> + Send + 'async_trait>,
            >
            where
                'life0: 'async_trait,
            {
                Box::pin(async move {
                    let __self = self;
                    let __ret: Result<u8, E> = { Ok(1) };
                    __ret
                })
            }
        )
    }

    #[test]
    fn under_async_trait_the_guard_goes_first_in_the_boxed_async_block() {
        let out = expand_str(
            quote!(rules("1/s"), limit_type = GLOBAL),
            async_trait_method(),
        );
        let expanded: syn::ItemFn = syn::parse_str(&out).unwrap();
        let [syn::Stmt::Expr(syn::Expr::Call(call), None)] = &expanded.block.stmts[..] else {
            panic!("expected only Box::pin(..): {out}");
        };
        let syn::Expr::Async(block) = &call.args[0] else {
            panic!("expected an async block: {out}");
        };
        let [guard, syn::Stmt::Expr(syn::Expr::Block(body), None)] = &block.block.stmts[..] else {
            panic!("expected the guard then the body: {out}");
        };
        let guard = quote!(#guard).to_string();
        assert!(guard.contains("static __RATELIMIT_SITE"), "{guard}");
        assert!(
            guard.contains("return :: core :: result :: Result :: Err"),
            "{guard}"
        );
        let body = &body.block.stmts;
        assert_eq!(body.len(), 3, "{out}");
        let first = &body[0];
        assert_eq!(quote!(#first).to_string(), "let __self = self ;");
    }

    #[test]
    fn a_cost_is_evaluated_once_and_a_cost_of_zero_skips_the_check() {
        let out = expand_str(
            quote!(rules("1/s"), limit_type = GLOBAL, cost = batch.len() as u64),
            quote!(
                async fn f(batch: Vec<u8>) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            out.contains(
                "let __ratelimit_cost : u64 = batch . len () as u64 ; \
                 match :: core :: num :: NonZeroU64 :: new (__ratelimit_cost) { \
                 :: core :: option :: Option :: None => :: core :: option :: Option :: None ,"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "check (__ratelimit_limiter , __ratelimit_key , __ratelimit_cost , \
                 :: core :: option :: Option :: None)"
            ),
            "{out}"
        );
        let default = expand_simple(quote!(rules("1/s"), limit_type = GLOBAL));
        assert!(
            default.contains(
                "check (__ratelimit_limiter , __ratelimit_key , \
                 :: core :: num :: NonZeroU64 :: MIN , :: core :: option :: Option :: None)"
            ),
            "{default}"
        );
        assert!(!default.contains("__ratelimit_cost"), "{default}");
    }

    #[test]
    fn a_name_and_the_attribute_s_location_are_given_to_the_call_site() {
        let out = expand_simple(quote!(
            rules("1/s"),
            limit_type = GLOBAL,
            name = "billing::send"
        ));
        assert!(
            out.contains(") . named (\"billing::send\") . defined_at ("),
            "{out}"
        );
        let unnamed = expand_simple(quote!(rules("1/s"), limit_type = GLOBAL));
        assert!(!unnamed.contains("named"), "{unnamed}");
        assert!(unnamed.contains(":: core :: file ! ()"), "{unnamed}");
    }

    #[test]
    fn policies_are_static_data_of_the_call_site() {
        let out = expand_simple(quote!(
            rules("1/s"),
            block_for = "15 minutes",
            wait = "2s",
            shadow = true
        ));
        assert!(
            out.contains(
                "shadow : true , \
                 lockout : :: core :: option :: Option :: Some \
                 (:: redis_ratelimit :: __private :: Lockout :: For \
                 (:: core :: time :: Duration :: from_millis (900000u64))) , \
                 wait : :: core :: option :: Option :: Some \
                 (:: core :: time :: Duration :: from_millis (2000u64)) ,"
            ),
            "{out}"
        );
        let default = expand_simple(quote!(rules("1/s")));
        assert!(
            default.contains("dynamic_rules : false , algorithm"),
            "{default}"
        );
        assert!(
            default.contains(
                "shadow : false , lockout : :: core :: option :: Option :: None , \
                 wait : :: core :: option :: Option :: None ,"
            ),
            "{default}"
        );
        let escalating = expand_simple(quote!(rules("1/s"), block_for = ["1m", "1 hour"]));
        assert!(
            escalating.contains(
                "lockout : :: core :: option :: Option :: Some \
                 (:: redis_ratelimit :: __private :: Lockout :: Escalating \
                 (& [:: core :: time :: Duration :: from_millis (60000u64) , \
                 :: core :: time :: Duration :: from_millis (3600000u64)])) ,"
            ),
            "{escalating}"
        );
    }

    #[test]
    fn rules_per_call_are_evaluated_before_the_key_and_lent_to_the_check() {
        let out = expand_for_user(quote!(rules = plan_rules(&user), prevent_duplicate = true));
        let duplicate_only = format!(
            "rules : & [{}] , duplicate_rule : true , dynamic_rules : true ,",
            quote!(::redis_ratelimit::__private::Rule::new(
                1u64,
                ::core::time::Duration::from_millis(5000u64)
            ))
        );
        assert!(out.contains(&duplicate_only), "{out}");
        let key = out.find("let __ratelimit_key =").expect("a key");
        let rules = out
            .find("let __ratelimit_rules = plan_rules (& user) ;")
            .expect("the rules");
        assert!(rules < key, "{out}");
        assert!(
            out.contains(
                "check (__ratelimit_limiter , __ratelimit_key , \
                 :: core :: num :: NonZeroU64 :: MIN , \
                 :: core :: option :: Option :: Some (& * __ratelimit_rules))"
            ),
            "{out}"
        );
    }

    /// The statements of an expanded function's body.
    fn statements(out: &str) -> Vec<syn::Stmt> {
        let expanded: syn::ItemFn = syn::parse_str(out).unwrap();
        expanded.block.stmts
    }

    #[test]
    fn an_empty_list_of_rules_per_call_skips_the_key_and_the_check() {
        let out = expand_for_user(quote!(rules = plan_rules(&user), limit_type = IP));
        let empty = out
            .find("if < [_] > :: is_empty (& * __ratelimit_rules)")
            .expect("the emptiness test");
        let key = out.find("let __ratelimit_key =").expect("a key");
        assert!(empty < key, "{out}");
        // With a duplicate-submission rule there is always a rule to check.
        let with_duplicate =
            expand_for_user(quote!(rules = plan_rules(&user), prevent_duplicate = true));
        assert!(with_duplicate.contains("if false {"), "{with_duplicate}");
    }

    #[test]
    fn without_charge_if_the_permit_is_dropped_before_the_body() {
        let out = expand_simple(quote!(rules("1/s")));
        let stmts = statements(&out);
        let [syn::Stmt::Local(permit), syn::Stmt::Expr(syn::Expr::Block(_), None)] = &stmts[..]
        else {
            panic!("expected `let _ = check;` then the body block: {out}");
        };
        assert!(matches!(permit.pat, syn::Pat::Wild(_)), "{out}");
        assert!(!out.contains("settle"), "{out}");
    }

    #[test]
    fn with_charge_if_the_body_s_result_decides_whether_the_units_are_given_back() {
        let out = expand_str(
            quote!(rules("3/minute"), charge_if = Result::is_err),
            quote!(
                async fn login(password: &str) -> Result<u8, E> {
                    check(password)?;
                    Ok(1)
                }
            ),
        );
        let stmts = statements(&out);
        let [syn::Stmt::Local(permit), syn::Stmt::Local(result), syn::Stmt::Expr(syn::Expr::If(settle), None), syn::Stmt::Expr(returned, None)] =
            &stmts[..]
        else {
            panic!("expected the permit, the body's result, the settlement, the result: {out}");
        };
        assert_eq!(
            quote!(#permit).to_string().split(" =").next(),
            Some("let __ratelimit_permit")
        );
        let result = quote!(#result).to_string();
        assert!(
            result.starts_with(
                "let __ratelimit_result : Result < u8 , E > = async move { \
                 # [allow (unreachable_code ,"
            ),
            "{result}"
        );
        assert!(
            result.ends_with(
                "if false { let __ratelimit_declared : Result < u8 , E > = :: core :: unreachable ! () ; \
                 return __ratelimit_declared ; } check (password) ? ; Ok (1) } . await ;"
            ),
            "{result}"
        );
        let settle = quote!(#settle).to_string();
        assert!(
            settle.starts_with(
                "if let :: core :: option :: Option :: Some (__ratelimit_permit) = __ratelimit_permit"
            ),
            "{settle}"
        );
        assert!(
            settle.contains(
                "__ratelimit_permit . settle (__ratelimit_charged :: < Result < u8 , E > , _ > \
                 (Result :: is_err , & __ratelimit_result)) . await ;"
            ),
            "{settle}"
        );
        assert_eq!(quote!(#returned).to_string(), "__ratelimit_result");
    }

    #[test]
    fn charge_if_types_the_result_as_the_return_type_with_impl_trait_inferred() {
        let out = expand_str(
            quote!(rules("1/s"), on_limit = busy, charge_if = |n: &_| true),
            quote!(
                async fn f() -> impl Display {
                    1
                }
            ),
        );
        assert!(
            out.contains("let __ratelimit_result : _ = async move"),
            "{out}"
        );
        assert!(out.contains("__ratelimit_charged :: < _ , _ >"), "{out}");
        let unit = expand_str(
            quote!(rules("1/s"), on_limit = busy, charge_if = |_: &()| true),
            quote!(
                async fn f() {}
            ),
        );
        assert!(
            unit.contains("let __ratelimit_result : () = async move"),
            "{unit}"
        );
    }

    #[test]
    fn under_async_trait_charge_if_settles_inside_the_boxed_async_block() {
        let out = expand_str(
            quote!(
                rules("1/s"),
                limit_type = GLOBAL,
                charge_if = Result::is_err
            ),
            async_trait_method(),
        );
        let stmts = statements(&out);
        let [syn::Stmt::Expr(syn::Expr::Call(call), None)] = &stmts[..] else {
            panic!("expected only Box::pin(..): {out}");
        };
        let syn::Expr::Async(block) = &call.args[0] else {
            panic!("expected an async block: {out}");
        };
        let block = quote!(#block).to_string();
        assert!(
            block.starts_with("async move { let __ratelimit_permit = {"),
            "{block}"
        );
        assert!(
            block.contains("let __ratelimit_result : Result < u8 , E > = async move {"),
            "{block}"
        );
        assert!(block.contains("let __self = self ;"), "{block}");
        assert!(
            block.ends_with(". await ; } __ratelimit_result }"),
            "{block}"
        );
    }
}
