//! envoyproxy/ratelimit's own matching cases (`test/config/config_test.go` with its
//! `basic_config.yaml`, `wildcard.yaml`, `shadowmode_config.yaml` and `share_threshold.yaml`),
//! rewritten against equivalent files: the same inputs, the same expected matches.

use std::path::PathBuf;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;

use super::{find, wildcard_match, Entry, Found};
use crate::config::load::{build, Loaded};

const BASIC: &str = "
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: subkey1
        value: subvalue1
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key2
    value: value2
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: key2
    value: value3
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: key4
    rate_limit: {name: key4_rate_limit, unit: day, requests_per_unit: 1}
  - key: key5
    value: value5
    rate_limit: {unit: day, requests_per_unit: 15}
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit: {unit: day, requests_per_unit: 25}
  - key: key6
    rate_limit: {unlimited: true}
  - key: key7
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 70}
";

const WILDCARD: &str = "
domain: test-domain
descriptors:
  - {key: wild, value: foo*, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: noWild, value: foo, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: noVal, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: midWild, value: bar*b, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: multiWild, value: foo*bar*baz, rate_limit: {unit: minute, requests_per_unit: 10}}
  - key: nestedWild
    value: val1
    descriptors:
      - {key: wild, value: goo*, rate_limit: {unit: minute, requests_per_unit: 20}}
";

fn config(yaml: &str) -> Loaded {
    build(&vec![(PathBuf::from("test.yaml"), yaml.to_owned())]).unwrap_or_else(|e| panic!("{e}"))
}

fn entries<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<Entry<'a>> {
    pairs
        .iter()
        .map(|&(key, value)| Entry { key, value })
        .collect()
}

fn lookup<'c>(loaded: &'c Loaded, pairs: &[(&str, &str)]) -> Option<Found<'c>> {
    find(&loaded.domains["test-domain"], &entries(pairs))
}

/// The matched limit's first rule as Envoy states it, and its metric name.
fn matched(loaded: &Loaded, pairs: &[(&str, &str)]) -> Option<(u32, Unit, String)> {
    let found = lookup(loaded, pairs)?;
    let name = found.metric_name(&entries(pairs)).into_owned();
    let answer = found.limit.answers.first().copied();
    Some(answer.map_or((0, Unit::Unknown, name.clone()), |a| {
        (a.requests_per_unit, a.unit, name)
    }))
}

#[test]
fn basic_config_matches_as_envoyproxy_ratelimit_does() {
    let c = config(BASIC);
    assert!(!c.domains.contains_key("foo_domain"));
    assert!(lookup(&c, &[]).is_none());
    assert!(lookup(&c, &[("key1", "something")]).is_none());
    assert!(lookup(&c, &[("key1", "value1")]).is_none());
    // Deeper than the configuration: no limit.
    assert!(lookup(&c, &[("key2", "value2"), ("subkey", "subvalue")]).is_none());
    // A second level that matches nothing.
    assert!(lookup(&c, &[("key5", "value5"), ("subkey5", "subvalue")]).is_none());
    assert_eq!(
        matched(&c, &[("key1", "value1"), ("subkey1", "something")]),
        Some((5, Unit::Second, "key1_value1.subkey1".into()))
    );
    assert_eq!(
        matched(&c, &[("key1", "value1"), ("subkey1", "subvalue1")]),
        Some((10, Unit::Second, "key1_value1.subkey1_subvalue1".into()))
    );
    assert_eq!(
        matched(&c, &[("key2", "something")]),
        Some((20, Unit::Minute, "key2".into()))
    );
    assert_eq!(
        matched(&c, &[("key2", "value2")]),
        Some((30, Unit::Minute, "key2_value2".into()))
    );
    // A value listed without a limit: exempt from its key's default.
    assert!(lookup(&c, &[("key2", "value3")]).is_none());
    assert_eq!(
        matched(&c, &[("key3", "foo")]),
        Some((1, Unit::Hour, "key3".into()))
    );
    let key3 = lookup(&c, &[("key3", "foo")]).unwrap();
    assert_eq!(key3.limit.name, None, "no name in the file");
    let key4 = lookup(&c, &[("key4", "foo")]).unwrap();
    assert_eq!(key4.limit.name.as_deref(), Some("key4_rate_limit"));
    assert_eq!(key4.limit.answers[0].unit, Unit::Day);
    assert!(lookup(&c, &[("key6", "foo")]).unwrap().limit.unlimited);
    // detailed_metric: the request's value names the metric.
    assert_eq!(
        matched(&c, &[("key7", "unspecified_value")]),
        Some((70, Unit::Minute, "key7_unspecified_value".into()))
    );
    assert_eq!(
        matched(&c, &[("key7", "another_value")]),
        Some((70, Unit::Minute, "key7_another_value".into()))
    );
}

