//! How rules are counted. The arithmetic lives here, apart from storage: the memory
//! backend runs these functions, and each `scripts/<algorithm>.lua` is the same arithmetic
//! for Redis. Both answer a [`RawDecision`] in microseconds, so they can be compared exactly.
//!
//! What every algorithm shares is here, once: its names ([`Algorithm`]), how a call's
//! `cost` is judged by one rule ([`Figures::of`]), which rule binds ([`decide`]), how time
//! is kept from running backwards ([`Clamp`]), how long a key lives ([`ttl_us`]) and how a
//! refusal locks a key out ([`Block`]). An algorithm is a [`Counter`]: it computes each
//! rule's [`Figures`] from its state, writes the state back, and gives back what a
//! decision took ([`Receipt`]). The fixed window, the sliding window and the token bucket keep
//! one record per rule and share all but their arithmetic ([`records`]); the sliding log
//! keeps its entries.

mod block;
mod calendar;
mod fixed_window;
mod records;
pub(crate) mod saved;
mod sliding_log;
mod sliding_window;
mod token_bucket;
#[cfg(test)]
mod worked;

pub(crate) use self::block::Block;
use crate::decision::{Bound, RawDecision, Receipt};
use crate::lockout::Packed;
use crate::{Algorithm, Rule};

/// The time a check is counted at: never earlier than the key's stored state.
///
/// A check can read an older time than the state it finds: the memory backend reads its
/// clock before taking the key's lock, and Redis's `TIME` steps back when a failover
/// promotes a server whose clock is behind. Counting such a check at its own time would
/// treat newer state as stale (a window that has not started yet), and so forget calls.
/// It is counted at the state's latest time instead (`at = max(now, latest)`), and its
/// durations are answered from the caller's own `now`: `retry_after` and `reset_after`
/// grow by `lag = at - now`, so that a call at `now + retry_after` on the same clock
/// passes, exactly as without a lag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Clamp {
    /// The time the check is counted at.
    pub at_us: u64,
    /// `at - now`: how far behind the state the caller's clock is.
    pub lag_us: u64,
}

impl Clamp {
    /// `now_us`, moved up to `latest_us`, the newest time the key's state records.
    pub fn new(now_us: u64, latest_us: Option<u64>) -> Self {
        let at_us = latest_us.map_or(now_us, |latest| latest.max(now_us));
        Clamp {
            at_us,
            lag_us: at_us - now_us,
        }
    }
}

/// One rule's view of a call of `cost` units, at the time the check is counted at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Figures {
    /// Units the rule would admit now.
    pub left: u64,
    /// Until the rule's window is fully free: after the call when the rule admits it, as
    /// things stand when it does not.
    pub reset_after_us: u64,
    /// 0 when the rule admits the call; else until it would, exactly; else
    /// [`RawDecision::NEVER`] when the cost is above the rule's count.
    pub retry_after_us: u64,
}

impl Figures {
    /// The figures of a rule of `count` that has `left` units now, for a call of `cost`:
    /// admitted when `cost <= left`, its window then free `admitted_reset_us` from now;
    /// else denied, the window free `denied_reset_us()` from now, and a call of the same
    /// cost admitted `retry_after_us()` from now, or never when `cost > count` (then
    /// `retry_after_us` is not called: it may assume `cost <= count`).
    #[inline(always)]
    pub fn of(
        count: u64,
        cost: u64,
        left: u64,
        admitted_reset_us: u64,
        denied_reset_us: impl FnOnce() -> u64,
        retry_after_us: impl FnOnce() -> u64,
    ) -> Figures {
        if cost <= left {
            return Figures {
                left,
                reset_after_us: admitted_reset_us,
                retry_after_us: 0,
            };
        }
        Figures {
            left,
            reset_after_us: denied_reset_us(),
            retry_after_us: if cost > count {
                RawDecision::NEVER
            } else {
                retry_after_us()
            },
        }
    }
}

