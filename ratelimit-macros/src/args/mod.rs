//! The attribute's arguments: parsed and validated into a typed [`Args`].
//!
//! Every misuse becomes a `syn::Error` on the offending token. Errors are collected in
//! [`Errors`] and parsing goes on past them, so one compile reports all of them. Each file
//! below reads one kind of argument; this one holds the list of them and the checks that
//! involve several.

mod choice;
mod identity;
mod keywords;
mod list;
mod policy;
mod rule;
mod rules;
mod slot;
mod value;

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, ExprPath, Ident, LitStr, Path};

use self::choice::choose;
use self::identity::RawIdentity;
use self::keywords as kw;
use self::list::{parse_list, unknown};
use self::policy::RawPolicies;
use self::rules::RawRules;
use self::slot::{fill_slot, Slot};
use self::value::{checked_cost, checked_name, parsed};
use crate::errors::Errors;
use crate::item::Returns;

pub use self::choice::{Algorithm, LimitType};
pub use self::policy::Policies;
pub use self::rule::Rule;
pub use self::rules::Rules;

const ARGUMENTS: &str =
    "one of rules, prevent_duplicate, prevent_duplicate_rule, limit_type, by, key, \
                         message, algorithm, on_limit, limiter, crate, name, cost, charge_if, \
                         settle, block_for, wait, shadow, concurrency, lease, warn_at, \
                         allowance";

/// The validated arguments of one `#[rate_limiter(...)]`.
pub struct Args {
    /// `crate = path`.
    pub krate: Path,
    /// `limiter = <expr>`; `None` for the global limiter.
    pub limiter: Option<Expr>,
    pub rules: Rules,
    /// The duplicate-submission rule, when `prevent_duplicate = true`.
    pub duplicate_rule: Option<Rule>,
    pub algorithm: Algorithm,
    pub limit_type: LimitType,
    /// `by = <expr>`.
    pub by: Option<Expr>,
    /// `key = "..."`; `None` for the default prefix.
    pub prefix: Option<LitStr>,
    /// `name = "..."`: the keys' path part; `None` for the function's path.
    pub name: Option<LitStr>,
    /// `cost = <expr>`; `None` for one unit.
    pub cost: Option<Expr>,
    /// `charge_if = <expr>`: whether the call's units stay used, given its result.
    pub charge_if: Option<Expr>,
    /// `settle = <expr>`: the call's actual cost, given its result.
    pub settle: Option<Expr>,
    /// `message = "..."`; `None` for the default message.
    pub message: Option<LitStr>,
    /// What a limited call returns.
    pub limited: Limited,
    pub policies: Policies,
}

/// What a limited call returns: `on_limit(err)`, or `Err(From::from(err))` spanned at the
/// function's error type.
pub enum Limited {
    OnLimit(ExprPath),
    Err { error_span: Span },
}

/// Arguments as written, before the checks that involve several of them (or the function).
#[derive(Default)]
pub struct RawArgs {
    errors: Errors,
    rules: RawRules,
    identity: RawIdentity,
    message: Slot<LitStr>,
    algorithm: Slot<Algorithm>,
    on_limit: Slot<ExprPath>,
    limiter: Slot<Expr>,
    krate: Slot<Path>,
    name: Slot<LitStr>,
    cost: Slot<Expr>,
    charge_if: Slot<Expr>,
    settle: Slot<Expr>,
    policies: RawPolicies,
}

impl RawArgs {
    /// Parses one `name = value` (or `rules(...)`). A malformed value is an `Err`; a
    /// well-formed but invalid one is recorded in `errors` and parsing goes on.
    ///
    /// The groups are tried in the order of [`ARGUMENTS`], which is also the order of syn's
    /// "expected one of ..." for a token that is no name at all.
    fn parse_argument(&mut self, input: ParseStream, errors: &mut Errors) -> syn::Result<()> {
        let lookahead = input.lookahead1();
        if let Some(parsed) = self.rules.parse(&lookahead, input, errors) {
            return parsed;
        }
        if let Some(parsed) = self.identity.parse(&lookahead, input, errors) {
            return parsed;
        }
        fill_slot! {
            lookahead, input, errors,
            [
                kw::message => self.message, parsed;
                kw::algorithm => self.algorithm, algorithm;
                kw::on_limit => self.on_limit, parsed;
                kw::limiter => self.limiter, parsed;
                kw::Crate => self.krate, crate_path;
                kw::name => self.name, checked_name;
                kw::cost => self.cost, checked_cost;
                kw::charge_if => self.charge_if, parsed;
                kw::settle => self.settle, parsed;
            ]
            _ => match self.policies.parse(&lookahead, input, errors) {
                Some(parsed) => parsed,
                None => Err(unknown(input, lookahead, "argument", ARGUMENTS)),
            }
        }
    }

    /// The checks that involve several arguments or the function's return type; then the
    /// typed [`Args`], or every error found.
    pub fn validate(mut self, returns: Returns) -> syn::Result<Args> {
        let (limit_type, by, prefix) = self.identity.validate(&mut self.errors);
        let (rules, duplicate_rule) = self.rules.validate(&mut self.errors);
        let policies = self.policies.validate(&mut self.errors);
        let limited = match (self.on_limit.into_inner(), returns) {
            (Some(on_limit), _) => Some(Limited::OnLimit(on_limit)),
            (None, Returns::Result { error_span }) => Some(Limited::Err { error_span }),
            (None, Returns::Other { span }) => {
                self.errors.push(syn::Error::new(
                    span,
                    "#[rate_limiter] on a function that does not return a `Result` needs \
                     `on_limit = path`, a `fn(RateLimitError) -> T` giving what a limited call \
                     returns; or return a `Result` whose error type implements \
                     `From<RateLimitError>` (only `Result<..>` and `path::Result<..>` are \
                     taken for a `Result`)",
                ));
                None
            }
        };
        self.errors.into_result()?;

        Ok(Args {
            krate: self
                .krate
                .into_inner()
                .unwrap_or_else(|| syn::parse_quote!(::redis_ratelimit)),
            limiter: self.limiter.into_inner(),
            rules,
            duplicate_rule,
            algorithm: self.algorithm.into_inner().unwrap_or(Algorithm::SlidingLog),
            limit_type,
            by,
            prefix,
            name: self.name.into_inner(),
            cost: self.cost.into_inner(),
            charge_if: self.charge_if.into_inner(),
            settle: self.settle.into_inner(),
            message: self.message.into_inner(),
            limited: limited.expect("no errors, so a way to return"),
            policies,
        })
    }
}

/// `algorithm = NAME`.
fn algorithm(input: ParseStream, errors: &mut Errors) -> syn::Result<Option<Algorithm>> {
    let ident = input.parse::<Ident>()?;
    Ok(errors.ok(choose(&ident, "algorithm", Algorithm::CHOICES)))
}

/// `crate = path`: a path to the facade crate, with no generic arguments.
fn crate_path(input: ParseStream, _: &mut Errors) -> syn::Result<Option<Path>> {
    input.call(Path::parse_mod_style).map(Some)
}

impl Parse for RawArgs {
    /// Never fails: errors are kept for [`RawArgs::validate`] to report with the others.
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut args = RawArgs::default();
        let mut errors = Errors::default();
        parse_list(input, &mut errors, |input, errors| {
            args.parse_argument(input, errors)
        });
        args.errors = errors;
        Ok(args)
    }
}

#[cfg(test)]
mod tests;
