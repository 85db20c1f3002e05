//! [`Slot`]: one argument's value, set at most once. Repeated arguments are detected here
//! and nowhere else (serde's `Attr::set`), so no argument can forget the check.

use proc_macro2::Span;
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned as _;
use syn::Token;

use crate::errors::Errors;

/// One argument's value and the span of its name, set at most once.
pub struct Slot<T> {
    value: Option<(Span, T)>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot { value: None }
    }
}

impl<T> Slot<T> {
    /// Parses `name = value`, the value with `value`, and sets it. `value` records an
    /// invalid value in `errors` and gives `None`: the argument then stays unset.
    pub fn parse<K: Parse + ToTokens>(
        &mut self,
        input: ParseStream,
        errors: &mut Errors,
        value: impl FnOnce(ParseStream, &mut Errors) -> syn::Result<Option<T>>,
    ) -> syn::Result<()> {
        let name = input.parse::<K>()?;
        input.parse::<Token![=]>()?;
        if let Some(value) = value(input, errors)? {
            self.set(errors, &name, value);
        }
        Ok(())
    }

    /// Sets the value of the argument named by `name` (its keyword as written), or records
    /// that it was given twice.
    pub fn set(&mut self, errors: &mut Errors, name: &impl ToTokens, value: T) {
        if self.value.is_some() {
            errors.push(syn::Error::new(
                name.span(),
                format!("duplicate argument `{}`", name.to_token_stream()),
            ));
        } else {
            self.value = Some((name.span(), value));
        }
    }

    pub fn span(&self) -> Option<Span> {
        self.value.as_ref().map(|(span, _)| *span)
    }

    pub fn get(&self) -> Option<&T> {
        self.value.as_ref().map(|(_, value)| value)
    }

    pub fn into_inner(self) -> Option<T> {
        self.value.map(|(_, value)| value)
    }
}

/// What a group of arguments gives for the argument next in the list: `None` when it is
/// none of the group's, else the outcome of parsing it.
pub type Parsed = Option<syn::Result<()>>;

/// Parses the argument `lookahead` sees into its slot: each `keyword => slot, value` is
/// tried in order (the order of syn's "expected one of ..." list), and `_ => ...` gives the
/// answer when none is seen. One line an argument, so that a new argument is one more line.
macro_rules! fill_slot {
    (
        $lookahead:ident, $input:ident, $errors:ident,
        [$($keyword:path => $slot:expr, $value:expr;)+]
        _ => $otherwise:expr $(,)?
    ) => {
        $(if $lookahead.peek($keyword) {
            $slot.parse::<$keyword>($input, $errors, $value)
        } else)+ {
            $otherwise
        }
    };
}
pub(crate) use fill_slot;
