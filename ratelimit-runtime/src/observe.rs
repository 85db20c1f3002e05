//! What each check tells an operator: a `tracing` span `ratelimit.check`, a `debug` event
//! when it is limited, and with feature `metrics` the counter `ratelimit_checks_total` and
//! the histogram `ratelimit_check_duration_seconds` (see the guide's
//! [operating](https://docs.rs/redis-ratelimit/*/redis_ratelimit/guide/operating/index.html#metrics-and-tracing)
//! chapter).
//!
//! Cheap when nobody listens: when no subscriber enables `DEBUG`, a check makes no span
//! (one atomic load) and formats nothing; otherwise a span or event whose target no
//! subscriber enables costs a cached interest check.
//! Without feature `metrics` nothing here reads the clock.

use tracing::field::Empty;
use tracing::Span;

use crate::backend::Request;
use crate::decision::RawDecision;
use crate::{BackendError, Rule};

/// The `site` label of checks made through [`Limiter::check`](crate::Limiter::check) and
/// [`Limiter::peek`](crate::Limiter::peek), whose keys are the caller's own.
pub(crate) const PROGRAMMATIC: &str = "programmatic";

/// The `site` label of a guarded site whose path is [`PROGRAMMATIC`] (`name =
/// "programmatic"` is a name like any other), apart from the programmatic checks': no
/// site's path has a space (a `name` has none, a function's path starts with its crate).
pub(crate) const PROGRAMMATIC_SITE: &str = "programmatic (site)";

/// Who makes a check. What a check is, not read from a name: a guarded site may be named
/// `programmatic`, and is a site all the same (its refusals are in `most_limited`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Checker {
    /// A guarded site (an attribute's, a layer guard's), by its path: the `name`, else
    /// the function's path.
    Guarded(&'static str),
    /// [`Limiter::check`](crate::Limiter::check) and [`Limiter::peek`](crate::Limiter::peek).
    Programmatic,
}

impl Checker {
    /// The `site` label of the metrics, the span and a [`Warning`](crate::Warning): a
    /// guarded site's path, [`PROGRAMMATIC`] for programmatic checks.
    #[inline]
    pub fn label(self) -> &'static str {
        match self {
            Checker::Programmatic => PROGRAMMATIC,
            Checker::Guarded(PROGRAMMATIC) => PROGRAMMATIC_SITE,
            Checker::Guarded(path) => path,
        }
    }
}

/// Who answered a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AnsweredBy {
    /// Whether the backend that answered, or that failed to, is Redis (else the embedded
    /// one). Flags rather than the label itself: an answer is moved along every step of a
    /// check, and the smaller the cheaper.
    pub redis: bool,
    /// Whether the limiter's fallback answered, its own backend failing.
    pub fallback: bool,
    /// Whether the limiter answered without asking its backend: a denial the deny cache
    /// kept, a call admitted from an allowance.
    pub local: bool,
}

impl AnsweredBy {
    pub const REDIS: AnsweredBy = AnsweredBy {
        redis: true,
        fallback: false,
        local: false,
    };
    pub const MEMORY: AnsweredBy = AnsweredBy {
        redis: false,
        fallback: false,
        local: false,
    };
    pub const LOCAL: AnsweredBy = AnsweredBy {
        redis: false,
        fallback: false,
        local: true,
    };

    /// This answer, given by a fallback.
    pub fn by_fallback(self) -> AnsweredBy {
        AnsweredBy {
            fallback: true,
            ..self
        }
    }

    /// The `backend` label: `redis`, `memory`, or `local` for an answer the limiter gave
    /// without asking its backend.
    pub fn backend(self) -> &'static str {
        match self {
            AnsweredBy { local: true, .. } => "local",
            AnsweredBy { redis: true, .. } => "redis",
            _ => "memory",
        }
    }
}

/// A check's answer and who gave it. The answer stays the backend's own until the check
/// hands it over ([`RawDecision::into_decision`]).
pub(crate) struct Answer {
    pub result: Result<RawDecision, BackendError>,
    pub by: AnsweredBy,
}

