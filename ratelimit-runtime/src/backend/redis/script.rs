//! The scripts' protocol: which script runs an algorithm, how a check is encoded into one
//! EVALSHA, and how the reply is decoded. Nothing here touches a connection.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

use redis::{Cmd, RedisWrite, Script, ToRedisArgs, Value};

use crate::backend::Request;
use crate::decision::RawDecision;
use crate::{random, Algorithm, Rule};

/// The scripts' sources, composed from shared fragments.
mod sources {
    include!("../../scripts/sources.rs");
}

/// The Lua source of the script that runs `algorithm`.
fn source(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::SlidingLog => sources::SLIDING_LOG,
        Algorithm::FixedWindow => sources::FIXED_WINDOW,
        Algorithm::SlidingWindow => sources::SLIDING_WINDOW,
        Algorithm::TokenBucket => sources::TOKEN_BUCKET,
    }
}

/// The script that runs `algorithm`, hashed once per process.
pub(crate) fn script(algorithm: Algorithm) -> &'static Script {
    static SCRIPTS: LazyLock<[Script; 4]> =
        LazyLock::new(|| Algorithm::ALL.map(|algorithm| Script::new(source(algorithm))));
    &SCRIPTS[algorithm as usize]
}

/// Whether running the same encoded check twice counts it once: a command that may have
/// executed is re-sent only when this holds.
pub(crate) fn rerun_is_harmless(algorithm: Algorithm) -> bool {
    // The sliding log's entries are named by the check's id, carried in the command: a
    // re-run finds them and writes nothing. The other algorithms would count it again.
    algorithm == Algorithm::SlidingLog
}

/// The id of one consuming sliding-log check, made when its command is built (so a re-sent
/// command carries the same one): a random prefix per process, then a counter per check.
/// Unique across processes with near certainty (a 64-bit random prefix), and within one
/// process for 2^64 checks.
fn check_id() -> [u8; 16] {
    static PREFIX: LazyLock<u64> = LazyLock::new(random::u64);
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut id = [0; 16];
    id[..8].copy_from_slice(&PREFIX.to_le_bytes());
    id[8..].copy_from_slice(&NEXT.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    id
}

/// Whether `request`'s script needs an id (ARGV[2]): a consuming sliding-log check.
fn needs_id(request: &Request<'_>) -> bool {
    request.consume && request.algorithm == Algorithm::SlidingLog
}

/// The EVALSHA of `request`, built directly, once, in a buffer of its final size: a
/// `ScriptInvocation` would collect every argument in a Vec of its own and then copy them
/// all into a command, and a growing buffer would be reallocated several times.
pub(crate) fn evalsha(request: &Request<'_>) -> Cmd {
    let hash = script(request.algorithm).get_hash();
    let id = needs_id(request).then(check_id);
    let size = "EVALSHA".len()
        + hash.len()
        + 1
        + request.key.len()
        + Numbers::len(request)
        + id.map_or(0, |id| id.len());
    let mut evalsha = Cmd::with_capacity(5 + usize::from(id.is_some()), size);
    evalsha
        .arg("EVALSHA")
        .arg(hash)
        .arg(1)
        .arg(request.key)
        .arg(Numbers(request));
    if let Some(id) = id {
        evalsha.arg(&id[..]);
    }
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
    if needs_id(request) {
        eval.arg(&check_id()[..]);
    }
    eval
}

/// The numbers of a check as the scripts read them, in one argument: consume (1 or 0), now
/// in µs (0: the server's TIME), the cost, then each rule's count and window in µs, every
/// one a little-endian `f64` (exact: each stays below 2^53; a cost beyond it is above any
/// count however it rounds). Redis parses text numbers slower than a check's own
/// arithmetic.
struct Numbers<'a>(&'a Request<'a>);

impl Numbers<'_> {
    /// The argument's size in bytes.
    fn len(request: &Request<'_>) -> usize {
        8 * (3 + 2 * request.rules.len())
    }
}

impl ToRedisArgs for Numbers<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        let Numbers(request) = self;
        let head = [
            u64::from(request.consume),
            request.now_us.unwrap_or(0),
            request.cost,
        ];
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

/// A script's answer: `{allowed, rule_index, remaining, reset_after_us, retry_after_us}`
/// (`retry_after_us` -1: [`RawDecision::NEVER`]), or an admitted call's short form
/// `(reset_after_us * (count + 1) + remaining) * 64 + rule_index`, over the binding rule's
/// `count` (an admitted call, or a peek, leaves at most `count` remaining). The scripts
/// send the short form whenever it stays below 2^53, as sending an array costs Redis more
/// than the arithmetic of a check. `None` when the answer is not one of these.
pub(crate) fn decode(reply: &Value, rules: &[Rule]) -> Option<RawDecision> {
    let int = |value: &Value| match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    let raw = match reply {
        Value::Int(_) => {
            let short = int(reply)?;
            let rule_index = (short % 64) as usize;
            let base = rules.get(rule_index)?.count() + 1;
            RawDecision {
                allowed: true,
                rule_index,
                remaining: short / 64 % base,
                reset_after_us: short / 64 / base,
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
                retry_after_us: match retry_after_us {
                    Value::Int(-1) => RawDecision::NEVER,
                    other => int(other)?,
                },
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
        let short = decode(&Value::Int((12_500_000 * 101 + 57) * 64 + 1), &rules).unwrap();
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
        // A peek of a fresh key: all 10 left.
        let fresh = decode(&Value::Int((1_000_000 * 11 + 10) * 64), &rules).unwrap();
        assert_eq!((fresh.remaining, fresh.reset_after_us), (10, 1_000_000));
        let never = Value::Array([0, 1, 3, 0, -1].map(Value::Int).to_vec());
        let never = decode(&never, &rules).unwrap();
        assert_eq!(
            (never.remaining, never.retry_after_us),
            (3, RawDecision::NEVER)
        );
        assert_eq!(never.into_decision(&rules).retry_after, None);
    }

    #[test]
    fn a_consuming_sliding_log_check_carries_an_id_of_its_own() {
        let rules = [Rule::per_second(10)];
        let request = |algorithm, consume| Request {
            key: "k",
            rules: &rules,
            algorithm,
            cost: 1,
            consume,
            block_for_us: 0,
            now_us: None,
        };
        let args = |cmd: Cmd| -> Vec<Vec<u8>> {
            cmd.args_iter()
                .map(|a| match a {
                    redis::Arg::Simple(b) => b.to_vec(),
                    _ => Vec::new(),
                })
                .collect()
        };
        let first = args(evalsha(&request(Algorithm::SlidingLog, true)));
        let second = args(evalsha(&request(Algorithm::SlidingLog, true)));
        assert_eq!(first.len(), 6);
        assert_eq!(first[5].len(), 16);
        assert_ne!(first[5], second[5], "a fresh id per check");
        assert_eq!(first[5][..8], second[5][..8], "one prefix per process");
        assert_eq!(
            args(evalsha(&request(Algorithm::SlidingLog, false))).len(),
            5
        );
        assert_eq!(
            args(evalsha(&request(Algorithm::FixedWindow, true))).len(),
            5
        );
        assert_eq!(args(eval(&request(Algorithm::SlidingLog, true))).len(), 6);
        assert!(rerun_is_harmless(Algorithm::SlidingLog));
        assert!(!rerun_is_harmless(Algorithm::TokenBucket));
    }

    #[test]
    fn each_algorithm_runs_its_own_script() {
        for algorithm in Algorithm::ALL {
            let own = Script::new(source(algorithm));
            assert_eq!(script(algorithm).get_hash(), own.get_hash(), "{algorithm}");
        }
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
