//! What the fixed window, the sliding window and the token bucket share: one record per
//! rule, all in one value (`scripts/state.lua` and `save.lua` on Redis), and one way to
//! check them. An algorithm of this kind only says how one rule judges a call from its
//! record ([`PerRule::judge`]); [`State`] does the rest, as the scripts do:
//!
//! 1. count the check at `now' = max(now, the latest time any record holds)` (see
//!    [`super::Clamp`]; the token bucket's records hold none);
//! 2. judge every rule from its record, and [`super::decide`];
//! 3. when a consuming check is admitted, write every rule's record as the call leaves it
//!    (only the rules checked: a rule not in this write is forgotten), and move the key's
//!    expiry when the state written would outlive it ([`extend_expiry`]).
//!
//! A peek or a denial writes nothing.

use std::fmt;

use smallvec::SmallVec;

use super::calendar::{self, Period};
use super::{
    decide, ttl_us, Block, Call, Clamp, Counter, Figures, Outcome, Returned, Settled, MARGIN_US,
};
use crate::decision::{CountedBy, Receipt};
use crate::{Algorithm, Rule};

/// An algorithm that keeps one record per rule.
pub(crate) trait PerRule {
    /// The algorithm this is.
    const ALGORITHM: Algorithm;

    /// What the algorithm keeps per rule (besides the rule).
    type Record: Copy + fmt::Debug;

    /// How many numbers a record holds on Redis after the rule's count and window (see
    /// `scripts/state.lua`).
    #[cfg(feature = "redis")]
    const NUMBERS: usize;

    /// The record of those numbers, in the script's order.
    #[cfg(feature = "redis")]
    fn from_numbers(numbers: &[u64]) -> Self::Record;

    /// The time `record` says a check is never counted before (a window's start), if any.
    fn latest_us(record: &Self::Record) -> Option<u64>;

    /// `rule`'s view of a call of `cost` units counted at `now_us`, from the record of its
    /// last write (`None`: not stored).
    ///
    /// Implementations are `#[inline(always)]`: a verdict returned through memory is read
    /// back at once from stores just made field by field, and that copy stalls until they
    /// drain (the sliding window's, left to the compiler, cost a tenth of a check).
    ///
    /// `hold_us` is a draw's hold (0 for a check): its units are recorded as spent that
    /// long after `now_us`. Only the token bucket's record tells times apart within a
    /// window; the windows' algorithms count a draw in the window of `now_us`, which its
    /// hold never leaves.
    fn judge(
        stored: Option<Self::Record>,
        rule: &Rule,
        now_us: u64,
        cost: u64,
        hold_us: u64,
    ) -> Verdict<Self::Record>;

    /// The units `record` (of `rule`) holds at `now_us`, uncapped (see
    /// [`super::Counter::held`]).
    fn held(record: Self::Record, rule: &Rule, now_us: u64) -> u64;

    /// The record of a rule counting in calendar periods (see [`super::calendar`]).
    fn from_period(period: Period) -> Self::Record;

    /// The period a record [`from_period`](Self::from_period) holds.
    fn period(record: &Self::Record) -> Period;

    /// Until when a settled record matters, when that can outgrow the expiry a check set
    /// (the token bucket's `tat`, pushed on by a debt); `None` for records whose windows
    /// the expiry covers whatever they count.
    fn until_us(_: &Self::Record) -> Option<u64> {
        None
    }

    /// `record` (of `rule`) with `units` more counted as if at `at_us` (a settled cost
    /// above its reservation), even past the rule's count, where the record still counts
    /// what was counted at `at_us`; `now_us` is the caller's clock.
    fn take(record: Self::Record, rule: &Rule, at_us: u64, units: u64, now_us: u64)
        -> Self::Record;

    /// `record` (of `rule`) with `units` of a draw counted at `at_us` that were not used
    /// given back, when [`unmoved`](Self::unmoved) allows it; by default as a refund.
    fn give_back(
        record: Self::Record,
        rule: &Rule,
        at_us: u64,
        units: u64,
        now_us: u64,
    ) -> Self::Record {
        Self::refund(record, rule, at_us, units, units, now_us)
    }

