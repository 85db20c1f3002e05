//! The guarded function's shape: only its signature is parsed; the body stays tokens.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned as _;
use syn::visit_mut::VisitMut;
use syn::{
    braced, Attribute, Block, Expr, ExprAsync, GenericArgument, PathArguments, ReturnType,
    Signature, Stmt, Token, Type, TypeParamBound, Visibility,
};

use crate::errors::Errors;

/// An `fn` item (free function or method): attributes, visibility, signature and body.
pub struct ItemFn {
    outer_attrs: Vec<Attribute>,
    vis: Visibility,
    sig: Signature,
    /// `#![...]` at the start of the body; they must stay first in the new body.
    inner_attrs: Vec<Attribute>,
    /// The statements of the body, untouched.
    body: TokenStream,
    /// Set when the function is an `async fn` that `#[async_trait]` has already rewritten.
    async_trait: Option<AsyncTrait>,
}

/// An `async fn` of a trait impl as `#[async_trait]` leaves it, the attribute being written
/// below `#[async_trait]`: not `async`, returning
/// `Pin<Box<dyn Future<Output = R> + Send + 'async_trait>>`, its body ending in
/// `Box::pin(async move { ... })`. The guard goes first in that async block, and a limited
/// call returns an `R` from it.
///
/// The shape is recognised as tracing-attributes recognises it (async-trait 0.1.44 and
/// later): the last expression statement of the body is an async block, possibly inside a
/// call whose path ends in `Box::pin`.
struct AsyncTrait {
    /// The whole body, parsed, with the async block to guard at `stmts[block_at]`.
    body: Block,
    block_at: usize,
    /// `R`, what the async block returns.
    output: Type,
}

impl AsyncTrait {
    /// The async block to guard, inside `body` (a copy of [`AsyncTrait::body`]).
    fn async_block<'a>(&self, body: &'a mut Block) -> &'a mut ExprAsync {
        match &mut body.stmts[self.block_at] {
            Stmt::Expr(expr, _) => async_block_of(expr).expect("recognised when parsed"),
            _ => unreachable!("recognised when parsed"),
        }
    }

    fn recognise(sig: &Signature, body: &TokenStream) -> Option<AsyncTrait> {
        if sig.asyncness.is_some() {
            return None;
        }
        let ReturnType::Type(_, ty) = &sig.output else {
            return None;
        };
        let output = boxed_future_output(ty)?.clone();
        let mut body: Block = syn::parse2(quote!({ #body })).ok()?;
        let block_at = body
            .stmts
            .iter_mut()
            .rposition(|stmt| matches!(stmt, Stmt::Expr(..)))?;
        match &mut body.stmts[block_at] {
            Stmt::Expr(expr, None) => async_block_of(expr)?,
            _ => return None,
        };
        Some(AsyncTrait {
            body,
            block_at,
            output,
        })
    }
}

/// `async move { ... }` or `Box::pin(async move { ... })`.
fn async_block_of(expr: &mut Expr) -> Option<&mut ExprAsync> {
    match expr {
        Expr::Async(block) => Some(block),
        Expr::Call(call) if call.args.len() == 1 => {
            let Expr::Path(func) = &*call.func else {
                return None;
            };
            let mut segments = func.path.segments.iter().rev();
            let (pin, boxed) = (segments.next()?, segments.next()?);
            if pin.ident != "pin" || boxed.ident != "Box" {
                return None;
            }
            match call.args.first_mut()? {
                Expr::Async(block) => Some(block),
                _ => None,
            }
        }
        _ => None,
    }
}

/// `R` of `Pin<Box<dyn Future<Output = R> + ...>>` (any paths to `Pin`, `Box`, `Future`).
fn boxed_future_output(ty: &Type) -> Option<&Type> {
    let boxed = only_type_argument(ty, "Pin")?;
    let Type::TraitObject(object) = only_type_argument(boxed, "Box")? else {
        return None;
    };
    object.bounds.iter().find_map(|bound| {
        let TypeParamBound::Trait(bound) = bound else {
            return None;
        };
        let future = bound.path.segments.last()?;
        if future.ident != "Future" {
            return None;
        }
        let PathArguments::AngleBracketed(args) = &future.arguments else {
            return None;
        };
        args.args.iter().find_map(|arg| match arg {
            GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&assoc.ty),
            _ => None,
        })
    })
}

/// `T` of `name<T>` (a path ending in `name` with one type argument).
fn only_type_argument<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(path) = ty else {
        return None;
    };
    let last = path.path.segments.last()?;
    if last.ident != name {
        return None;
    }
    match &last.arguments {
        PathArguments::AngleBracketed(args) if args.args.len() == 1 => match args.args.first() {
            Some(GenericArgument::Type(ty)) => Some(ty),
            _ => None,
        },
        _ => None,
    }
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
        let async_trait = AsyncTrait::recognise(&sig, &body);
        Ok(ItemFn {
            outer_attrs,
            vis,
            sig,
            inner_attrs,
            body,
            async_trait,
        })
    }
}

