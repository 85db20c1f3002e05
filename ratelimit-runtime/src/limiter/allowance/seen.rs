//! The keys a shard saw lately that hold no allowance, and their pace: what lets a key into
//! the allowance table.
//!
//! A key enters the table once a running mean of the gaps between its checks here shows
//! a pace that may draw (at least [`MIN_EXPECTED_CHECKS`] per `max_age`). A mean, not one
//! gap: among random arrivals at a pace several times too slow to draw (many keys, each
//! checked every 200 ms, with an allowance of 250 ms), one gap in five is still short
//! enough, and each key let in then costs an entry in the table, and, drawn, a give-back.

use super::MIN_EXPECTED_CHECKS;

/// The slots of one shard: two keys on one slot forget each other, which costs either one
/// more check sent alone.
const SLOTS: usize = 1024;

/// Per slot (bits 8..18 of the key's hash), one packed number: from the top, 20 bits of
/// the key's hash (bits 18..38, which neither the slot nor the shard uses), whether the key
/// is in the table (1 bit), when it was last checked (27 bits of local ms, wrapping every
/// 37 hours) and the running mean of its gaps (16 bits of ms, saturating); empty until
/// first used. A key in the table keeps its slot (see [`Sight::Held`]); another slot
/// taken by another key, or wrapped, only costs a key a check sent alone more or less.
#[derive(Default)]
pub(super) struct Seen(Box<[u64]>);

const HELD: u64 = 1 << 43;
const MS_BITS: u32 = 27;
const MS_MASK: u32 = (1 << MS_BITS) - 1;
const GAP_MAX: u32 = u16::MAX as u32;

/// What a check's look at its key's slot found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sight {
    /// Not in the table, and not warm: a plain check, nothing to look up.
    Cold,
    /// Not in the table, and now warm: it may enter.
    Warm,
    /// Its slot is held by a key of the table, itself or another: look in the table.
    Held,
}

impl Seen {
    /// What the key of `hash`, checked at local `now_us` with an allowance of
    /// `max_age_ms`, is; notes the check unless the slot is held. One look, before the
    /// table's: a cold key costs no lookup there, whose buckets a loaded machine has
    /// often evicted from the cache.
    pub fn again(&mut self, hash: u64, now_us: u64, max_age_ms: u32) -> Sight {
        if self.0.is_empty() {
            self.0 = vec![0; SLOTS].into_boxed_slice();
        }
        let slot = &mut self.0[(hash >> 8) as usize % SLOTS];
        if *slot & HELD != 0 {
            return Sight::Held;
        }
        // In whole numbers: a float's conversion costs this path as much as the rest.
        let warm_ms = max_age_ms / MIN_EXPECTED_CHECKS as u32;
        let (next, warm) = step(*slot, tag(hash), (now_us / 1000) as u32, warm_ms);
        *slot = next;
        match warm {
            true => Sight::Warm,
            false => Sight::Cold,
        }
    }

    /// Marks the slot of the key of `hash`, which entered the table, held: a key of the
    /// table keeps its slot until it leaves.
    pub fn held(&mut self, hash: u64) {
        if let Some(slot) = self.0.get_mut((hash >> 8) as usize % SLOTS) {
            if *slot >> 44 == tag(hash) {
                *slot |= HELD;
            }
        }
    }

    /// Frees the slot of the key of `hash`, which is not in the table (any more).
    pub fn left(&mut self, hash: u64) {
        if let Some(slot) = self.0.get_mut((hash >> 8) as usize % SLOTS) {
            if *slot >> 44 == tag(hash) {
                *slot &= !HELD;
            }
        }
    }
}

fn tag(hash: u64) -> u64 {
    (hash >> 18) & 0xF_FFFF
}