/// The decision for a call of `cost` units, from each rule's [`Figures`] in the rules'
/// order; `lag_us` as [`Clamp`] computed it.
///
/// The call passes when every rule admits it. The binding rule is then the one with the
/// least left (ties: lowest index), and `remaining` what it has left after the call (a
/// check) or now (a peek). Otherwise the binding rule is the denying one with the largest
/// `retry_after` (ties: lowest index; a cost that can never pass is the largest), and
/// `remaining` what it has left now. Every script makes the same choice in its `bind`.
///
/// `call`'s rules are the rules judged: an admitted check's `remaining` is what the binding
/// rule has left after its own part of the cost ([`Call::units`]).
#[inline]
pub(crate) fn decide(
    figures: impl IntoIterator<Item = Figures>,
    call: &Call<'_>,
    lag_us: u64,
) -> RawDecision {
    let Call { rules, consume, .. } = *call;
    let mut denied: Option<(usize, Figures)> = None;
    let mut tightest: Option<(usize, Figures)> = None;
    for (i, f) in figures.into_iter().enumerate() {
        if f.retry_after_us > 0 {
            if denied.is_none_or(|(_, d)| f.retry_after_us > d.retry_after_us) {
                denied = Some((i, f));
            }
        } else if tightest.is_none_or(|(_, t)| f.left < t.left) {
            tightest = Some((i, f));
        }
    }
    let later = |us: u64| us.saturating_add(lag_us);
    if let Some((rule_index, f)) = denied {
        let retry_after_us = match f.retry_after_us {
            RawDecision::NEVER => RawDecision::NEVER,
            retry => later(retry),
        };
        return RawDecision {
            allowed: false,
            rule_index,
            remaining: f.left,
            reset_after_us: later(f.reset_after_us),
            retry_after_us,
            receipt: Receipt::NONE,
            bound: Bound::Rule,
            crossed: None,
        };
    }
    let (rule_index, f) = tightest.expect("at least one rule");
    RawDecision {
        allowed: true,
        rule_index,
        remaining: if consume {
            f.left - call.units(&rules[rule_index])
        } else {
            f.left
        },
        reset_after_us: later(f.reset_after_us),
        retry_after_us: 0,
        receipt: Receipt::NONE,
        bound: Bound::Rule,
        crossed: None,
    }
}

/// The hold of a draw (`backend::Draw::hold_at`) of `rules` by `algorithm` counted at
/// `at_us`, asked for `hold_us`: never more than a quarter of the shortest window, and
/// never past the last µs of the aligned window (fixed and sliding window) or, with a rule
/// counting in calendar periods, of the UTC day `at_us` is in (a period ends at a
/// midnight), so that the units it records at `at_us + hold` are counted where they are
/// spent (see `docs/allowances.md`). `scripts/hold.lua` computes the same.
pub(crate) fn draw_hold_us(rules: &[Rule], algorithm: Algorithm, at_us: u64, hold_us: u64) -> u64 {
    let aligned = matches!(algorithm, Algorithm::FixedWindow | Algorithm::SlidingWindow);
    rules.iter().fold(hold_us, |hold, rule| {
        let end_us = match rule.calendar() {
            Some(_) => crate::calendar::period_us(crate::Calendar::Day, at_us).1,
            None if aligned => (at_us / rule.window_us() + 1) * rule.window_us(),
            None => u64::MAX,
        };
        let quarter = match rule.calendar() {
            Some(_) => u64::MAX,
            None => rule.window_us() / 4,
        };
        hold.min(quarter).min(end_us.saturating_sub(at_us + 1))
    })
}

/// Until when a give-back of a draw of `rules` counted at `at_us` and held `hold_us`
/// could still change a window's records: the end of its calendar periods, two windows
/// after its hold (the sliding window's previous count) for the others. The embedded
/// backend remembers a draw that long for its give-back.
pub(crate) fn draw_matters_until_us(rules: &[Rule], at_us: u64, hold_us: u64) -> u64 {
    rules
        .iter()
        .map(|rule| match rule.calendar() {
            Some(calendar) => crate::calendar::period_us(calendar, at_us).1,
            None => at_us + hold_us + 2 * rule.window_us(),
        })
        .max()
        .unwrap_or(0)
}

