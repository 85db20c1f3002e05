//! The attribute's arguments: parsed and validated into a typed [`Args`].
//!
//! Every misuse becomes a `syn::Error` on the offending token. Errors are collected in
//! [`Errors`] and parsing goes on past them, so one compile reports all of them.

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens, TokenStreamExt as _};
use syn::parse::{Lookahead1, Parse, ParseStream};
use syn::spanned::Spanned as _;
use syn::{parenthesized, Expr, ExprPath, Ident, LitInt, LitStr, Path, Token};

use ratelimit_rule_text::{Calendar, InvalidRule, NAME_FORM, UNITS};

use crate::errors::Errors;
use crate::item::Returns;

mod kw {
    syn::custom_keyword!(rules);
    syn::custom_keyword!(rule);
    syn::custom_keyword!(count);
    syn::custom_keyword!(time);
    syn::custom_keyword!(unit);
    syn::custom_keyword!(calls);
    syn::custom_keyword!(calendar);
    syn::custom_keyword!(prevent_duplicate);
    syn::custom_keyword!(prevent_duplicate_rule);
    syn::custom_keyword!(limit_type);
    syn::custom_keyword!(by);
    syn::custom_keyword!(key);
    syn::custom_keyword!(message);
    syn::custom_keyword!(algorithm);
    syn::custom_keyword!(on_limit);
    syn::custom_keyword!(limiter);
    syn::custom_keyword!(name);
    syn::custom_keyword!(cost);
    syn::custom_keyword!(charge_if);
    syn::custom_keyword!(settle);
    syn::custom_keyword!(block_for);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(shadow);
    syn::custom_keyword!(concurrency);
    syn::custom_keyword!(lease);
    syn::custom_keyword!(warn_at);
    syn::custom_keyword!(allowance);
}

const ARGUMENTS: &str =
    "one of rules, prevent_duplicate, prevent_duplicate_rule, limit_type, by, key, \
                         message, algorithm, on_limit, limiter, crate, name, cost, charge_if, \
                         settle, block_for, wait, shadow, concurrency, lease, warn_at, \
                         allowance";

/// The validated arguments of one `#[rate_limiter(...)]`.
pub struct Args {
    pub rules: Rules,
    /// The duplicate-submission rule, when `prevent_duplicate = true`.
    pub duplicate_rule: Option<Rule>,
    pub limit_type: LimitType,
    /// `by = <expr>`.
    pub by: Option<Expr>,
    /// `key = "..."`; `None` for the default prefix.
    pub prefix: Option<LitStr>,
    /// `message = "..."`; `None` for the default message.
    pub message: Option<LitStr>,
    pub algorithm: Algorithm,
    /// What a limited call returns.
    pub limited: Limited,
    /// `limiter = <expr>`; `None` for the global limiter.
    pub limiter: Option<Expr>,
    /// `crate = path`.
    pub krate: Path,
    /// `name = "..."`: the keys' path part; `None` for the function's path.
    pub name: Option<LitStr>,
    /// `cost = <expr>`; `None` for one unit.
    pub cost: Option<Expr>,
    /// `charge_if = <expr>`: whether the call's units stay used, given its result.
    pub charge_if: Option<Expr>,
    /// `settle = <expr>`: the call's actual cost, given its result.
    pub settle: Option<Expr>,
    /// `block_for = "..."` (or a list of one), in milliseconds.
    pub block_for_ms: Option<u64>,
    /// `block_for = ["...", "...", ...]`: an escalating lock-out's schedule of two or more
    /// durations, in milliseconds.
    pub block_schedule_ms: Option<Vec<u64>>,
    /// `wait = "..."`, in milliseconds.
    pub wait_ms: Option<u64>,
    /// `shadow = true`.
    pub shadow: bool,
    /// `concurrency = N`: at most N calls at once; with `lease = "..."`, in milliseconds
    /// (`None`: the runtime's default lease).
    pub concurrency: Option<(u64, Option<u64>)>,
    /// `warn_at = P`: warn when a call takes a rule to P % of its count (1 to 99).
    pub warn_at: Option<u8>,
    /// `allowance = "..."`, in milliseconds.
    pub allowance_ms: Option<u64>,
}

/// Where the rules come from.
pub enum Rules {
    /// `rules(...)`, in the order written (none with only `prevent_duplicate`).
    Listed(Vec<Rule>),
    /// `rules = <expr>`, evaluated per call.
    PerCall(Expr),
}

/// What a limited call returns: `on_limit(err)`, or `Err(From::from(err))` spanned at the
/// function's error type.
pub enum Limited {
    OnLimit(ExprPath),
    Err { error_span: Span },
}

/// One rule, its window already in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub count: u64,
    pub window_ms: u64,
    /// Whether the rule counts calls rather than units (`calls = true`, `"N calls/unit"`).
    pub calls: bool,
    /// The calendar period the rule counts in (`calendar = MONTH`, `"N per calendar
    /// month"`); `window_ms` is then the period's longest length.
    pub calendar: Option<Calendar>,
}

impl Rule {
    /// `prevent_duplicate_rule`'s default: once per 5 seconds.
    const DEFAULT_DUPLICATE: Rule = Rule {
        count: 1,
        window_ms: 5_000,
        calls: false,
        calendar: None,
    };
}

/// An argument whose value is one of a few names, written in any case: the enum, its
/// names, and its expansion to the runtime's variant of the same name.
macro_rules! choice {
    ($(#[$doc:meta])* $choice:ident { $($variant:ident = $name:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $choice { $($variant),+ }

        impl $choice {
            const CHOICES: &'static [(&'static str, $choice)] = &[$(($name, $choice::$variant)),+];
        }

        impl ToTokens for $choice {
            fn to_tokens(&self, tokens: &mut TokenStream) {
                let variant = match self { $($choice::$variant => stringify!($variant)),+ };
                tokens.append(Ident::new(variant, Span::call_site()));
            }
        }
    };
}

choice! {
    /// `limit_type = ...`.
    LimitType { Ip = "IP", UserId = "USER_ID", Global = "GLOBAL", Custom = "CUSTOM" }
}

choice! {
    /// `algorithm = ...`.
    Algorithm {
        SlidingLog = "SLIDING_LOG",
        FixedWindow = "FIXED_WINDOW",
        SlidingWindow = "SLIDING_WINDOW",
        TokenBucket = "TOKEN_BUCKET",
    }
}

