//! The policies of a guarded call: `block_for`, `wait`, `shadow`, `concurrency` with its
//! `lease`, `warn_at` and `allowance`, parsed into [`Policies`].

use syn::parse::{Lookahead1, ParseStream};
use syn::{LitInt, LitStr, Token};

use super::keywords as kw;
use super::slot::{fill_slot, Parsed, Slot};
use super::value::bool_literal;
use crate::errors::Errors;

/// What a guarded call does besides counting; every policy is off by default.
pub struct Policies {
    /// `block_for = "..."`, or `["...", "...", ...]` (an escalating lock-out's schedule;
    /// a list of one is the one duration), in milliseconds: at least one.
    pub block_for_ms: Option<Vec<u64>>,
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

/// The policy arguments as written.
#[derive(Default)]
pub struct RawPolicies {
    block_for: Slot<Vec<u64>>,
    wait: Slot<u64>,
    shadow: Slot<bool>,
    concurrency: Slot<u64>,
    lease: Slot<u64>,
    warn_at: Slot<u8>,
    allowance: Slot<u64>,
}

impl RawPolicies {
    /// Parses one policy argument, if `next` is one; `None` for any other argument.
    pub fn parse(&mut self, next: &Lookahead1, input: ParseStream, errors: &mut Errors) -> Parsed {
        Some(fill_slot! {
            next, input, errors,
            [
                kw::block_for => self.block_for, lockout_durations;
                kw::allowance => self.allowance, duration_literal("allowance");
                kw::wait => self.wait, duration_literal("wait");
                kw::shadow => self.shadow, bool_literal("shadow");
                kw::concurrency => self.concurrency, concurrency_literal;
                kw::lease => self.lease, duration_literal("lease");
                kw::warn_at => self.warn_at, warn_at_literal;
            ]
            _ => return None,
        })
    }

    /// The typed [`Policies`]; a `lease` without `concurrency` is recorded in `errors`.
    pub fn validate(self, errors: &mut Errors) -> Policies {
        if let (Some(lease), None) = (self.lease.span(), self.concurrency.get()) {
            errors.push(syn::Error::new(
                lease,
                "`lease` has no effect without `concurrency = N`: it is how long a call's \
                 slot outlives its holder; add `concurrency`, or remove `lease`",
            ));
        }
        Policies {
            block_for_ms: self.block_for.into_inner(),
            wait_ms: self.wait.into_inner(),
            shadow: self.shadow.into_inner().unwrap_or(false),
            concurrency: self
                .concurrency
                .into_inner()
                .map(|max| (max, self.lease.into_inner())),
            warn_at: self.warn_at.into_inner(),
            allowance_ms: self.allowance.into_inner(),
        }
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
            list.parse::<Token![,]>()?;
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
