//! A key's state as the embedded backend's state file keeps it (`backend/memory_state.rs`
//! holds the file around it): every algorithm's records, the sliding log's entries,
//! calendar periods and the block, with their times as they are (µs since the epoch, the
//! wall clock's), so a state read back after a restart decides as it would have.
//!
//! Numbers are LEB128 varints, and a log's entries the differences from the one before:
//! most are small, so a key of one rule costs a few bytes beside its name.

use std::time::Duration;

use super::calendar::Period;
use super::records::{self, PerRule};
use super::{sliding_log, Block, Counts, StoredState};
use crate::{Algorithm, Calendar, Rule};

/// Writes numbers and bytes to the end of a buffer.
pub(crate) struct Writer<'a>(pub &'a mut Vec<u8>);

impl Writer<'_> {
    pub fn number(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.0.push(n as u8 | 0x80);
            n >>= 7;
        }
        self.0.push(n as u8);
    }

    pub fn bytes(&mut self, bytes: &[u8]) {
        self.number(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    pub fn rule(&mut self, rule: &Rule) {
        // Bit 0: counts calls; bits 1-2: 0 a window (given next), 1 a calendar day, 2 a
        // month, 3 a year.
        let calendar = match rule.calendar() {
            None => 0,
            Some(Calendar::Day) => 1,
            Some(Calendar::Month) => 2,
            Some(Calendar::Year) => 3,
        };
        self.number(rule.count());
        self.number(u64::from(rule.counts_calls()) | calendar << 1);
        if calendar == 0 {
            self.number(rule.window_us());
        }
    }

    /// Ascending times, as the first and the differences after it.
    pub fn times<'t>(&mut self, times: impl ExactSizeIterator<Item = &'t u64>) {
        self.number(times.len() as u64);
        let mut last = 0;
        for &t in times {
            self.number(t.wrapping_sub(last));
            last = t;
        }
    }
}

/// Reads what a [`Writer`] wrote; every read is `None` past the end or on a malformed
/// number, so a damaged file is refused, never trusted.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn number(&mut self) -> Option<u64> {
        let mut n = 0u64;
        for (i, &byte) in self.bytes.iter().enumerate().take(10) {
            let bits = u64::from(byte & 0x7f);
            if i == 9 && bits > 1 {
                return None;
            }
            n |= bits << (7 * i);
            if byte < 0x80 {
                self.bytes = &self.bytes[i + 1..];
                return Some(n);
            }
        }
        None
    }

    /// A number that counts things: no more than bytes are left, so a damaged length
    /// cannot ask for a huge allocation.
    pub fn length(&mut self) -> Option<usize> {
        let n = usize::try_from(self.number()?).ok()?;
        (n <= self.bytes.len()).then_some(n)
    }

    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.length()?;
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(taken)
    }

    pub fn rule(&mut self) -> Option<Rule> {
        let count = self.number()?;
        let flags = self.number()?;
        if count == 0 || count > Rule::MAX_COUNT || flags > 7 {
            return None;
        }
        let rule = match flags >> 1 {
            0 => {
                let window_us = self.number()?;
                if window_us == 0 || window_us > Rule::MAX_WINDOW.as_micros() as u64 {
                    return None;
                }
                Rule::new(count, Duration::from_micros(window_us))
            }
            1 => Rule::per_calendar(count, Calendar::Day),
            2 => Rule::per_calendar(count, Calendar::Month),
            _ => Rule::per_calendar(count, Calendar::Year),
        };
        Some(if flags & 1 == 1 { rule.calls() } else { rule })
    }

    pub fn times(&mut self) -> Option<Vec<u64>> {
        let n = self.length()?;
        let mut times = Vec::with_capacity(n);
        let mut last = 0u64;
        for _ in 0..n {
            last = last.checked_add(self.number()?)?;
            times.push(last);
        }
        Some(times)
    }
}

