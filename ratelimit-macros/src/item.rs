//! The guarded function's shape: only its signature is parsed; the body stays tokens.

use proc_macro2::{Span, TokenStream};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned as _;
use syn::{
    braced, Attribute, GenericArgument, PathArguments, ReturnType, Signature, Token, Type,
    Visibility,
};

use crate::args::Errors;

/// An `fn` item (free function or method): attributes, visibility, signature and body.
pub struct ItemFn {
    pub outer_attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub sig: Signature,
    /// `#![...]` at the start of the body; they must stay first in the new body.
    pub inner_attrs: Vec<Attribute>,
    /// The statements of the body, untouched.
    pub body: TokenStream,
}

impl Parse for ItemFn {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let outer_attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        if !input.peek(Token![fn])
            && !input.peek(Token![async])
            && !input.peek(Token![const])
            && !input.peek(Token![unsafe])
            && !input.peek(Token![extern])
        {
            return Err(input.error("#[rate_limiter] goes on an `async fn`"));
        }
        let sig: Signature = input.parse()?;
        if input.peek(Token![;]) {
            return Err(syn::Error::new(
                input.span(),
                "#[rate_limiter] needs a function body to guard",
            ));
        }
        let content;
        braced!(content in input);
        let inner_attrs = content.call(Attribute::parse_inner)?;
        let body = content.parse()?;
        Ok(ItemFn {
            outer_attrs,
            vis,
            sig,
            inner_attrs,
            body,
        })
    }
}

/// What a limited call returns, read from the signature.
pub enum Returns {
    /// A `Result` (by name): `Err(From::from(err))`, spanned at the given error type, or at
    /// the whole type when the error type is not written out (`io::Result<T>`).
    Result { error_span: Span },
    /// Anything else: only `on_limit` can produce it.
    Other,
}

impl ItemFn {
    /// Rejects what cannot be guarded, each on its offending token.
    pub fn check(&self, errors: &mut Errors) {
        let sig = &self.sig;
        if let Some(constness) = &sig.constness {
            errors.push(syn::Error::new_spanned(
                constness,
                "#[rate_limiter] cannot guard a `const fn`: the check runs at run time",
            ));
        }
        if let Some(abi) = &sig.abi {
            errors.push(syn::Error::new_spanned(
                abi,
                "#[rate_limiter] cannot guard an `extern` function; guard a Rust `async fn` \
                 that it calls instead",
            ));
        }
        if sig.asyncness.is_none() {
            errors.push(syn::Error::new_spanned(
                sig.fn_token,
                "#[rate_limiter] needs an `async fn`: the check is a (possibly remote) call \
                 that is awaited before the body runs",
            ));
        }
    }

    /// The error to report when the function cannot return a limited call's error: its
    /// return type is not a `Result` and there is no `on_limit`.
    pub fn returns(&self) -> Returns {
        match &self.sig.output {
            ReturnType::Type(_, ty) => result_error_span(ty)
                .map_or(Returns::Other, |error_span| Returns::Result { error_span }),
            ReturnType::Default => Returns::Other,
        }
    }

    /// Where "no `on_limit` for a non-`Result` return" is reported: the return type, or the
    /// function's name when it returns `()` implicitly.
    pub fn return_type_span(&self) -> Span {
        match &self.sig.output {
            ReturnType::Type(_, ty) => ty.span(),
            ReturnType::Default => self.sig.ident.span(),
        }
    }
}

/// `Some(span of the error type)` when `ty` is a `Result` by name: its last path segment is
/// `Result` or ends with `Result` (`io::Result<T>`, `ApiResult<T>`).
fn result_error_span(ty: &Type) -> Option<Span> {
    match ty {
        Type::Group(group) => result_error_span(&group.elem),
        Type::Paren(paren) => result_error_span(&paren.elem),
        Type::Path(path) if path.qself.is_none() => {
            let last = path.path.segments.last()?;
            if !last.ident.to_string().ends_with("Result") {
                return None;
            }
            let error = match &last.arguments {
                PathArguments::AngleBracketed(args) if args.args.len() == 2 => {
                    match args.args.last() {
                        Some(GenericArgument::Type(error)) => Some(error.span()),
                        _ => None,
                    }
                }
                _ => None,
            };
            Some(error.unwrap_or_else(|| ty.span()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn is_result(ty: Type) -> bool {
        result_error_span(&ty).is_some()
    }

    #[test]
    fn results_are_recognised_by_their_last_segment() {
        assert!(is_result(parse_quote!(Result<(), E>)));
        assert!(is_result(
            parse_quote!(::std::result::Result<u8, Box<dyn std::error::Error>>)
        ));
        assert!(is_result(parse_quote!(io::Result<u8>)));
        assert!(is_result(parse_quote!(ApiResult<u8>)));
        assert!(is_result(parse_quote!((Result<u8, E>))));
        assert!(!is_result(parse_quote!(Option<u8>)));
        assert!(!is_result(parse_quote!(ResultSet)));
        assert!(!is_result(parse_quote!(())));
        assert!(!is_result(parse_quote!(<T as Tr>::Result)));
        assert!(!is_result(parse_quote!(
            impl Future<Output = Result<u8, E>>
        )));
    }

    #[test]
    fn body_is_kept_as_tokens_after_inner_attributes() {
        let item: ItemFn = parse_quote! {
            /// Docs.
            #[inline]
            pub(crate) async fn f<'a, T: Send>(x: &'a T) -> u8 where T: Sync {
                #![allow(unused)]
                let y = 1;
                y
            }
        };
        assert_eq!(item.outer_attrs.len(), 2);
        assert_eq!(item.inner_attrs.len(), 1);
        assert_eq!(item.body.to_string(), "let y = 1 ; y");
        assert!(item.sig.generics.where_clause.is_some());
    }
}
