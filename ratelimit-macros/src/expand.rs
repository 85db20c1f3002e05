//! Code generation. Everything here has been validated: no user error is reported here.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;

use crate::args::{Args, Limited, Rule};
use crate::item::ItemFn;

/// The function with the check before its body (for a method `#[async_trait]` has
/// rewritten, in the async block its body returns).
pub fn expand(args: &Args, item: &ItemFn) -> TokenStream {
    let check = check(args);
    // The body keeps a block of its own, so that it reads exactly as written: its items
    // and statements come first in their block, as they did.
    item.guarded(|body| {
        quote! {
            #check
            { #body }
        }
    })
}

/// The block that checks the call site's rules and returns early when the call is limited.
///
/// It is a block of its own so that none of its names are visible to the body.
fn check(args: &Args) -> TokenStream {
    let krate = &args.krate;
    let private = quote!(#krate::__private);

    let rules = args
        .rules
        .iter()
        .chain(&args.duplicate_rule)
        .map(|Rule { count, window_ms }| {
            quote! {
                #private::Rule::new(#count, ::core::time::Duration::from_millis(#window_ms))
            }
        });
    let duplicate_rule = args.duplicate_rule.is_some();
    let algorithm = args.algorithm;
    let limit_type = args.limit_type;
    let prefix = match &args.prefix {
        Some(prefix) => quote!(#prefix),
        None => {
            let prefix = Args::DEFAULT_PREFIX;
            quote!(#prefix)
        }
    };
    let message = match &args.message {
        Some(message) => quote!(#message),
        None => {
            let message = Args::DEFAULT_MESSAGE;
            quote!(#message)
        }
    };

    let (limited, err) = limited(&args.limited);
    let key = match &args.by {
        Some(by) => {
            // Spanned at `by`, so a value that is not `Display` is reported there.
            let identity = quote_spanned!(by.span()=> &(#by));
            quote! {
                __RATELIMIT_SITE.key_by(__ratelimit_probe_name, #identity)
            }
        }
        None => quote! {
            match __RATELIMIT_SITE.key_from_context(__ratelimit_probe_name) {
                ::core::result::Result::Ok(__ratelimit_key) => __ratelimit_key,
                ::core::result::Result::Err(#err) => #limited,
            }
        },
    };
    let limiter = match &args.limiter {
        Some(limiter) => quote!(&*(#limiter)),
        None => quote!(#private::global()),
    };

    let named = args.name.as_ref().map(|name| quote!(.named(#name)));
    let cost = match &args.cost {
        Some(_) => quote!(__ratelimit_cost),
        None => quote!(1),
    };
    let check = quote! {
        // `by` is borrowed only to build the (owned) key, so it is not held across the
        // `.await` and does not affect whether the future is `Send`.
        let __ratelimit_key = #key;
        let __ratelimit_limiter: &#private::Limiter = #limiter;
        if let ::core::result::Result::Err(#err) =
            __RATELIMIT_SITE.check(__ratelimit_limiter, __ratelimit_key, #cost).await
        {
            #limited
        }
    };
    // A cost is evaluated once, before the body, into a plain `u64`: it holds no borrow
    // across the `.await`. A call that costs 0 uses nothing and is not checked.
    let check = match &args.cost {
        Some(cost) => quote! {
            let __ratelimit_cost: u64 = #cost;
            if __ratelimit_cost != 0 {
                #check
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
                    algorithm: #private::Algorithm::#algorithm,
                    limit_type: #private::LimitType::#limit_type,
                    prefix: #prefix,
                    message: #message,
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
            if !#private::RequestContext::current_is_exempt() {
                #check
            }
        }
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
        let [syn::Stmt::Expr(syn::Expr::Block(guard), None), syn::Stmt::Expr(syn::Expr::Block(body), None)] =
            &expanded.block.stmts[..]
        else {
            panic!("expected the guard block then the body block: {out}");
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
            guard.contains("if ! :: facade :: __private :: RequestContext :: current_is_exempt ()"),
            "{guard}"
        );
    }

    #[test]
    fn under_async_trait_the_guard_goes_first_in_the_boxed_async_block() {
        let out = expand_str(
            quote!(rules("1/s"), limit_type = GLOBAL),
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
            ),
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
                 if __ratelimit_cost != 0 {"
            ),
            "{out}"
        );
        assert!(
            out.contains("check (__ratelimit_limiter , __ratelimit_key , __ratelimit_cost)"),
            "{out}"
        );
        let default = expand_simple(quote!(rules("1/s"), limit_type = GLOBAL));
        assert!(
            default.contains("check (__ratelimit_limiter , __ratelimit_key , 1)"),
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
}