    /// What tells, in a record a draw wrote, whether a later write has moved it since: the
    /// token bucket's `tat`; `None` for the windows, whose counts a give-back can lower
    /// whatever came after.
    fn witness(_: &Self::Record) -> Option<u64> {
        None
    }

    /// `record` (of `rule`) with `units` of the `reserved` units counted at `at_us` given
    /// back (all of them for a refund, the difference for a settle below its
    /// reservation), as far as it still holds them at `now_us` (never below zero).
    fn refund(
        record: Self::Record,
        rule: &Rule,
        at_us: u64,
        units: u64,
        reserved: u64,
        now_us: u64,
    ) -> Self::Record;
}

/// `rule`'s view of a call of `cost` units counted at `now_us`: the algorithm's
/// ([`PerRule::judge`]), or a calendar period's for a rule counting in one.
#[inline(always)]
fn judge<A: PerRule>(
    stored: Option<A::Record>,
    rule: &Rule,
    now_us: u64,
    cost: u64,
    hold_us: u64,
) -> Verdict<A::Record> {
    let Some(in_calendar) = rule.calendar() else {
        return A::judge(stored, rule, now_us, cost, hold_us);
    };
    let v = calendar::judge(
        stored.map(|r| A::period(&r)),
        rule,
        in_calendar,
        now_us,
        cost,
    );
    Verdict {
        figures: v.figures,
        counted: A::from_period(v.counted),
        needed_us: v.until_end_us,
        reach_us: v.until_end_us,
    }
}

/// `record` (of `rule`) with `units` of the `reserved` counted at `at_us` given back, or
/// `units` more taken (`take`): [`PerRule::refund`] and [`PerRule::take`], or a calendar
/// period's.
fn adjust<A: PerRule>(
    record: A::Record,
    rule: &Rule,
    at_us: u64,
    (units, reserved): (u64, u64),
    now_us: u64,
    take: bool,
) -> A::Record {
    match (rule.calendar(), take) {
        (Some(in_calendar), _) => A::from_period(calendar::adjust(
            A::period(&record),
            in_calendar,
            at_us,
            units,
            take,
        )),
        (None, true) => A::take(record, rule, at_us, units, now_us),
        (None, false) => A::refund(record, rule, at_us, units, reserved, now_us),
    }
}

/// How many rules' verdicts a check keeps for its write (the rules after them are judged
/// again): call sites rarely have more.
const KEPT: usize = 4;

/// One rule's view of a call.
#[derive(Clone, Copy)]
pub(crate) struct Verdict<R> {
    pub figures: Figures,
    /// The record the call leaves when it is admitted and consumes.
    pub counted: R,
    /// How long from `now'` that record matters.
    pub needed_us: u64,
    /// How far from `now'` a write of this rule can ever need the key to live (at least
    /// `needed_us`): see [`extend_expiry`].
    pub reach_us: u64,
}

/// The records of one key, and its expiry as the Redis value records it.
pub(crate) struct State<A: PerRule> {
    /// When the key expires (0: never written).
    expires_at_us: u64,
    records: Records<A::Record>,
    /// The draws these records count and have not had back, as (time counted at, id,
    /// until when a give-back of it could still change the records): a give-back changes
    /// the records only when it finds its draw here, and takes it out, so that one sent
    /// twice changes them once, and one of a draw made before a reset (a new state)
    /// changes nothing.
    drawn: Vec<(u64, u64, u64)>,
}

/// Numbers the draws of the windows' algorithms over every key of the process: a draw
/// made before its key was reset never shares its number with one made after.
static NEXT_DRAW: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl<A: PerRule> Default for State<A> {
    fn default() -> Self {
        State {
            expires_at_us: 0,
            records: Records::default(),
            drawn: Vec::new(),
        }
    }
}

impl<A: PerRule> fmt::Debug for State<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("State")
            .field("expires_at_us", &self.expires_at_us)
            .field("records", &self.records.0)
            .finish()
    }
}

