//! A script's answer, read.

use redis::Value;

use crate::decision::{Bound, RawDecision, Receipt};
use crate::warning::Crossing;
use crate::Rule;

/// A script's answer: `{allowed, rule_index, remaining, reset_after_us, retry_after_us}`
/// (`retry_after_us` -1: [`RawDecision::NEVER`]), or an admitted call's short form
/// `(reset_after_us * (count + 1) + remaining) * 64 + rule_index`, over the binding rule's
/// `count` (an admitted call, or a peek, leaves at most `count` remaining). The scripts
/// send the short form whenever it stays below 2^53, as sending an array costs Redis more
/// than the arithmetic of a check. A consuming check of a string-state algorithm adds the
/// time it was counted at: the short form and that time as two little-endian `f64`s, or
/// a sixth number. `None` when the answer is not one of these; else the decision (without
/// its receipt) and that time.
pub(crate) fn decode(reply: &Value, rules: &[Rule]) -> Option<(RawDecision, Option<u64>)> {
    let int = |value: &Value| match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    let short = |short: u64| -> Option<RawDecision> {
        let rule_index = (short % 64) as usize;
        let base = rules.get(rule_index)?.count() + 1;
        Some(RawDecision {
            allowed: true,
            rule_index,
            remaining: short / 64 % base,
            reset_after_us: short / 64 / base,
            retry_after_us: 0,
            receipt: Receipt::NONE,
            bound: Bound::Rule,
            crossed: None,
        })
    };
    let (raw, at_us) = match reply {
        Value::Int(_) => (short(int(reply)?)?, None),
        Value::BulkString(bytes) if bytes.len() == 16 => {
            let double = |b: &[u8]| f64::from_le_bytes(b.try_into().expect("8 bytes"));
            let (n, at) = (double(&bytes[..8]), double(&bytes[8..]));
            let whole = |x: f64| (x >= 0.0 && x.fract() == 0.0).then_some(x as u64);
            (short(whole(n)?)?, Some(whole(at)?))
        }
        Value::Array(items) => {
            // A check that crossed a rule's warning share (`warn_reply.lua`) ends with its
            // crossings; a draw's answer carries the token bucket's witness (else 0) after
            // its time.
            let (items, crossed) = match items.as_slice() {
                [figures @ .., Value::BulkString(crossings)] if items.len() >= 7 => {
                    (figures, Some(decode_crossings(crossings)?))
                }
                items => (items, None),
            };
            let (figures, at_us, witness) = match items {
                [figures @ .., at] if items.len() == 6 => (figures, Some(int(at)?), 0),
                [figures @ .., at, witness] if items.len() == 7 => {
                    (figures, Some(int(at)?), int(witness)?)
                }
                figures => (figures, None, 0),
            };
            let [allowed, rule_index, remaining, reset_after_us, retry_after_us] = figures else {
                return None;
            };
            let raw = RawDecision {
                allowed: match int(allowed)? {
                    0 => false,
                    1 => true,
                    _ => return None,
                },
                rule_index: int(rule_index)? as usize,
                remaining: int(remaining)?,
                reset_after_us: int(reset_after_us)?,
                retry_after_us: match retry_after_us {
                    Value::Int(-1) => RawDecision::NEVER,
                    other => int(other)?,
                },
                receipt: Receipt {
                    id: witness,
                    ..Receipt::NONE
                },
                bound: Bound::Rule,
                crossed,
            };
            (raw, at_us)
        }
        _ => return None,
    };
    (raw.rule_index < rules.len()).then_some((raw, at_us))
}

/// The crossings of `warn_reply.lua`: struct '<dd' (rule index, units used) each.
#[cold]
fn decode_crossings(bytes: &[u8]) -> Option<Box<[Crossing]>> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(16) {
        return None;
    }
    let whole = |b: &[u8]| {
        let x = f64::from_le_bytes(b.try_into().expect("8 bytes"));
        (x >= 0.0 && x.fract() == 0.0).then_some(x as u64)
    };
    bytes
        .chunks_exact(16)
        .map(|pair| {
            Some(Crossing {
                rule_index: whole(&pair[..8])? as usize,
                used: whole(&pair[8..])?,
            })
        })
        .collect()
}
