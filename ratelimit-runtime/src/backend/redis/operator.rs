//! What an operator's reads and writes send (see [`Limiter::inspect`](crate::Limiter::inspect)): a key's state read at
//! one instant by `scripts/inspect.lua`, the server's time, and the fields of the
//! `{prefix}rules` hash. Sent like a check, to the key's server, under the timeout.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Cmd, Script, Value};

use super::{Failure, RedisBackend};
use crate::algorithm::StoredState;
use crate::clock::{Clock, SystemClock};
use crate::{BackendError, Calendar, Rule};

/// `scripts/inspect.lua`, hashed once per process.
static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCE));
const SOURCE: &str = include_str!("../../scripts/inspect.lua");

/// A key as [`RedisBackend::read_key`] finds it.
pub(crate) struct FoundKey {
    pub state: StoredState,
    /// The server's time when read, µs since the epoch (this process's when the server
    /// refuses `TIME`).
    pub now_us: u64,
    /// How long until the key expires; `None`: never.
    pub ttl: Option<Duration>,
}

impl RedisBackend {
    /// When an operator's command must have answered (see
    /// [`RedisConfig::operator_timeout`](super::RedisConfig::operator_timeout)).
    pub(super) fn operator_deadline(&self) -> tokio::time::Instant {
        self.deadline(self.config.operator_timeout())
    }

    /// Sends an operator's `command` on `key`'s server (`harmless`: running it twice does
    /// what running it once does).
    pub(super) async fn operate(
        &self,
        key: &str,
        command: &Cmd,
        harmless: bool,
    ) -> Result<Value, BackendError> {
        self.send(key, command, harmless, self.operator_deadline())
            .await
            .map_err(|failure| self.error(key, failure))
    }

    /// Runs an operator's `script` with `args` on `key`'s server, as
    /// [`operate`](Self::operate) sends a command.
    pub(super) async fn operate_script(
        &self,
        key: &str,
        script: (&Script, &str),
        args: impl Fn(&mut Cmd),
        harmless: bool,
    ) -> Result<Value, BackendError> {
        self.run_script(key, script, args, harmless, self.operator_deadline())
            .await
            .map_err(|failure| self.error(key, failure))
    }

    /// What `key` holds, decoded by the algorithms' own code; `None` when it is absent. An
    /// error when it holds something the limiter does not write.
    pub(crate) async fn read_key(&self, key: &str) -> Result<Option<FoundKey>, BackendError> {
        let args = |cmd: &mut Cmd| {
            cmd.arg(1).arg(key);
        };
        let reply = self
            .operate_script(key, (&INSPECT, SOURCE), args, true)
            .await?;
        let unexpected = |what: String| self.error(key, Failure::Unexpected(what.into()));
        let Value::Array(items) = reply else {
            return Err(unexpected(format!("the key's read answered {reply:?}")));
        };
        let (kind, pttl, value) = match items.as_slice() {
            [kind, Value::Int(pttl), rest @ ..] => (text(kind), *pttl, rest.first()),
            _ => return Err(unexpected(format!("the key's read answered {items:?}"))),
        };
        let state = match (kind.as_deref(), value) {
            (Some("none"), _) => return Ok(None),
            (Some("string"), Some(Value::BulkString(bytes))) => {
                StoredState::from_redis_string(bytes)
                    .map_err(|what| command_error(key, &format!("holds {what}")))?
            }
            (Some("zset"), Some(Value::Array(members))) => {
                log_state(members).map_err(|what| command_error(key, &what))?
            }
            (Some(other), _) => {
                let what = format!("is a {other}, which the limiter never writes");
                return Err(command_error(key, &what));
            }
            _ => return Err(unexpected(format!("the key's read answered {items:?}"))),
        };
        let now_us = self.server_time_us(key).await;
        let ttl = u64::try_from(pttl).ok().map(Duration::from_millis);
        Ok(Some(FoundKey { state, now_us, ttl }))
    }

    /// The time on `key`'s server, in µs since the epoch; this process's clock when the
    /// server will not tell (`TIME` renamed away).
    async fn server_time_us(&self, key: &str) -> u64 {
        let time = self.operate(key, &redis::cmd("TIME"), true).await;
        let parsed = match time {
            Ok(Value::Array(parts)) => match parts.as_slice() {
                [s, us] => text(s).zip(text(us)).and_then(|(s, us)| {
                    Some(s.parse::<u64>().ok()? * 1_000_000 + us.parse::<u64>().ok()?)
                }),
                _ => None,
            },
            _ => None,
        };
        parsed.unwrap_or_else(|| SystemClock.now_us())
    }

    /// Sets `field` of the hash at `key` to `value`.
    pub(crate) async fn hash_set(
        &self,
        key: &str,
        field: &str,
        value: &str,
    ) -> Result<(), BackendError> {
        let mut hset = redis::cmd("HSET");
        hset.arg(key).arg(field).arg(value);
        // Setting a field twice leaves what setting it once does.
        self.operate(key, &hset, true).await.map(drop)
    }

