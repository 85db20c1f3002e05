//! Arguments whose value is one of a few names (`limit_type = IP`, `algorithm = ...`), and
//! [`choose`], which reads such a name for them and for the names inside `rule(...)`.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, TokenStreamExt as _};
use syn::Ident;

/// An argument whose value is one of a few names, written in any case: the enum, its
/// names, and its expansion to the runtime's variant of the same name.
macro_rules! choice {
    ($(#[$doc:meta])* $choice:ident { $($variant:ident = $name:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $choice { $($variant),+ }

        impl $choice {
            pub const CHOICES: &'static [(&'static str, $choice)] = &[$(($name, $choice::$variant)),+];
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

/// The value named by `ident` (case-insensitively), or an error on it listing the choices
/// (in upper case, as the attribute spells them).
pub fn choose<T: Copy>(ident: &Ident, what: &str, choices: &[(&str, T)]) -> syn::Result<T> {
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
