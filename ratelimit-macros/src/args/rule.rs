//! One rule: `rule(count = N, time = T, ...)` or `"N/unit"`, into a [`Rule`] with its window
//! in milliseconds; and the list of them in `rules(...)`.

use proc_macro2::Span;
use quote::{quote, ToTokens};
use syn::parse::ParseStream;
use syn::{parenthesized, Ident, LitInt, LitStr};

use ratelimit_rule_text::{Calendar, InvalidRule, UNITS};

use super::choice::choose;
use super::keywords as kw;
use super::list::{parse_list, unknown};
use super::slot::{fill_slot, Slot};
use super::value::{bool_literal, parsed};
use crate::errors::Errors;

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
    pub const DEFAULT_DUPLICATE: Rule = Rule {
        count: 1,
        window_ms: 5_000,
        calls: false,
        calendar: None,
    };
}

/// `(rule(...) | "N/unit", ...)` after `rules`. Invalid rules (and an empty list) are
/// recorded in `errors`; the valid ones are returned.
pub fn parse_rules(input: ParseStream, errors: &mut Errors) -> syn::Result<Vec<Rule>> {
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
pub fn parse_rule_call(input: ParseStream, errors: &mut Errors) -> syn::Result<Option<Rule>> {
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
                         the UTC day, month or year `calendar` names; remove `{what}`"
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
#[derive(Default)]
struct RuleFields {
    count: Slot<LitInt>,
    time: Slot<LitInt>,
    /// The unit in milliseconds, and its name.
    unit: Slot<(u64, Ident)>,
    /// `calls = true`: the rule counts calls.
    calls: Slot<bool>,
    /// `calendar = DAY | MONTH | YEAR`: the rule counts in calendar periods.
    calendar: Slot<Calendar>,
}

impl RuleFields {
    fn parse_field(&mut self, input: ParseStream, errors: &mut Errors) -> syn::Result<()> {
        let lookahead = input.lookahead1();
        fill_slot! {
            lookahead, input, errors,
            [
                kw::count => self.count, parsed;
                kw::time => self.time, parsed;
                kw::unit => self.unit, unit;
                kw::calls => self.calls, bool_literal("calls");
                kw::calendar => self.calendar, calendar;
            ]
            _ => Err(unknown(
                input,
                lookahead,
                "rule argument",
                "count, time, unit, calls, calendar",
            )),
        }
    }
}

/// `unit = NAME`: the unit in milliseconds, and its name (underlined with a time too long).
fn unit(input: ParseStream, errors: &mut Errors) -> syn::Result<Option<(u64, Ident)>> {
    let ident = input.parse::<Ident>()?;
    let units: Vec<_> = UNITS.iter().map(|unit| (unit.name(), unit.ms)).collect();
    let ms = errors.ok(choose(&ident, "unit", &units));
    Ok(ms.map(|ms| (ms, ident)))
}

/// `calendar = DAY | MONTH | YEAR`.
fn calendar(input: ParseStream, errors: &mut Errors) -> syn::Result<Option<Calendar>> {
    let ident = input.parse::<Ident>()?;
    let calendars: Vec<_> = Calendar::ALL
        .iter()
        .map(|calendar| (calendar.name(), *calendar))
        .collect();
    Ok(errors.ok(choose(&ident, "calendar", &calendars)))
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
