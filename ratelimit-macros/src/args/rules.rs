//! Which rules a call is checked against: `rules(...)` or `rules = <expr>`, and the
//! duplicate-submission rule of `prevent_duplicate = true` (each rule is read in `rule.rs`).

use proc_macro2::Span;
use syn::parse::{Lookahead1, ParseStream};
use syn::{Expr, Token};

use super::keywords as kw;
use super::rule::{parse_rule_call, parse_rules, Rule};
use super::slot::{fill_slot, Parsed, Slot};
use super::value::{bool_literal, parsed};
use crate::errors::Errors;

/// Where the rules come from.
pub enum Rules {
    /// `rules(...)`, in the order written (none with only `prevent_duplicate`).
    Listed(Vec<Rule>),
    /// `rules = <expr>`, evaluated per call.
    PerCall(Expr),
}

/// The rule arguments as written.
#[derive(Default)]
pub struct RawRules {
    listed: Slot<Vec<Rule>>,
    /// `rules = <expr>`: a slot of its own, so that it can be told apart from `rules(...)`.
    per_call: Slot<Expr>,
    prevent_duplicate: Slot<bool>,
    prevent_duplicate_rule: Slot<Rule>,
}

impl RawRules {
    /// Parses one rule argument, if `next` is one; `None` for any other argument.
    pub fn parse(&mut self, next: &Lookahead1, input: ParseStream, errors: &mut Errors) -> Parsed {
        // One peek of `rules` (each peek adds its token to the lookahead's "expected one
        // of ..."), then `rules = <expr>` or `rules(...)`.
        if next.peek(kw::rules) {
            return Some(match input.peek2(Token![=]) {
                true => self.per_call.parse::<kw::rules>(input, errors, parsed),
                false => self.parse_listed(input, errors),
            });
        }
        Some(fill_slot! {
            next, input, errors,
            [
                kw::prevent_duplicate => self.prevent_duplicate, bool_literal("prevent_duplicate");
                kw::prevent_duplicate_rule => self.prevent_duplicate_rule, parse_rule_call;
            ]
            _ => return None,
        })
    }

    /// `rules(...)`: no `=`, so not a [`Slot::parse`].
    fn parse_listed(&mut self, input: ParseStream, errors: &mut Errors) -> syn::Result<()> {
        let name = input.parse::<kw::rules>()?;
        let rules = parse_rules(input, errors)?;
        self.listed.set(errors, &name, rules);
        Ok(())
    }

    /// The rules and the duplicate rule; the rules' cross-argument misuse is recorded in
    /// `errors`.
    pub fn validate(self, errors: &mut Errors) -> (Rules, Option<Rule>) {
        let prevent_duplicate = self.prevent_duplicate.get().copied().unwrap_or(false);
        if let (Some(span), false) = (self.prevent_duplicate_rule.span(), prevent_duplicate) {
            errors.push(syn::Error::new(
                span,
                "prevent_duplicate_rule has no effect without `prevent_duplicate = true`",
            ));
        }
        if let (Some(per_call), Some(_)) = (self.per_call.span(), self.listed.get()) {
            errors.push(syn::Error::new(
                per_call,
                "`rules = <expr>` cannot be used with `rules(...)`: choose the rules per call \
                 with `rules = <expr>`, or write them in `rules(...)`",
            ));
        }
        if self.listed.get().is_none() && self.per_call.get().is_none() && !prevent_duplicate {
            errors.push(syn::Error::new(
                Span::call_site(),
                "#[rate_limiter] needs at least one rule: add `rules(...)`, e.g. \
                 `rules(\"10/minute\")`, `rules = <expr>` for rules chosen per call, or \
                 `prevent_duplicate = true`",
            ));
        }
        let rules = match self.per_call.into_inner() {
            Some(per_call) => Rules::PerCall(per_call),
            None => Rules::Listed(self.listed.into_inner().unwrap_or_default()),
        };
        let duplicate_rule = prevent_duplicate.then(|| {
            self.prevent_duplicate_rule
                .into_inner()
                .unwrap_or(Rule::DEFAULT_DUPLICATE)
        });
        (rules, duplicate_rule)
    }
}