/// One argument's value and the span of its name, set at most once.
struct Slot<T> {
    name: &'static str,
    value: Option<(Span, T)>,
}

impl<T> Slot<T> {
    fn new(name: &'static str) -> Self {
        Slot { name, value: None }
    }

    /// Parses `name = value`, the value with `value`, and sets it. `value` records an
    /// invalid value in `errors` and gives `None`: the argument then stays unset.
    fn parse<K: Parse + ToTokens>(
        &mut self,
        input: ParseStream,
        errors: &mut Errors,
        value: impl FnOnce(ParseStream, &mut Errors) -> syn::Result<Option<T>>,
    ) -> syn::Result<()> {
        let name = input.parse::<K>()?.span();
        input.parse::<Token![=]>()?;
        if let Some(value) = value(input, errors)? {
            self.set(errors, name, value);
        }
        Ok(())
    }

    /// The one place repeated arguments are detected.
    fn set(&mut self, errors: &mut Errors, name: Span, value: T) {
        if self.value.is_some() {
            errors.push(syn::Error::new(
                name,
                format!("duplicate argument `{}`", self.name),
            ));
        } else {
            self.value = Some((name, value));
        }
    }

    fn span(&self) -> Option<Span> {
        self.value.as_ref().map(|(span, _)| *span)
    }

    fn get(&self) -> Option<&T> {
        self.value.as_ref().map(|(_, value)| value)
    }

    fn into_inner(self) -> Option<T> {
        self.value.map(|(_, value)| value)
    }
}

/// A value parsed as written, with no check of its own.
fn parsed<T: Parse>(input: ParseStream, _: &mut Errors) -> syn::Result<Option<T>> {
    input.parse().map(Some)
}

/// Arguments as written, before the checks that involve several of them (or the function).
pub struct RawArgs {
    errors: Errors,
    rules: Slot<Vec<Rule>>,
    /// `rules = <expr>`: a slot of its own, so that it can be told apart from `rules(...)`.
    rules_per_call: Slot<Expr>,
    prevent_duplicate: Slot<bool>,
    prevent_duplicate_rule: Slot<Rule>,
    limit_type: Slot<(LimitType, Span)>,
    by: Slot<Expr>,
    key: Slot<LitStr>,
    message: Slot<LitStr>,
    algorithm: Slot<Algorithm>,
    on_limit: Slot<ExprPath>,
    limiter: Slot<Expr>,
    krate: Slot<Path>,
    name: Slot<LitStr>,
    cost: Slot<Expr>,
    charge_if: Slot<Expr>,
    settle: Slot<Expr>,
    block_for: Slot<Vec<u64>>,
    wait: Slot<u64>,
    shadow: Slot<bool>,
    concurrency: Slot<u64>,
    lease: Slot<u64>,
    warn_at: Slot<u8>,
    allowance: Slot<u64>,
}

impl RawArgs {
    fn new() -> Self {
        RawArgs {
            errors: Errors::default(),
            rules: Slot::new("rules"),
            rules_per_call: Slot::new("rules"),
            prevent_duplicate: Slot::new("prevent_duplicate"),
            prevent_duplicate_rule: Slot::new("prevent_duplicate_rule"),
            limit_type: Slot::new("limit_type"),
            by: Slot::new("by"),
            key: Slot::new("key"),
            message: Slot::new("message"),
            algorithm: Slot::new("algorithm"),
            on_limit: Slot::new("on_limit"),
            limiter: Slot::new("limiter"),
            krate: Slot::new("crate"),
            name: Slot::new("name"),
            cost: Slot::new("cost"),
            charge_if: Slot::new("charge_if"),
            settle: Slot::new("settle"),
            block_for: Slot::new("block_for"),
            wait: Slot::new("wait"),
            shadow: Slot::new("shadow"),
            concurrency: Slot::new("concurrency"),
            lease: Slot::new("lease"),
            warn_at: Slot::new("warn_at"),
            allowance: Slot::new("allowance"),
        }
    }

    /// Parses one `name = value` (or `rules(...)`). A malformed value is an `Err`; a
    /// well-formed but invalid one is recorded in `errors` and parsing goes on.
    fn parse_argument(&mut self, input: ParseStream, errors: &mut Errors) -> syn::Result<()> {
        let lookahead = input.lookahead1();
        if lookahead.peek(kw::rules) && input.peek2(Token![=]) {
            self.rules_per_call
                .parse::<kw::rules>(input, errors, parsed)?;
        } else if lookahead.peek(kw::rules) {
            let name = input.parse::<kw::rules>()?.span;
            let rules = parse_rules(input, errors)?;
            self.rules.set(errors, name, rules);
        } else if lookahead.peek(kw::prevent_duplicate) {
            self.prevent_duplicate.parse::<kw::prevent_duplicate>(
                input,
                errors,
                bool_literal("prevent_duplicate"),
            )?;
        } else if lookahead.peek(kw::prevent_duplicate_rule) {
            self.prevent_duplicate_rule
                .parse::<kw::prevent_duplicate_rule>(input, errors, parse_rule_call)?;
        } else if lookahead.peek(kw::limit_type) {
            self.limit_type
                .parse::<kw::limit_type>(input, errors, |input, errors| {
                    let ident = input.parse::<Ident>()?;
                    let value = errors.ok(choose(&ident, "limit_type", LimitType::CHOICES));
                    Ok(value.map(|value| (value, ident.span())))
                })?;
        } else if lookahead.peek(kw::by) {
            self.by.parse::<kw::by>(input, errors, parsed)?;
        } else if lookahead.peek(kw::key) {
            self.key.parse::<kw::key>(input, errors, parsed)?;
        } else if lookahead.peek(kw::message) {
            self.message.parse::<kw::message>(input, errors, parsed)?;
        } else if lookahead.peek(kw::algorithm) {
            self.algorithm
                .parse::<kw::algorithm>(input, errors, |input, errors| {
                    let ident = input.parse::<Ident>()?;
                    Ok(errors.ok(choose(&ident, "algorithm", Algorithm::CHOICES)))
                })?;
        } else if lookahead.peek(kw::on_limit) {
            self.on_limit.parse::<kw::on_limit>(input, errors, parsed)?;
        } else if lookahead.peek(kw::limiter) {
            self.limiter.parse::<kw::limiter>(input, errors, parsed)?;
        } else if lookahead.peek(Token![crate]) {
            self.krate
                .parse::<Token![crate]>(input, errors, |input, _| {
                    input.call(Path::parse_mod_style).map(Some)
                })?;
        } else if lookahead.peek(kw::name) {
            self.name
                .parse::<kw::name>(input, errors, |input, errors| {
                    let value = input.parse::<LitStr>()?;
                    Ok(errors.ok(check_name(&value)).map(|()| value))
                })?;
        } else if lookahead.peek(kw::cost) {
            self.cost
                .parse::<kw::cost>(input, errors, |input, errors| {
                    let expr = input.parse::<Expr>()?;
                    Ok(errors.ok(check_cost(&expr)).map(|()| expr))
                })?;
        } else if lookahead.peek(kw::charge_if) {
            self.charge_if
                .parse::<kw::charge_if>(input, errors, parsed)?;
        } else if lookahead.peek(kw::settle) {
            self.settle.parse::<kw::settle>(input, errors, parsed)?;
        } else if lookahead.peek(kw::block_for) {
            self.block_for
                .parse::<kw::block_for>(input, errors, lockout_durations)?;
        } else if lookahead.peek(kw::allowance) {
            self.allowance
                .parse::<kw::allowance>(input, errors, duration_literal("allowance"))?;
        } else if lookahead.peek(kw::wait) {
            self.wait
                .parse::<kw::wait>(input, errors, duration_literal("wait"))?;
        } else if lookahead.peek(kw::shadow) {
            self.shadow
                .parse::<kw::shadow>(input, errors, bool_literal("shadow"))?;
        } else if lookahead.peek(kw::concurrency) {
            self.concurrency
                .parse::<kw::concurrency>(input, errors, concurrency_literal)?;
        } else if lookahead.peek(kw::lease) {
            self.lease
                .parse::<kw::lease>(input, errors, duration_literal("lease"))?;
        } else if lookahead.peek(kw::warn_at) {
            self.warn_at
                .parse::<kw::warn_at>(input, errors, warn_at_literal)?;
        } else {
            return Err(unknown(input, lookahead, "argument", ARGUMENTS));
        }
        Ok(())
    }

