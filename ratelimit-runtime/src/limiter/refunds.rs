//! The refunds a limiter has made of the counting algorithms' decisions.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use crate::decision::Receipt;
use crate::sync::lock;
use crate::Algorithm;

/// The fixed window, the sliding window and the token bucket count units without names:
/// a second refund of one decision would give back units of other calls. So a limiter
/// remembers the last [`Refunds::REMEMBERED`] decisions it refunded (by key and receipt)
/// and gives each back once. The sliding log names its units: a repeated refund of its
/// decision finds nothing to remove, and needs no memory here.
#[derive(Debug, Default)]
pub(crate) struct Refunds(Mutex<Ledger>);

#[derive(Debug, Default)]
struct Ledger {
    made: HashSet<(u64, Receipt)>,
    /// `made`, oldest first.
    order: VecDeque<(u64, Receipt)>,
}

impl Refunds {
    /// How many refunds a limiter remembers: a decision is refunded again at once or not
    /// at all, in practice.
    pub const REMEMBERED: usize = 4096;

    /// Whether the refund of `receipt` (of a decision on `key`) is its first, recording it.
    pub fn first(&self, key: &str, receipt: &Receipt) -> bool {
        if receipt.algorithm == Algorithm::SlidingLog {
            return true;
        }
        self.record(key, receipt)
    }

    /// Whether the settle of `receipt` (of a decision on `key`) is its first, recording
    /// it, whatever the algorithm: a second settle of a decision, even by name, would
    /// settle from a reservation that is no longer there.
    pub fn first_settle(&self, key: &str, receipt: &Receipt) -> bool {
        self.record(key, receipt)
    }

    /// Records the refund or settle of `receipt`; `false` when it was recorded already.
    fn record(&self, key: &str, receipt: &Receipt) -> bool {
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        let made = (hasher.finish(), *receipt);
        let mut ledger = lock(&self.0);
        if !ledger.made.insert(made) {
            return false;
        }
        ledger.order.push_back(made);
        if ledger.order.len() > Self::REMEMBERED {
            let oldest = ledger.order.pop_front().expect("over the limit");
            ledger.made.remove(&oldest);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::CountedBy;

    fn receipt(at_us: u64, algorithm: Algorithm) -> Receipt {
        Receipt::new(
            1,
            at_us,
            Receipt::check_id(algorithm, 0),
            algorithm,
            CountedBy::Memory,
        )
    }

    #[test]
    fn a_counting_decision_is_refunded_once_and_the_oldest_are_forgotten() {
        let refunds = Refunds::default();
        let fixed = receipt(1, Algorithm::FixedWindow);
        assert!(refunds.first("k", &fixed));
        assert!(!refunds.first("k", &fixed));
        assert!(refunds.first("other", &fixed));
        let log = receipt(1, Algorithm::SlidingLog);
        assert!(refunds.first("k", &log) && refunds.first("k", &log));
        for at_us in 2..=Refunds::REMEMBERED as u64 + 1 {
            assert!(refunds.first("k", &receipt(at_us, Algorithm::TokenBucket)));
        }
        assert!(
            refunds.first("k", &fixed),
            "forgotten after the last REMEMBERED"
        );
    }
}