impl<A: PerRule> State<A> {
    /// Where the records are stored (for [`super::prefetch`]).
    pub fn first_record(&self) -> *const (Rule, A::Record) {
        self.records.0.as_ptr()
    }

    /// The rules of the last write, in its order.
    pub fn rules(&self) -> impl Iterator<Item = Rule> + '_ {
        self.records.0.iter().map(|&(rule, _)| rule)
    }
}

/// What the state file keeps (`super::saved`).
impl<A: PerRule> State<A> {
    /// When the key expires, as the state records it (0: never written).
    pub fn expires_at_us(&self) -> u64 {
        self.expires_at_us
    }

    /// Each rule of the last write and its record, in that write's order.
    pub fn records(&self) -> &[(Rule, A::Record)] {
        &self.records.0
    }

    /// The state holding `records`, expiring at `expires_at_us`.
    pub fn from_records(expires_at_us: u64, records: Vec<(Rule, A::Record)>) -> Self {
        // The embedded backend draws no allowances, so a saved state holds no draw.
        State {
            expires_at_us,
            records: Records(records.into()),
            drawn: Vec::new(),
        }
    }
}

impl<A: PerRule> Clone for State<A> {
    fn clone(&self) -> Self {
        State {
            expires_at_us: self.expires_at_us,
            records: Records(self.records.0.clone()),
            drawn: self.drawn.clone(),
        }
    }
}

/// Reading the value `scripts/state.lua` describes, as Redis holds it.
#[cfg(feature = "redis")]
impl<A: PerRule> State<A> {
    /// The records and block of a value whose name (`A`'s label, or in capitals when
    /// `blocked`) has been read, from `body`, the rest: the key's expiry, then per rule its
    /// count, window and the algorithm's [`PerRule::NUMBERS`], each a little-endian `f64`;
    /// under a block, a last record of count 0 holding the block's end and rule. `None`
    /// when `body` is not such a value.
    pub fn decode(body: &[u8], blocked: bool) -> Option<(Self, Block)> {
        let size = 8 * (2 + A::NUMBERS);
        if body.len() < 8 || !(body.len() - 8).is_multiple_of(size) {
            return None;
        }
        let numbers = |bytes: &[u8]| -> Option<Vec<u64>> {
            bytes
                .chunks(8)
                .map(|b| whole(f64::from_le_bytes(b.try_into().ok()?)))
                .collect()
        };
        let expires_at_us = numbers(&body[..8])?[0];
        let mut stored: Vec<&[u8]> = body[8..].chunks(size).collect();
        let block = match blocked {
            false => Block::NONE,
            true => {
                let last = numbers(stored.pop()?)?;
                Block::stored(last[1], last[2])
            }
        };
        let records = stored
            .into_iter()
            .map(|record| {
                // A rule counting calls is stored with its count negated (Rule::signed_count).
                let calls = f64::from_le_bytes(record[..8].try_into().ok()?) < 0.0;
                // A calendar rule's window is negative (scripts/calendar.lua).
                let in_calendar = f64::from_le_bytes(record[8..16].try_into().ok()?) < 0.0;
                let mut record = record.to_vec();
                record[7] &= 0x7f;
                record[15] &= 0x7f;
                let n = numbers(&record)?;
                let count = ratelimit_rule_text::check_count(n[0]).ok()?;
                let (rule, own) = match in_calendar {
                    // -(4 * the period's first day + 1 for a day, 2 a month, 3 a year).
                    true => {
                        let calendar = match n[1] % 4 {
                            1 => crate::Calendar::Day,
                            2 => crate::Calendar::Month,
                            3 => crate::Calendar::Year,
                            _ => return None,
                        };
                        let units = A::period(&A::from_numbers(&n[2..])).units;
                        let start_us = (n[1] / 4).checked_mul(86_400_000_000)?;
                        let own = A::from_period(Period { start_us, units });
                        (Rule::per_calendar(count, calendar), own)
                    }
                    false => {
                        let window_us = ratelimit_rule_text::check_window_us(n[1].into()).ok()?;
                        let window = std::time::Duration::from_micros(window_us);
                        (Rule::new(count, window), A::from_numbers(&n[2..]))
                    }
                };
                let rule = if calls { rule.calls() } else { rule };
                Some((rule, own))
            })
            .collect::<Option<_>>()?;
        let state = State {
            expires_at_us,
            records: Records(records),
            ..State::default()
        };
        Some((state, block))
    }
}