    /// The checks that involve several arguments or the function's return type; then the
    /// typed [`Args`], or every error found.
    pub fn validate(mut self, returns: Returns) -> syn::Result<Args> {
        let limit_type = self.limit_type.get().copied();
        let prevent_duplicate = self.prevent_duplicate.get().copied().unwrap_or(false);

        if let (Some((LimitType::Global, _)), Some(by)) = (limit_type, self.by.span()) {
            self.errors.push(syn::Error::new(
                by,
                "`by` cannot be used with limit_type = GLOBAL: a global limit counts every \
                 caller in one budget, so it has no identity; remove `by`, or choose \
                 limit_type = IP, USER_ID or CUSTOM",
            ));
        }
        if let (Some((LimitType::Custom, ident)), None) = (limit_type, self.by.get()) {
            self.errors.push(syn::Error::new(
                ident,
                "limit_type = CUSTOM needs `by = <expr>`, the value whose budget is counted \
                 (e.g. `by = phone`)",
            ));
        }
        if let (Some(span), false) = (self.prevent_duplicate_rule.span(), prevent_duplicate) {
            self.errors.push(syn::Error::new(
                span,
                "prevent_duplicate_rule has no effect without `prevent_duplicate = true`",
            ));
        }
        if let (Some(per_call), Some(_)) = (self.rules_per_call.span(), self.rules.get()) {
            self.errors.push(syn::Error::new(
                per_call,
                "`rules = <expr>` cannot be used with `rules(...)`: choose the rules per call \
                 with `rules = <expr>`, or write them in `rules(...)`",
            ));
        }
        if self.rules.get().is_none() && self.rules_per_call.get().is_none() && !prevent_duplicate {
            self.errors.push(syn::Error::new(
                Span::call_site(),
                "#[rate_limiter] needs at least one rule: add `rules(...)`, e.g. \
                 `rules(\"10/minute\")`, `rules = <expr>` for rules chosen per call, or \
                 `prevent_duplicate = true`",
            ));
        }
        if let (Some(lease), None) = (self.lease.span(), self.concurrency.get()) {
            self.errors.push(syn::Error::new(
                lease,
                "`lease` has no effect without `concurrency = N`: it is how long a call's \
                 slot outlives its holder; add `concurrency`, or remove `lease`",
            ));
        }
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

        let block_for = self.block_for.into_inner();
        Ok(Args {
            rules: match self.rules_per_call.into_inner() {
                Some(per_call) => Rules::PerCall(per_call),
                None => Rules::Listed(self.rules.into_inner().unwrap_or_default()),
            },
            duplicate_rule: prevent_duplicate.then(|| {
                self.prevent_duplicate_rule
                    .into_inner()
                    .unwrap_or(Rule::DEFAULT_DUPLICATE)
            }),
            limit_type: limit_type.map_or(LimitType::Ip, |(value, _)| value),
            by: self.by.into_inner(),
            prefix: self.key.into_inner(),
            message: self.message.into_inner(),
            algorithm: self.algorithm.into_inner().unwrap_or(Algorithm::SlidingLog),
            limited: limited.expect("no errors, so a way to return"),
            limiter: self.limiter.into_inner(),
            krate: self
                .krate
                .into_inner()
                .unwrap_or_else(|| syn::parse_quote!(::redis_ratelimit)),
            name: self.name.into_inner(),
            cost: self.cost.into_inner(),
            charge_if: self.charge_if.into_inner(),
            settle: self.settle.into_inner(),
            block_for_ms: block_for.as_deref().and_then(|ms| match ms {
                [one] => Some(*one),
                _ => None,
            }),
            block_schedule_ms: block_for.filter(|ms| ms.len() > 1),
            wait_ms: self.wait.into_inner(),
            shadow: self.shadow.into_inner().unwrap_or(false),
            concurrency: self
                .concurrency
                .into_inner()
                .map(|max| (max, self.lease.into_inner())),
            warn_at: self.warn_at.into_inner(),
            allowance_ms: self.allowance.into_inner(),
        })
    }
}

