//! How a guarded site treats its decisions: enforce them, only report them, or skip the
//! check. Operators switch it per site without a deploy.

use std::fmt;

use crate::spelling::spelled;

/// What a guarded site does with its decisions.
///
/// Set per site in process with [`Limiter::override_mode`](crate::Limiter::override_mode),
/// for every instance at once under the field `"{path}#mode"` of the `{prefix}rules` hash
/// (values `enforce`, `shadow`, `off`), for every site of a limiter with
/// [`Limiter::shadow`](crate::Limiter::shadow), or in the attribute with `shadow = true`.
/// The site's override wins, then the limiter's shadow, then the attribute.
///
/// ```
/// use redis_ratelimit::{Limiter, Mode};
///
/// let limiter = Limiter::memory();
/// limiter.override_mode("my_app::send_code", Mode::Off); // the kill switch
/// assert_eq!(limiter.mode_in_force("my_app::send_code"), Mode::Off);
/// assert_eq!("shadow".parse::<Mode>(), Ok(Mode::Shadow));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Refuse calls over a rule (the default).
    Enforce,
    /// Count exactly as enforcing would (a would-be refusal consumes nothing), but let every
    /// call through; report would-be refusals (metrics outcome `shadow_limited`, a throttled
    /// `info` event) and add no RateLimit headers. The way to roll a limit out.
    Shadow,
    /// Skip the check entirely: no backend call, nothing counted, nothing refused.
    Off,
}

spelled! {
    Mode;
    /// Every mode, in the order of the stored spelling's documentation.
    ALL;
    /// The stored spelling: `enforce`, `shadow` or `off`.
    fn as_str {
        Enforce => "enforce",
        Shadow => "shadow",
        Off => "off",
    }
    /// Reads `enforce`, `shadow` or `off`, in any case, around spaces.
    from_str(text.trim()) -> Result<_, ParseModeError> else ParseModeError(text.to_owned());
}

/// A text that names no [`Mode`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseModeError(String);

impl fmt::Display for ParseModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown mode `{}`: expected `enforce`, `shadow` or `off`",
            self.0
        )
    }
}

impl std::error::Error for ParseModeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_their_stored_spelling_in_any_case() {
        for mode in Mode::ALL {
            assert_eq!(mode.as_str().parse(), Ok(mode));
            assert_eq!(mode.as_str().to_uppercase().parse(), Ok(mode));
        }
        assert_eq!(" Off ".parse(), Ok(Mode::Off));
        let err = "disabled".parse::<Mode>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown mode `disabled`: expected `enforce`, `shadow` or `off`"
        );
    }
}
