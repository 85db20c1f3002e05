//! The arguments' parsing and checks, on token streams; the diagnostics as users see them
//! are the UI tests' (`tests/ui/fail`).

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::parse_quote;

use ratelimit_rule_text::{Calendar, InvalidRule};

use super::*;

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
    assert!(matches!(args.limited, Limited::OnLimit(path) if path == parse_quote!(limited::<u8>)));
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
fn calendar_rules_count_in_days_months_or_years_alone() {
    let args = args(quote!(rules(
        rule(count = 2000000, calendar = MONTH),
        rule(calendar = day, count = 100, calls = true),
        "5000 per calendar day",
        rule(count = 1000, calendar = YEAR),
        "12 calls per calendar year"
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
            (1_000, Some(Calendar::Year), false),
            (12, Some(Calendar::Year), true),
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
        ["unknown calendar `WEEK`; expected one of DAY, MONTH, YEAR"]
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
        (
            plain.policies.block_for_ms,
            plain.policies.wait_ms,
            plain.policies.shadow
        ),
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
    assert_eq!(args.policies.block_for_ms, Some(vec![900_000]));
    assert_eq!(args.policies.wait_ms, Some(500));
    assert!(args.policies.shadow);
    let off = self::args(quote!(rules("1/s"), shadow = false)).unwrap();
    assert!(!off.policies.shadow);
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
            (args.policies.block_for_ms, args.policies.wait_ms),
            (Some(vec![ms]), Some(ms)),
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
    let escalating = args(quote!(rules("1/s"), block_for = ["1m", "10 minutes", "1h"])).unwrap();
    assert_eq!(
        escalating.policies.block_for_ms,
        Some(vec![60_000, 600_000, 3_600_000])
    );
    // A list of one is the single duration of 0.3.
    let one = args(quote!(rules("1/s"), block_for = ["90s"])).unwrap();
    assert_eq!(one.policies.block_for_ms, Some(vec![90_000]));
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

#[test]
fn a_token_that_is_no_argument_lists_each_argument_once() {
    let errors = messages(quote!(5));
    let listed: Vec<&str> = errors[0]
        .trim_start_matches("expected one of: ")
        .split(", ")
        .collect();
    assert_eq!(listed.first(), Some(&"`rules`"), "{errors:?}");
    let mut unique = listed.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        listed.len(),
        "an argument listed twice: {errors:?}"
    );
}
