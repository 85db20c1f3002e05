//! The `path` part of each guarded function's key: two functions never share one by
//! accident, whatever the shape of the impl they stand in.
//!
//! Each guarded function admits one call a minute; the second call's `Limited` error
//! carries the key, whose path part is compared with the documented form. Call sites that
//! still share a path (through `name`) are reported when they count it differently.

mod support;

use std::sync::LazyLock;

use redis_ratelimit::{rate_limiter, Limiter, RateLimitError};

static LIMITER: LazyLock<Limiter> = LazyLock::new(Limiter::memory);

/// The crate's name, as key paths start with it.
const CRATE: &str = module_path!();

/// Functions returning `Ok(())`, guarded with this file's limiter and the given arguments.
macro_rules! guarded {
    ($(#[rate_limiter($($arg:tt)*)] $vis:vis async fn $name:ident($($params:tt)*);)+) => {$(
        #[rate_limiter(limiter = &*LIMITER, $($arg)*)]
        $vis async fn $name($($params)*) -> Result<(), RateLimitError> {
            Ok(())
        }
    )+};
}

/// Functions guarded as most here are: one call a minute, counted in one budget for every
/// caller, so that the second call's error names the key.
macro_rules! once_a_minute {
    ($($vis:vis async fn $name:ident($($params:tt)*);)+) => {
        guarded! {
            $(#[rate_limiter(rules("1/minute"), limit_type = GLOBAL)] $vis async fn $name($($params)*);)+
        }
    };
}

mod models {
    use super::*;

    pub struct Svc;
    pub struct Other;
    pub struct Gen<T>(pub T);

    pub trait A {
        async fn go(&self) -> Result<(), RateLimitError>;
    }
    pub trait B {
        async fn go(&self) -> Result<(), RateLimitError>;
    }
    /// Implemented for every [`Marked`] type at once.
    pub trait Audit {
        async fn audit(&self) -> Result<(), RateLimitError>;
    }
    pub trait Marked {}
    pub trait Convert<T> {
        async fn convert(&self) -> Result<(), RateLimitError>;
    }

    impl Svc {
        once_a_minute! {
            pub async fn own(&self);
            pub async fn go(&self);
        }
    }

    impl Marked for Svc {}
    impl Marked for Other {}
}

/// Impl blocks written away from their types, as handlers often are.
mod handlers {
    use super::models::{self, Audit, Convert, Marked, A, B};
    use super::*;

    impl models::Svc {
        once_a_minute! {
            pub async fn send(&self);
            pub async fn create();
        }
    }

    impl models::Svc {
        once_a_minute! {
            pub async fn notify(&self);
        }
    }

    impl models::Other {
        once_a_minute! {
            pub async fn notify(&self);
            pub async fn send(&self);
            pub async fn create();
        }
    }

    impl<T: Send + Sync> models::Gen<T> {
        once_a_minute! {
            pub async fn get(&self);
        }
    }

    impl A for models::Svc {
        once_a_minute! {
            async fn go(&self);
        }
    }

    impl B for models::Svc {
        once_a_minute! {
            async fn go(&self);
        }
    }

    impl A for models::Gen<u8> {
        once_a_minute! {
            async fn go(&self);
        }
    }

    impl A for models::Gen<u16> {
        once_a_minute! {
            async fn go(&self);
        }
    }

    impl<T: Marked + Sync> Audit for T {
        once_a_minute! {
            async fn audit(&self);
        }
    }

    impl Convert<u8> for models::Svc {
        once_a_minute! {
            async fn convert(&self);
        }
    }

    impl Convert<u16> for models::Svc {
        once_a_minute! {
            async fn convert(&self);
        }
    }

    pub mod nested {
        use super::*;

        once_a_minute! {
            pub async fn free();
        }
    }
}

use models::{Audit, Convert, Gen, Other, Svc, A, B};

/// Runs `call` until it is refused (at most twice) and gives the path part of its key.
async fn path_of<F: std::future::Future<Output = Result<(), RateLimitError>>>(
    mut call: impl FnMut() -> F,
) -> String {
    for _ in 0..2 {
        if let Err(err) = call().await {
            let RateLimitError::Limited { key, .. } = err else {
                panic!("expected a Limited error, got {err:?}");
            };
            return key
                .strip_prefix("rate_limit:global:")
                .expect("a global key")
                .to_owned();
        }
    }
    panic!("a one-a-minute function admitted two calls");
}

/// `{crate}::{rest}`.
fn expected(rest: &str) -> String {
    format!("{CRATE}::{rest}")
}

#[tokio::test]
async fn methods_of_impls_written_in_another_module_name_their_self_type() {
    assert_eq!(path_of(|| Svc.send()).await, expected("models::Svc::send"));
    assert_eq!(
        path_of(|| Other.send()).await,
        expected("models::Other::send")
    );
    assert_eq!(path_of(Svc::create).await, expected("models::Svc::create"));
    assert_eq!(
        path_of(Other::create).await,
        expected("models::Other::create")
    );
}

#[tokio::test]
async fn methods_of_impls_beside_their_type_have_the_same_form() {
    assert_eq!(path_of(|| Svc.own()).await, expected("models::Svc::own"));
}

#[tokio::test]
async fn same_named_methods_of_two_types_have_budgets_of_their_own() {
    // One call each: had they shared a budget, the second would be refused.
    Svc.notify().await.unwrap();
    Other.notify().await.unwrap();
}

#[tokio::test]
async fn trait_methods_name_their_trait() {
    assert_eq!(
        path_of(|| A::go(&Svc)).await,
        format!("<{CRATE}::models::Svc as {CRATE}::models::A>::go")
    );
    assert_eq!(
        path_of(|| B::go(&Svc)).await,
        format!("<{CRATE}::models::Svc as {CRATE}::models::B>::go")
    );
}

#[tokio::test]
async fn inherent_and_trait_methods_of_one_name_differ() {
    let inherent = path_of(|| Svc.go()).await;
    let of_a = path_of(|| A::go(&Svc)).await;
    let of_b = path_of(|| B::go(&Svc)).await;
    assert_eq!(inherent, expected("models::Svc::go"));
    assert_ne!(inherent, of_a);
    assert_ne!(of_a, of_b);
}

#[tokio::test]
async fn impls_for_different_instantiations_differ() {
    assert_eq!(
        path_of(|| A::go(&Gen(1u8))).await,
        format!("<{CRATE}::models::Gen<u8> as {CRATE}::models::A>::go")
    );
    assert_eq!(
        path_of(|| A::go(&Gen(1u16))).await,
        format!("<{CRATE}::models::Gen<u16> as {CRATE}::models::A>::go")
    );
    assert_eq!(
        path_of(|| Convert::<u8>::convert(&Svc)).await,
        format!("<{CRATE}::models::Svc as {CRATE}::models::Convert<u8>>::convert")
    );
    assert_eq!(
        path_of(|| Convert::<u16>::convert(&Svc)).await,
        format!("<{CRATE}::models::Svc as {CRATE}::models::Convert<u16>>::convert")
    );
}

#[tokio::test]
async fn every_instantiation_of_a_generic_impl_shares_one_budget() {
    Gen(1u8).get().await.unwrap();
    let err = Gen("text").get().await.unwrap_err();
    let RateLimitError::Limited { key, .. } = err else {
        panic!("expected a Limited error, got {err:?}");
    };
    assert_eq!(key, format!("rate_limit:global:{CRATE}::models::Gen::get"));
}

#[tokio::test]
async fn blanket_impls_keep_their_trait() {
    let path = path_of(|| Svc.audit()).await;
    assert_eq!(path, format!("<_ as {CRATE}::models::Audit>::audit"));
    // Every type the blanket impl covers shares its budget, as for any generic function.
    assert!(Other.audit().await.is_err());
}

#[tokio::test]
async fn free_functions_name_their_module_path() {
    assert_eq!(
        path_of(handlers::nested::free).await,
        expected("handlers::nested::free")
    );
}

#[tokio::test]
async fn a_name_sets_the_key_path() {
    guarded! {
        #[rate_limiter(rules("1/minute"), limit_type = GLOBAL, name = "billing::send_invoice")]
        async fn send();
    }

    assert_eq!(path_of(send).await, "billing::send_invoice");
}

#[tokio::test]
async fn sites_given_one_name_and_the_same_rules_share_a_budget_silently() {
    guarded! {
        #[rate_limiter(rules("1/minute"), limit_type = GLOBAL, name = "shared/quietly")]
        async fn first();
        #[rate_limiter(
            rules(rule(count = 1, time = 60)),
            limit_type = GLOBAL,
            name = "shared/quietly",
            message = "another message changes no count",
        )]
        async fn second();
    }

    let (logs, _guard) = support::capture_logs();
    first().await.unwrap();
    let err = second().await.unwrap_err();
    assert!(matches!(err, RateLimitError::Limited { .. }), "{err:?}");
    assert_eq!(logs.text(), "");
}