/// How long a key must live after a write, as the scripts' `PEXPIRE` sets it: `needed_us`
/// rounded up to whole milliseconds, plus a one-second margin, in µs.
///
/// `needed_us` is how long the state just written stays meaningful (for the sliding log,
/// the longest window). The margin only keeps a key a little longer than it matters, never
/// shorter: every algorithm ignores expired data by itself, so expiry frees memory and never
/// decides. Every script computes the same as `ttl_ms(needed_us)`:
/// `floor((needed_us + 999) / 1000) + 1000`.
pub(crate) fn ttl_us(needed_us: u64) -> u64 {
    needed_us
        .div_ceil(1000)
        .saturating_add(MARGIN_US / 1000)
        .saturating_mul(1000)
}

/// How much longer than its state matters a key always lives: one second. A check whose
/// clock is behind the key's (see [`Clamp`]) by less than this never finds the key
/// expired while its state still matters to it.
pub(crate) const MARGIN_US: u64 = 1_000_000;

/// One check of one key, as an algorithm counts it: made from the backend's request, in
/// one place (`Request::call`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call<'a> {
    pub rules: &'a [Rule],
    /// The caller's clock, µs since the epoch.
    pub now_us: u64,
    /// Units of every rule counting units: the request's, at least 1.
    pub cost: u64,
    /// What a rule counting calls takes: 1, or the calls a draw stands for.
    pub calls: u64,
    /// The hold a draw asks for: its units are recorded as spent [`draw_hold_us`] of it
    /// after the time the call is counted at; 0 for a check.
    pub hold_us: u64,
    /// Whether the call is a draw (whose give-back the state must find), whatever its hold.
    pub draw: bool,
    /// `false` for a peek: answer as a check would, write nothing.
    pub consume: bool,
    /// When a consuming check is refused by a rule, the key refuses every check for this
    /// long after (see [`Block`]); `None`: no block.
    pub lockout: Option<Packed>,
}

impl Call<'_> {
    /// The hold this call gets from `algorithm` when counted at `at_us`: a draw's
    /// ([`draw_hold_us`]), 0 for a check.
    pub fn hold_at(&self, algorithm: Algorithm, at_us: u64) -> u64 {
        match self.hold_us {
            0 => 0,
            asked => draw_hold_us(self.rules, algorithm, at_us, asked),
        }
    }

    /// What the call takes from `rule`: its calls from a rule counting calls, its cost
    /// from any other.
    #[inline(always)]
    pub fn units(&self, rule: &Rule) -> u64 {
        match rule.counts_calls() {
            true => self.calls,
            false => self.cost,
        }
    }
}

/// The end of one draw, as an algorithm applies it (see `backend::GiveBack`): the draw of
/// `rules` counted at `at_us` under `id` (its receipt's), recorded as spent `hold_us`
/// later ([`draw_hold_us`]), of which `used_units` units and `used_calls` calls were
/// spent, the last at `last_spend_us`, and the rest, `units` and `calls`, not at all.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Returned<'a> {
    pub rules: &'a [Rule],
    pub at_us: u64,
    pub id: u64,
    pub hold_us: u64,
    pub units: u64,
    pub calls: u64,
    pub used_units: u64,
    pub used_calls: u64,
    pub last_spend_us: u64,
}

impl Returned<'_> {
    /// What of the draw `rule` gets back: calls from a rule counting calls, units from
    /// any other.
    pub fn unused(&self, rule: &Rule) -> u64 {
        match rule.counts_calls() {
            true => self.calls,
            false => self.units,
        }
    }

    /// When the draw's units are recorded as spent.
    pub fn held_until_us(&self) -> u64 {
        self.at_us + self.hold_us
    }
}