/// The `outcome` label: exactly one per check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutcomeLabel {
    /// The backend admitted the call (or, for a peek, would).
    Allowed,
    /// The backend denied it (also from the deny cache).
    Limited,
    /// The backend failed and no fallback answered.
    Error,
    /// The backend failed and the fallback answered (admitting the call or not).
    Fallback,
    /// A shadow site's check that enforcing would have refused; the call went on.
    ShadowLimited,
}

impl OutcomeLabel {
    #[inline]
    fn of(answer: &Answer, shadow: bool) -> OutcomeLabel {
        match &answer.result {
            _ if answer.by.fallback => OutcomeLabel::Fallback,
            Ok(decision) if decision.allowed => OutcomeLabel::Allowed,
            Ok(_) if shadow => OutcomeLabel::ShadowLimited,
            Ok(_) => OutcomeLabel::Limited,
            Err(_) => OutcomeLabel::Error,
        }
    }

    pub const fn label(self) -> &'static str {
        match self {
            OutcomeLabel::Allowed => "allowed",
            OutcomeLabel::Limited => "limited",
            OutcomeLabel::Error => "error",
            OutcomeLabel::Fallback => "fallback",
            OutcomeLabel::ShadowLimited => "shadow_limited",
        }
    }
}

/// One check being watched, from before it runs to its answer.
pub(crate) struct Observation {
    /// `None` when no subscriber enabled `DEBUG` as the check began: then there is neither
    /// a span to record on nor a `debug` event to send.
    span: Option<Span>,
    /// Whether the check is a shadow site's: a denial is then `shadow_limited`.
    shadow: bool,
    #[cfg(feature = "metrics")]
    site: &'static str,
    #[cfg(feature = "metrics")]
    algorithm: crate::Algorithm,
    #[cfg(feature = "metrics")]
    started: std::time::Instant,
}

impl Observation {
    /// Opens the span of a check of `request` made by `site` (the key's path part, or
    /// [`PROGRAMMATIC`]); `shadow` when the site is in shadow mode.
    #[inline]
    pub fn start(site: &'static str, request: &Request<'_>, shadow: bool) -> Observation {
        // Unless some subscriber enables DEBUG (one atomic load), no span at all: a span
        // of a disabled callsite still evaluates its fields and, with tracing's `log`
        // feature (which other crates turn on), asks `log` at its creation, every enter
        // and exit, every record and its drop.
        let span = tracing::level_enabled!(tracing::Level::DEBUG).then(|| {
            tracing::debug_span!(
                target: "redis_ratelimit",
                "ratelimit.check",
                site,
                key = request.key,
                algorithm = request.algorithm.label(),
                cost = request.cost.get(),
                peek = !request.consume,
                outcome = Empty,
                answered_by = Empty,
                remaining = Empty,
                retry_after_ms = Empty,
            )
        });
        Observation::of(span, site, request, shadow)
    }

    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn of(
        span: Option<Span>,
        site: &'static str,
        request: &Request<'_>,
        shadow: bool,
    ) -> Observation {
        Observation {
            span,
            shadow,
            #[cfg(feature = "metrics")]
            site,
            #[cfg(feature = "metrics")]
            algorithm: request.algorithm,
            #[cfg(feature = "metrics")]
            started: std::time::Instant::now(),
        }
    }

    /// The check's span, to instrument the part of it that waits (`Span::none()` when
    /// there is none).
    pub fn span(&self) -> Span {
        self.span.clone().unwrap_or_else(Span::none)
    }

