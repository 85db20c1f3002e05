//! envoyproxy/ratelimit's configuration errors (`test/config/config_test.go`: empty and
//! duplicate domains and keys, bad units, `replaces` of itself or of nothing, bad YAML,
//! misspelled and non-string keys, lists of non-mappings, `unlimited` with a unit,
//! `share_threshold` without a wildcard), each with its line; and ours.

use std::path::PathBuf;

use super::load::build;

/// The errors of loading `files`, as `file:line: message` lines.
fn errors(files: &[(&str, &str)]) -> Vec<String> {
    let sources = files
        .iter()
        .map(|(name, text)| (PathBuf::from(name), (*text).to_owned()))
        .collect();
    match build(&sources) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

#[track_caller]
fn refused(files: &[(&str, &str)], expected: &str) {
    let errors = errors(files);
    assert!(
        errors.iter().any(|e| e.starts_with(expected)),
        "no {expected:?} in {errors:#?}"
    );
}

const LIMIT: &str = "rate_limit: {unit: second, requests_per_unit: 5}";

#[test]
fn the_incumbents_bad_files_are_refused_at_their_line() {
    refused(
        &[
            ("a.yaml", "domain: test-domain\n"),
            ("b.yaml", "domain: test-domain\n"),
        ],
        "b.yaml:1: duplicate domain 'test-domain': a.yaml already defines it",
    );
    for (file, yaml, expected) in [
        (
            "e.yaml",
            "descriptors: []\n",
            "e.yaml:1: config file cannot have empty domain",
        ),
        (
            "e.yaml",
            "domain: \"\"\n",
            "e.yaml:1: config file cannot have empty domain",
        ),
        (
            "k.yaml",
            "domain: d\ndescriptors:\n  - value: value1\n",
            "k.yaml:3: descriptor has empty key",
        ),
        (
            "k.yaml",
            "domain: d\ndescriptors:\n  - key: key1\n    value: value1\n\n  - key: key1\n    value: value1\n",
            "k.yaml:6: duplicate descriptor composite key 'd.key1_value1'",
        ),
        (
            "u.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n",
            "u.yaml:5: invalid rate limit unit 'foo'",
        ),
        (
            "r.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name: self\n      unit: second\n      requests_per_unit: 5\n",
            "r.yaml:7: replaces should not contain name of same descriptor",
        ),
        (
            "r.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name:\n      unit: second\n      requests_per_unit: 5\n",
            "r.yaml:7: a `replaces` entry has no `name`",
        ),
        (
            "y.yaml",
            "'''\n",
            "y.yaml:",
        ),
        (
            "m.yaml",
            "domain: d\ndescriptors:\n  - key: key1\n    ratelimit:\n      unit: day\n",
            "m.yaml:4: unknown field `ratelimit` in a descriptor",
        ),
        (
            "m.yaml",
            "domain: d\ndescriptors:\n  - key: key1\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n",
            "m.yaml:6: unknown field `requestsperunit` in `rate_limit`",
        ),
        (
            "n.yaml",
            "0.25: test-domain\ndescriptors: []\n",
            "n.yaml:1: the file has a key that is not a string (`0.25`)",
        ),
        (
            "l.yaml",
            "domain: d\ndescriptors:\n  - a\n  - b\n",
            "l.yaml:3: a descriptor is a scalar",
        ),
        (
            "x.yaml",
            "domain: d\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n",
            "x.yaml:6: should not specify rate limit unit when unlimited",
        ),
        (
            "s.yaml",
            &format!("domain: d\ndescriptors:\n  - key: files\n    value: exact\n    share_threshold: true\n    {LIMIT}\n"),
            "s.yaml:3: share_threshold can only be used with wildcard values",
        ),
    ] {
        refused(&[(file, yaml)], expected);
    }
}

#[test]
fn every_error_of_every_file_is_reported() {
    let errors = errors(&[
        ("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: week}\n  - key: j\n    bogus: 1\n"),
        ("b.yaml", "descriptors: []\n"),
    ]);
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert!(errors[0].starts_with("a.yaml:4:"), "{errors:#?}");
    assert!(errors[1].starts_with("a.yaml:6:"), "{errors:#?}");
    assert!(errors[2].starts_with("b.yaml:1:"), "{errors:#?}");
}

#[test]
fn our_fields_are_checked_too() {
    for (yaml, expected) in [
        (
            "domain: d\nalgorithm: leaky\n",
            "o.yaml:2: unknown algorithm `leaky`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      limits: [\"10/fortnight\"]\n",
            "o.yaml:5: `10/fortnight`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      limits: [\"10/second\"]\n      unit: second\n",
            "o.yaml:5: `limits` and `unit`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 0}\n",
            "o.yaml:4: unit_multiplier must be 1 or more",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, unit_multiplier: 2, requests_per_unit: 1}\n",
            "o.yaml:4: unit_multiplier 2 with unit `year`: calendar years are counted one at a time",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, allowance: soon}\n",
            "o.yaml:4: `allowance: soon`",
        ),
    ] {
        refused(&[("o.yaml", yaml)], expected);
    }
}

#[test]
fn our_fields_load_into_rules() {
    let sources = vec![(
        PathBuf::from("ok.yaml"),
        "domain: d\nalgorithm: token_bucket\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 5, allowance: 250ms}\n  - key: m\n    rate_limit: {unit: month, requests_per_unit: 7, algorithm: sliding_window}\n  - key: z\n    rate_limit: {unit: minute, requests_per_unit: 0}\n  - key: y\n    rate_limit: {unit: year, requests_per_unit: 1000}\n".to_owned(),
    )];
    let loaded = build(&sources).unwrap();
    let root = &loaded.domains["d"].root;
    let k = root.children["k"].limit.as_ref().unwrap();
    assert_eq!(k.rules[0].to_string(), "5 per 30s");
    assert_eq!(k.algorithm, redis_ratelimit::Algorithm::TokenBucket);
    assert_eq!(k.allowance, Some(std::time::Duration::from_millis(250)));
    let m = root.children["m"].limit.as_ref().unwrap();
    assert_eq!(m.rules[0].to_string(), "7 per calendar month");
    assert_eq!(m.algorithm, redis_ratelimit::Algorithm::SlidingWindow);
    assert!(root.children["z"].limit.as_ref().unwrap().refuse_all);
    let y = root.children["y"].limit.as_ref().unwrap();
    assert_eq!(y.rules[0].to_string(), "1000 per calendar year");
    assert_eq!(y.rules[0].calendar(), Some(redis_ratelimit::Calendar::Year));
}