/// A settle, as an algorithm applies it (see `backend::Settle`): the cost the reservation
/// `receipt` made of `rules` replaced by `actual` units.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settled<'a> {
    pub rules: &'a [Rule],
    pub receipt: Receipt,
    pub actual: u64,
}

/// What one check did to a key's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// With the receipt of an admitted consuming check.
    pub decision: RawDecision,
    /// `Some(ttl)` when the check moved the key's expiry: the key now expires `ttl` µs from
    /// `now` (what the script's `PEXPIRE` or `SET ... PX` does). `None` leaves the expiry
    /// as it was: a peek or a denial, which write nothing (but for a refusal that starts a
    /// block), or a write the expiry already covers. A check of an absent key that writes
    /// always moves it.
    pub ttl_us: Option<u64>,
}

impl Outcome {
    /// A check that wrote nothing.
    pub fn unwritten(decision: RawDecision) -> Self {
        Outcome {
            decision,
            ttl_us: None,
        }
    }
}

/// `call` on `counter`: refused while `block` lasts; else checked at the time [`Clamp`]
/// makes of it, the newest time the state records.
#[inline(always)]
fn counted(counter: &mut impl Counter, block: &mut Block, call: &Call<'_>) -> Outcome {
    match block.clamp(call, counter.latest_us()) {
        Ok(clamp) => counter.check(block, call, clamp),
        Err(refused) => refused,
    }
}

