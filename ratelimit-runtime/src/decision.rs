use std::time::Duration;

use crate::warning::Crossings;
use crate::{Algorithm, Rule};

/// The outcome of one check (or peek) of a set of rules.
///
/// Every figure describes the *binding* rule: the one with the least remaining budget
/// (when allowed), or the one that frees up last (when denied).
///
/// A decision also remembers what `Limiter::refund` needs to give back exactly the units
/// it took (the algorithm, the cost, when and under which ids they were counted). That
/// part is not compared: two decisions are equal when their figures are.
#[derive(Clone, Copy, Debug)]
pub struct Decision {
    /// Whether the call may proceed: for a check, it was admitted and counted; for a peek,
    /// a call of the given cost would pass now.
    pub allowed: bool,
    /// The binding rule's count.
    pub limit: u64,
    /// Units left under the binding rule. For an admitted check: after this call. For a
    /// peek, and for a denied check (which consumes nothing): left now, before any call
    /// (so a peek of a fresh key with a limit of 5 answers 5, and a denied check of cost 3
    /// may answer 2).
    pub remaining: u64,
    /// Time until the binding rule's window is fully free again (for an allowed peek: as
    /// a call of the given cost would leave it).
    pub reset_after: Duration,
    /// When denied: `Some(time until a call of the same cost would pass)`, or `None` when
    /// it never can (its cost is above the binding rule's count). Always `None` when
    /// allowed.
    pub retry_after: Option<Duration>,
    /// The binding rule.
    pub rule: Rule,
    /// The binding rule's position in the rules that were checked. A decision bound by a
    /// limit on calls in flight (`concurrency`) answers the number of rules checked: that
    /// limit stands after them, as its `rule` (the limit over the lease).
    pub rule_index: usize,
    /// What bound the decision: a rule, or the limit on calls in flight.
    pub(crate) bound: Bound,
    /// What a refund of this decision needs.
    pub(crate) receipt: Receipt,
}

/// `PartialEq` and `Eq` of a decision by the figures named: what it says, not the receipt
/// (nor the crossings) that name what was counted.
macro_rules! eq_by_figures {
    ($decision:ty: $($figure:ident),+) => {
        impl PartialEq for $decision {
            fn eq(&self, other: &Self) -> bool {
                $(self.$figure == other.$figure)&&+
            }
        }

        impl Eq for $decision {}
    };
}

eq_by_figures!(Decision: allowed, limit, remaining, reset_after, retry_after, rule, rule_index, bound);

/// What bound a decision: the rule at its `rule_index`, or the limit on calls in flight
/// (see `slot.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Bound {
    #[default]
    Rule,
    Slots,
}

impl Decision {
    /// Whether the limit on calls in flight bound the decision, not a rule.
    #[cfg_attr(not(any(feature = "tower", feature = "actix")), allow(dead_code))]
    pub(crate) fn bound_by_slots(&self) -> bool {
        self.bound == Bound::Slots
    }

    /// What a refund of this decision needs.
    pub(crate) fn receipt(&self) -> &Receipt {
        &self.receipt
    }
}

/// What giving back the units of one decision needs, and no more: small and `Copy`, so
/// that [`Decision`] stays `Copy`.
///
/// A refund gives back `cost` units of every rule, counted by `algorithm` at `at_us` (the
/// time the check was counted at, on the backend's clock). The sliding log names its
/// entries, so its refund removes exactly them, once: on Redis the members made from the
/// check's id (the process's prefix, then `id`; see `backend::redis::script`), in memory
/// the entries of the check numbered `id` of its key. The other algorithms count units
/// without names: their refund gives back only what the key's state still holds in the
/// same window (or, for the token bucket, what has not refilled since), never below zero;
/// their `id` tells apart decisions counted at the same time with the same cost, which the
/// limiter settles and refunds once each (`limiter::refunds`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Receipt {
    /// When the units were counted, in µs since the epoch, on the backend's clock.
    pub at_us: u64,
    /// The sliding log's id of the check.
    pub id: u64,
    /// The units taken of every rule; 0 when none were (a denial, a peek): nothing to give
    /// back. Any cost a rule holds ([`Rule::MAX_COUNT`]) is settled and refunded exactly.
    pub cost: u64,
    pub algorithm: Algorithm,
    /// Which backend counted them: a refund goes to that one alone.
    pub counted_by: CountedBy,
}

impl Receipt {
    /// The receipt of a decision that took nothing.
    pub const NONE: Receipt = Receipt {
        at_us: 0,
        id: 0,
        cost: 0,
        algorithm: Algorithm::SlidingLog,
        counted_by: CountedBy::Memory,
    };

    /// The id of a check's receipt: `log_id`, the check's own, for the sliding log; an id
    /// of its own ([`unique_id`]) for the other algorithms. (An allowance's draw is named
    /// by an id of its draw, whatever its algorithm: the token bucket's witness, the
    /// windows' draw number (see `backend::Draw`), which its give-back must find as it
    /// was.)
    pub fn check_id(algorithm: Algorithm, log_id: u64) -> u64 {
        match algorithm {
            Algorithm::SlidingLog => log_id,
            _ => unique_id(),
        }
    }