#[tokio::test]
async fn sites_sharing_a_path_with_different_rules_are_reported_once_naming_both() {
    guarded! {
        #[rate_limiter(rules("5/minute"), limit_type = GLOBAL, name = "shared::by_mistake")]
        async fn strict();
        #[rate_limiter(
            rules("10/minute", "100/hour"),
            limit_type = GLOBAL,
            name = "shared::by_mistake",
        )]
        async fn lenient();
    }

    let (logs, _guard) = support::capture_logs();
    strict().await.unwrap();
    assert_eq!(logs.text(), "", "one site alone is not reported");
    lenient().await.unwrap();
    lenient().await.unwrap();
    strict().await.unwrap();
    let logs = logs.text();
    assert_eq!(logs.lines().count(), 1, "{logs}");
    let test =
        format!("{CRATE}::sites_sharing_a_path_with_different_rules_are_reported_once_naming_both");
    for expected in [
        "WARN",
        &format!("call sites `{test}::strict` (tests/key_paths.rs:"),
        &format!(") and `{test}::lenient` (tests/key_paths.rs:"),
        "share the key path `shared::by_mistake` with different rules: ",
        "rules [5 per 60s], algorithm = SLIDING_LOG, limit_type = GLOBAL, key = \"rate_limit:\" \
         and rules [10 per 60s, 100 per 3600s], algorithm = SLIDING_LOG, limit_type = GLOBAL, \
         key = \"rate_limit:\";",
    ] {
        assert!(logs.contains(expected), "{expected:?} not in {logs}");
    }
}

#[tokio::test]
async fn sites_sharing_a_path_with_different_algorithms_are_reported() {
    guarded! {
        #[rate_limiter(rules("5/minute"), limit_type = GLOBAL, name = "shared::algorithms")]
        async fn log();
        #[rate_limiter(
            rules("5/minute"),
            limit_type = USER_ID,
            by = "u1",
            algorithm = TOKEN_BUCKET,
            key = "other:",
            name = "shared::algorithms",
        )]
        async fn bucket();
    }

    let (logs, _guard) = support::capture_logs();
    log().await.unwrap();
    bucket().await.unwrap();
    let logs = logs.text();
    assert!(
        logs.contains("with different algorithms, limit types, prefixes: "),
        "{logs}"
    );
    assert!(
        logs.contains(
            "algorithm = SLIDING_LOG, limit_type = GLOBAL, key = \"rate_limit:\" and rules \
             [5 per 60s], algorithm = TOKEN_BUCKET, limit_type = USER_ID, key = \"other:\""
        ),
        "{logs}"
    );
}