#[test]
fn wildcards_match_prefixes_middles_and_several_stars() {
    let c = config(WILDCARD);
    let no_val = matched(&c, &[("noVal", "foo1")]).unwrap();
    assert_eq!(no_val, matched(&c, &[("noVal", "foo2")]).unwrap());
    assert_eq!(no_val.2, "noVal");
    let wild = matched(&c, &[("wild", "foo1")]).unwrap();
    assert_eq!(wild, matched(&c, &[("wild", "foo2")]).unwrap());
    assert_eq!(wild.2, "wild_foo*");
    assert_eq!(
        matched(&c, &[("nestedWild", "val1"), ("wild", "goo2")])
            .unwrap()
            .2,
        "nestedWild_val1.wild_goo*"
    );
    assert!(lookup(&c, &[("wild", "bar")]).is_none());
    // An exact value is not a prefix.
    assert!(lookup(&c, &[("noWild", "foo1")]).is_none());
    for value in ["barab", "bar123b", "barb"] {
        assert_eq!(
            matched(&c, &[("midWild", value)]).unwrap().2,
            "midWild_bar*b",
            "{value}"
        );
    }
    assert!(lookup(&c, &[("midWild", "bara")]).is_none());
    assert!(lookup(&c, &[("midWild", "xbarb")]).is_none());
    for value in ["foo123bar456baz", "foobarbaz"] {
        let m = matched(&c, &[("multiWild", value)]).unwrap();
        assert_eq!(
            (m.0, m.2.as_str()),
            (10, "multiWild_foo*bar*baz"),
            "{value}"
        );
    }
    assert!(lookup(&c, &[("multiWild", "foo123baz")]).is_none());
    assert!(lookup(&c, &[("multiWild", "bar456baz")]).is_none());
}

#[test]
fn shadow_mode_is_per_descriptor() {
    let c = config(
        "
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - {key: subkey1, rate_limit: {unit: second, requests_per_unit: 5}}
      - key: subkey1
        value: subvalue1
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key2
    value: value2
    rate_limit: {unit: minute, requests_per_unit: 30}
",
    );
    let shadow = |pairs: &[(&str, &str)]| lookup(&c, pairs).unwrap().limit.shadow_mode;
    assert!(!shadow(&[("key1", "value1"), ("subkey1", "something")]));
    assert!(shadow(&[("key1", "value1"), ("subkey1", "subvalue1")]));
    assert!(shadow(&[("key2", "something")]));
    assert!(!shadow(&[("key2", "value2")]));
}

#[test]
fn share_threshold_counts_every_matching_value_under_the_pattern() {
    let c = config(
        "
domain: test-domain
descriptors:
  - {key: files, value: files/*, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 100}}
  - key: nested
    value: parent
    descriptors:
      - {key: files, value: nested/*, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 200}}
  - {key: file, value: test1, rate_limit: {unit: minute, requests_per_unit: 50}}
  - {key: file, value: test*, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 100}}
  - {key: midpath, value: /api*v1, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 100}}
",
    );
    let files = lookup(&c, &[("files", "files/a.txt")]).unwrap();
    assert_eq!(files.shared_value(0), Some("files/*"));
    assert_eq!(
        lookup(&c, &[("nested", "parent"), ("files", "nested/x")])
            .unwrap()
            .shared_value(1),
        Some("nested/*")
    );
    // An explicit value wins over the wildcard, and is its own counter.
    let test1 = lookup(&c, &[("file", "test1")]).unwrap();
    assert_eq!(test1.limit.answers[0].requests_per_unit, 50);
    assert_eq!(test1.shared_value(0), None);
    let test2 = lookup(&c, &[("file", "test2")]).unwrap();
    assert_eq!(test2.limit.answers[0].requests_per_unit, 100);
    assert_eq!(test2.shared_value(0), Some("test*"));
    assert_eq!(
        lookup(&c, &[("midpath", "/api/users/v1")])
            .unwrap()
            .shared_value(0),
        Some("/api*v1")
    );
    assert!(lookup(&c, &[("midpath", "/api/users/v2")]).is_none());
}

#[test]
fn value_to_metric_names_the_requests_value() {
    let c = config(
        "
domain: test-domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - {key: http_method, rate_limit: {unit: minute, requests_per_unit: 60}}
  - key: wild
    value: foo*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 20}
",
    );
    assert_eq!(
        matched(&c, &[("route", "draw"), ("http_method", "GET")])
            .unwrap()
            .2,
        "route_draw.http_method"
    );
    assert_eq!(matched(&c, &[("wild", "foobar")]).unwrap().2, "wild_foobar");
}

#[test]
fn wildcard_patterns() {
    let parts = |p: &str| p.split('*').map(str::to_owned).collect::<Vec<_>>();
    assert!(wildcard_match(&parts("a*"), "a"));
    assert!(wildcard_match(&parts("a*"), "abc"));
    assert!(!wildcard_match(&parts("a*"), "ba"));
    assert!(wildcard_match(&parts("a*b*c"), "abc"));
    assert!(wildcard_match(&parts("a*b*c"), "axxbyyc"));
    assert!(!wildcard_match(&parts("a*b*c"), "ac"));
    // The fixed parts may not overlap.
    assert!(!wildcard_match(&parts("ab*ba"), "aba"));
    assert!(wildcard_match(&parts("exact"), "exact"));
    assert!(!wildcard_match(&parts("exact"), "exactly"));
}
