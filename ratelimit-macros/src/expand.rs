//! Code generation. Everything here has been validated: no user error is reported here.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;

use crate::args::{Args, Limited, Rule};
use crate::item::{AsyncTrait, ItemFn};

/// The function with the guard prepended to its body (for a method `#[async_trait]` has
/// rewritten, to the async block its body returns).
pub fn expand(args: &Args, item: &ItemFn) -> TokenStream {
    let ItemFn {
        outer_attrs,
        vis,
        sig,
        inner_attrs,
        body,
        async_trait,
    } = item;
    let guard = guard(args);
    if let Some(async_trait) = async_trait {
        // The function only builds the future; the check belongs in the future, before
        // what it runs, and a limited call returns from the async block.
        let mut body = async_trait.body.clone();
        let block = AsyncTrait::async_block(&mut body, async_trait.block_at);
        let guard: syn::Stmt = syn::parse2(guard).expect("the guard is a block");
        block.block.stmts.insert(0, guard);
        let stmts = &body.stmts;
        return quote! {
            #(#outer_attrs)*
            #vis #sig {
                #(#inner_attrs)*
                #(#stmts)*
            }
        };
    }
    // The body keeps a block of its own, so that it reads exactly as written: its items
    // and statements come first in their block, as they did.
    quote! {
        #(#outer_attrs)*
        #vis #sig {
            #(#inner_attrs)*
            #guard
            { #body }
        }
    }
}

/// The block that checks the call site's rules and returns early when the call is limited.
///
/// It is a block of its own so that none of its names are visible to the body.
fn guard(args: &Args) -> TokenStream {
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

    let limited = limited(&args.limited);
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
                ::core::result::Result::Err(__ratelimit_err) => #limited,
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
        if let ::core::result::Result::Err(__ratelimit_err) =
            __RATELIMIT_SITE.check(__ratelimit_limiter, __ratelimit_key, #cost, ::core::option::Option::None).await
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
    // An exempt request (the application's decision, e.g. a health checker) skips
    // everything: no identity is needed, nothing is counted or refused.
    let check = quote! {
        if !#private::RequestContext::current_is_exempt() {
            #check
        }
    };

    quote! {
        {
            static __RATELIMIT_SITE: #private::CallSite = #private::CallSite::new(
                #private::SiteConfig {
                    rules: &[#(#rules),*],
                    duplicate_rule: #duplicate_rule,
                    dynamic_rules: false,
                    algorithm: #private::Algorithm::#algorithm,
                    limit_type: #private::LimitType::#limit_type,
                    prefix: #prefix,
                    message: #message,
                    shadow: false,
                    block_for: ::core::option::Option::None,
                    wait: ::core::option::Option::None,
                },
            )
            #named
            .defined_at(::core::concat!(
                ::core::file!(), ":", ::core::line!(), ":", ::core::column!()
            ));
            // Its type name is the guarded function's full path, impl type included.
            fn __ratelimit_probe() {}
            let __ratelimit_probe_name = ::core::any::type_name_of_val(&__ratelimit_probe);
            #check
        }
    }
}

/// `return ...` of a limited call, given `__ratelimit_err: RateLimitError`.
fn limited(limited: &Limited) -> TokenStream {
    match limited {
        Limited::OnLimit(on_limit) => {
            let span = first_span(on_limit);
            quote_spanned! {span=>
                return #on_limit(__ratelimit_err)
            }
        }
        // Spanned at the user's error type, so that a missing `From<RateLimitError>` is
        // reported there. Being user-spanned, it is linted as user code: the conversion is
        // the identity when the error type is `RateLimitError` itself.
        Limited::Err { error_span } => quote_spanned! {*error_span=>
            {
                #[allow(clippy::useless_conversion)]
                return ::core::result::Result::Err(::core::convert::From::from(__ratelimit_err));
            }
        },
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
            .validate(&item)
            .unwrap();
        expand(&args, &item).to_string()
    }

    #[test]
    fn rules_are_static_data_in_milliseconds_with_the_duplicate_rule_last() {
        let out = expand_str(
            quote!(
                rules("10/minute", rule(count = 2, time = 3, unit = HOURS)),
                prevent_duplicate = true
            ),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
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
        let stmts = &block.block.stmts;
        assert_eq!(stmts.len(), 4, "{out}");
        let guard = &stmts[0];
        let guard = quote!(#guard).to_string();
        assert!(guard.contains("static __RATELIMIT_SITE"), "{guard}");
        assert!(
            guard.contains("return :: core :: result :: Result :: Err"),
            "{guard}"
        );
        let first = &stmts[1];
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
            out.contains("check (__ratelimit_limiter , __ratelimit_key , __ratelimit_cost , :: core :: option :: Option :: None)"),
            "{out}"
        );
        let default = expand_str(
            quote!(rules("1/s"), limit_type = GLOBAL),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            default.contains("check (__ratelimit_limiter , __ratelimit_key , 1 , :: core :: option :: Option :: None)"),
            "{default}"
        );
        assert!(!default.contains("__ratelimit_cost"), "{default}");
    }

    #[test]
    fn a_name_and_the_attribute_s_location_are_given_to_the_call_site() {
        let out = expand_str(
            quote!(rules("1/s"), limit_type = GLOBAL, name = "billing::send"),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            out.contains(") . named (\"billing::send\") . defined_at ("),
            "{out}"
        );
        let unnamed = expand_str(
            quote!(rules("1/s"), limit_type = GLOBAL),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(!unnamed.contains("named"), "{unnamed}");
        assert!(unnamed.contains(":: core :: file ! ()"), "{unnamed}");
    }
}
