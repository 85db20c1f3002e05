//! The comma-separated lists of the attribute and of `rule(...)`, read past their errors.

use syn::parse::{Lookahead1, ParseStream};
use syn::{Ident, Token};

use crate::errors::Errors;

/// Parses the comma-separated list that fills `input`, one `item` at a time.
///
/// A malformed item is recorded in `errors` and skipped up to the next top-level comma, so
/// that the items after it are still checked. The whole input is always consumed: syn
/// would report leftover tokens as an "unexpected token" in place of the real errors.
pub fn parse_list(
    input: ParseStream,
    errors: &mut Errors,
    mut item: impl FnMut(ParseStream, &mut Errors) -> syn::Result<()>,
) {
    while !input.is_empty() {
        if let Err(err) = item(input, errors) {
            errors.push(err);
            skip_to_comma(input);
        }
        if input.is_empty() {
            break;
        }
        if let Err(err) = input.parse::<Token![,]>() {
            errors.push(err);
            skip_to_comma(input);
            let _ = input.parse::<Option<Token![,]>>();
        }
    }
}

fn skip_to_comma(input: ParseStream) {
    let _ = input.step(|cursor| {
        let mut rest = *cursor;
        while let Some((tt, next)) = rest.token_tree() {
            if matches!(&tt, proc_macro2::TokenTree::Punct(p) if p.as_char() == ',') {
                break;
            }
            rest = next;
        }
        Ok(((), rest))
    });
}

/// The error for what is none of the expected names: an unknown `what` (an identifier,
/// consumed), or syn's own "expected ..." for any other token.
pub fn unknown(
    input: ParseStream,
    lookahead: Lookahead1,
    what: &str,
    expected: &str,
) -> syn::Error {
    match input.parse::<Ident>() {
        Ok(ident) => syn::Error::new(
            ident.span(),
            format!("unknown {what} `{ident}`; expected {expected}"),
        ),
        Err(_) => lookahead.error(),
    }
}
