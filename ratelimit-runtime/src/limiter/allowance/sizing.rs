//! What sizes a key's next draw: this instance's pace on the key, and the key's room.

use super::{Live, MAX_DRAW_CHECKS, MIN_EXPECTED_CHECKS, SHARE_OF_ROOM};
use crate::backend::Request;
use crate::decision::RawDecision;
use crate::Rule;

/// What sizes a key's next draw: how fast this instance spent its last allowance, and how
/// much room the key had at its last answer.
#[derive(Clone, Copy, Default)]
pub(super) struct Sizing {
    /// Whether the key was ever answered here: the first draw of a key is its own check.
    pub(super) known: bool,
    /// Checks of the last cost that the key had room for at its last answer.
    pub(super) room_checks: u64,
    /// This instance's pace on the key, as the mean time between its checks (µs): an
    /// average of the last allowance's (its life over its checks) and of the gaps between
    /// the checks that came without one. Gaps, not rates, are averaged: random arrivals
    /// have many short gaps, whose rates would overstate the pace.
    pub(super) gap_us: f64,
    /// When a check of the key last came here without an allowance to admit it (local
    /// µs; 0: never).
    pub(super) last_us: u64,
}

impl Sizing {
    /// Learns the key's room from the backend's `raw` answer to `request`.
    pub(super) fn answered(&mut self, request: &Request<'_>, raw: &RawDecision) {
        self.known = true;
        let calls_rule = request
            .rules
            .get(raw.rule_index)
            .is_some_and(Rule::counts_calls);
        self.room_checks = match calls_rule {
            true => raw.remaining,
            false => raw.remaining / request.cost.get(),
        };
    }

    /// Learns how fast `live`, ended at local `now_us`, was spent.
    pub(super) fn spent(&mut self, live: &Live, now_us: u64) {
        // Spent to its end early, it says little of the pace below a millisecond.
        let over_us = now_us
            .min(live.ends_at_us)
            .saturating_sub(live.sent_at_us)
            .max(1000);
        self.mix(over_us as f64 / live.checks.max(1) as f64);
        self.last_us = now_us;
    }

    /// Learns the gap before a check that came at local `now_us` with no allowance here.
    pub(super) fn arrived(&mut self, now_us: u64) {
        if self.last_us != 0 {
            self.mix(now_us.saturating_sub(self.last_us).max(1) as f64);
        }
        self.last_us = now_us;
    }

    fn mix(&mut self, gap_us: f64) {
        self.gap_us = match self.gap_us {
            0.0 => gap_us,
            // A quarter of the new gap: one short gap among random arrivals moves it
            // little.
            before => before * 0.75 + gap_us * 0.25,
        };
    }

    /// How many checks the next draw of a key stands for, for an allowance living up to
    /// `lifetime_us` and `demand` checks waiting for it: twice what this instance's pace
    /// spends over a lifetime, at least the demand, never more than [`SHARE_OF_ROOM`] of the
    /// room the key had. One (a plain check) when the pace fills less than
    /// [`MIN_EXPECTED_CHECKS`] of a lifetime.
    pub(super) fn next_checks(&self, lifetime_us: u64, demand: u64) -> u64 {
        let expected = match self.gap_us {
            0.0 => 0.0,
            gap_us => lifetime_us as f64 / gap_us,
        };
        let wanted = match expected < MIN_EXPECTED_CHECKS {
            true => 1,
            false => (2.0 * expected).min(MAX_DRAW_CHECKS as f64) as u64,
        };
        wanted
            .max(demand)
            .min(self.room_checks / SHARE_OF_ROOM)
            .min(MAX_DRAW_CHECKS)
    }
}