/// `x` when it is a whole number a `u64` holds exactly (every number the scripts store).
#[cfg(feature = "redis")]
fn whole(x: f64) -> Option<u64> {
    (x >= 0.0 && x.fract() == 0.0 && x < 2f64.powi(64)).then_some(x as u64)
}

impl<A: PerRule> State<A> {
    /// The id of a draw of `rules` just written: the witness of its first rule counting
    /// in windows, where the algorithm keeps one (the token bucket's `tat`); else the
    /// process's next draw number.
    fn draw_id(&self, rules: &[Rule]) -> u64 {
        self.witness(rules)
            .unwrap_or_else(|| NEXT_DRAW.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// The witness of the first rule of `rules` counting in windows (see
    /// [`PerRule::witness`]), if stored.
    fn witness(&self, rules: &[Rule]) -> Option<u64> {
        let (i, rule) = rules
            .iter()
            .enumerate()
            .find(|(_, rule)| rule.calendar().is_none())?;
        A::witness(&self.records.get(i, rule)?)
    }
}

impl<A: PerRule> Counter for State<A> {
    fn check(&mut self, block: &mut Block, call: &Call<'_>, clamp: Clamp) -> Outcome {
        let (rules, now_us, cost, consume) = (call.rules, call.now_us, call.cost, call.consume);
        let Clamp { at_us: now, lag_us } = clamp;
        let hold_us = call.hold_at(A::ALGORITHM, now);
        // The verdicts of the first rules, kept for the write: judging again would divide
        // again, which costs more than keeping them.
        let mut kept = [None; KEPT];
        let (mut needed_us, mut reach_us) = (0, 0);
        let figures = rules.iter().enumerate().map(|(i, r)| {
            let v = judge::<A>(self.records.get(i, r), r, now, call.units(r), hold_us);
            if let Some(slot) = kept.get_mut(i) {
                *slot = Some(v);
            }
            needed_us = needed_us.max(v.needed_us);
            reach_us = reach_us.max(v.reach_us);
            v.figures
        });
        let mut decision = decide(figures, call, lag_us);
        if !decision.allowed {
            // A block keeps what the key holds too, as far as it may matter.
            let ttl_us = block
                .start(&mut decision, call, clamp)
                .and_then(|block_us| {
                    let reach_us = (reach_us + lag_us).max(block_us);
                    extend_expiry(&mut self.expires_at_us, now_us, block_us, reach_us)
                });
            return Outcome { decision, ttl_us };
        }
        if !consume {
            return Outcome::unwritten(decision);
        }
        block.end(now);
        self.records
            .write(rules, |i, rule, stored| match kept.get(i) {
                Some(&Some(v)) => v.counted,
                _ => judge::<A>(stored, rule, now, call.units(rule), hold_us).counted,
            });
        decision.receipt = match call.draw {
            false => {
                let id = Receipt::check_id(A::ALGORITHM, 0);
                Receipt::new(cost, now, id, A::ALGORITHM, CountedBy::Memory)
            }
            true => {
                let id = self.draw_id(rules);
                self.drawn.retain(|&(_, _, until_us)| until_us > now_us);
                let until_us = super::draw_matters_until_us(rules, now, hold_us);
                self.drawn.push((now, id, until_us));
                Receipt::new(cost, now, id, A::ALGORITHM, CountedBy::Memory)
            }
        };
        // From the caller's `now`, which the key's expiry (the script's PX) is relative to.
        let ttl_us = extend_expiry(
            &mut self.expires_at_us,
            now_us,
            needed_us + lag_us,
            reach_us + lag_us,
        );
        Outcome { decision, ttl_us }
    }

    fn refund(&mut self, rules: &[Rule], receipt: &Receipt, now_us: u64) {
        let (at_us, cost) = (receipt.at_us, receipt.cost);
        for (i, rule) in rules.iter().enumerate() {
            if let Some(record) = self.records.get_mut(i, rule) {
                let units = rule.units(cost);
                *record = adjust::<A>(*record, rule, at_us, (units, units), now_us, false);
            }
        }
    }

    fn give_back(&mut self, back: &Returned<'_>, now_us: u64) {
        let drawn = |&(at_us, id, _): &(u64, u64, u64)| at_us == back.at_us && id == back.id;
        let Some(at) = self.drawn.iter().position(drawn) else {
            return;
        };
        self.drawn.swap_remove(at);
        // The token bucket's draw gives back only while no later charge has moved its
        // `tat` (see `docs/allowances.md`): what it holds unused then comes back by refill.
        let unmoved = self.witness(back.rules).is_none_or(|tat| tat == back.id);
        for (i, rule) in back.rules.iter().enumerate() {
            let units = back.unused(rule);
            // A calendar period's count is given back whatever came after.
            if units == 0 || (!unmoved && rule.calendar().is_none()) {
                continue;
            }
            if let Some(record) = self.records.get_mut(i, rule) {
                *record = match rule.calendar() {
                    Some(_) => {
                        adjust::<A>(*record, rule, back.at_us, (units, units), now_us, false)
                    }
                    None => A::give_back(*record, rule, back.at_us, units, now_us),
                };
            }
        }
    }

    fn settle(&mut self, settle: &Settled<'_>, now_us: u64) -> Option<u64> {
        let (at_us, reserved, actual) = (settle.receipt.at_us, settle.receipt.cost, settle.actual);
        let mut ttl_us = None;
        for (i, rule) in settle.rules.iter().enumerate() {
            if rule.counts_calls() || actual == reserved {
                continue;
            }
            if let Some(record) = self.records.get_mut(i, rule) {
                *record = match actual < reserved {
                    true => {
                        let units = (reserved - actual, reserved);
                        adjust::<A>(*record, rule, at_us, units, now_us, false)
                    }
                    false => {
                        let units = (actual - reserved, reserved);
                        adjust::<A>(*record, rule, at_us, units, now_us, true)
                    }
                };
                // A debt that outlives the key's expiry moves it, as the script does (a
                // calendar period's record matters until the period ends, which the
                // expiry covers).
                let until_us = match rule.calendar() {
                    None => A::until_us(record),
                    Some(_) => None,
                };
                if let Some(until_us) = until_us {
                    let needed_us = until_us.saturating_sub(now_us);
                    if let Some(ttl) =
                        extend_expiry(&mut self.expires_at_us, now_us, needed_us, needed_us)
                    {
                        ttl_us = Some(ttl);
                    }
                }
            }
        }
        ttl_us
    }

    /// The latest window start a record holds (the token bucket's records hold none).
    fn latest_us(&self) -> Option<u64> {
        self.records.values().filter_map(|r| A::latest_us(&r)).max()
    }

    fn figures(&self, rule: &Rule, at_us: u64, cost: u64) -> Figures {
        judge::<A>(self.records.get(usize::MAX, rule), rule, at_us, cost, 0).figures
    }

    fn held(&self, rule: &Rule, at_us: u64) -> u64 {
        self.records
            .get(usize::MAX, rule)
            .map_or(0, |record| match rule.calendar() {
                Some(in_calendar) => calendar::held(A::period(&record), in_calendar, at_us),
                None => A::held(record, rule, at_us),
            })
    }
}

/// Per rule of the last write, the algorithm's record `R`, in that write's order.
///
/// A rule is looked up at its own place first and elsewhere only when the rules changed,
/// as the scripts' `state.lua` does. A write of the same rules as the last (the steady
/// state) updates the records in place, allocating nothing; other rules replace them. One
/// rule's record is kept inline, with the key: a check then reads no memory of its own.
struct Records<R>(SmallVec<[(Rule, R); 1]>);

impl<R> Default for Records<R> {
    fn default() -> Self {
        Records(SmallVec::new())
    }
}

impl<R: Copy> Records<R> {
    /// The record of `rule`, the `i`-th rule of a check.
    fn get(&self, i: usize, rule: &Rule) -> Option<R> {
        match self.0.get(i) {
            Some((r, x)) if r == rule => Some(*x),
            _ => self.0.iter().find(|(r, _)| r == rule).map(|&(_, x)| x),
        }
    }

    /// The record of `rule`, the `i`-th rule of a call, to change in place.
    fn get_mut(&mut self, i: usize, rule: &Rule) -> Option<&mut R> {
        let at = match self.0.get(i) {
            Some((r, _)) if r == rule => i,
            _ => self.0.iter().position(|(r, _)| r == rule)?,
        };
        Some(&mut self.0[at].1)
    }

    /// Every record, in no particular order.
    fn values(&self) -> impl Iterator<Item = R> + '_ {
        self.0.iter().map(|&(_, x)| x)
    }

    /// Makes the records those of `rules`, the `i`-th rule's being `new(i, rule, its
    /// record before this write)`.
    fn write(&mut self, rules: &[Rule], mut new: impl FnMut(usize, &Rule, Option<R>) -> R) {
        let same =
            self.0.len() == rules.len() && self.0.iter().zip(rules).all(|((r, _), q)| r == q);
        if same {
            // Each rule finds its record at its own place, which no earlier rule writes.
            for (i, (rule, x)) in self.0.iter_mut().enumerate() {
                *x = new(i, rule, Some(*x));
            }
        } else {
            let records = rules
                .iter()
                .enumerate()
                .map(|(i, rule)| (*rule, new(i, rule, self.get(i, rule))))
                .collect();
            self.0 = records;
        }
    }
}

/// The expiry a write leaves: the scripts move a key's expiry only when the state written
/// would outlive it (with the [`MARGIN_US`]), and then to [`ttl_us`]`(reach_us)` from now;
/// otherwise `SET ... KEEPTTL` keeps it, which costs Redis less than setting it again.
///
/// `expires_at_us` is the key's expiry as the state records it (0 for a new key), moved
/// when the expiry moves. `needed_us` is how long the state just written matters;
/// `reach_us` (at least `needed_us`) how far ahead a write of the same rules can ever
/// need, so that a moved expiry also covers the writes after it: the token bucket's burst
/// span, the fixed and sliding window's `needed_us` itself (their state matters until a
/// window ends, whatever the calls). Returns the new TTL, or `None` when the expiry already
/// covers `needed_us` from `now_us`. Either way the key lives at least as long as the
/// state just written matters, which is all expiry is for.
fn extend_expiry(
    expires_at_us: &mut u64,
    now_us: u64,
    needed_us: u64,
    reach_us: u64,
) -> Option<u64> {
    if *expires_at_us >= now_us.saturating_add(needed_us).saturating_add(MARGIN_US) {
        return None;
    }
    let ttl = ttl_us(reach_us.max(needed_us));
    *expires_at_us = now_us.saturating_add(ttl);
    Some(ttl)
}

#[cfg(test)]
mod tests {
    use super::extend_expiry;

    #[test]
    fn expiry_moves_only_when_the_state_would_outlive_it() {
        let mut expires = 0;
        assert_eq!(
            extend_expiry(&mut expires, 5_000_000, 1_500, 1_500),
            Some(1_002_000)
        );
        assert_eq!(expires, 6_002_000);
        // Covered with the one-second margin, up to the last µs.
        assert_eq!(extend_expiry(&mut expires, 5_000_000, 2_000, 2_000), None);
        assert_eq!(expires, 6_002_000);
        assert_eq!(
            extend_expiry(&mut expires, 5_000_000, 2_001, 2_001),
            Some(1_003_000)
        );
        assert_eq!(expires, 6_003_000);
    }
}
