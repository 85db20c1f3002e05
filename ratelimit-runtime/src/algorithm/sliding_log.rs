//! The sliding log: one timestamp per admitted unit; a rule is full when its window holds
//! `count` of them. Exact, at the cost of one entry per admitted unit.
//!
//! An entry at `s` is inside a window `w` at `now` iff `s > now - w`. A check is counted
//! at `now' = max(now, newest entry)` (see [`super::Clamp`]), so the log only ever grows
//! at its end and no entry is ever newer than the time it is judged at. Per rule, with
//! `inside` the entries of its window and a call of `n` units:
//!
//! - left now: `count - inside`; the rule admits the call when `inside + n <= count`;
//! - admitted: `reset_after = w` (the call's entries are the last to leave);
//! - denied: `reset_after` = until the newest entry leaves, and `retry_after` = until
//!   enough of the window's entries have left for `n` more: the window's entries are the
//!   newest `inside` of the log, so its oldest `inside - (count - n)` must leave, the last
//!   of which is the `(count - n + 1)`-th newest entry overall;
//! - never (`n > count`): denied with [`RawDecision::NEVER`](crate::decision::RawDecision::NEVER).
//!
//! An admitted check trims the entries outside the longest window and appends `n` entries
//! at `now'`; a peek or a denial writes nothing, not even a trim: a later check from a
//! clock behind is counted at the newest entry, and an entry trimmed at a newer time may
//! still be inside its windows (only an admitted check makes its own time the newest
//! entry's). The key lives for the longest window (plus the lag and the TTL margin) after
//! each write.
//!
//! `scripts/sliding_log.lua` is the same arithmetic on a Redis ZSET (score = timestamp),
//! whose members are ids made by the client, so that a re-sent check is counted once.
//!
//! A refund removes the entries of one admitted check, once: here the entries at the
//! time it was counted at (entries of one time are alike, so which of them go does not
//! matter), remembering the check's number so that a second refund of it removes nothing;
//! on Redis its own members, by name. Entries that have left the log have nothing to give.
//!
//! A rule counting in calendar periods is not counted in the log: a month of tokens would
//! be millions of entries. It keeps one counter, its period's start and units (see
//! [`super::calendar`]), beside the log; the log is trimmed to the longest window of the
//! other rules.

use std::collections::VecDeque;

use super::calendar::{self, Period};
use super::{decide, ttl_us, Block, Call, Clamp, Counter, Figures, Outcome, Returned, Settled};
use crate::decision::{CountedBy, Receipt};
use crate::{Algorithm, Rule};

/// The timestamps (µs) of admitted units, ascending.
#[derive(Clone, Debug, Default)]
pub(crate) struct State {
    log: VecDeque<u64>,
    /// The timestamps (µs) of admitted checks of rules counting calls, one per check,
    /// ascending: what those rules count (empty while no check has such a rule).
    calls: VecDeque<u64>,
    /// The counter of each rule counting in calendar periods (empty while no check has
    /// such a rule).
    periods: Vec<(Rule, Period)>,
    /// The number of the next admitted check, its receipt's id.
    checks: u64,
    /// The checks refunded and the draws given back, as (time their entries are at,
    /// number), while entries of that time may still be in the log.
    refunded: Vec<(u64, u64)>,
    /// The newest time a write was counted at while the key holds a draw's units (0
    /// otherwise): a draw's entries are newer than the time it was counted at (units held
    /// until they may be spent, see [`Returned`]), so until they are all in the past the
    /// newest entry is not the key's clock. `scripts/sliding_log.lua` keeps it in a member
    /// too.
    clock_us: u64,
}

impl State {
    /// Where the log's oldest and newest entries are stored (for [`super::prefetch`]):
    /// a check reads the one and writes after the other, usually in two cache lines.
    pub fn ends(&self) -> [*const u64; 2] {
        let (front, back) = self.log.as_slices();
        let newest = back
            .last()
            .or(front.last())
            .map_or(front.as_ptr(), |s| s as *const u64);
        [front.as_ptr(), newest]
    }

    /// The log's length, its oldest and its newest entry (µs); `None` when empty.
    pub fn entries(&self) -> Option<(usize, u64, u64)> {
        Some((self.log.len(), *self.log.front()?, *self.log.back()?))
    }

