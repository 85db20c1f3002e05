//! The `#[rate_limiter]` attribute of `redis-ratelimit`. Use it through that crate.

use proc_macro::TokenStream;

/// Rate-limits an `async fn`. See the `redis-ratelimit` crate for the arguments.
#[proc_macro_attribute]
pub fn rate_limiter(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