    /// The receipt of `cost` units counted by `algorithm` in `counted_by` at `at_us`,
    /// named `id` (see [`check_id`](Self::check_id)). Every receipt is made here.
    pub fn new(
        cost: u64,
        at_us: u64,
        id: u64,
        algorithm: Algorithm,
        counted_by: CountedBy,
    ) -> Receipt {
        Receipt {
            at_us,
            id,
            cost,
            algorithm,
            counted_by,
        }
    }

    /// Whether the decision took nothing, so that a refund of it has nothing to do.
    pub fn is_empty(&self) -> bool {
        self.cost == 0
    }
}

/// An id no other call of this process gets, so that two decisions counted at the same
/// microsecond with the same cost (concurrent checks, a test clock) are settled and
/// refunded once each, not once between them. Per thread, in blocks of 2^32, so that no
/// check contends for it.
fn unique_id() -> u64 {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, Ordering};
    static BLOCKS: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NEXT: Cell<u64> = const { Cell::new(0) };
    }
    NEXT.with(|next| {
        let mut id = next.get();
        if id as u32 == 0 {
            id = BLOCKS.fetch_add(1, Ordering::Relaxed) << 32 | 1;
        }
        next.set(id + 1);
        id
    })
}

/// Where a decision's units were counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum CountedBy {
    // Without the `redis` feature only the embedded backend counts.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    Redis,
    #[default]
    Memory,
    /// Admitted locally from an allowance (`limiter/allowance.rs`): `id` names the
    /// allowance; its give-back settles what it used with the backend.
    Allowance,
}

/// What a backend's algorithm answers, in the backend's units (µs). Both backends produce
/// exactly this, so a differential test can compare them field by field (all but the
/// receipt, which names what each backend counted, and the crossings).
#[derive(Clone, Debug)]
pub(crate) struct RawDecision {
    pub allowed: bool,
    /// 0-based index of the binding rule; for a decision bound by calls in flight, the
    /// number of rules checked (see [`Decision::rule_index`]).
    pub rule_index: usize,
    pub bound: Bound,
    pub remaining: u64,
    pub reset_after_us: u64,
    /// 0 when allowed; [`RawDecision::NEVER`] when the call's cost is above the binding
    /// rule's count.
    pub retry_after_us: u64,
    /// What a refund needs ([`Receipt::NONE`] when nothing was taken).
    pub receipt: Receipt,
    /// The rules an admitted check with `warn_at` took to their warning share (see
    /// `warning.rs`); `None` for every other check.
    pub crossed: Crossings,
}

eq_by_figures!(RawDecision: allowed, rule_index, bound, remaining, reset_after_us, retry_after_us);

impl RawDecision {
    /// `retry_after_us` of a call that can never pass (the scripts answer -1).
    pub const NEVER: u64 = u64::MAX;

    /// A refusal by rule `rule_index` that took nothing and has nothing left: the key is
    /// free again in `reset_after_us`, a call of this cost passes in `retry_after_us`
    /// ([`NEVER`](Self::NEVER): none ever does). A lock-out's, a ban's.
    pub(crate) fn refused(rule_index: usize, reset_after_us: u64, retry_after_us: u64) -> Self {
        RawDecision {
            allowed: false,
            rule_index,
            remaining: 0,
            reset_after_us,
            retry_after_us,
            receipt: Receipt::NONE,
            bound: Bound::Rule,
            crossed: None,
        }
    }

    /// [`Decision::retry_after`]: `None` when admitted or when the call can never pass.
    #[inline]
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        let retry = !self.allowed && self.retry_after_us != Self::NEVER;
        retry.then(|| Duration::from_micros(self.retry_after_us))
    }

    /// The caller's decision, `rules` being the rules checked. Made once, where the check
    /// hands it over: a decision is large, and one built earlier would be copied at every
    /// step of the pipeline.
    #[inline]
    pub(crate) fn into_decision(self, rules: &[Rule]) -> Decision {
        let rule = rules[self.rule_index];
        Decision {
            allowed: self.allowed,
            limit: rule.count(),
            remaining: self.remaining,
            reset_after: Duration::from_micros(self.reset_after_us),
            retry_after: self.retry_after(),
            rule,
            rule_index: self.rule_index,
            bound: self.bound,
            receipt: self.receipt,
        }
    }
}

impl RawDecision {
    /// [`into_decision`](Self::into_decision) of the answer to a check that took one of
    /// `max` slots, which its limit on calls in flight may have bound (see `slot.rs`).
    /// Apart from `into_decision`, which every check takes, so that its decision is still
    /// built in place (a branch there costs every check about 100 instructions).
    pub(crate) fn into_decision_with_slot(self, rules: &[Rule], max: u64) -> Decision {
        match self.bound {
            Bound::Rule => self.into_decision(rules),
            Bound::Slots => self.slots_decision(max),
        }
    }

    /// The decision of a check bound by its limit of `max` calls in flight, which stands
    /// after the rules checked: `rule_index` is their number, `remaining` the slots left,
    /// `reset_after` the lease. Its `rule` is the limit over the lease.
    #[cold]
    fn slots_decision(self, max: u64) -> Decision {
        let lease = Duration::from_micros(self.reset_after_us);
        Decision {
            allowed: self.allowed,
            limit: max,
            remaining: self.remaining,
            reset_after: lease,
            retry_after: self.retry_after(),
            rule: Rule::new(max, lease),
            rule_index: self.rule_index,
            bound: Bound::Slots,
            receipt: self.receipt,
        }
    }
}