/// `slot` (not held) after a check of the key tagged `tag` at local `now_ms`, and whether
/// the key's mean gap is now `warm_ms` or less. A key seen for the first time starts at a
/// mean of 5/4 of `warm_ms` and each gap weighs an eighth: a key checked concurrently, or
/// in a loop, is warm at its third check, a steady pace of half of it at its fourth, and
/// random arrivals at a pace several times too slow about never (they would need two or
/// three short gaps in a row). One short gap must not suffice: such a key draws and gives
/// back for about two checks, two scripts dearer than a check's, to save two; a higher
/// start leaves keys whose pace fills an allowance cold for longer (BENCHMARKS.md).
fn step(slot: u64, tag: u64, now_ms: u32, warm_ms: u32) -> (u64, bool) {
    let now_ms = now_ms & MS_MASK;
    let known = slot != 0 && slot >> 44 == tag;
    // Eight times the mean, compared before it is rounded down: rounding would let a few
    // ms more pass at each step.
    let sum = match known {
        true => {
            let (before_ms, mean) = ((slot >> 16) as u32 & MS_MASK, slot as u32 & GAP_MAX);
            let gap = now_ms.wrapping_sub(before_ms) & MS_MASK;
            7 * u64::from(mean) + u64::from(gap.min(GAP_MAX))
        }
        false => 8 * u64::from(warm_ms.saturating_add(warm_ms / 4).min(GAP_MAX)),
    };
    let next = (tag << 44) | (u64::from(now_ms) << 16) | (sum / 8);
    (next, known && sum <= 8 * u64::from(warm_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a key checked at each of `at_ms` is warm at each check, for `max_age_ms`.
    fn warm_at(at_ms: &[u64], max_age_ms: u32) -> Vec<bool> {
        let mut seen = Seen::default();
        let hash = 0x0123_4567_89AB_CDEF;
        at_ms
            .iter()
            .map(|ms| seen.again(hash, ms * 1000, max_age_ms) == Sight::Warm)
            .collect()
    }

    #[test]
    fn a_key_checked_at_once_is_warm_at_its_third_check() {
        assert_eq!(warm_at(&[5, 5, 5], 250), [false, false, true]);
        assert_eq!(warm_at(&[0, 100, 100], 5000), [false, false, true]);
    }

    #[test]
    fn one_short_gap_does_not_warm_a_key_seen_first() {
        // A second check within a ms, among keys checked at random about every 130 ms at
        // 250 ms, happens to about one key in ten: it must not draw for that.
        assert!(warm_at(&[0, 1, 101, 201], 250).iter().all(|warm| !warm));
    }

    #[test]
    fn a_slow_key_with_one_short_gap_stays_cold() {
        // A sixth of 250 ms is 41 ms: one short gap among gaps of 180 ms does not make
        // the key warm, where a single gap used to.
        let at = [0, 180, 360, 380, 560, 740, 750, 930];
        assert!(warm_at(&at, 250).iter().all(|warm| !warm));
    }

    #[test]
    fn a_steady_pace_of_half_the_threshold_gets_warm_within_a_few_checks() {
        let at: Vec<u64> = (0..8).map(|i| i * 20).collect();
        let warm = warm_at(&at, 250);
        assert!(!warm[2] && warm[3..].iter().all(|&warm| warm), "{warm:?}");
    }

    #[test]
    fn another_key_on_the_slot_starts_over() {
        let mut seen = Seen::default();
        let (a, b) = (0x0000_0000_0000_0100, 0x0000_0000_1000_0100);
        assert_eq!(seen.again(a, 0, 250), Sight::Cold);
        assert_eq!(seen.again(b, 1000, 250), Sight::Cold);
        assert_eq!(seen.again(a, 2000, 250), Sight::Cold, "b took the slot");
        let again: Vec<Sight> = (3..5).map(|ms| seen.again(a, ms * 1000, 250)).collect();
        assert_eq!(again, [Sight::Cold, Sight::Warm]);
    }

    #[test]
    fn a_key_in_the_table_keeps_its_slot_until_it_leaves() {
        let mut seen = Seen::default();
        let (a, b) = (0x0000_0000_0000_0100, 0x0000_0000_1000_0100);
        assert_eq!(seen.again(a, 0, 250), Sight::Cold);
        seen.held(a);
        // Every key of the slot looks in the table, and none takes the slot.
        assert_eq!(seen.again(b, 1000, 250), Sight::Held);
        assert_eq!(seen.again(a, 1000, 250), Sight::Held);
        seen.left(b);
        assert_eq!(
            seen.again(a, 1000, 250),
            Sight::Held,
            "only its own key frees it"
        );
        seen.left(a);
        assert_eq!(
            seen.again(a, 1000, 250),
            Sight::Cold,
            "its pace is as it was"
        );
    }

    #[test]
    fn a_long_max_age_saturates_the_mean_and_warms_at_the_second_check() {
        assert_eq!(warm_at(&[0, 70_000], 3_600_000), [false, true]);
        // The clock wraps at 2^28 ms: a gap across it is still a gap.
        let wrap = u64::from(MS_MASK);
        assert_eq!(
            warm_at(&[wrap - 1, wrap, wrap + 1], 250),
            [false, false, true]
        );
    }
}