impl Parse for RawArgs {
    /// Never fails: errors are kept for [`RawArgs::validate`] to report with the others.
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut args = RawArgs::new();
        let mut errors = Errors::default();
        parse_list(input, &mut errors, |input, errors| {
            args.parse_argument(input, errors)
        });
        args.errors = errors;
        Ok(args)
    }
}

/// Parses the comma-separated list that fills `input`, one `item` at a time.
///
/// A malformed item is recorded in `errors` and skipped up to the next top-level comma, so
/// that the items after it are still checked. The whole input is always consumed: syn
/// would report leftover tokens as an "unexpected token" in place of the real errors.
fn parse_list(
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

/// `(rule(...) | "N/unit", ...)` after `rules`. Invalid rules (and an empty list) are
/// recorded in `errors`; the valid ones are returned.
fn parse_rules(input: ParseStream, errors: &mut Errors) -> syn::Result<Vec<Rule>> {
    let content;
    let parens = parenthesized!(content in input);
    if content.is_empty() {
        errors.push(syn::Error::new(
            parens.span.join(),
            "rules(...) needs at least one rule: `rule(count = N, time = T)` or a string \
             such as \"10/minute\"",
        ));
    }
    let mut rules = Vec::new();
    parse_list(&content, errors, |input, errors| {
        let lookahead = input.lookahead1();
        let rule = if lookahead.peek(kw::rule) {
            parse_rule_call(input, errors)?
        } else if lookahead.peek(LitStr) {
            errors.ok(parse_rule_text(&input.parse()?))
        } else {
            return Err(lookahead.error());
        };
        rules.extend(rule);
        Ok(())
    });
    Ok(rules)
}

/// `rule(count = N, time = T, unit = U)`, its arguments in any order. `Ok(None)` when it is
/// invalid; the reasons are in `errors`.
fn parse_rule_call(input: ParseStream, errors: &mut Errors) -> syn::Result<Option<Rule>> {
    let rule_kw = input.parse::<kw::rule>()?;
    let content;
    parenthesized!(content in input);
    let mut rule_errors = Errors::default();
    let mut fields = RuleFields::default();
    parse_list(&content, &mut rule_errors, |input, errors| {
        fields.parse_field(input, errors)
    });
    // A missing field is worth reporting only when the fields were all understood.
    let understood = rule_errors.is_empty();
    let complain = |errors: &mut Errors, what: &str| {
        if understood {
            errors.push(syn::Error::new(
                rule_kw.span,
                format!(
                    "rule(...) needs `{what} = ...`: write rule(count = N, time = T, unit = U)"
                ),
            ));
        }
    };

    let count = match fields.count.into_inner() {
        Some(lit) => rule_errors.ok(lit.base10_parse().and_then(|count| {
            ratelimit_rule_text::check_count(count).map_err(|invalid| invalid_rule(&lit, invalid))
        })),
        None => {
            complain(&mut rule_errors, "count");
            None
        }
    };
    let calendar = fields.calendar.get().copied();
    if calendar.is_some() {
        // A calendar period is the rule's window: a time or unit beside it says another.
        let beside = |span: Option<Span>, what: &str| {
            span.map(|span| {
                syn::Error::new(
                    span,
                    format!(
                        "`{what}` cannot be given with `calendar`: a calendar rule counts in \
                         the UTC day or month `calendar` names; remove `{what}`"
                    ),
                )
            })
        };
        let errors = [
            beside(fields.time.span(), "time"),
            beside(fields.unit.span(), "unit"),
        ];
        for err in errors.into_iter().flatten() {
            rule_errors.push(err);
        }
    }
    let (unit_ms, unit_ident) = match fields.unit.into_inner() {
        Some((ms, ident)) => (ms, Some(ident)),
        None => (1_000, None),
    };
    let window_ms = match (calendar, fields.time.into_inner()) {
        (Some(calendar), _) => Some(calendar.longest_ms()),
        (None, time) => match time {
            Some(lit) => rule_errors.ok(lit.base10_parse().and_then(|time| {
                ratelimit_rule_text::window_ms(time, unit_ms).map_err(|invalid| match invalid {
                    // Too long is the time in its unit, so both are underlined.
                    InvalidRule::WindowTooLong => invalid_rule(quote!(#lit #unit_ident), invalid),
                    // Only `time = 0` makes an empty window: say which argument that is.
                    InvalidRule::EmptyWindow => syn::Error::new_spanned(
                        &lit,
                        "`time` must be at least 1: a rule's window lasts `time` units (`unit`, \
                         SECONDS by default), and 0 is no window",
                    ),
                    _ => invalid_rule(&lit, invalid),
                })
            })),
            None => {
                complain(&mut rule_errors, "time");
                None
            }
        },
    };
    let calls = fields.calls.into_inner().unwrap_or(false);
    Ok(match rule_errors.into_result() {
        Ok(()) => count.zip(window_ms).map(|(count, window_ms)| Rule {
            count,
            window_ms,
            calls,
            calendar,
        }),
        Err(err) => {
            errors.push(err);
            None
        }
    })
}

fn invalid_rule(tokens: impl ToTokens, invalid: InvalidRule) -> syn::Error {
    syn::Error::new_spanned(tokens, invalid.message())
}

/// The `name = value` list inside `rule(...)`, as written.
struct RuleFields {
    count: Slot<LitInt>,
    time: Slot<LitInt>,
    /// The unit in milliseconds, and its name.
    unit: Slot<(u64, Ident)>,
    /// `calls = true`: the rule counts calls.
    calls: Slot<bool>,
    /// `calendar = DAY | MONTH`: the rule counts in calendar periods.
    calendar: Slot<Calendar>,
}

impl Default for RuleFields {
    fn default() -> Self {
        RuleFields {
            count: Slot::new("count"),
            time: Slot::new("time"),
            unit: Slot::new("unit"),
            calls: Slot::new("calls"),
            calendar: Slot::new("calendar"),
        }
    }
}

impl RuleFields {
    fn parse_field(&mut self, input: ParseStream, errors: &mut Errors) -> syn::Result<()> {
        let lookahead = input.lookahead1();
        if lookahead.peek(kw::count) {
            self.count.parse::<kw::count>(input, errors, parsed)?;
        } else if lookahead.peek(kw::time) {
            self.time.parse::<kw::time>(input, errors, parsed)?;
        } else if lookahead.peek(kw::unit) {
            self.unit
                .parse::<kw::unit>(input, errors, |input, errors| {
                    let ident = input.parse::<Ident>()?;
                    let units: Vec<_> = UNITS.iter().map(|unit| (unit.name(), unit.ms)).collect();
                    let ms = errors.ok(choose(&ident, "unit", &units));
                    Ok(ms.map(|ms| (ms, ident)))
                })?;
        } else if lookahead.peek(kw::calls) {
            self.calls
                .parse::<kw::calls>(input, errors, bool_literal("calls"))?;
        } else if lookahead.peek(kw::calendar) {
            self.calendar
                .parse::<kw::calendar>(input, errors, |input, errors| {
                    let ident = input.parse::<Ident>()?;
                    let calendars: Vec<_> = Calendar::ALL
                        .iter()
                        .map(|calendar| (calendar.name(), *calendar))
                        .collect();
                    Ok(errors.ok(choose(&ident, "calendar", &calendars)))
                })?;
        } else {
            return Err(unknown(
                input,
                lookahead,
                "rule argument",
                "count, time, unit, calls, calendar",
            ));
        }
        Ok(())
    }
}

/// The error for what is none of the expected names: an unknown `what` (an identifier,
/// consumed), or syn's own "expected ..." for any other token.
fn unknown(input: ParseStream, lookahead: Lookahead1, what: &str, expected: &str) -> syn::Error {
    match input.parse::<Ident>() {
        Ok(ident) => syn::Error::new(
            ident.span(),
            format!("unknown {what} `{ident}`; expected {expected}"),
        ),
        Err(_) => lookahead.error(),
    }
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
fn bool_literal(
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

/// The milliseconds of `argument = "<duration>"`, in the rules' units (`"15 minutes"`,
/// `"900s"`, `"500ms"`); a duration of 0 or a malformed one is an error on the literal.
fn duration_literal(
    argument: &'static str,
) -> impl FnOnce(ParseStream, &mut Errors) -> syn::Result<Option<u64>> {
    move |input, errors| {
        if !input.peek(LitStr) {
            return Err(input.error(format!(
                "`{argument}` takes a duration string, e.g. `{argument} = \"15 minutes\"`, \
                 \"900s\" or \"500ms\""
            )));
        }
        let lit = input.parse::<LitStr>()?;
        let duration = ratelimit_rule_text::parse_duration(&lit.value())
            .map_err(|err| syn::Error::new(lit.span(), err));
        // Whole milliseconds, at most `MAX_WINDOW_MS`: the conversion is exact.
        Ok(errors
            .ok(duration)
            .map(|duration| duration.as_millis() as u64))
    }
}

/// `block_for = "<duration>"`, or a list of them for escalating lock-outs:
/// `block_for = ["1m", "10m", "1h"]`, at least one, each a duration string.
fn lockout_durations(input: ParseStream, errors: &mut Errors) -> syn::Result<Option<Vec<u64>>> {
    if !input.peek(syn::token::Bracket) {
        let one = duration_literal("block_for")(input, errors)?;
        return Ok(one.map(|ms| vec![ms]));
    }
    let list;
    let brackets = syn::bracketed!(list in input);
    let mut durations = Some(Vec::new());
    while !list.is_empty() {
        if !list.peek(LitStr) {
            errors.push(list.error(
                "`block_for = [...]` lists duration strings, one per lock-out in a row, e.g. \
                 `block_for = [\"1m\", \"10m\", \"1h\"]`",
            ));
            // The rest of the list is not read: one error says what is wrong with it.
            list.parse::<proc_macro2::TokenStream>()?;
            return Ok(None);
        }
        let ms = duration_literal("block_for")(&list, errors)?;
        match (&mut durations, ms) {
            (Some(durations), Some(ms)) => durations.push(ms),
            _ => durations = None,
        }
        if !list.is_empty() {
            list.parse::<syn::Token![,]>()?;
        }
    }
    if durations.as_ref().is_some_and(Vec::is_empty) {
        return Err(syn::Error::new(
            brackets.span.join(),
            "`block_for = []` needs at least one duration, e.g. `block_for = [\"1m\", \"10m\", \"1h\"]` \
             (the nth lock-out in a row lasts the nth; the last repeats)",
        ));
    }
    Ok(durations)
}

/// `concurrency = N`: an integer literal from 1 to `MAX_COUNT`.
fn concurrency_literal(input: ParseStream, errors: &mut Errors) -> syn::Result<Option<u64>> {
    if !input.peek(LitInt) {
        return Err(input.error(
            "`concurrency` takes an integer literal, the most calls of one caller running at \
             once, e.g. `concurrency = 4`",
        ));
    }
    let lit = input.parse::<LitInt>()?;
    let max = lit
        .base10_parse::<u64>()
        .ok()
        .filter(|max| (1..=ratelimit_rule_text::MAX_COUNT).contains(max));
    let checked = max.ok_or_else(|| {
        syn::Error::new(
            lit.span(),
            format!(
                "concurrency must be at least 1 and at most {}: it is the most calls of one \
                 caller running at once",
                ratelimit_rule_text::MAX_COUNT
            ),
        )
    });
    Ok(errors.ok(checked))
}

/// `warn_at = P`: an integer literal from 1 to 99, a percentage of each rule's count.
fn warn_at_literal(input: ParseStream, errors: &mut Errors) -> syn::Result<Option<u8>> {
    if !input.peek(LitInt) {
        return Err(input.error(
            "`warn_at` takes an integer literal, the percentage of a rule's count at which \
             to warn, e.g. `warn_at = 80`",
        ));
    }
    let lit = input.parse::<LitInt>()?;
    let percent = lit
        .base10_parse::<u8>()
        .ok()
        .filter(|percent| (1..=99).contains(percent));
    let checked = percent.ok_or_else(|| {
        syn::Error::new(
            lit.span(),
            "warn_at must be a percentage from 1 to 99: a warning at 0 % would fire on the \
             first call, and at 100 % the refusal itself says it",
        )
    });
    Ok(errors.ok(checked))
}

/// The value named by `ident` (case-insensitively), or an error on it listing the choices
/// (in upper case, as the attribute spells them).
fn choose<T: Copy>(ident: &Ident, what: &str, choices: &[(&str, T)]) -> syn::Result<T> {
    let name = ident.to_string();
    choices
        .iter()
        .find(|(choice, _)| choice.eq_ignore_ascii_case(&name))
        .map(|(_, value)| *value)
        .ok_or_else(|| {
            let names: Vec<String> = choices
                .iter()
                .map(|(choice, _)| choice.to_ascii_uppercase())
                .collect();
            syn::Error::new(
                ident.span(),
                format!(
                    "unknown {what} `{name}`; expected one of {}",
                    names.join(", ")
                ),
            )
        })
}

/// A rule written as a string, with errors on the literal. The grammar and its messages are
/// the runtime's (`ratelimit_rule_text`), which also reads rules stored in Redis.
fn parse_rule_text(lit: &LitStr) -> syn::Result<Rule> {
    ratelimit_rule_text::parse_rule(&lit.value())
        .map(|rule| Rule {
            count: rule.count,
            window_ms: rule.window_ms,
            calls: rule.calls,
            calendar: rule.calendar,
        })
        .map_err(|err| syn::Error::new(lit.span(), err))
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn args(tokens: TokenStream) -> syn::Result<Args> {
        let returns = Returns::Result {
            error_span: Span::call_site(),
        };
        syn::parse2::<RawArgs>(tokens)?.validate(returns)
    }

    /// The rules of `rules(...)`; panics for `rules = <expr>`.
    fn listed(args: &Args) -> &[Rule] {
        match &args.rules {
            Rules::Listed(rules) => rules,
            Rules::PerCall(_) => panic!("rules chosen per call"),
        }
    }

    fn messages(tokens: TokenStream) -> Vec<String> {
        match args(tokens) {
            Ok(_) => Vec::new(),
            Err(err) => err.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn rules_and_units_become_milliseconds() {
        let args = args(quote!(rules(
            rule(count = 10, time = 60),
            rule(time = 3, unit = minutes, count = 20),
            rule(count = 1, time = 250, unit = MILLISECONDS),
            "1000/day"
        )))
        .unwrap();
        let windows: Vec<(u64, u64)> = listed(&args)
            .iter()
            .map(|r| (r.count, r.window_ms))
            .collect();
        assert_eq!(
            windows,
            [(10, 60_000), (20, 180_000), (1, 250), (1000, 86_400_000)]
        );
        assert_eq!(args.duplicate_rule, None);
        assert_eq!(args.limit_type, LimitType::Ip);
        assert_eq!(args.algorithm, Algorithm::SlidingLog);
    }

    #[test]
    fn prevent_duplicate_adds_its_rule_after_the_others() {
        let only = args(quote!(prevent_duplicate = true)).unwrap();
        assert!(listed(&only).is_empty());
        assert_eq!(only.duplicate_rule, Some(Rule::DEFAULT_DUPLICATE));
        let custom = args(quote!(
            rules("1/s"),
            prevent_duplicate = true,
            prevent_duplicate_rule = rule(count = 2, time = 10)
        ))
        .unwrap();
        assert_eq!(listed(&custom).len(), 1);
        let two_per_ten_seconds = Rule {
            count: 2,
            window_ms: 10_000,
            calls: false,
            calendar: None,
        };
        assert_eq!(custom.duplicate_rule, Some(two_per_ten_seconds));
    }

    #[test]
    fn every_other_argument_is_kept() {
        let args = args(quote!(
            rules("1/s"),
            limit_type = custom,
            by = user.id(),
            key = "p:",
            message = "slow down",
            algorithm = token_bucket,
            on_limit = limited::<u8>,
            limiter = &LIMITER,
            crate = ::facade,
            name = "billing::send",
            cost = batch.len() as u64,
        ))
        .unwrap();
        assert_eq!(args.name.unwrap().value(), "billing::send");
        assert_eq!(args.cost, Some(parse_quote!(batch.len() as u64)));
        assert_eq!(args.limit_type, LimitType::Custom);
        assert_eq!(args.algorithm, Algorithm::TokenBucket);
        assert_eq!(args.by, Some(parse_quote!(user.id())));
        assert_eq!(args.prefix.unwrap().value(), "p:");
        assert_eq!(args.message.unwrap().value(), "slow down");
        assert!(
            matches!(args.limited, Limited::OnLimit(path) if path == parse_quote!(limited::<u8>))
        );
        assert_eq!(args.limiter, Some(parse_quote!(&LIMITER)));
        assert_eq!(args.krate, parse_quote!(::facade));
    }

    #[test]
    fn windows_the_runtime_cannot_count_are_rejected() {
        let too_long = InvalidRule::WindowTooLong.message();
        let too_large = InvalidRule::CountTooLarge.message();
        let max_days = ratelimit_rule_text::MAX_WINDOW_MS / 86_400_000;
        assert!(args(quote!(rules(rule(count = 1, time = #max_days, unit = DAYS)))).is_ok());
        let over = max_days + 1;
        let errors = messages(quote!(rules(rule(count = 1, time = #over, unit = DAYS))));
        assert_eq!(errors, [too_long]);
        let errors = messages(quote!(rules(rule(count = 1, time = 18446744073709551615))));
        assert_eq!(errors, [too_long]);
        let errors = messages(quote!(rules(rule(count = 18446744073709551616, time = 1))));
        assert_eq!(errors, ["number too large to fit in target type"]);
        let errors = messages(quote!(rules("1/18446744073709551615d")));
        assert!(errors[0].ends_with(too_long), "{errors:?}");
        let max_count = ratelimit_rule_text::MAX_COUNT;
        assert!(args(quote!(rules(rule(count = #max_count, time = 1)))).is_ok());
        let over = max_count + 1;
        let errors = messages(quote!(rules(rule(count = #over, time = 1))));
        assert_eq!(errors, [too_large]);
        let errors = messages(quote!(rules("4503599627370497/second")));
        assert!(errors[0].ends_with(too_large), "{errors:?}");
    }

    #[test]
    fn all_errors_are_reported_and_later_arguments_still_checked() {
        let errors = messages(quote!(
            rules(rule(count = 0, time = 0), "often"),
            limit_type = PER_IP,
            algorithm = LEAKY,
            bogus = 1,
            by = ,
            message = "m",
            message = "again",
        ));
        assert_eq!(errors.len(), 8, "{errors:#?}");
        let expected = [
            "a rule's count must be at least 1",
            "`time` must be at least 1",
            "cannot parse rule \"often\"",
            "unknown limit_type `PER_IP`; expected one of IP, USER_ID, GLOBAL, CUSTOM",
            "unknown algorithm `LEAKY`",
            "unknown argument `bogus`",
            "expected an expression",
            "duplicate argument `message`",
        ];
        for (error, expected) in errors.iter().zip(expected) {
            assert!(error.contains(expected), "{error:?} lacks {expected:?}");
        }
    }

    #[test]
    fn a_malformed_rule_keeps_its_own_error_and_the_others() {
        let errors = messages(quote!(
            rules(rule(unit = WEEKS, period = 60), "1/s", rule(count = 1 time = 1)),
            limit_type = NOPE
        ));
        assert_eq!(errors.len(), 4, "{errors:#?}");
        assert!(errors[0].starts_with("unknown unit `WEEKS`"), "{errors:?}");
        assert!(
            errors[1].starts_with("unknown rule argument `period`"),
            "{errors:?}"
        );
        assert_eq!(errors[2], "expected `,`");
        assert!(
            errors[3].starts_with("unknown limit_type `NOPE`"),
            "{errors:?}"
        );
    }

    #[test]
    fn cross_argument_misuse_is_rejected() {
        let errors = messages(quote!(rules("1/s"), limit_type = GLOBAL, by = x));
        assert!(errors[0].starts_with("`by` cannot be used"), "{errors:?}");
        let errors = messages(quote!(rules("1/s"), limit_type = CUSTOM));
        assert!(
            errors[0].starts_with("limit_type = CUSTOM needs `by"),
            "{errors:?}"
        );
        let errors = messages(quote!(
            rules("1/s"),
            prevent_duplicate_rule = rule(count = 1, time = 1)
        ));
        assert!(
            errors[0].starts_with("prevent_duplicate_rule has no effect"),
            "{errors:?}"
        );
        let errors = messages(quote!(prevent_duplicate = false));
        assert!(errors[0].contains("needs at least one rule"), "{errors:?}");
        let errors = messages(quote!());
        assert!(errors[0].contains("needs at least one rule"), "{errors:?}");
    }

    #[test]
    fn rule_calls_need_count_and_time_once_each() {
        let errors = messages(quote!(rules(rule(
            count = 1,
            count = 2,
            time = 1,
            unit = WEEKS
        ))));
        assert_eq!(
            errors,
            [
                "duplicate argument `count`",
                "unknown unit `WEEKS`; expected one of MILLISECONDS, SECONDS, MINUTES, HOURS, DAYS"
            ]
        );
        let errors = messages(quote!(rules(rule(time = 1))));
        assert!(errors[0].contains("needs `count = ...`"), "{errors:?}");
        let errors = messages(quote!(rules()));
        assert!(errors[0].contains("needs at least one rule"), "{errors:?}");
    }

    #[test]
    fn names_of_the_documented_grammar_are_accepted() {
        for name in [
            "billing::send_invoice",
            "api/v2/orders",
            "v1.2-beta_3",
            "X",
            "a::b/c",
        ] {
            let args = args(quote!(rules("1/s"), name = #name)).unwrap();
            assert_eq!(args.name.unwrap().value(), name);
        }
    }

    #[test]
    fn empty_and_malformed_names_are_rejected() {
        assert_eq!(
            messages(quote!(rules("1/s"), name = "")).len(),
            1,
            "an empty name"
        );
        assert!(messages(quote!(rules("1/s"), name = ""))[0].starts_with("`name` cannot be empty"));
        for (name, why) in [
            ("send code", "' ' is not allowed"),
            ("a\tb", "'\\t' is not allowed"),
            ("a:b", "':' is not allowed"),
            ("a:::b", "':' is not allowed"),
            ("{tag}", "'{' is not allowed"),
            ("caf\u{e9}", "'\u{e9}' is not allowed"),
            ("a::", "it has an empty segment"),
            ("::a", "it has an empty segment"),
            ("a//b", "it has an empty segment"),
            ("/", "it has an empty segment"),
        ] {
            let errors = messages(quote!(rules("1/s"), name = #name));
            assert_eq!(errors.len(), 1, "{name:?}: {errors:?}");
            let expected = format!("malformed `name` {name:?}: {why}; a name is");
            assert!(errors[0].starts_with(&expected), "{name:?}: {errors:?}");
        }
    }

    #[test]
    fn a_literal_cost_of_zero_is_rejected_and_expressions_are_kept() {
        for zero in [quote!(0), quote!(0u64), quote!(0_0)] {
            let errors = messages(quote!(rules("1/s"), cost = #zero));
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(
                errors[0].starts_with("cost must be at least 1"),
                "{errors:?}"
            );
        }
        assert!(args(quote!(rules("1/s"), cost = 3)).is_ok());
        assert!(args(quote!(rules("1/s"), cost = n)).is_ok());
        let errors = messages(quote!(rules("1/s"), cost = 2, cost = 3));
        assert_eq!(errors, ["duplicate argument `cost`"]);
    }

    #[test]
    fn calendar_rules_count_in_days_or_months_alone() {
        let args = args(quote!(rules(
            rule(count = 2000000, calendar = MONTH),
            rule(calendar = day, count = 100, calls = true),
            "5000 per calendar day"
        )))
        .unwrap();
        let rules: Vec<_> = listed(&args)
            .iter()
            .map(|r| (r.count, r.calendar, r.calls))
            .collect();
        assert_eq!(
            rules,
            [
                (2_000_000, Some(Calendar::Month), false),
                (100, Some(Calendar::Day), true),
                (5_000, Some(Calendar::Day), false),
            ]
        );
        let errors = messages(quote!(rules(rule(
            count = 1,
            calendar = MONTH,
            time = 60,
            unit = SECONDS
        ))));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with("`time` cannot be given with `calendar`"));
        assert!(errors[1].starts_with("`unit` cannot be given with `calendar`"));
        let errors = messages(quote!(rules(rule(count = 1, calendar = WEEK))));
        assert_eq!(
            errors,
            ["unknown calendar `WEEK`; expected one of DAY, MONTH"]
        );
        let errors = messages(quote!(rules(rule(calendar = DAY))));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("`count = ...`"), "{errors:?}");
    }

    #[test]
    fn rules_counting_calls_and_a_settled_cost_are_kept() {
        let args = args(quote!(
            rules(
                rule(count = 60, time = 60, calls = true),
                "90000/minute",
                "5 calls/s"
            ),
            cost = prompt.max_tokens,
            settle = |r: &Result<u64, E>| *r.as_ref().unwrap_or(&0),
        ))
        .unwrap();
        let calls: Vec<bool> = listed(&args).iter().map(|r| r.calls).collect();
        assert_eq!(calls, [true, false, true]);
        assert_eq!(
            args.settle,
            Some(parse_quote!(|r: &Result<u64, E>| *r.as_ref().unwrap_or(&0)))
        );
        let errors = messages(quote!(rules(rule(count = 1, time = 1, calls = 1))));
        assert_eq!(errors.len(), 1, "{errors:?}");
        let errors = messages(quote!(rules("1/s"), settle = a, settle = b));
        assert_eq!(errors, ["duplicate argument `settle`"]);
    }

    #[test]
    fn policies_are_kept_and_off_by_default() {
        let plain = args(quote!(rules("1/s"))).unwrap();
        assert!(plain.charge_if.is_none());
        assert_eq!(
            (plain.block_for_ms, plain.wait_ms, plain.shadow),
            (None, None, false)
        );
        let args = args(quote!(
            rules = plan_rules(&user),
            charge_if = Result::is_err,
            block_for = "15 minutes",
            wait = "500ms",
            shadow = true,
        ))
        .unwrap();
        assert!(
            matches!(&args.rules, Rules::PerCall(expr) if *expr == parse_quote!(plan_rules(&user)))
        );
        assert_eq!(args.charge_if, Some(parse_quote!(Result::is_err)));
        assert_eq!(args.block_for_ms, Some(900_000));
        assert_eq!(args.wait_ms, Some(500));
        assert!(args.shadow);
        let off = self::args(quote!(rules("1/s"), shadow = false)).unwrap();
        assert!(!off.shadow);
    }

    #[test]
    fn durations_take_the_rule_units() {
        for (text, ms) in [
            ("15 minutes", 900_000),
            ("900s", 900_000),
            ("1 hour", 3_600_000),
            ("500ms", 500),
            ("2s", 2_000),
            ("1 DAY", 86_400_000),
        ] {
            let args = args(quote!(rules("1/s"), block_for = #text, wait = #text)).unwrap();
            assert_eq!(
                (args.block_for_ms, args.wait_ms),
                (Some(ms), Some(ms)),
                "{text}"
            );
        }
    }

    /// Asserts that there is one error per prefix, each starting with its prefix.
    #[track_caller]
    fn assert_errors_start_with(errors: &[String], prefixes: &[&str]) {
        assert_eq!(errors.len(), prefixes.len(), "{errors:#?}");
        for (error, prefix) in errors.iter().zip(prefixes) {
            assert!(
                error.starts_with(prefix),
                "{error:?} does not start with {prefix:?}"
            );
        }
    }

    #[test]
    fn block_for_takes_a_list_of_lock_outs_in_a_row() {
        let escalating =
            args(quote!(rules("1/s"), block_for = ["1m", "10 minutes", "1h"])).unwrap();
        assert_eq!(
            (escalating.block_for_ms, escalating.block_schedule_ms),
            (None, Some(vec![60_000, 600_000, 3_600_000]))
        );
        // A list of one is the single duration of 0.3.
        let one = args(quote!(rules("1/s"), block_for = ["90s"])).unwrap();
        assert_eq!(
            (one.block_for_ms, one.block_schedule_ms),
            (Some(90_000), None)
        );
        let errors = messages(quote!(rules("1/s"), block_for = []));
        assert_errors_start_with(&errors, &["`block_for = []` needs at least one duration"]);
        let errors = messages(quote!(rules("1/s"), block_for = ["1m", "soon", "0s"]));
        assert_errors_start_with(
            &errors,
            &["cannot parse duration \"soon\"", "duration \"0s\" is empty"],
        );
        let errors = messages(quote!(rules("1/s"), block_for = ["1m", 10]));
        assert_errors_start_with(&errors, &["`block_for = [...]` lists duration strings"]);
    }

    #[test]
    fn empty_malformed_and_unquoted_durations_are_rejected() {
        let errors = messages(quote!(rules("1/s"), block_for = "0s", wait = "0 minutes"));
        assert_errors_start_with(
            &errors,
            &[
                "duration \"0s\" is empty",
                "duration \"0 minutes\" is empty",
            ],
        );
        let errors = messages(quote!(
            rules("1/s"),
            block_for = "soon",
            wait = "2 fortnights"
        ));
        assert_errors_start_with(
            &errors,
            &[
                "cannot parse duration \"soon\"",
                "cannot parse duration \"2 fortnights\"",
            ],
        );
        let errors = messages(quote!(
            rules("1/s"),
            wait = 2,
            block_for = Duration::from_secs(1)
        ));
        assert_errors_start_with(
            &errors,
            &[
                "`wait` takes a duration string",
                "`block_for` takes a duration string",
            ],
        );
    }

    #[test]
    fn shadow_and_prevent_duplicate_take_only_a_bool_literal() {
        for value in [quote!(1), quote!(yes), quote!(cfg!(test)), quote!("true")] {
            let errors = messages(quote!(rules("1/s"), shadow = #value));
            assert_eq!(errors, ["`shadow` takes the literal `true` or `false`"]);
            let errors = messages(quote!(rules("1/s"), prevent_duplicate = #value));
            assert_eq!(
                errors,
                ["`prevent_duplicate` takes the literal `true` or `false`"]
            );
        }
    }

    #[test]
    fn rules_per_call_exclude_listed_rules_but_not_the_duplicate_rule() {
        let exclusive = ["`rules = <expr>` cannot be used with `rules(...)`"];
        assert_errors_start_with(&messages(quote!(rules("1/s"), rules = tiers())), &exclusive);
        assert_errors_start_with(&messages(quote!(rules = tiers(), rules("1/s"))), &exclusive);
        let errors = messages(quote!(rules = tiers(), rules = other()));
        assert_eq!(errors, ["duplicate argument `rules`"]);
        let both = args(quote!(rules = tiers(), prevent_duplicate = true)).unwrap();
        assert!(matches!(both.rules, Rules::PerCall(_)));
        assert_eq!(both.duplicate_rule, Some(Rule::DEFAULT_DUPLICATE));
    }
}