/// How one algorithm counts a key's state.
pub(crate) trait Counter {
    /// Runs `call`, which `block` does not refuse (see [`StoredState::check`]), counted at
    /// `clamp`: judged and decided, recorded with its receipt when it consumes and every
    /// rule admits it ([`Block::end`]), and blocking the key when it asks to and is
    /// refused ([`Block::start`]).
    fn check(&mut self, block: &mut Block, call: &Call<'_>, clamp: Clamp) -> Outcome;

    /// Gives back what `receipt` took, as far as the state still holds it (see
    /// [`Receipt`]); `now_us` is the caller's clock.
    fn refund(&mut self, rules: &[Rule], receipt: &Receipt, now_us: u64);

    /// Gives back what a draw did not use and re-times what it used (see [`Returned`]),
    /// once: sent twice, the second changes nothing; `now_us` is the caller's clock.
    fn give_back(&mut self, back: &Returned<'_>, now_us: u64);

    /// Replaces the cost the settle's receipt reserved by its `actual` in every one of its
    /// rules counting units (rules counting calls keep their one): gives back the
    /// difference as far as the state still holds it, or takes it, even past a rule's
    /// count, where the state still counts the reservation; `now_us` is the caller's clock.
    /// See [`StoredState::settle`]. Returns the key's new TTL from `now_us` when the settle
    /// moved its expiry (a debt that outlives it), as [`Outcome::ttl_us`].
    fn settle(&mut self, settle: &Settled<'_>, now_us: u64) -> Option<u64>;

    /// The latest time the state records, before which no check is counted (see
    /// [`Clamp`]); `None` when it records none.
    fn latest_us(&self) -> Option<u64>;

    /// `rule`'s view of a call of `cost` units counted at `at_us` (already clamped),
    /// changing nothing; a rule the state keeps no record of stands empty.
    fn figures(&self, rule: &Rule, at_us: u64, cost: u64) -> Figures;

    /// The units (or calls) `rule` holds at `at_us` (already clamped), more than its
    /// count when a settle left it in debt (for [`crate::inspect`]).
    fn held(&self, rule: &Rule, at_us: u64) -> u64;
}

/// The counts of one key, for whichever algorithm keeps them.
#[derive(Clone, Debug)]
enum Counts {
    SlidingLog(sliding_log::State),
    FixedWindow(fixed_window::State),
    SlidingWindow(sliding_window::State),
    TokenBucket(token_bucket::State),
}

/// The state one key holds: its counts and its block.
#[derive(Clone, Debug)]
pub(crate) struct StoredState {
    counts: Counts,
    block: Block,
}

impl StoredState {
    /// The empty state of a key that does not exist yet.
    pub fn new(algorithm: Algorithm) -> Self {
        let counts = match algorithm {
            Algorithm::SlidingLog => Counts::SlidingLog(Default::default()),
            Algorithm::FixedWindow => Counts::FixedWindow(Default::default()),
            Algorithm::SlidingWindow => Counts::SlidingWindow(Default::default()),
            Algorithm::TokenBucket => Counts::TokenBucket(Default::default()),
        };
        StoredState {
            counts,
            block: Block::NONE,
        }
    }

    /// The algorithm whose state this is.
    pub fn algorithm(&self) -> Algorithm {
        match self.counts {
            Counts::SlidingLog(_) => Algorithm::SlidingLog,
            Counts::FixedWindow(_) => Algorithm::FixedWindow,
            Counts::SlidingWindow(_) => Algorithm::SlidingWindow,
            Counts::TokenBucket(_) => Algorithm::TokenBucket,
        }
    }

    /// Asks the processor to start loading the state's own memory (a log, or records),
    /// so that it arrives while the key is being compared rather than after.
    pub fn prefetch(&self) {
        match &self.counts {
            Counts::SlidingLog(s) => s.ends().into_iter().for_each(prefetch),
            Counts::FixedWindow(s) => prefetch(s.first_record()),
            Counts::SlidingWindow(s) => prefetch(s.first_record()),
            Counts::TokenBucket(s) => prefetch(s.first_record()),
        }
    }

    /// Runs `call`: refused while the key is blocked; else counted, recorded when it
    /// consumes and every rule admits it, and blocking the key when it consumes, a rule
    /// refuses it and `block_for_us` is set.
    pub fn check(&mut self, call: &Call<'_>) -> Outcome {
        let block = &mut self.block;
        match &mut self.counts {
            Counts::SlidingLog(s) => counted(s, block, call),
            Counts::FixedWindow(s) => counted(s, block, call),
            Counts::SlidingWindow(s) => counted(s, block, call),
            Counts::TokenBucket(s) => counted(s, block, call),
        }
    }

    /// Blocks the key until `until_us` (µs since the epoch) unless it is blocked longer
    /// already (`Limiter::block`): the block a refusal with `block_for` starts, answered by
    /// rule 0. Returns the block's end.
    pub fn block_until(&mut self, until_us: u64) -> u64 {
        self.block.extend(until_us, 0, self.block.strikes);
        self.block.until_us
    }

    /// A key that held nothing when it was blocked is kept as the sliding log keeps a block
    /// (as on Redis: a sorted set holding only the block's member). Whichever algorithm
    /// checks it first takes it over, keeping the block; `None` when the state holds
    /// counts, or is already `algorithm`'s.
    pub fn taken_over_by(&self, algorithm: Algorithm) -> Option<StoredState> {
        match &self.counts {
            Counts::SlidingLog(s)
                if algorithm != Algorithm::SlidingLog && s.latest_us().is_none() =>
            {
                Some(StoredState {
                    block: self.block,
                    ..StoredState::new(algorithm)
                })
            }
            _ => None,
        }
    }

    /// Gives back what `receipt` took of `rules`, as far as the state still holds it;
    /// nothing when another algorithm counted it.
    pub fn refund(&mut self, rules: &[Rule], receipt: &Receipt, now_us: u64) {
        if receipt.algorithm != self.algorithm() {
            return;
        }
        match &mut self.counts {
            Counts::SlidingLog(s) => s.refund(rules, receipt, now_us),
            Counts::FixedWindow(s) => s.refund(rules, receipt, now_us),
            Counts::SlidingWindow(s) => s.refund(rules, receipt, now_us),
            Counts::TokenBucket(s) => s.refund(rules, receipt, now_us),
        }
    }
}

impl StoredState {
    /// Gives back what a draw did not use and re-times what it used (see [`Returned`]),
    /// once; nothing when another algorithm counted it.
    pub fn give_back(&mut self, algorithm: Algorithm, back: &Returned<'_>, now_us: u64) {
        if algorithm != self.algorithm() {
            return;
        }
        match &mut self.counts {
            Counts::SlidingLog(s) => s.give_back(back, now_us),
            Counts::FixedWindow(s) => s.give_back(back, now_us),
            Counts::SlidingWindow(s) => s.give_back(back, now_us),
            Counts::TokenBucket(s) => s.give_back(back, now_us),
        }
    }

    /// Settles the reservation the settle's receipt made of its rules at its `actual` units,
    /// as far as the state still counts it; nothing when another algorithm counted it.
    ///
    /// Every algorithm treats the settled cost as if the check had been of `actual` units
    /// at the time it was counted at: the sliding log adds or removes entries at that time;
    /// the fixed and sliding windows change the count of the window it was counted in,
    /// while a record still holds it; the token bucket gives back what has not refilled
    /// (as a refund) or pushes its `tat` on by the excess from now (a bucket in debt
    /// refills from there). An excess is taken even past a rule's count: later checks are
    /// refused until the window has room again. Returns the key's new TTL from `now_us`
    /// when the debt outlives its expiry (the token bucket's), as [`Outcome::ttl_us`].
    pub fn settle(&mut self, settle: &Settled<'_>, now_us: u64) -> Option<u64> {
        if settle.receipt.algorithm != self.algorithm() {
            return None;
        }
        match &mut self.counts {
            Counts::SlidingLog(s) => s.settle(settle, now_us),
            Counts::FixedWindow(s) => s.settle(settle, now_us),
            Counts::SlidingWindow(s) => s.settle(settle, now_us),
            Counts::TokenBucket(s) => s.settle(settle, now_us),
        }
    }
}

/// How one rule stands in a key's state at some time, as a check would find it (for
/// [`Limiter::inspect`](crate::Limiter::inspect)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Standing {
    /// Units the rule admits now.
    pub left: u64,
    /// Until one unit passes the rule: 0 when one passes now.
    pub retry_after_us: u64,
    /// Until every unit of the rule is free again: 0 when none is used.
    pub reset_after_us: u64,
    /// Units (or calls) the rule holds now: above its count when in debt.
    pub held: u64,
}

/// Reading a key's state without changing it.
impl StoredState {
    /// How `rule` stands at `now_us`, by the algorithm's own arithmetic: a peek of one unit
    /// (`left`, `retry_after_us`) and of more than the rule's count (the window as things
    /// stand, `reset_after_us`), counted at the time a check would be ([`Clamp`]). A rule
    /// the state keeps no record of stands empty, as a check would start it; under the
    /// sliding log every rule is counted from the entries. The block is not applied: see
    /// [`block`](Self::block).
    pub fn standing(&self, rule: &Rule, now_us: u64) -> Standing {
        let counter: &dyn Counter = match &self.counts {
            Counts::SlidingLog(s) => s,
            Counts::FixedWindow(s) => s,
            Counts::SlidingWindow(s) => s,
            Counts::TokenBucket(s) => s,
        };
        let Clamp { at_us, lag_us } = Clamp::new(now_us, counter.latest_us());
        let figures = |cost| counter.figures(rule, at_us, cost);
        let (one, all) = (figures(1), figures(rule.count().saturating_add(1)));
        let later = |us: u64| match us {
            0 => 0,
            us => us.saturating_add(lag_us),
        };
        Standing {
            held: counter.held(rule, at_us),
            left: one.left,
            retry_after_us: later(one.retry_after_us),
            reset_after_us: match one.left >= rule.count() {
                true => 0,
                false => later(all.reset_after_us),
            },
        }
    }

    /// The rules whose records the state keeps, in the order of the write that stored
    /// them; none for the sliding log, whose entries name no rule.
    pub fn stored_rules(&self) -> Vec<Rule> {
        match &self.counts {
            Counts::SlidingLog(s) => s.period_rules().collect(),
            Counts::FixedWindow(s) => s.rules().collect(),
            Counts::SlidingWindow(s) => s.rules().collect(),
            Counts::TokenBucket(s) => s.rules().collect(),
        }
    }

    /// The key's block, as (until µs since the epoch, the index of the rule that started
    /// it), whether or not it has passed; `None` when there is none.
    pub fn block(&self) -> Option<(u64, usize)> {
        (self.block != Block::NONE).then_some((self.block.until_us, self.block.rule_index))
    }

    /// The sliding log's entries: how many, the oldest and the newest (µs since the
    /// epoch); `None` for an empty log or another algorithm.
    pub fn log_entries(&self) -> Option<(usize, u64, u64)> {
        match &self.counts {
            Counts::SlidingLog(s) => s.entries(),
            _ => None,
        }
    }

    /// The state a string-state script wrote (`scripts/state.lua`): its algorithm's name
    /// (in capitals under a block), the key's expiry, the records, and the block's record.
    /// An error says what the value is instead.
    #[cfg(feature = "redis")]
    pub fn from_redis_string(value: &[u8]) -> Result<StoredState, String> {
        use records::State;
        for algorithm in [
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
            Algorithm::TokenBucket,
        ] {
            let name = algorithm.label().as_bytes();
            let Some(head) = value.get(..name.len()) else {
                continue;
            };
            let blocked = head == algorithm.name().as_bytes();
            if head != name && !blocked {
                continue;
            }
            let body = &value[name.len()..];
            let decoded = match algorithm {
                Algorithm::FixedWindow => {
                    State::decode(body, blocked).map(|(s, block)| (Counts::FixedWindow(s), block))
                }
                Algorithm::SlidingWindow => {
                    State::decode(body, blocked).map(|(s, block)| (Counts::SlidingWindow(s), block))
                }
                _ => State::decode(body, blocked).map(|(s, block)| (Counts::TokenBucket(s), block)),
            };
            return decoded
                .map(|(counts, block)| StoredState { counts, block })
                .ok_or_else(|| format!("a value named {algorithm} of an unexpected length"));
        }
        Err("a string the limiter did not write".into())
    }

    /// The sliding log held in a sorted set: its entries' times (µs, in any order), the
    /// times of the checks rules counting calls counted, the counters of rules counting in
    /// calendar periods (the rule, its period's start and units), and the block member's
    /// end and rule, if any (see `scripts/sliding_log.lua`).
    #[cfg(feature = "redis")]
    pub fn from_redis_log(
        entries: Vec<u64>,
        calls: Vec<u64>,
        periods: Vec<(Rule, u64, u64)>,
        block: Option<(u64, usize)>,
    ) -> StoredState {
        let log = sliding_log::State::from_entries(entries, calls, periods);
        StoredState {
            counts: Counts::SlidingLog(log),
            block: block.map_or(Block::NONE, |(until_us, rule)| {
                Block::stored(until_us, rule as u64)
            }),
        }
    }
}

/// A hint to load the cache line at `ptr`; it reads nothing and cannot fault.
#[inline(always)]
fn prefetch<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch only hints the cache; any address is allowed.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

/// Helpers shared by the algorithms' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::time::Duration;

    use super::{Block, Call, Counter, Outcome};
    use crate::Rule;

    /// A call without a block.
    pub fn call(rules: &[Rule], now_us: u64, cost: u64, consume: bool) -> Call<'_> {
        Call {
            rules,
            now_us,
            cost,
            calls: 1,
            hold_us: 0,
            draw: false,
            consume,
            lockout: None,
        }
    }

    /// Checks a call without a block on the state of one algorithm.
    pub fn check(
        state: &mut impl Counter,
        rules: &[Rule],
        now_us: u64,
        cost: u64,
        consume: bool,
    ) -> Outcome {
        super::counted(
            state,
            &mut Block::default(),
            &call(rules, now_us, cost, consume),
        )
    }

    /// A rule of `count` per `window_us` microseconds.
    pub fn rule(count: u64, window_us: u64) -> Rule {
        Rule::new(count, Duration::from_micros(window_us))
    }
}

#[cfg(test)]
mod tests;