    /// Runs `f` in the check's span.
    #[inline]
    pub fn in_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        // One call of `f`, so that it is inlined here.
        let _entered = self.span.as_ref().map(Span::enter);
        f()
    }

    /// Records `answer` to a check of `rules`: on the span, as a `debug` event when the
    /// call is limited, and in the metrics.
    #[inline]
    pub fn finish(self, answer: &Answer, rules: &[Rule]) {
        // Nobody listens: nothing to compute.
        #[cfg(not(feature = "metrics"))]
        if self.span.is_none() {
            return;
        }
        self.record(answer, rules);
    }

    fn record(self, answer: &Answer, rules: &[Rule]) {
        let outcome = OutcomeLabel::of(answer, self.shadow);
        if let Some(span) = &self.span {
            span.record("outcome", outcome.label());
            span.record("answered_by", answer.by.backend());
            if let Ok(decision) = &answer.result {
                let retry_after_ms = decision.retry_after().map(|d| d.as_millis() as u64);
                span.record("remaining", decision.remaining);
                if let Some(retry_after_ms) = retry_after_ms {
                    span.record("retry_after_ms", retry_after_ms);
                }
                if !decision.allowed && !self.shadow {
                    tracing::debug!(
                        target: "redis_ratelimit",
                        parent: span,
                        // Past the rules: refused by the limit on calls in flight.
                        limit = rules.get(decision.rule_index).map_or(0, Rule::count),
                        retry_after_ms,
                        "rate limited"
                    );
                }
            }
        }
        #[cfg(feature = "metrics")]
        {
            // Every refusal, the fallback's too; a shadow site refuses nothing.
            if let Ok(decision) = &answer.result {
                if !decision.allowed && !self.shadow {
                    limited_total(self.site, rules, decision);
                }
            }
            metrics::counter!(
                "ratelimit_checks_total",
                "site" => self.site,
                "algorithm" => self.algorithm.label(),
                "outcome" => outcome.label(),
            )
            .increment(1);
            metrics::histogram!(
                "ratelimit_check_duration_seconds",
                "backend" => answer.by.backend(),
            )
            .record(self.started.elapsed().as_secs_f64());
        }
    }
}

/// Counts a refusal in `ratelimit_limited_total{site, rule}`, `rule` the refusing rule's
/// text (`3 per 60s`), or `N in flight` for a site's limit on calls in flight: bounded by
/// the site's rules.
#[cfg(feature = "metrics")]
#[cold]
fn limited_total(site: &'static str, rules: &[Rule], decision: &RawDecision) {
    let rule = match rules.get(decision.rule_index) {
        Some(rule) => rule.to_string(),
        // Past the rules: refused by the limit on calls in flight, which rides in the id.
        None => format!("{} in flight", decision.receipt.id),
    };
    metrics::counter!("ratelimit_limited_total", "site" => site, "rule" => rule).increment(1);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn decision(allowed: bool) -> RawDecision {
        RawDecision {
            allowed,
            rule_index: 0,
            remaining: 0,
            reset_after_us: 1_000_000,
            retry_after_us: if allowed { 0 } else { 1_000_000 },
            receipt: Default::default(),
            bound: crate::decision::Bound::Rule,
            crossed: None,
        }
    }

    #[test]
    fn every_answer_has_exactly_one_outcome() {
        let answer = |result, by| OutcomeLabel::of(&Answer { result, by }, false);
        let failed = || Err(BackendError::timeout(Duration::from_millis(1)));
        let fallback = AnsweredBy {
            fallback: true,
            ..AnsweredBy::MEMORY
        };
        assert_eq!(
            answer(Ok(decision(true)), AnsweredBy::REDIS),
            OutcomeLabel::Allowed
        );
        assert_eq!(
            answer(Ok(decision(false)), AnsweredBy::MEMORY),
            OutcomeLabel::Limited
        );
        assert_eq!(answer(failed(), AnsweredBy::REDIS), OutcomeLabel::Error);
        assert_eq!(answer(Ok(decision(true)), fallback), OutcomeLabel::Fallback);
        assert_eq!(
            answer(Ok(decision(false)), fallback),
            OutcomeLabel::Fallback
        );
        let shadow = |result| {
            OutcomeLabel::of(
                &Answer {
                    result,
                    by: AnsweredBy::REDIS,
                },
                true,
            )
        };
        assert_eq!(shadow(Ok(decision(false))), OutcomeLabel::ShadowLimited);
        assert_eq!(shadow(Ok(decision(true))), OutcomeLabel::Allowed);
    }
}