    /// A log holding the entries `entries` and the checks counted by rules counting calls
    /// `calls` (µs, in any order), as read from Redis.
    /// With `periods`, the counters of its rules counting in calendar periods, each the
    /// rule, its period's start and units.
    #[cfg(feature = "redis")]
    pub fn from_entries(
        mut entries: Vec<u64>,
        mut calls: Vec<u64>,
        periods: Vec<(Rule, u64, u64)>,
    ) -> State {
        entries.sort_unstable();
        calls.sort_unstable();
        State {
            log: entries.into(),
            calls: calls.into(),
            periods: periods
                .into_iter()
                .map(|(rule, start_us, units)| (rule, Period { start_us, units }))
                .collect(),
            ..State::default()
        }
    }

    /// What the state file keeps of the log (`super::saved`): the next check's number, the
    /// entries, the calls and the calendar counters. What a refund needs of checks counted
    /// before a restart is not kept: their callers are gone with the process.
    pub fn parts(&self) -> Parts<'_> {
        Parts {
            checks: self.checks,
            log: &self.log,
            calls: &self.calls,
            periods: &self.periods,
        }
    }

    /// The log of those [`parts`](Self::parts).
    pub fn from_parts(
        checks: u64,
        log: Vec<u64>,
        calls: Vec<u64>,
        periods: Vec<(Rule, Period)>,
    ) -> State {
        State {
            log: log.into(),
            calls: calls.into(),
            periods,
            checks,
            refunded: Vec::new(),
            // The embedded backend draws no allowances: its newest entry is its clock.
            clock_us: 0,
        }
    }

    /// The rules counting in calendar periods whose counters the state keeps: the only
    /// rules a sliding log names.
    pub fn period_rules(&self) -> impl Iterator<Item = Rule> + '_ {
        self.periods.iter().map(|&(rule, _)| rule)
    }

    /// The counter of a rule counting in calendar periods, if stored.
    fn period_of(&self, rule: &Rule) -> Option<Period> {
        self.periods
            .iter()
            .find(|(r, _)| r == rule)
            .map(|&(_, period)| period)
    }

    /// The counters of the calendar rules of a call of `rules`, each changed once by
    /// `change` (the rule, its counter or `None`): the others' are kept.
    fn update_periods(
        &mut self,
        rules: &[Rule],
        mut change: impl FnMut(&Rule, crate::Calendar, Option<Period>) -> Option<Period>,
    ) {
        for (i, rule) in rules.iter().enumerate() {
            let Some(in_calendar) = rule.calendar() else {
                continue;
            };
            // A rule listed twice has one counter, changed once.
            if rules[..i].contains(rule) {
                continue;
            }
            let at = self.periods.iter().position(|(r, _)| r == rule);
            let new = change(rule, in_calendar, at.map(|at| self.periods[at].1));
            match (at, new) {
                (Some(at), Some(period)) => self.periods[at].1 = period,
                (None, Some(period)) => self.periods.push((*rule, period)),
                (_, None) => {}
            }
        }
    }

    /// The log a rule counts: its entries, or the checks for a rule counting calls.
    #[inline(always)]
    fn log_of(&self, rule: &Rule) -> &VecDeque<u64> {
        match rule.counts_calls() {
            true => &self.calls,
            false => &self.log,
        }
    }
}

/// Adds `n` entries at `at_us` to `log`, in order: at its end but behind a draw's held
/// entries. One push per unit: `extend` from an iterator costs several times more for the
/// usual single unit.
#[inline]
fn record(log: &mut VecDeque<u64>, at_us: u64, n: u64) {
    if log.back().is_none_or(|&newest| newest <= at_us) {
        for _ in 0..n {
            log.push_back(at_us);
        }
    } else {
        let at = log.partition_point(|&s| s <= at_us);
        for _ in 0..n {
            log.insert(at, at_us);
        }
    }
}

/// Of the entries held at `held_us`, removes `unused` and moves `used` to `last_us`, as
/// far as they are there (entries of one time are alike); returns how many it removed.
fn settle_held(log: &mut VecDeque<u64>, held_us: u64, unused: u64, used: u64, last_us: u64) -> u64 {
    let first = log.partition_point(|&s| s < held_us);
    let alike = (log.partition_point(|&s| s <= held_us) - first) as u64;
    let gone = alike.min(unused);
    let moved = (alike - gone).min(used);
    log.drain(first..first + (gone + moved) as usize);
    if moved > 0 {
        let at = log.partition_point(|&s| s <= last_us);
        for _ in 0..moved {
            log.insert(at, last_us);
        }
    }
    gone
}