    /// Deletes `fields` of the hash at `key`; how many there were.
    pub(crate) async fn hash_delete(
        &self,
        key: &str,
        fields: &[String],
    ) -> Result<u64, BackendError> {
        let mut hdel = redis::cmd("HDEL");
        hdel.arg(key).arg(fields);
        match self.operate(key, &hdel, true).await? {
            Value::Int(n) => Ok(u64::try_from(n).unwrap_or(0)),
            other => Err(self.error(
                key,
                Failure::Unexpected(format!("HDEL answered {other:?}").into()),
            )),
        }
    }
}

/// A sliding log's sorted set: every entry's time (a draw's units as one weighted entry),
/// the checks counted by rules counting calls (scored minus their time), and the block
/// member (`B`, then the block's end and rule as two little-endian doubles, scored
/// `+inf`).
fn log_state(members: &[Value]) -> Result<StoredState, String> {
    let mut entries = Vec::with_capacity(members.len() / 2);
    let (mut calls, mut periods, mut block) = (Vec::new(), Vec::new(), None);
    for pair in members.chunks(2) {
        let [Value::BulkString(member), score] = pair else {
            return Err("is a sorted set that is not a sliding log".into());
        };
        let score = text(score).unwrap_or_default();
        if score == "inf" {
            let double = |b: &[u8]| f64::from_le_bytes(b.try_into().expect("8 bytes"));
            match member.as_slice() {
                [b'B', numbers @ ..] if numbers.len() == 16 => {
                    block = Some((double(&numbers[..8]) as u64, double(&numbers[8..]) as usize));
                }
                _ => {
                    return Err(
                        "is a sorted set with a member scored +inf that is not a block".into(),
                    )
                }
            }
            continue;
        }
        match score.parse::<f64>() {
            // The clock of a key that has had a draw (scripts/sliding_log.lua): no entry.
            Ok(x) if x >= TWO_52 && member.as_slice() == b"K" => {}
            // A draw's units: 'W', their number, the draw's id; scored 2^52 + their time.
            Ok(x) if x >= TWO_52 && x.fract() == 0.0 && member.first() == Some(&b'W') => {
                let units = member
                    .get(1..9)
                    .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .filter(|units| units.fract() == 0.0 && (1.0..TWO_52).contains(units))
                    .ok_or("is a sorted set with a weighted entry no draw writes")?;
                let at = (x - TWO_52) as u64;
                entries.extend(std::iter::repeat_n(at, units as usize));
            }
            // A calendar rule's counter (scripts/sliding_log_calendar.lua): 'P', its count
            // and its record's window, scored -(2^52 + units).
            Ok(x) if x <= -TWO_52 && x.fract() == 0.0 => {
                let period = match member.as_slice() {
                    [b'P', numbers @ ..] if numbers.len() == 16 => calendar_counter(numbers, x),
                    _ => None,
                };
                periods
                    .push(period.ok_or("is a sorted set with a calendar counter no check writes")?);
            }
            Ok(us) if us >= 0.0 && us.fract() == 0.0 => entries.push(us as u64),
            // A check's one call, for rules counting calls: scored minus its time.
            Ok(us) if us < 0.0 && us.fract() == 0.0 => calls.push(-us as u64),
            _ => {
                return Err(format!(
                    "is a sorted set with a score `{score}` no check writes"
                ))
            }
        }
    }
    Ok(StoredState::from_redis_log(entries, calls, periods, block))
}

/// 2^52: a calendar counter's score is below minus this.
const TWO_52: f64 = 4_503_599_627_370_496.0;

/// A calendar counter's rule, period start and units, from its member's numbers (its
/// count, negative counting calls, and its record's window, `-(4 * first day + 1, 2 or 3)`)
/// and its score.
fn calendar_counter(numbers: &[u8], score: f64) -> Option<(Rule, u64, u64)> {
    let double = |b: &[u8]| f64::from_le_bytes(b.try_into().expect("8 bytes"));
    let (signed, window) = (double(&numbers[..8]), -double(&numbers[8..]));
    let count = ratelimit_rule_text::check_count(signed.abs() as u64).ok()?;
    if window.fract() != 0.0 || !(1.0..TWO_52).contains(&window) {
        return None;
    }
    let calendar = match window as u64 % 4 {
        1 => Calendar::Day,
        2 => Calendar::Month,
        3 => Calendar::Year,
        _ => return None,
    };
    let rule = Rule::per_calendar(count, calendar);
    let rule = if signed < 0.0 { rule.calls() } else { rule };
    let start_us = (window as u64 / 4).checked_mul(86_400_000_000)?;
    Some((rule, start_us, (-score - TWO_52) as u64))
}

/// A reply part that is text.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

/// The error of a key that holds what the limiter does not write.
fn command_error(key: &str, what: &str) -> BackendError {
    BackendError::new(
        crate::BackendErrorKind::Command,
        format!("key `{key}` {what}: it is not a rate-limit key"),
    )
}
