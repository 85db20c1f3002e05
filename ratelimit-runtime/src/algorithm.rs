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

mod calendar;
mod fixed_window;
mod records;
pub(crate) mod saved;
mod sliding_log;
mod sliding_window;
mod token_bucket;
#[cfg(test)]
mod worked;

use std::num::NonZeroU64;

use crate::decision::{RawDecision, Receipt};
use crate::lockout::{Lockout, STREAK_US};
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
    pub block_for_us: Option<NonZeroU64>,
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

/// How one algorithm counts a key's state.
pub(crate) trait Counter {
    /// Runs `call` (see [`KeyState::check`]): refused while `block` lasts; else judged at
    /// the time [`Clamp`] makes of it and decided, recorded with its receipt when it
    /// consumes and every rule admits it ([`Block::end`]), and blocking the key when it
    /// asks to and is refused ([`Block::start`]).
    fn check(&mut self, block: &mut Block, call: &Call<'_>) -> Outcome;

    /// Gives back what `receipt` took, as far as the state still holds it (see
    /// [`Receipt`]); `now_us` is the caller's clock.
    fn refund(&mut self, rules: &[Rule], receipt: &Receipt, now_us: u64);

    /// Gives back what a draw did not use and re-times what it used (see [`Returned`]),
    /// once: sent twice, the second changes nothing; `now_us` is the caller's clock.
    fn give_back(&mut self, back: &Returned<'_>, now_us: u64);

    /// Replaces the cost `receipt` reserved by `actual` in every rule of `rules` counting
    /// units (rules counting calls keep their one): gives back the difference as far as
    /// the state still holds it, or takes it, even past a rule's count, where the state
    /// still counts the reservation; `now_us` is the caller's clock. See
    /// [`KeyState::settle`]. Returns the key's new TTL from `now_us` when the settle moved
    /// its expiry (a debt that outlives it), as [`Outcome::ttl_us`].
    fn settle(
        &mut self,
        rules: &[Rule],
        receipt: &Receipt,
        actual: u64,
        now_us: u64,
    ) -> Option<u64>;

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

/// A key's lock-out: after a consuming check with `block_for` set is refused by a rule,
/// every check of the key (and every peek) is refused, consuming nothing, until the time
/// it was counted at plus `block_for`. The refusal answers with the rule that started the
/// block (rule 0 when the rules have changed since and there is no such rule), nothing
/// remaining, and `retry_after` and `reset_after` the block's remaining time.
///
/// It is kept with the key's state: on Redis in the key itself (a string state named in
/// capitals, with a last record of count 0; a member scored `+inf` in the sliding log's
/// sorted set), whose expiry a block moves to cover it; so `reset` (deleting the key)
/// lifts it, and a block longer than every window outlives them. An admitted write ends a
/// block that has passed. Its rule is the one that refused the call (the binding rule of
/// the refusal), kept as an index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Block {
    /// µs since the epoch; 0: no block.
    until_us: u64,
    rule_index: usize,
    /// Which lock-out of an escalating schedule this is (1 for the first; 0 for a block
    /// of one duration, which starts no streak).
    strikes: u32,
}

impl Block {
    /// No block.
    pub const NONE: Block = Block {
        until_us: 0,
        rule_index: 0,
        strikes: 0,
    };

    /// A block as the scripts store it: its end and its rule's index plus 65536 times its
    /// strikes (blocked.lua).
    #[cfg(feature = "redis")]
    pub fn stored(until_us: u64, rule: u64) -> Block {
        Block {
            until_us,
            rule_index: (rule % 65536) as usize,
            strikes: u32::try_from(rule / 65536).unwrap_or(u32::MAX),
        }
    }

    /// The time `call` is counted at, `latest_us` being the newest time the key's state
    /// records (see [`Clamp`]); or, while the block lasts, the call's refusal.
    fn clamp(&self, call: &Call<'_>, latest_us: Option<u64>) -> Result<Clamp, Outcome> {
        let clamp = Clamp::new(call.now_us, latest_us);
        if clamp.at_us >= self.until_us {
            return Ok(clamp);
        }
        let left_us = self.until_us - clamp.at_us + clamp.lag_us;
        Err(Outcome::unwritten(RawDecision {
            allowed: false,
            rule_index: if self.rule_index < call.rules.len() {
                self.rule_index
            } else {
                0
            },
            remaining: 0,
            reset_after_us: left_us,
            retry_after_us: left_us,
            receipt: Receipt::NONE,
            crossed: None,
        }))
    }

    /// After `call`, counted at `clamp`, is refused: blocks the key when the call consumes
    /// and asks for a block, from the time the refusal was counted at, and the refusal
    /// then says that no call passes before the block ends. Returns how long the key must
    /// live from the caller's clock for the block, `None` when there is none: to its end,
    /// and for an escalating lock-out 24 hours more, so that its streak is remembered
    /// (see [`crate::lockout`]).
    fn start(&mut self, refusal: &mut RawDecision, call: &Call<'_>, clamp: Clamp) -> Option<u64> {
        let lockout = match call.block_for_us {
            Some(block_for_us) if call.consume => Lockout::of(block_for_us),
            _ => return None,
        };
        let (strikes, remembered_us) = match lockout {
            Lockout::Fixed(_) => (0, 0),
            // The previous lock-out has ended (a refusal under one is answered before).
            Lockout::Escalating(_) if self.streak_at(clamp.at_us) => (self.strikes + 1, STREAK_US),
            Lockout::Escalating(_) => (1, STREAK_US),
        };
        let block_for_us = lockout.duration_us(strikes);
        self.extend(
            clamp.at_us.saturating_add(block_for_us),
            refusal.rule_index,
            strikes,
        );
        let block_us = block_for_us.saturating_add(clamp.lag_us);
        if refusal.retry_after_us != RawDecision::NEVER {
            refusal.retry_after_us = refusal.retry_after_us.max(block_us);
        }
        refusal.reset_after_us = refusal.reset_after_us.max(block_us);
        Some(block_us.saturating_add(remembered_us))
    }

    /// Whether a lock-out starting at `at_us` continues the key's streak: its previous
    /// lock-out was one of a schedule and ended less than 24 hours before.
    fn streak_at(&self, at_us: u64) -> bool {
        self.strikes > 0 && at_us < self.until_us.saturating_add(STREAK_US)
    }

    /// Blocks the key until `until_us` (µs since the epoch), answered by rule
    /// `rule_index`, the `strikes`th lock-out of a streak (0: none), unless a block already
    /// runs at least as long: a block never shortens another. Both ways a block starts come
    /// here: a refusal with `block_for` ([`start`](Self::start)) and
    /// [`KeyState::block_until`] (`Limiter::block`).
    fn extend(&mut self, until_us: u64, rule_index: usize, strikes: u32) {
        if until_us > self.until_us {
            *self = Block {
                until_us,
                rule_index,
                strikes,
            };
        }
    }

    /// How long from `now_us` the key must live to remember its streak: until 24 hours
    /// after its last lock-out's end; 0 without one.
    fn remembered_us(&self, now_us: u64) -> u64 {
        match self.strikes {
            0 => 0,
            _ => self
                .until_us
                .saturating_add(STREAK_US)
                .saturating_sub(now_us),
        }
    }

    /// An admitted write at `at_us` ends a block that has passed, as a script's write drops
    /// it; but for an escalating lock-out's, kept (refusing nothing) while the next one
    /// would continue its streak.
    fn end(&mut self, at_us: u64) {
        if !self.streak_at(at_us) {
            *self = Block::NONE;
        }
    }
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
pub(crate) struct KeyState {
    counts: Counts,
    block: Block,
}

impl KeyState {
    /// The empty state of a key that does not exist yet.
    pub fn new(algorithm: Algorithm) -> Self {
        let counts = match algorithm {
            Algorithm::SlidingLog => Counts::SlidingLog(Default::default()),
            Algorithm::FixedWindow => Counts::FixedWindow(Default::default()),
            Algorithm::SlidingWindow => Counts::SlidingWindow(Default::default()),
            Algorithm::TokenBucket => Counts::TokenBucket(Default::default()),
        };
        KeyState {
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
            Counts::SlidingLog(s) => s.check(block, call),
            Counts::FixedWindow(s) => s.check(block, call),
            Counts::SlidingWindow(s) => s.check(block, call),
            Counts::TokenBucket(s) => s.check(block, call),
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
    pub fn taken_over_by(&self, algorithm: Algorithm) -> Option<KeyState> {
        match &self.counts {
            Counts::SlidingLog(s)
                if algorithm != Algorithm::SlidingLog && s.latest_us().is_none() =>
            {
                Some(KeyState {
                    block: self.block,
                    ..KeyState::new(algorithm)
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

impl KeyState {
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

    /// Settles the reservation `receipt` made of `rules` at `actual` units, as far as the
    /// state still counts it; nothing when another algorithm counted it.
    ///
    /// Every algorithm treats the settled cost as if the check had been of `actual` units
    /// at the time it was counted at: the sliding log adds or removes entries at that time;
    /// the fixed and sliding windows change the count of the window it was counted in,
    /// while a record still holds it; the token bucket gives back what has not refilled
    /// (as a refund) or pushes its `tat` on by the excess from now (a bucket in debt
    /// refills from there). An excess is taken even past a rule's count: later checks are
    /// refused until the window has room again. Returns the key's new TTL from `now_us`
    /// when the debt outlives its expiry (the token bucket's), as [`Outcome::ttl_us`].
    pub fn settle(
        &mut self,
        rules: &[Rule],
        receipt: &Receipt,
        actual: u64,
        now_us: u64,
    ) -> Option<u64> {
        if receipt.algorithm != self.algorithm() {
            return None;
        }
        match &mut self.counts {
            Counts::SlidingLog(s) => s.settle(rules, receipt, actual, now_us),
            Counts::FixedWindow(s) => s.settle(rules, receipt, actual, now_us),
            Counts::SlidingWindow(s) => s.settle(rules, receipt, actual, now_us),
            Counts::TokenBucket(s) => s.settle(rules, receipt, actual, now_us),
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
impl KeyState {
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
    pub fn from_redis_string(value: &[u8]) -> Result<KeyState, String> {
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
                .map(|(counts, block)| KeyState { counts, block })
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
    ) -> KeyState {
        let log = sliding_log::State::from_entries(entries, calls, periods);
        KeyState {
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
            block_for_us: None,
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
        state.check(&mut Block::default(), &call(rules, now_us, cost, consume))
    }

    /// A rule of `count` per `window_us` microseconds.
    pub fn rule(count: u64, window_us: u64) -> Rule {
        Rule::new(count, Duration::from_micros(window_us))
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;

    use super::testing::{call, rule};
    use super::{Call, KeyState};
    use crate::decision::{RawDecision, Receipt};
    use crate::Algorithm;
    use crate::Rule;

    const ALL: [Algorithm; 4] = Algorithm::ALL;

    /// The arithmetic of one key, for the hand-worked sequences.
    struct Key(Option<KeyState>);

    impl super::worked::Runner for Key {
        type Receipt = Receipt;

        fn check(&mut self, check: &super::worked::Check<'_>) -> ([u64; 5], Receipt) {
            let algorithm: Algorithm = check.algorithm.parse().unwrap();
            let rules: Vec<Rule> = check.rules.iter().map(|&(c, w)| rule(c, w)).collect();
            let call = Call {
                rules: &rules,
                now_us: check.now_us,
                cost: check.cost,
                calls: 1,
                hold_us: 0,
                draw: false,
                consume: check.consume,
                block_for_us: NonZeroU64::new(check.block_for_us),
            };
            let state = self.0.get_or_insert_with(|| KeyState::new(algorithm));
            let d = state.check(&call).decision;
            let answer = [
                u64::from(d.allowed),
                d.rule_index as u64,
                d.remaining,
                d.reset_after_us,
                d.retry_after_us,
            ];
            (answer, d.receipt)
        }

        fn refund(&mut self, _: &str, rules: &[(u64, u64)], receipt: &Receipt, now_us: u64) {
            let rules: Vec<Rule> = rules.iter().map(|&(c, w)| rule(c, w)).collect();
            if let Some(state) = &mut self.0 {
                state.refund(&rules, receipt, now_us);
            }
        }

        fn reset(&mut self) {
            self.0 = None;
        }

        fn start(&mut self, _: usize) {
            self.0 = None;
        }
    }

    #[test]
    fn hand_worked_sequences_are_answered_exactly() {
        super::worked::replay(&mut Key(None));
    }

    #[test]
    fn a_cost_above_a_count_is_denied_for_ever_and_consumes_nothing() {
        let rules = [rule(10, 1_000), rule(3, 100)];
        for algorithm in ALL {
            let mut s = KeyState::new(algorithm);
            assert!(s.check(&call(&rules, 5_000, 1, true)).decision.allowed);
            let never = s.check(&call(&rules, 5_000, 4, true));
            assert!(!never.decision.allowed, "{algorithm:?}");
            assert_eq!(never.decision.rule_index, 1, "{algorithm:?}");
            assert_eq!(never.decision.retry_after_us, RawDecision::NEVER);
            assert_eq!(never.decision.remaining, 2, "{algorithm:?}: left now");
            assert_eq!(never.ttl_us, None);
            // Nothing was consumed: 2 units of the 3 are still there.
            let d = s.check(&call(&rules, 5_000, 2, true)).decision;
            assert_eq!((d.allowed, d.remaining), (true, 0), "{algorithm:?}");
        }
    }

    #[test]
    fn a_cost_uses_that_many_units_of_every_rule() {
        let rules = [rule(10, 1_000_000), rule(4, 1_000_000)];
        for algorithm in ALL {
            let mut s = KeyState::new(algorithm);
            let d = s.check(&call(&rules, 0, 3, true)).decision;
            assert_eq!(
                (d.allowed, d.rule_index, d.remaining),
                (true, 1, 1),
                "{algorithm:?}"
            );
            let peek = s.check(&call(&rules, 0, 1, false)).decision;
            assert_eq!((peek.rule_index, peek.remaining), (1, 1), "{algorithm:?}");
            let denied = s.check(&call(&rules, 0, 2, true)).decision;
            assert!(!denied.allowed, "{algorithm:?}");
            assert_eq!(denied.remaining, 1, "{algorithm:?}: left now");
            // The denial took nothing: the last unit still passes, under both rules.
            let last = s.check(&call(&rules, 0, 1, true)).decision;
            assert_eq!((last.allowed, last.remaining), (true, 0), "{algorithm:?}");
        }
    }

    #[test]
    fn denied_calls_consume_nothing() {
        let rules = [rule(10, 1_000), rule(1, 100)];
        for algorithm in ALL {
            let (mut denied, mut fresh) = (KeyState::new(algorithm), KeyState::new(algorithm));
            for s in [&mut denied, &mut fresh] {
                assert!(s.check(&call(&rules, 0, 1, true)).decision.allowed);
            }
            // The 100 µs rule is full: denials, which write nothing.
            for now in [40, 50, 60] {
                let d = denied.check(&call(&rules, now, 1, true));
                assert_eq!(
                    (d.decision.allowed, d.decision.rule_index, d.ttl_us),
                    (false, 1, None),
                    "{algorithm:?}"
                );
            }
            // The state that saw them answers every later call as the one that did not.
            for now in [100, 200, 250, 900, 1_100] {
                let (a, b) = (
                    denied.check(&call(&rules, now, 1, true)),
                    fresh.check(&call(&rules, now, 1, true)),
                );
                assert_eq!(a, b, "{algorithm:?} at {now}");
            }
        }
    }

    #[test]
    fn retry_after_is_exactly_when_the_binding_rule_passes() {
        // Calls every `step` µs with the costs in turn, until enough denials: each denial's
        // `retry_after` must be exact for its binding rule alone: a peek of the same cost
        // one µs earlier is denied, one on time is admitted.
        let cases: [(&[Rule], u64, usize); 3] = [
            (&[rule(2, 700), rule(5, 3_000)], 37, 6),
            (&[rule(3, 700), rule(7, 5_000), rule(2, 333)], 23, 12),
            (&[rule(3, 700), rule(7, 5_000)], 29, 8),
        ];
        for algorithm in ALL {
            for (rules, step, denials) in cases {
                let mut s = KeyState::new(algorithm);
                let (mut now, mut seen) = (1_234, 0);
                for &cost in [1, 2, 1, 1, 2].iter().cycle() {
                    if seen == denials {
                        break;
                    }
                    let d = s.check(&call(rules, now, cost, true)).decision;
                    if d.allowed {
                        now += step;
                        continue;
                    }
                    seen += 1;
                    let retry = d.retry_after_us;
                    assert_ne!(retry, RawDecision::NEVER, "{algorithm:?}, cost {cost}");
                    let binding = [rules[d.rule_index]];
                    let early = s.check(&call(&binding, now + retry - 1, cost, false));
                    assert!(!early.decision.allowed, "{algorithm:?}: 1 µs early");
                    now += retry;
                    let on_time = s.check(&call(&binding, now, cost, false));
                    assert!(on_time.decision.allowed, "{algorithm:?}: on time");
                }
            }
        }
    }

    #[test]
    fn peek_tells_what_is_left_now_and_writes_nothing() {
        let rules = [rule(2, 1_000)];
        for algorithm in ALL {
            let mut s = KeyState::new(algorithm);
            for now in [0, 1] {
                let peek = s.check(&call(&rules, now, 1, false));
                assert_eq!(peek.ttl_us, None, "{algorithm:?}");
                let counted = s.check(&call(&rules, now, 1, true)).decision;
                let left_now = counted.remaining + 1;
                let expected = RawDecision {
                    remaining: left_now,
                    ..counted
                };
                assert_eq!(peek.decision, expected, "{algorithm:?}");
            }
            let full = s.check(&call(&rules, 3, 1, false));
            assert_eq!(full.ttl_us, None, "{algorithm:?}");
            assert!(!full.decision.allowed, "{algorithm:?}");
            assert_eq!(s.check(&call(&rules, 3, 1, true)).decision, full.decision);
        }
    }

    #[test]
    fn stale_state_decides_like_absent_state() {
        let rules = [rule(2, 1_000)];
        for algorithm in ALL {
            let mut s = KeyState::new(algorithm);
            s.check(&call(&rules, 500, 1, true));
            s.check(&call(&rules, 501, 1, true));
            let mut fresh = KeyState::new(algorithm);
            for now in [2_501, 7_000] {
                assert_eq!(
                    s.check(&call(&rules, now, 1, false)).decision,
                    fresh.check(&call(&rules, now, 1, false)).decision,
                    "{algorithm:?} at {now}"
                );
            }
            for _ in 0..3 {
                assert_eq!(
                    s.check(&call(&rules, 7_000, 1, true)).decision,
                    fresh.check(&call(&rules, 7_000, 1, true)).decision,
                    "{algorithm:?}"
                );
            }
        }
    }

    #[test]
    fn binding_rule_is_least_remaining_when_allowed_and_last_to_free_when_denied() {
        let rules = [rule(2, 1_000), rule(2, 10_000), rule(5, 10_000)];
        for algorithm in ALL {
            let mut s = KeyState::new(algorithm);
            // Remaining 1, 1, 4, then 0, 0, 3: ties go to the lowest index.
            for remaining in [1, 0] {
                let d = s.check(&call(&rules, 0, 1, true)).decision;
                assert_eq!((d.rule_index, d.remaining), (0, remaining), "{algorithm:?}");
            }
            // Rules 0 and 1 deny; rule 1's window frees last.
            let d = s.check(&call(&rules, 10, 1, true)).decision;
            assert_eq!((d.allowed, d.rule_index), (false, 1), "{algorithm:?}");
        }
        // Equal retries bind the lowest index.
        let both = [rule(1, 1_000), rule(1, 1_000), rule(2, 1_000)];
        for algorithm in ALL {
            let mut s = KeyState::new(algorithm);
            s.check(&call(&both, 0, 1, true));
            let d = s.check(&call(&both, 10, 1, true)).decision;
            assert_eq!((d.allowed, d.rule_index), (false, 0), "{algorithm:?}");
        }
    }

    #[test]
    fn a_write_of_one_record_per_rule_keeps_only_the_rules_it_checked() {
        let (short, long) = (rule(3, 1_000), rule(5, 10_000));
        for algorithm in &ALL[1..] {
            let mut s = KeyState::new(*algorithm);
            s.check(&call(&[short, long], 0, 1, true));
            s.check(&call(&[short, long], 1, 1, true));
            // The long rule keeps its count when checked alone, in any position.
            let d = s.check(&call(&[long], 2, 1, true)).decision;
            assert_eq!((d.allowed, d.remaining), (true, 2), "{algorithm:?}");
            let d = s.check(&call(&[short, long], 3, 1, false)).decision;
            assert_eq!((d.rule_index, d.remaining), (1, 2), "{algorithm:?}");
            // The short rule was not in that write: it starts empty again.
            let fresh = KeyState::new(*algorithm).check(&call(&[short], 3, 1, false));
            assert_eq!(
                s.check(&call(&[short], 3, 1, false)),
                fresh,
                "{algorithm:?}"
            );
        }
    }

    #[test]
    fn an_older_now_never_discards_newer_state() {
        // Two windows of 1 ms: the newer one full, then a check from 600 µs in the past
        // (the previous window) must still find it full.
        let rules = [rule(2, 1_000)];
        for algorithm in ALL {
            let mut s = KeyState::new(algorithm);
            assert!(s.check(&call(&rules, 10_100, 1, true)).decision.allowed);
            assert!(s.check(&call(&rules, 10_100, 1, true)).decision.allowed);
            let late = s.check(&call(&rules, 9_500, 1, true)).decision;
            assert!(!late.allowed, "{algorithm:?}: {late:?}");
            // Answered from the caller's clock: a call from it passes exactly on time.
            let retry = late.retry_after_us;
            let early = s.check(&call(&rules, 9_500 + retry - 1, 1, false)).decision;
            assert!(!early.allowed, "{algorithm:?}");
            let on_time = s.check(&call(&rules, 9_500 + retry, 1, false)).decision;
            assert!(on_time.allowed, "{algorithm:?}");
        }
    }

    #[test]
    fn ttl_is_whole_milliseconds_rounded_up_plus_one_second() {
        use super::ttl_us;
        assert_eq!(ttl_us(0), 1_000_000);
        assert_eq!(ttl_us(1), 1_001_000);
        assert_eq!(ttl_us(1_000), 1_001_000);
        assert_eq!(ttl_us(1_001), 1_002_000);
        assert_eq!(ttl_us(60_000_000), 61_000_000);
    }

    #[test]
    fn a_write_moves_the_expiry_to_cover_what_its_state_needs() {
        const S: u64 = 1_000_000;
        // Admitted checks as (now, cost, the TTL they set, or None when the expiry
        // already covers what they wrote): the time the state matters, rounded up to whole
        // ms, plus the one-second margin.
        type Writes = &'static [(u64, u64, Option<u64>)];
        let cases: [(Algorithm, &[Rule], Writes); 5] = [
            // Until the last rule's window ends; the next minute outlives it.
            (
                Algorithm::FixedWindow,
                &[rule(5, 1_000), rule(5, 60 * S)],
                &[
                    (59 * S, 1, Some(2 * S)),
                    (59 * S + 1, 1, None),
                    (60 * S, 1, Some(61 * S)),
                ],
            ),
            // Until the end of the next window.
            (
                Algorithm::SlidingWindow,
                &[rule(4, 1_000)],
                &[(100, 1, Some(1_002_000)), (200, 1, None)],
            ),
            // The whole burst span, from the first write on: T = 250 µs, then 600 ms, whose
            // burst, by 0, leaves a tat of 60 s; one more, 60.6 s, outgrows the expiry.
            (
                Algorithm::TokenBucket,
                &[rule(4, 1_000)],
                &[(0, 1, Some(1_001_000)), (0, 3, None)],
            ),
            (
                Algorithm::TokenBucket,
                &[rule(100, 60 * S)],
                &[
                    (0, 1, Some(61 * S)),
                    (0, 99, None),
                    (600_000, 1, Some(61 * S)),
                ],
            ),
            // Every write, for the longest window.
            (
                Algorithm::SlidingLog,
                &[rule(5, 10 * S), rule(5, 60 * S)],
                &[(0, 1, Some(61 * S)), (S, 1, Some(61 * S))],
            ),
        ];
        for (algorithm, rules, writes) in cases {
            let mut s = KeyState::new(algorithm);
            for &(now, cost, ttl) in writes {
                let outcome = s.check(&call(rules, now, cost, true));
                assert!(outcome.decision.allowed, "{algorithm:?} at {now}");
                assert_eq!(outcome.ttl_us, ttl, "{algorithm:?} at {now}");
            }
        }
    }
}