/// What a limited call returns, read from the signature.
pub enum Returns {
    /// A `Result`: `Err(From::from(err))`, spanned at the given error type, or at the whole
    /// type when the error type is not written out (`io::Result<T>`).
    Result { error_span: Span },
    /// Anything else: only `on_limit` can produce it. `span` is where to say so: the return
    /// type, or the function's name when it returns `()` implicitly.
    Other { span: Span },
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
        if sig.asyncness.is_none() && self.async_trait.is_none() {
            errors.push(syn::Error::new_spanned(
                sig.fn_token,
                "#[rate_limiter] needs an `async fn`: the check is a (possibly remote) call \
                 that is awaited before the body runs",
            ));
        }
    }

    /// Whether the function returns a `Result`, from its declared return type.
    pub fn returns(&self) -> Returns {
        let declared = match (&self.async_trait, &self.sig.output) {
            (Some(async_trait), _) => Some(&async_trait.output),
            (None, ReturnType::Type(_, ty)) => Some(&**ty),
            (None, ReturnType::Default) => None,
        };
        match declared {
            Some(ty) => result_error_span(ty)
                .map_or(Returns::Other { span: ty.span() }, |error_span| {
                    Returns::Result { error_span }
                }),
            None => Returns::Other {
                span: self.sig.ident.span(),
            },
        }
    }

    /// `R`, what a call gives: the declared return type (the future's output under
    /// `#[async_trait]`), or `()`. An `impl Trait` in it becomes `_`, since only a
    /// function's signature may name one.
    pub fn output(&self) -> Type {
        let mut output = match (&self.async_trait, &self.sig.output) {
            (Some(async_trait), _) => async_trait.output.clone(),
            (None, ReturnType::Type(_, ty)) => (**ty).clone(),
            (None, ReturnType::Default) => syn::parse_quote!(()),
        };
        InferImplTrait.visit_type_mut(&mut output);
        output
    }

    /// The function as written, with `guard(statements)` in place of the statements that
    /// run when it is awaited: the body of an `async fn`, or the async block that
    /// `#[async_trait]` made of it (the function itself only builds that future).
    pub fn guarded(&self, guard: impl FnOnce(TokenStream) -> TokenStream) -> TokenStream {
        let statements = match &self.async_trait {
            None => guard(self.body.clone()),
            Some(async_trait) => {
                let mut body = async_trait.body.clone();
                let block = &mut async_trait.async_block(&mut body).block;
                let stmts = &block.stmts;
                let guarded = guard(quote!(#(#stmts)*));
                *block = syn::parse2(quote!({ #guarded })).expect("the guarded body is a block");
                let stmts = &body.stmts;
                quote!(#(#stmts)*)
            }
        };
        let (attrs, vis, sig, inner_attrs) =
            (&self.outer_attrs, &self.vis, &self.sig, &self.inner_attrs);
        quote! {
            #(#attrs)*
            #vis #sig {
                #(#inner_attrs)*
                #statements
            }
        }
    }
}

/// Replaces each `impl Trait` of a type with `_`.
struct InferImplTrait;

impl VisitMut for InferImplTrait {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        match ty {
            Type::ImplTrait(_) => *ty = syn::parse_quote!(_),
            _ => syn::visit_mut::visit_type_mut(self, ty),
        }
    }
}

/// `Some(span of the error type)` when `ty` is a `Result`: `Result<..>` or a path ending in
/// `::Result<..>` (`std::result::Result<T, E>`, `io::Result<T>`, `anyhow::Result<T>`).
///
/// Only the name `Result` itself counts, with its type arguments written: a type whose
/// name merely ends in `Result` (a `QueryResult` struct) is not taken for one, since
/// nothing but the name is known here, and an `Err(..)` of the wrong type would be a
/// confusing error. Any other return type, an alias like `ApiResult<T>` included, needs
/// `on_limit`.
fn result_error_span(ty: &Type) -> Option<Span> {
    match ty {
        Type::Group(group) => result_error_span(&group.elem),
        Type::Paren(paren) => result_error_span(&paren.elem),
        Type::Path(path) if path.qself.is_none() => {
            let last = path.path.segments.last()?;
            if last.ident != "Result" {
                return None;
            }
            let PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            let error = match args.args.len() {
                2 => match args.args.last() {
                    Some(GenericArgument::Type(error)) => Some(error.span()),
                    _ => None,
                },
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
    fn only_result_and_paths_ending_in_result_are_results() {
        assert!(is_result(parse_quote!(Result<(), E>)));
        assert!(is_result(
            parse_quote!(::std::result::Result<u8, Box<dyn std::error::Error>>)
        ));
        assert!(is_result(parse_quote!(io::Result<u8>)));
        assert!(is_result(parse_quote!(anyhow::Result<u8>)));
        assert!(is_result(parse_quote!((Result<u8, E>))));
        // Names that merely end in `Result` are other types.
        assert!(!is_result(parse_quote!(QueryResult)));
        assert!(!is_result(parse_quote!(db::QueryResult<Row>)));
        assert!(!is_result(parse_quote!(ApiResult<u8>)));
        // `Result` without its arguments is not known to be one.
        assert!(!is_result(parse_quote!(Result)));
        assert!(!is_result(parse_quote!(Option<u8>)));
        assert!(!is_result(parse_quote!(ResultSet)));
        assert!(!is_result(parse_quote!(())));
        assert!(!is_result(parse_quote!(<T as Tr>::Result)));
        assert!(!is_result(parse_quote!(
            impl Future<Output = Result<u8, E>>
        )));
    }

    #[test]
    fn the_async_trait_shape_is_recognised_with_its_output() {
        let item: ItemFn = parse_quote! {
            fn go<'life0, 'async_trait>(
                &'life0 self,
            ) -> ::core::pin::Pin<Box<
                dyn ::core::future::Future<Output = Result<u8, E>> + ::core::marker::Send + 'async_trait,
            >>
            where
                'life0: 'async_trait,
                Self: 'async_trait,
            {
                Box::pin(async move {
                    let __self = self;
                    let __ret: Result<u8, E> = { Ok(1) };
                    #[allow(unreachable_code)]
                    __ret
                })
            }
        };
        let async_trait = item.async_trait.as_ref().expect("recognised");
        assert_eq!(async_trait.block_at, 0);
        let output = &async_trait.output;
        assert_eq!(quote::quote!(#output).to_string(), "Result < u8 , E >");
        assert!(matches!(item.returns(), Returns::Result { .. }));
    }

    #[test]
    fn other_non_async_functions_are_not_taken_for_async_trait() {
        let not_boxed: ItemFn = parse_quote! {
            fn go(&self) -> Pin<Box<dyn Future<Output = u8> + Send>> {
                make()
            }
        };
        assert!(not_boxed.async_trait.is_none());
        let not_a_future: ItemFn = parse_quote! {
            fn go(&self) -> Box<u8> {
                Box::pin(async move { 1 })
            }
        };
        assert!(not_a_future.async_trait.is_none());
        let plain: ItemFn = parse_quote! {
            fn go(&self) -> u8 {
                1
            }
        };
        assert!(plain.async_trait.is_none());
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
