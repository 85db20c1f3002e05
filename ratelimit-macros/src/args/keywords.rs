//! The names the attribute reads: `rules`, `limit_type`, ... and those inside `rule(...)`.

syn::custom_keyword!(rules);
syn::custom_keyword!(rule);
syn::custom_keyword!(count);
syn::custom_keyword!(time);
syn::custom_keyword!(unit);
syn::custom_keyword!(calls);
syn::custom_keyword!(calendar);
syn::custom_keyword!(prevent_duplicate);
syn::custom_keyword!(prevent_duplicate_rule);
syn::custom_keyword!(limit_type);
syn::custom_keyword!(by);
syn::custom_keyword!(key);
syn::custom_keyword!(message);
syn::custom_keyword!(algorithm);
syn::custom_keyword!(on_limit);
syn::custom_keyword!(limiter);
syn::custom_keyword!(name);
syn::custom_keyword!(cost);
syn::custom_keyword!(charge_if);
syn::custom_keyword!(settle);
syn::custom_keyword!(block_for);
syn::custom_keyword!(wait);
syn::custom_keyword!(shadow);
syn::custom_keyword!(concurrency);
syn::custom_keyword!(lease);
syn::custom_keyword!(warn_at);
syn::custom_keyword!(allowance);

/// `crate`, a Rust keyword: syn's own token, which peeks and parses as the ones above do.
pub use syn::token::Crate;
