//! Compile-time behaviour of `#[rate_limiter]`: the shapes it accepts (`tests/ui/pass`) and
//! the diagnostic of each misuse (`tests/ui/fail`). After changing a diagnostic, regenerate
//! the `.stderr` files with `TRYBUILD=overwrite cargo test --test ui` and read the diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
