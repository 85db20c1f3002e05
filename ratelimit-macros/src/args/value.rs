//! The values of single arguments that check themselves: a literal `bool`, a `name`, a
//! `cost`. Each records a well-formed but invalid value in `errors`.

use syn::parse::{Parse, ParseStream};
use syn::{Expr, LitStr};

use ratelimit_rule_text::NAME_FORM;

use crate::errors::Errors;

/// A value parsed as written, with no check of its own.
pub fn parsed<T: Parse>(input: ParseStream, _: &mut Errors) -> syn::Result<Option<T>> {
    input.parse().map(Some)
}

/// `name = "..."`, a name of [`NAME_FORM`].
pub fn checked_name(input: ParseStream, errors: &mut Errors) -> syn::Result<Option<LitStr>> {
    let value = input.parse::<LitStr>()?;
    Ok(errors.ok(check_name(&value)).map(|()| value))
}

/// `cost = <expr>`, any expression but a literal 0.
pub fn checked_cost(input: ParseStream, errors: &mut Errors) -> syn::Result<Option<Expr>> {
    let expr = input.parse::<Expr>()?;
    Ok(errors.ok(check_cost(&expr)).map(|()| expr))
}

/// Accepts the names of [`NAME_FORM`]: they are a key's last part, a metric label and a
/// Redis hash field, so they hold no whitespace, braces (Redis Cluster hash tags), lone
/// colons (the key's own separator) or anything outside ASCII.
fn check_name(lit: &LitStr) -> syn::Result<()> {
    let name = lit.value();
    if name.is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`name` cannot be empty: it is the path part of this function's keys; {NAME_FORM}, \
                 or remove `name` to use the function's path"
            ),
        ));
    }
    ratelimit_rule_text::check_name(&name).map_err(|why| {
        syn::Error::new(
            lit.span(),
            format!("malformed `name` {name:?}: {why}; {NAME_FORM}"),
        )
    })
}

/// Rejects a literal cost of 0; any other expression is checked at run time, where 0
/// skips the check.
fn check_cost(expr: &Expr) -> syn::Result<()> {
    if let Expr::Lit(syn::ExprLit {
        lit: syn::Lit::Int(lit),
        ..
    }) = expr
    {
        if lit.base10_parse::<u64>()? == 0 {
            return Err(syn::Error::new(
                lit.span(),
                "cost must be at least 1: a call of cost 0 uses nothing, so the attribute \
                 would never limit it; remove `cost` for one unit per call",
            ));
        }
    }
    Ok(())
}

/// The value of `argument = true` or `argument = false`: only a literal, since it is
/// decided at compile time.
pub fn bool_literal(
    argument: &'static str,
) -> impl FnOnce(ParseStream, &mut Errors) -> syn::Result<Option<bool>> {
    move |input, errors| {
        let expr = input.parse::<Expr>()?;
        if let Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Bool(value),
            attrs,
        }) = &expr
        {
            if attrs.is_empty() {
                return Ok(Some(value.value));
            }
        }
        errors.push(syn::Error::new_spanned(
            expr,
            format!("`{argument}` takes the literal `true` or `false`"),
        ));
        Ok(None)
    }
}
