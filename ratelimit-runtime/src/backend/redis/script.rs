//! The scripts' protocol: which script runs an algorithm, how a check is encoded into one
//! EVALSHA, and how the reply is decoded. Nothing here touches a connection.

use std::io::Write;

use once_cell::sync::Lazy;
use redis::{Cmd, RedisWrite, Script, ToRedisArgs, Value};

use crate::backend::Request;
use crate::decision::RawDecision;
use crate::{Algorithm, Rule};

/// The Lua source of the script that runs `algorithm`.
fn source(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::SlidingLog => include_str!("../../scripts/sliding_log.lua"),
        Algorithm::FixedWindow => include_str!("../../scripts/fixed_window.lua"),
        Algorithm::SlidingWindow => include_str!("../../scripts/sliding_window.lua"),
        Algorithm::TokenBucket => include_str!("../../scripts/token_bucket.lua"),
    }
}

/// The script that runs `algorithm`, hashed once per process.
pub(crate) fn script(algorithm: Algorithm) -> &'static Script {
    static SCRIPTS: Lazy<[Script; 4]> = Lazy::new(|| {
        [
            Algorithm::SlidingLog,
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
            Algorithm::TokenBucket,
        ]
        .map(|algorithm| Script::new(source(algorithm)))
    });
    &SCRIPTS[algorithm as usize]
}

/// Whether running the same encoded check twice counts it once: a command that may have
/// executed is re-sent only when this holds.
pub(crate) fn rerun_is_harmless(algorithm: Algorithm) -> bool {
    // Filled in by the algorithms that make a re-run a no-op.
    let _ = algorithm;
    false
}

/// The EVALSHA of `request`, built directly, once, in a buffer of its final size: a
/// `ScriptInvocation` would collect every argument in a Vec of its own and then copy them
/// all into a command, and a growing buffer would be reallocated several times.
pub(crate) fn evalsha(request: &Request<'_>) -> Cmd {
    let hash = script(request.algorithm).get_hash();
    let size = "EVALSHA".len() + hash.len() + 1 + request.key.len() + Numbers::len(request);
    let mut evalsha = Cmd::with_capacity(5, size);
    evalsha
        .arg("EVALSHA")
        .arg(hash)
        .arg(1)
        .arg(request.key)
        .arg(Numbers(request));
    evalsha
}

/// The same check as an `EVAL` carrying the script's body, for a server that does not
/// know the script (first use, `SCRIPT FLUSH`, a restart, a failover).
pub(crate) fn eval(request: &Request<'_>) -> Cmd {
    let mut eval = redis::cmd("EVAL");
    eval.arg(source(request.algorithm))
        .arg(1)
        .arg(request.key)
        .arg(Numbers(request));
    eval
}

/// The numbers of a check as the scripts read them, in one argument: consume (1 or 0), now
/// in µs (0: the server's TIME), then each rule's count and window in µs, every one a
/// little-endian `f64` (exact: each stays below 2^53). Redis parses text numbers slower
/// than a check's own arithmetic.
struct Numbers<'a>(&'a Request<'a>);

impl Numbers<'_> {
    /// The argument's size in bytes.
    fn len(request: &Request<'_>) -> usize {
        8 * (2 + 2 * request.rules.len())
    }
}

impl ToRedisArgs for Numbers<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        let Numbers(request) = self;
        let head = [u64::from(request.consume), request.now_us.unwrap_or(0)];
        let rules = request
            .rules
            .iter()
            .flat_map(|r| [r.count(), r.window_us()]);
        // Written straight into the command's buffer, which cannot fail.
        let mut arg = out.writer_for_next_arg();
        for n in head.into_iter().chain(rules) {
            arg.write_all(&(n as f64).to_le_bytes())
                .expect("writing to memory");
        }
    }
}

/// A script's answer: `{allowed, rule_index, remaining, reset_after_us, retry_after_us}`,
/// or an admitted call's short form `(reset_after_us * count + remaining) * 64 +
/// rule_index`, over the binding rule's `count` (an admitted call leaves fewer than `count`
/// remaining). The scripts send the short form whenever it stays below 2^53, as sending an
/// array costs Redis more than the arithmetic of a check. `None` when the answer is not
/// one of these.
pub(crate) fn decode(reply: &Value, rules: &[Rule]) -> Option<RawDecision> {
    let int = |value: &Value| match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    let raw = match reply {
        Value::Int(_) => {
            let short = int(reply)?;
            let rule_index = (short % 64) as usize;
            let count = rules.get(rule_index)?.count();
            RawDecision {
                allowed: true,
                rule_index,
                remaining: short / 64 % count,
                reset_after_us: short / 64 / count,
                retry_after_us: 0,
            }
        }
        Value::Array(items) => match items.as_slice() {
            [allowed, rule_index, remaining, reset_after_us, retry_after_us] => RawDecision {
                allowed: match int(allowed)? {
                    0 => false,
                    1 => true,
                    _ => return None,
                },
                rule_index: int(rule_index)? as usize,
                remaining: int(remaining)?,
                reset_after_us: int(reset_after_us)?,
                retry_after_us: int(retry_after_us)?,
            },
            _ => return None,
        },
        _ => return None,
    };
    (raw.rule_index < rules.len()).then_some(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_reply_forms_decode() {
        let rules = [Rule::per_second(10), Rule::per_minute(100)];
        // Rule 1 (count 100) with 57 remaining, free again in 12.5 s.
        let short = decode(&Value::Int((12_500_000 * 100 + 57) * 64 + 1), &rules).unwrap();
        assert_eq!(
            short,
            RawDecision {
                allowed: true,
                rule_index: 1,
                remaining: 57,
                reset_after_us: 12_500_000,
                retry_after_us: 0
            }
        );
        let long = Value::Array([0, 0, 0, 900, 400].map(Value::Int).to_vec());
        let denied = decode(&long, &rules).unwrap();
        assert_eq!(
            (denied.allowed, denied.reset_after_us, denied.retry_after_us),
            (false, 900, 400)
        );
    }

    #[test]
    fn replies_out_of_range_are_rejected() {
        let rules = [Rule::per_second(10)];
        assert_eq!(decode(&Value::Int(64 + 1), &rules), None); // rule 1 of 1
        assert_eq!(decode(&Value::Int(-1), &rules), None);
        assert_eq!(
            decode(
                &Value::Array([2, 0, 0, 0, 0].map(Value::Int).to_vec()),
                &rules
            ),
            None
        );
        assert_eq!(decode(&Value::Array(vec![Value::Int(1)]), &rules), None);
        assert_eq!(decode(&Value::Nil, &rules), None);
    }
}