/// How an algorithm's record is kept: its numbers, in order.
pub(crate) trait SavedRecord: Sized {
    fn save(&self, out: &mut Writer<'_>);
    fn restore(from: &mut Reader<'_>) -> Option<Self>;
}

impl SavedRecord for Period {
    fn save(&self, out: &mut Writer<'_>) {
        out.number(self.start_us);
        out.number(self.units);
    }

    fn restore(from: &mut Reader<'_>) -> Option<Self> {
        Some(Period {
            start_us: from.number()?,
            units: from.number()?,
        })
    }
}

/// The token bucket's record: its `tat` (or a calendar period's units), then 0 (or the
/// period's start).
impl SavedRecord for (u64, u64) {
    fn save(&self, out: &mut Writer<'_>) {
        out.number(self.0);
        out.number(self.1);
    }

    fn restore(from: &mut Reader<'_>) -> Option<Self> {
        Some((from.number()?, from.number()?))
    }
}

impl StoredState {
    /// Appends the state to `out`.
    pub fn save(&self, out: &mut Writer<'_>) {
        let algorithm = self.algorithm();
        out.number(
            Algorithm::ALL
                .iter()
                .position(|&a| a == algorithm)
                .unwrap_or(0) as u64,
        );
        let Block {
            until_us,
            rule_index,
            strikes,
        } = self.block;
        out.number(until_us);
        if until_us > 0 {
            out.number(rule_index as u64);
            out.number(u64::from(strikes));
        }
        match &self.counts {
            Counts::SlidingLog(s) => save_log(s, out),
            Counts::FixedWindow(s) => s.save(out),
            Counts::SlidingWindow(s) => s.save(out),
            Counts::TokenBucket(s) => s.save(out),
        }
    }

    /// A state [`save`](Self::save) wrote; `None` when the bytes are not one.
    pub fn restore(from: &mut Reader<'_>) -> Option<StoredState> {
        let algorithm = *Algorithm::ALL.get(usize::try_from(from.number()?).ok()?)?;
        let until_us = from.number()?;
        let block = match until_us {
            0 => Block::NONE,
            _ => Block {
                until_us,
                rule_index: usize::try_from(from.number()?).ok()?,
                strikes: u32::try_from(from.number()?).ok()?,
            },
        };
        let counts = match algorithm {
            Algorithm::SlidingLog => Counts::SlidingLog(restore_log(from)?),
            Algorithm::FixedWindow => Counts::FixedWindow(records::State::restore(from)?),
            Algorithm::SlidingWindow => Counts::SlidingWindow(records::State::restore(from)?),
            Algorithm::TokenBucket => Counts::TokenBucket(records::State::restore(from)?),
        };
        Some(StoredState { counts, block })
    }
}

fn save_log(log: &sliding_log::State, out: &mut Writer<'_>) {
    let parts = log.parts();
    out.number(parts.checks);
    out.times(parts.log.iter());
    out.times(parts.calls.iter());
    out.number(parts.periods.len() as u64);
    for (rule, period) in parts.periods {
        out.rule(rule);
        period.save(out);
    }
}

fn restore_log(from: &mut Reader<'_>) -> Option<sliding_log::State> {
    let checks = from.number()?;
    let (entries, calls) = (from.times()?, from.times()?);
    let n = from.length()?;
    let periods = (0..n)
        .map(|_| Some((from.rule()?, Period::restore(from)?)))
        .collect::<Option<_>>()?;
    Some(sliding_log::State::from_parts(
        checks, entries, calls, periods,
    ))
}

impl<A: PerRule> records::State<A>
where
    A::Record: SavedRecord,
{
    fn save(&self, out: &mut Writer<'_>) {
        out.number(self.expires_at_us());
        let records = self.records();
        out.number(records.len() as u64);
        for (rule, record) in records {
            out.rule(rule);
            record.save(out);
        }
    }

    fn restore(from: &mut Reader<'_>) -> Option<Self> {
        let expires_at_us = from.number()?;
        let n = from.length()?;
        let records = (0..n)
            .map(|_| Some((from.rule()?, A::Record::restore(from)?)))
            .collect::<Option<_>>()?;
        Some(Self::from_records(expires_at_us, records))
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::algorithm::testing::{call, rule};
    use crate::algorithm::Call;
    use crate::lockout::Lockout;

    fn round_trip(state: &StoredState) -> StoredState {
        let mut bytes = Vec::new();
        state.save(&mut Writer(&mut bytes));
        let mut reader = Reader::new(&bytes);
        let restored = StoredState::restore(&mut reader).expect("a state just saved");
        assert!(reader.is_empty());
        restored
    }

    #[test]
    fn every_algorithm_s_state_decides_the_same_once_read_back() {
        const S: u64 = 1_000_000;
        let t0 = 1_700_000_000 * S;
        let rules = [
            rule(3, 10 * S),
            rule(5, 60 * S).calls(),
            Rule::per_calendar(7, Calendar::Day),
            Rule::per_calendar(100, Calendar::Month),
            Rule::per_calendar(1_000, Calendar::Year).calls(),
        ];
        for algorithm in Algorithm::ALL {
            let mut state = StoredState::new(algorithm);
            for (i, cost) in [1, 2, 1].into_iter().enumerate() {
                state.check(&call(&rules, t0 + i as u64 * S, cost, true));
            }
            let blocked = Call {
                lockout: Lockout::For(Duration::from_micros(30 * S)).packed(),
                ..call(&rules, t0 + 3 * S, 1, true)
            };
            assert!(!state.check(&blocked).decision.allowed, "{algorithm}");
            let mut restored = round_trip(&state);
            assert_eq!(restored.block(), state.block(), "{algorithm}");
            for at in [4, 20, 40, 70, 90_000] {
                let now = t0 + at * S;
                for consume in [false, true] {
                    let ours = state.check(&call(&rules, now, 1, consume));
                    let theirs = restored.check(&call(&rules, now, 1, consume));
                    assert_eq!(ours, theirs, "{algorithm} at +{at} s");
                }
            }
        }
    }

    #[test]
    fn damaged_bytes_are_refused_never_trusted() {
        let mut state = StoredState::new(Algorithm::SlidingLog);
        state.check(&call(&[rule(3, 1_000)], 5_000, 2, true));
        let mut bytes = Vec::new();
        state.save(&mut Writer(&mut bytes));
        for cut in 0..bytes.len() {
            assert!(StoredState::restore(&mut Reader::new(&bytes[..cut])).is_none());
        }
        assert!(StoredState::restore(&mut Reader::new(&[9, 0])).is_none());
        assert!(Reader::new(&[0xff; 11]).number().is_none());
    }
}
