//! A key's lock-out, kept with its counts.

use super::{Call, Clamp, Outcome};
use crate::decision::RawDecision;
use crate::lockout::{Lockout, STREAK_US};

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
    pub(super) until_us: u64,
    pub(super) rule_index: usize,
    /// Which lock-out of an escalating schedule this is (1 for the first; 0 for a block
    /// of one duration, which starts no streak).
    pub(super) strikes: u32,
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
    pub(super) fn clamp(&self, call: &Call<'_>, latest_us: Option<u64>) -> Result<Clamp, Outcome> {
        let clamp = Clamp::new(call.now_us, latest_us);
        if clamp.at_us >= self.until_us {
            return Ok(clamp);
        }
        let left_us = self.until_us - clamp.at_us + clamp.lag_us;
        let rule_index = match self.rule_index < call.rules.len() {
            true => self.rule_index,
            false => 0,
        };
        Err(Outcome::unwritten(RawDecision::refused(
            rule_index, left_us, left_us,
        )))
    }

    /// After `call`, counted at `clamp`, is refused: blocks the key when the call consumes
    /// and asks for a block, from the time the refusal was counted at, and the refusal
    /// then says that no call passes before the block ends. Returns how long the key must
    /// live from the caller's clock for the block, `None` when there is none: to its end,
    /// and for an escalating lock-out 24 hours more, so that its streak is remembered
    /// (see [`crate::lockout`]).
    pub(super) fn start(
        &mut self,
        refusal: &mut RawDecision,
        call: &Call<'_>,
        clamp: Clamp,
    ) -> Option<u64> {
        let lockout = match call.lockout {
            Some(packed) if call.consume => packed.lockout(),
            _ => return None,
        };
        let (strikes, remembered_us) = match lockout {
            Lockout::For(_) => (0, 0),
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
    pub(super) fn streak_at(&self, at_us: u64) -> bool {
        self.strikes > 0 && at_us < self.until_us.saturating_add(STREAK_US)
    }

    /// Blocks the key until `until_us` (µs since the epoch), answered by rule
    /// `rule_index`, the `strikes`th lock-out of a streak (0: none), unless a block already
    /// runs at least as long: a block never shortens another. Both ways a block starts come
    /// here: a refusal with `block_for` ([`start`](Self::start)) and
    /// [`StoredState::block_until`](super::StoredState::block_until) (`Limiter::block`).
    pub(super) fn extend(&mut self, until_us: u64, rule_index: usize, strikes: u32) {
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
    pub(super) fn remembered_us(&self, now_us: u64) -> u64 {
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
    pub(super) fn end(&mut self, at_us: u64) {
        if !self.streak_at(at_us) {
            *self = Block::NONE;
        }
    }
}