/// What the state file keeps of a log ([`State::parts`]).
pub(crate) struct Parts<'a> {
    pub checks: u64,
    pub log: &'a VecDeque<u64>,
    pub calls: &'a VecDeque<u64>,
    pub periods: &'a [(Rule, Period)],
}

/// An entry at `s` is inside a window `w` at `now` iff `s > now - w`, written so that it
/// cannot underflow.
fn in_window(s: u64, window_us: u64, now_us: u64) -> bool {
    s.saturating_add(window_us) > now_us
}

/// How many of the log's oldest entries are outside a window `w` at `now`.
///
/// Searched from the oldest end, doubling the step, then by halves within the last step:
/// each admitted check trims the entries outside the longest window, so that window has
/// few of them, found in the log's first cache line, where a search by halves of the whole
/// log would read a line every step.
fn outside(log: &VecDeque<u64>, window_us: u64, now_us: u64) -> usize {
    let stale = |i: usize| !in_window(log[i], window_us, now_us);
    // `log[..lo]` is outside; the first entry inside is at `bound - 1` or before.
    let (mut lo, mut bound) = (0, 1);
    while bound <= log.len() && stale(bound - 1) {
        lo = bound;
        bound *= 2;
    }
    let mut hi = bound.min(log.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if stale(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

fn figures(log: &VecDeque<u64>, rule: &Rule, now_us: u64, cost: u64) -> Figures {
    let (count, window) = (rule.count(), rule.window_us());
    let total = log.len();
    let inside = (total - outside(log, window, now_us)) as u64;
    let newest_leaves = || {
        log.back()
            .filter(|_| inside > 0)
            .map_or(0, |&newest| newest + window - now_us)
    };
    let must_leave = || log[total - (count - cost) as usize - 1] + window - now_us;
    Figures::of(
        count,
        cost,
        count.saturating_sub(inside),
        window,
        newest_leaves,
        must_leave,
    )
}

impl Counter for State {
    fn check(&mut self, block: &mut Block, call: &Call<'_>, clamp: Clamp) -> Outcome {
        let (rules, cost, consume) = (call.rules, call.cost, call.consume);
        let Clamp { at_us: now, lag_us } = clamp;
        let hold_us = call.hold_at(Algorithm::SlidingLog, now);
        // Stale entries are skipped by every count, as the script's ZCOUNTs do. Whether a
        // rule counts calls or in calendar periods is noted on the way, not found by a
        // second pass; a calendar rule's counter needs the log no longer than the others.
        let (mut counts_calls, mut in_calendar, mut logged, mut period_end) = (false, false, 0, 0);
        let this = &*self;
        let mut decision = decide(
            rules.iter().map(|rule| {
                counts_calls |= rule.counts_calls();
                if let Some(calendar) = rule.calendar() {
                    in_calendar = true;
                    let v = calendar::judge(
                        this.period_of(rule),
                        rule,
                        calendar,
                        now,
                        call.units(rule),
                    );
                    period_end = period_end.max(v.until_end_us);
                    return v.figures;
                }
                logged = logged.max(rule.window_us());
                figures(this.log_of(rule), rule, now, call.units(rule))
            }),
            call,
            lag_us,
        );
        // The longest window of the rules counted in the log (at least 1 µs: the
        // script keeps a check's own entries, which it adds before it trims, when every
        // rule is a calendar rule), and how long the state matters: as long, or until
        // the last calendar period ends.
        let longest = logged.max(1);
        let kept = match in_calendar {
            true => longest.max(period_end),
            false => longest,
        } + hold_us;
        if !decision.allowed {
            // Every write sets the expiry, as the script's `PEXPIRE` does: for the block,
            // and the entries as long as they may matter.
            let ttl_us = block
                .start(&mut decision, call, clamp)
                .map(|block_us| ttl_us(block_us.max(kept + lag_us)));
            return Outcome { decision, ttl_us };
        }
        if !consume {
            return Outcome::unwritten(decision);
        }
        block.end(now);
        if in_calendar {
            // The counters of this check's calendar rules replace every other, as the
            // script's do.
            self.periods.retain(|(rule, _)| rules.contains(rule));
            self.update_periods(rules, |rule, calendar, stored| {
                Some(calendar::judge(stored, rule, calendar, now, call.units(rule)).counted)
            });
        }
        if hold_us > 0 || self.clock_us > 0 {
            // Once no held unit is above `now`, the newest entry is the clock again (the
            // script drops its clock member): later checks take the common path.
            let unheld = hold_us == 0 && lag_us == 0 && self.log.back().is_none_or(|&s| s <= now);
            self.clock_us = match unheld {
                true => 0,
                false => self.clock_us.max(now),
            };
        }
        // A draw's entries are held until they may be spent.
        let at_us = now + hold_us;
        let log = &mut self.log;
        while log.front().is_some_and(|&s| !in_window(s, longest, now)) {
            log.pop_front();
        }
        record(log, at_us, cost);
        if counts_calls {
            let calls = &mut self.calls;
            while calls.front().is_some_and(|&s| !in_window(s, longest, now)) {
                calls.pop_front();
            }
            record(calls, at_us, call.calls);
        }
        decision.receipt = Receipt::new(
            cost,
            now,
            self.checks,
            Algorithm::SlidingLog,
            CountedBy::Memory,
        );
        self.checks = self.checks.wrapping_add(1);
        // Every write sets the expiry: it must not forget an escalating lock-out's streak.
        let needed_us = (kept + lag_us).max(block.remembered_us(call.now_us));
        Outcome {
            decision,
            ttl_us: Some(ttl_us(needed_us)),
        }
    }

    fn refund(&mut self, rules: &[Rule], receipt: &Receipt, _: u64) {
        let Receipt {
            at_us, id, cost, ..
        } = *receipt;
        // Entries are only ever added at the newest time or later: once the log's oldest
        // entry is newer than a refunded check, none of its time can come back.
        if let Some(&oldest) = self.log.front() {
            self.refunded.retain(|&(at, _)| at >= oldest);
        }
        if self.refunded.contains(&(at_us, id)) {
            return;
        }
        let first = self.log.partition_point(|&s| s < at_us);
        let alike = self.log.partition_point(|&s| s <= at_us) - first;
        let gone = alike.min(cost as usize);
        if gone > 0 {
            // The check's units (or call) in each calendar counter, while its period lasts.
            self.update_periods(rules, |rule, calendar, stored| {
                let units = rule.units(cost);
                stored.map(|p| calendar::adjust(p, calendar, at_us, units, false))
            });
            self.log.drain(first..first + gone);
            self.refunded.push((at_us, id));
            // The check's one call, where rules counting calls counted it.
            if rules.iter().any(Rule::counts_calls) {
                if let Ok(at) = self.calls.binary_search(&at_us) {
                    self.calls.remove(at);
                }
            }
        }
    }

    /// Entries at the time the check was counted at: removed while there (entries of one
    /// time are alike), or added beside them while any is there, as the script removes
    /// or adds the check's own members by name.
    fn settle(&mut self, settle: &Settled<'_>, _: u64) -> Option<u64> {
        let (at_us, reserved, actual) = (settle.receipt.at_us, settle.receipt.cost, settle.actual);
        let first = self.log.partition_point(|&s| s < at_us);
        let alike = self.log.partition_point(|&s| s <= at_us) - first;
        // The entries removed, or added.
        let (changed, take) = if actual < reserved {
            let gone = alike.min((reserved - actual) as usize);
            self.log.drain(first..first + gone);
            (gone as u64, false)
        } else if actual > reserved && alike > 0 {
            let newer = self.log.split_off(first);
            self.log
                .extend(std::iter::repeat_n(at_us, (actual - reserved) as usize));
            self.log.extend(newer);
            (actual - reserved, true)
        } else {
            (0, false)
        };
        // Each calendar counter of units, of the reservation's period, by as many as the
        // entries changed, as the script's (which settles entries by name, so that a
        // settle sent twice moves them once).
        if changed > 0 {
            self.update_periods(settle.rules, |rule, calendar, stored| {
                match rule.counts_calls() {
                    true => None,
                    false => stored.map(|p| calendar::adjust(p, calendar, at_us, changed, take)),
                }
            });
        }
        // Entries at the check's time or before: the expiry already covers them.
        None
    }

    /// The newest entry: entries are added at the newest time or later; once the key has
    /// had a draw, the newest time a write was counted at (see [`State::clock_us`]).
    fn latest_us(&self) -> Option<u64> {
        match self.clock_us {
            0 => self.log.back().copied(),
            clock_us => Some(clock_us),
        }
    }

    /// The draw's entries and calls, held at `at + hold`: the unused ones removed, the used
    /// ones moved to the last spend; its units (and calls) in each calendar counter of the
    /// period it was counted in given back. Named by the time held at and the draw's
    /// number, as a refund is, so that a second give-back changes nothing.
    fn give_back(&mut self, back: &Returned<'_>, _: u64) {
        let held_us = back.held_until_us();
        if let Some(&oldest) = self.log.front() {
            self.refunded.retain(|&(at, _)| at >= oldest);
        }
        if self.refunded.contains(&(held_us, back.id)) {
            return;
        }
        let last_us = back.last_spend_us.clamp(back.at_us, held_us);
        let units = settle_held(&mut self.log, held_us, back.units, back.used_units, last_us);
        let calls = match back.rules.iter().any(Rule::counts_calls) {
            true => settle_held(
                &mut self.calls,
                held_us,
                back.calls,
                back.used_calls,
                last_us,
            ),
            false => 0,
        };
        self.update_periods(back.rules, |rule, calendar, stored| {
            let gone = match rule.counts_calls() {
                true => calls,
                false => units,
            };
            stored.map(|p| calendar::adjust(p, calendar, back.at_us, gone, false))
        });
        self.refunded.push((held_us, back.id));
    }

    fn figures(&self, rule: &Rule, at_us: u64, cost: u64) -> Figures {
        if let Some(in_calendar) = rule.calendar() {
            return calendar::judge(self.period_of(rule), rule, in_calendar, at_us, cost).figures;
        }
        figures(self.log_of(rule), rule, at_us, cost)
    }

    fn held(&self, rule: &Rule, at_us: u64) -> u64 {
        if let Some(in_calendar) = rule.calendar() {
            return self
                .period_of(rule)
                .map_or(0, |p| calendar::held(p, in_calendar, at_us));
        }
        let log = self.log_of(rule);
        (log.len() - outside(log, rule.window_us(), at_us)) as u64
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::algorithm::testing::check;
    use crate::decision::RawDecision;

    const T0: u64 = 1_700_000_000_000_000;
    const SEC: u64 = 1_000_000;

    fn rule(count: u64, secs: u64) -> Rule {
        Rule::new(count, Duration::from_secs(secs))
    }

    fn allowed(rule_index: usize, remaining: u64, reset_after_us: u64) -> RawDecision {
        RawDecision {
            allowed: true,
            rule_index,
            remaining,
            reset_after_us,
            retry_after_us: 0,
            receipt: Receipt::NONE,
            bound: crate::decision::Bound::Rule,
            crossed: None,
        }
    }

    fn denied(rule_index: usize, reset_after_us: u64, retry_after_us: u64) -> RawDecision {
        RawDecision::refused(rule_index, reset_after_us, retry_after_us)
    }

    #[test]
    fn outside_counts_the_entries_out_of_the_window() {
        for len in 0..40u64 {
            let log: VecDeque<u64> = (0..len).map(|i| 100 + 10 * i).collect();
            for now in (0..len * 10 + 200).step_by(5) {
                for window in [1, 10, 25, 1_000] {
                    let expected = log.iter().filter(|&&s| !in_window(s, window, now)).count();
                    assert_eq!(outside(&log, window, now), expected, "{len} {now} {window}");
                }
            }
        }
    }

    #[test]
    fn peek_tells_what_is_left_now_and_writes_nothing() {
        let rules = [rule(2, 10)];
        let mut s = State::default();
        assert_eq!(
            check(&mut s, &rules, T0, 1, false).decision,
            allowed(0, 2, 10 * SEC)
        );
        check(&mut s, &rules, T0, 1, true);
        let peek = check(&mut s, &rules, T0 + SEC, 1, false);
        assert_eq!(peek.ttl_us, None);
        assert_eq!(s.log, [T0]);
        assert_eq!(peek.decision, allowed(0, 1, 10 * SEC));
        // Would a call of 2 pass? Not before the entry at T0 leaves.
        assert_eq!(
            check(&mut s, &rules, T0 + SEC, 2, false).decision,
            RawDecision {
                remaining: 1,
                ..denied(0, 9 * SEC, 9 * SEC)
            }
        );
        assert_eq!(
            check(&mut s, &rules, T0 + SEC, 1, true).decision,
            allowed(0, 0, 10 * SEC)
        );
        // Stale entries are skipped, not trimmed, by a peek.
        let later = T0 + 60 * SEC;
        assert_eq!(
            check(&mut s, &rules, later, 1, false).decision,
            allowed(0, 2, 10 * SEC)
        );
        assert_eq!(s.log.len(), 2);
    }

    #[test]
    fn a_cost_uses_that_many_entries_of_every_rule_or_none() {
        let rules = [rule(5, 10), rule(3, 1)];
        let mut s = State::default();
        assert_eq!(
            check(&mut s, &rules, T0, 2, true).decision,
            allowed(1, 1, SEC)
        );
        assert_eq!(s.log, [T0, T0]);
        // 2 more would make 4 of 3 in the 1 s rule: denied until both leave, consuming nothing.
        assert_eq!(
            check(&mut s, &rules, T0 + 1, 2, true).decision,
            RawDecision {
                remaining: 1,
                ..denied(1, SEC - 1, SEC - 1)
            }
        );
        assert_eq!(s.log.len(), 2);
        assert_eq!(
            check(&mut s, &rules, T0 + SEC, 3, true).decision,
            allowed(0, 0, 10 * SEC)
        );
        // The 10 s rule is full: 2 units pass once the 2 oldest entries leave.
        assert_eq!(
            check(&mut s, &rules, T0 + 2 * SEC, 2, true).decision,
            denied(0, 9 * SEC, 8 * SEC)
        );
    }

    #[test]
    fn a_cost_above_a_count_never_passes() {
        let rules = [rule(5, 10), rule(3, 1)];
        let mut s = State::default();
        check(&mut s, &rules, T0, 1, true);
        let d = check(&mut s, &rules, T0, 4, true);
        assert_eq!(
            d.decision,
            RawDecision {
                remaining: 2,
                ..denied(1, SEC, RawDecision::NEVER)
            }
        );
        assert_eq!((d.ttl_us, s.log.len()), (None, 1));
        // Never, even on an empty log.
        let d = check(&mut State::default(), &rules, T0, 6, false).decision;
        assert_eq!(
            d,
            RawDecision {
                remaining: 5,
                ..denied(0, 0, RawDecision::NEVER)
            }
        );
    }

    #[test]
    fn stale_entries_decide_like_no_entries() {
        let rules = [rule(2, 10)];
        let mut stale = State::default();
        check(&mut stale, &rules, T0, 1, true);
        check(&mut stale, &rules, T0, 1, true);
        let later = T0 + 10 * SEC;
        let mut fresh = State::default();
        for consume in [false, true, true, true] {
            assert_eq!(
                check(&mut stale, &rules, later, 1, consume),
                check(&mut fresh, &rules, later, 1, consume)
            );
        }
    }

    #[test]
    fn an_older_now_is_counted_at_the_newest_entry() {
        let rules = [rule(3, 10)];
        let mut s = State::default();
        check(&mut s, &rules, T0 + 5 * SEC, 1, true);
        // 4 s behind the newest entry: counted at it, answered from the caller's clock.
        let d = check(&mut s, &rules, T0 + SEC, 1, true);
        assert_eq!(d.decision, allowed(0, 1, 14 * SEC));
        assert_eq!(d.ttl_us, Some(15 * SEC));
        assert_eq!(s.log, [T0 + 5 * SEC, T0 + 5 * SEC]);
        check(&mut s, &rules, T0 + 5 * SEC, 1, true);
        // Full until the entries leave at T0 + 15 s, 14 s from this caller's now.
        let d = check(&mut s, &rules, T0 + SEC, 1, true).decision;
        assert_eq!(d, denied(0, 14 * SEC, 14 * SEC));
        assert!(
            !check(&mut s, &rules, T0 + 15 * SEC - 1, 1, false)
                .decision
                .allowed
        );
        assert!(
            check(&mut s, &rules, T0 + 15 * SEC, 1, false)
                .decision
                .allowed
        );
    }
}
