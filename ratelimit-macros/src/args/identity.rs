//! Whom a call is counted for: `limit_type`, `by` and the keys' prefix `key`.

use proc_macro2::Span;
use syn::parse::{Lookahead1, ParseStream};
use syn::{Expr, Ident, LitStr};

use super::choice::{choose, LimitType};
use super::keywords as kw;
use super::slot::{fill_slot, Parsed, Slot};
use super::value::parsed;
use crate::errors::Errors;

/// The identity arguments as written.
#[derive(Default)]
pub struct RawIdentity {
    /// With the name's span, for the checks that involve `by`.
    limit_type: Slot<(LimitType, Span)>,
    by: Slot<Expr>,
    key: Slot<LitStr>,
}

impl RawIdentity {
    /// Parses one identity argument, if `next` is one; `None` for any other argument.
    pub fn parse(&mut self, next: &Lookahead1, input: ParseStream, errors: &mut Errors) -> Parsed {
        Some(fill_slot! {
            next, input, errors,
            [
                kw::limit_type => self.limit_type, limit_type;
                kw::by => self.by, parsed;
                kw::key => self.key, parsed;
            ]
            _ => return None,
        })
    }

    /// The limit type, `by` and the prefix; a `by` that a limit type rules out or needs is
    /// recorded in `errors`.
    pub fn validate(self, errors: &mut Errors) -> (LimitType, Option<Expr>, Option<LitStr>) {
        let limit_type = self.limit_type.get().copied();
        if let (Some((LimitType::Global, _)), Some(by)) = (limit_type, self.by.span()) {
            errors.push(syn::Error::new(
                by,
                "`by` cannot be used with limit_type = GLOBAL: a global limit counts every \
                 caller in one budget, so it has no identity; remove `by`, or choose \
                 limit_type = IP, USER_ID or CUSTOM",
            ));
        }
        if let (Some((LimitType::Custom, ident)), None) = (limit_type, self.by.get()) {
            errors.push(syn::Error::new(
                ident,
                "limit_type = CUSTOM needs `by = <expr>`, the value whose budget is counted \
                 (e.g. `by = phone`)",
            ));
        }
        (
            limit_type.map_or(LimitType::Ip, |(value, _)| value),
            self.by.into_inner(),
            self.key.into_inner(),
        )
    }
}

/// `limit_type = NAME`, with the name's span.
fn limit_type(input: ParseStream, errors: &mut Errors) -> syn::Result<Option<(LimitType, Span)>> {
    let ident = input.parse::<Ident>()?;
    let value = errors.ok(choose(&ident, "limit_type", LimitType::CHOICES));
    Ok(value.map(|value| (value, ident.span())))
}
