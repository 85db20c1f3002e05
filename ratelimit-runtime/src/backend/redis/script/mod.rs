//! The scripts' protocol: which script runs an algorithm, how a check is encoded into one
//! EVALSHA, and how the reply is decoded. Nothing here touches a connection.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use redis::{Cmd, RedisWrite, Script, ToRedisArgs, Value};

use crate::backend::Request;
use crate::concurrency::{SlotAsk, SlotId};
use crate::decision::{CountedBy, RawDecision, Receipt};
use crate::lockout::Lockout;
use crate::warning::Crossing;
use crate::{random, Algorithm, Rule};

/// The scripts' sources, composed from shared fragments.
pub(super) mod sources {
    include!("../../scripts/sources.rs");
}

pub(crate) mod all;

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

/// One check's commands and how to read its answer. A consuming sliding-log check gets
/// its id here, once: its EVALSHA, the EVAL sent instead when the server does not know
/// the script, and a re-sent command all carry the same, and its answer's receipt names
/// it.
pub(crate) struct Invocation<'r> {
    request: &'r Request<'r>,
    /// The counter part of the check's id (see [`check_id`]).
    id: Option<u64>,
}

impl<'r> Invocation<'r> {
    pub fn new(request: &'r Request<'r>) -> Self {
        // A draw of any algorithm carries one too: its give-back is named by it.
        let needs_id = request.consume
            && (request.algorithm == Algorithm::SlidingLog || request.draw.is_some());
        Invocation {
            request,
            id: needs_id.then(next_check),
        }
    }

    /// The EVALSHA of the check, built directly, once, in a buffer of its final size: a
    /// `ScriptInvocation` would collect every argument in a Vec of its own and then copy
    /// them all into a command, and a growing buffer would be reallocated several times.
    pub fn evalsha(&self) -> Cmd {
        let request = self.request;
        if let Some(ask) = request.slot {
            return self.taking_slot(ask, true);
        }
        let hash = script(request.algorithm).get_hash();
        // The common check: its id, if any, is the last argument (see `optional_args`).
        let id_len = if self.id.is_some() { 16 } else { 0 };
        let size =
            "EVALSHA".len() + hash.len() + 1 + request.key.len() + Numbers::len(request) + id_len;
        let mut evalsha = Cmd::with_capacity(5 + usize::from(self.id.is_some()), size);
        evalsha.arg("EVALSHA").arg(hash);
        self.keys(&mut evalsha);
        evalsha.arg(Numbers(request));
        self.optional_args(&mut evalsha);
        evalsha
    }

    /// The same check as an `EVAL` carrying the script's body, for a server that does not
    /// know the script (first use, `SCRIPT FLUSH`, a restart, a failover).
    pub fn eval(&self) -> Cmd {
        let request = self.request;
        if let Some(ask) = request.slot {
            return self.taking_slot(ask, false);
        }
        let mut eval = redis::cmd("EVAL");
        eval.arg(source(request.algorithm));
        self.keys(&mut eval);
        eval.arg(Numbers(request));
        self.optional_args(&mut eval);
        eval
    }

    /// The check's keys: its key, and for a draw of a string-state algorithm the draws
    /// its records count (`scripts/drawn.lua`), beside it.
    #[inline]
    fn keys(&self, cmd: &mut Cmd) {
        let request = self.request;
        match request.draw.is_some() && request.algorithm != Algorithm::SlidingLog {
            true => cmd.arg(2).arg(request.key).arg(drawn_key(request.key)),
            false => cmd.arg(1).arg(request.key),
        };
    }

    /// The arguments after the check's numbers, each at a place of its own so that every
    /// fragment finds its own: ARGV[2] the sliding log's id (`sliding_log.lua`), ARGV[3] a
    /// consuming check's `warn_at`, one byte (`warn_args.lua`), ARGV[4] an escalating
    /// lock-out's schedule (`block.lua`), ARGV[5] an allowance's draw (`preamble.lua`). A
    /// place before one that is sent goes empty; a check that needs none of them sends
    /// nothing more.
    #[inline]
    fn optional_args(&self, cmd: &mut Cmd) {
        let request = self.request;
        let warn_at = (request.warn_at != 0 && request.consume).then_some([request.warn_at]);
        let schedule = Schedule::of(request);
        let places = match (self.id, warn_at, &schedule, request.draw) {
            (_, _, _, Some(_)) => 4,
            (_, _, Some(_), None) => 3,
            (_, Some(_), None, None) => 2,
            (Some(_), None, None, None) => 1,
            (None, None, None, None) => return,
        };
        match self.id {
            Some(id) => cmd.arg(&check_id(id)[..]),
            None => cmd.arg(&b""[..]),
        };
        if places >= 2 {
            cmd.arg(warn_at.as_ref().map_or(&b""[..], |byte| &byte[..]));
        }
        if places >= 3 {
            match schedule {
                Some(schedule) => cmd.arg(schedule),
                None => cmd.arg(&b""[..]),
            };
        }
        if let Some(draw) = request.draw {
            cmd.arg(&draw_numbers(draw)[..]);
        }
    }

    /// The script's answer, with the receipt of an admitted consuming check that a refund
    /// can use (the sliding log's, by its id; another algorithm's, when it answered the
    /// time it was counted at); `None` when the answer is not one a script gives (see
    /// [`decode`]).
    pub fn decode(&self, reply: &Value) -> Option<RawDecision> {
        let request = self.request;
        if let Some(ask) = request.slot {
            return self.decode_taking_slot(ask, reply);
        }
        let (mut raw, at_us) = decode(reply, request.rules)?;
        let refundable = self.id.is_some() || at_us.is_some();
        if raw.allowed && request.consume && refundable {
            // A token bucket's draw is named by its witness (which the answer carries in
            // its receipt), its give-back by the id it carried.
            let (cost, at_us) = (request.cost.get(), at_us.unwrap_or(0));
            raw.receipt = match (request.draw, request.algorithm) {
                (Some(_), algorithm) if has_witness(algorithm, request.rules) => Receipt::of_draw(
                    cost,
                    at_us,
                    raw.receipt.id,
                    request.algorithm,
                    CountedBy::Redis,
                ),
                (Some(_), _) => Receipt::of_draw(
                    cost,
                    at_us,
                    self.id.unwrap_or(0),
                    request.algorithm,
                    CountedBy::Redis,
                ),
                (None, _) => Receipt::new(
                    cost,
                    at_us,
                    self.id.unwrap_or(0),
                    request.algorithm,
                    CountedBy::Redis,
                ),
            };
        }
        Some(raw)
    }
}

// Calls in flight (`slot.rs`, `scripts/slot.lua`): a check that takes a slot runs its
// algorithm's script wrapped by the slot's part, with the key's slots as a second key and
// the slot as the last argument.
impl Invocation<'_> {
    /// The EVALSHA (`by_hash`) or EVAL of a check that takes the slot `ask` asks for.
    #[cold]
    fn taking_slot(&self, ask: &SlotAsk, by_hash: bool) -> Cmd {
        let request = self.request;
        let (source, script) = slot_script(request);
        let mut cmd = evalsha_or_eval(by_hash, source, script);
        cmd.arg(2)
            .arg(request.key)
            .arg(slots_key(request.key))
            .arg(Numbers(request));
        self.optional_args(&mut cmd);
        let mut slot = Vec::with_capacity(32);
        slot.extend_from_slice(&(ask.max as f64).to_le_bytes());
        slot.extend_from_slice(&(ask.lease_us as f64).to_le_bytes());
        slot.extend_from_slice(&ask.id.0);
        cmd.arg(slot);
        cmd
    }

    /// The answer of a check that takes a slot: every slot taken (`{-1, in_use}`), a slot
    /// taken without rules (`{-2, free}`), or the rules' answer. Its receipt names Redis,
    /// where the slot is kept.
    #[cold]
    fn decode_taking_slot(&self, ask: &SlotAsk, reply: &Value) -> Option<RawDecision> {
        let request = self.request;
        let mut raw = match reply {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(-1), Value::Int(_)] => return Some(ask.full(request.rules)),
                [Value::Int(-2), Value::Int(free)] if request.rules.is_empty() => {
                    ask.taken(u64::try_from(*free).ok()?)
                }
                _ => self.decode_rules(reply)?,
            },
            _ => self.decode_rules(reply)?,
        };
        raw.receipt.counted_by = CountedBy::Redis;
        Some(raw)
    }

    /// [`decode`](Self::decode) of the rules' answer alone.
    fn decode_rules(&self, reply: &Value) -> Option<RawDecision> {
        (!self.request.rules.is_empty())
            .then(|| {
                Invocation {
                    request: &Request {
                        slot: None,
                        ..*self.request
                    },
                    id: self.id,
                }
                .decode(reply)
            })
            .flatten()
    }
}

/// The source and script of a check that takes a slot: the algorithm's script as the
/// function `check`, then `slot.lua`; without rules, `slot.lua` alone. Composed and
/// hashed once per process.
/// `EVALSHA` and the hash of `script` (`by_hash`), or `EVAL` and its `source`: a command's
/// head, its keys and arguments to follow.
fn evalsha_or_eval(by_hash: bool, source: &str, script: &Script) -> Cmd {
    let mut cmd = match by_hash {
        true => redis::cmd("EVALSHA"),
        false => redis::cmd("EVAL"),
    };
    match by_hash {
        true => cmd.arg(script.get_hash()),
        false => cmd.arg(source),
    };
    cmd
}

fn slot_script(request: &Request<'_>) -> &'static (String, Script) {
    static SCRIPTS: LazyLock<[(String, Script); 5]> = LazyLock::new(|| {
        [
            sources::SLIDING_LOG_SLOT,
            sources::FIXED_WINDOW_SLOT,
            sources::SLIDING_WINDOW_SLOT,
            sources::TOKEN_BUCKET_SLOT,
            sources::SLOT_ALONE,
        ]
        .map(|source| (source.to_string(), Script::new(source)))
    });
    match request.rules.is_empty() {
        true => &SCRIPTS[4],
        false => &SCRIPTS[request.algorithm as usize],
    }
}

/// The key holding the slots of `key`, in the same hash slot (so a Cluster node serves
/// both in one script): `key` then `:slots` when `key` has a hash tag (a first `{`, then a
/// `}` after it with text between), whose slot it keeps; else `{key}:slots`, whose tag is
/// the whole of `key`, when `key` holds no `}`. A key with a `}` but no hash tag (a rare
/// shape: keys built by the attribute have none) gets `key:slots:N`, the first `N` that
/// hashes to the slot of `key`.
pub(crate) fn slots_key(key: &str) -> String {
    sibling_key(key, "slots")
}

/// The draws of a string-state algorithm that `key`'s records count and have not had
/// back (`scripts/drawn.lua`): a hash beside `key`, in its hash slot, deleted with it by a
/// reset.
pub(crate) fn drawn_key(key: &str) -> String {
    sibling_key(key, "drawn")
}

/// A key beside `key` in its hash slot, named by `suffix`, as [`slots_key`] names the
/// key's slots (`suffix` in place of `slots`).
fn sibling_key(key: &str, suffix: &str) -> String {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').is_some_and(|open| {
        let rest = &bytes[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .is_some_and(|close| close > 0)
    });
    if tagged {
        return format!("{key}:{suffix}");
    }
    if !key.contains('}') {
        return format!("{{{key}}}:{suffix}");
    }
    let slot = super::cluster::slot(bytes);
    (0u64..)
        .map(|n| format!("{key}:{suffix}:{n}"))
        .find(|candidate| super::cluster::slot(candidate.as_bytes()) == slot)
        .expect("some suffix hashes to every slot")
}

/// A draw's give-back (`backend::GiveBack`), as one script: the sliding log's
/// (`scripts/sliding_log_give_back.lua`) names the draw's members by its id; the others'
/// (`scripts/give_back.lua`) take the draw's name out of the key's draws
/// (`scripts/drawn.lua`), and change nothing when it is not there. Either way, sent twice
/// it changes the key once, so it is re-sent like a sliding-log check. Returns the
/// `EVALSHA`, then NOSCRIPT's `EVAL`.
pub(crate) fn give_back(give_back: &crate::backend::GiveBack<'_>) -> [Cmd; 2] {
    static SCRIPTS: LazyLock<[Script; 4]> =
        LazyLock::new(|| Algorithm::ALL.map(|algorithm| Script::new(give_back_source(algorithm))));
    let receipt = &give_back.receipt;
    let returned = give_back.returned();
    let algorithm = receipt.algorithm;
    let mut numbers = Vec::with_capacity(8 * (3 + 2 * give_back.rules.len()));
    let head = [returned.at_us, returned.units, 0];
    let doubles = head
        .iter()
        .map(|&n| n as f64)
        .chain(rule_numbers(give_back.rules));
    for n in doubles {
        numbers.extend_from_slice(&n.to_le_bytes());
    }
    let id = check_id(receipt.id);
    let commands = [true, false].map(|by_hash| {
        let mut cmd = match by_hash {
            true => redis::cmd("EVALSHA"),
            false => redis::cmd("EVAL"),
        };
        match by_hash {
            true => cmd.arg(SCRIPTS[algorithm as usize].get_hash()),
            false => cmd.arg(give_back_source(algorithm)),
        };
        if algorithm == Algorithm::SlidingLog {
            let last_us = returned
                .last_spend_us
                .clamp(returned.at_us, returned.held_until_us());
            let spent = [
                returned.used_units,
                returned.units,
                returned.used_calls,
                returned.calls,
                last_us,
            ];
            let spent: Vec<u8> = spent
                .iter()
                .flat_map(|&n| (n as f64).to_le_bytes())
                .collect();
            cmd.arg(1)
                .arg(give_back.key)
                .arg(&numbers[..])
                .arg(&id[..])
                .arg(spent);
        } else {
            let mut calls = Vec::with_capacity(16);
            calls.extend_from_slice(&(returned.calls as f64).to_le_bytes());
            calls.extend_from_slice(&(returned.id as f64).to_le_bytes());
            // The draw's name among the key's draws (`scripts/drawn.lua`).
            let witness = (returned.id as f64).to_le_bytes();
            let name = match has_witness(algorithm, give_back.rules) {
                true => &witness[..],
                false => &id[..],
            };
            cmd.arg(2)
                .arg(give_back.key)
                .arg(drawn_key(give_back.key))
                .arg(&numbers[..])
                .arg(calls)
                .arg(name);
        }
        cmd
    });
    commands
}

/// Whether a draw of `rules` by `algorithm` is named by its witness (the token bucket's
/// first rule counting in windows: `scripts/token_bucket.lua`), rather than by its
/// check's id.
fn has_witness(algorithm: Algorithm, rules: &[Rule]) -> bool {
    algorithm == Algorithm::TokenBucket && rules.iter().any(|rule| rule.calendar().is_none())
}

/// The give-back script of `algorithm`.
fn give_back_source(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::SlidingLog => sources::SLIDING_LOG_GIVE_BACK,
        Algorithm::FixedWindow => sources::FIXED_WINDOW_GIVE_BACK,
        Algorithm::SlidingWindow => sources::SLIDING_WINDOW_GIVE_BACK,
        Algorithm::TokenBucket => sources::TOKEN_BUCKET_GIVE_BACK,
    }
}

/// A slot's renewal (`scripts/slot_renew.lua`) and NOSCRIPT's EVAL of it.
pub(crate) fn renew_slot(slots_key: &str, id: SlotId, lease_us: u64, now_us: u64) -> [Cmd; 2] {
    static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(sources::SLOT_RENEW));
    let mut numbers = Vec::with_capacity(16);
    numbers.extend_from_slice(&(now_us as f64).to_le_bytes());
    numbers.extend_from_slice(&(lease_us as f64).to_le_bytes());
    let mut evalsha = redis::cmd("EVALSHA");
    evalsha.arg(SCRIPT.get_hash());
    let mut eval = redis::cmd("EVAL");
    eval.arg(sources::SLOT_RENEW);
    for cmd in [&mut evalsha, &mut eval] {
        cmd.arg(1).arg(slots_key).arg(&numbers[..]).arg(&id.0[..]);
    }
    [evalsha, eval]
}

/// The count of the slots held (`scripts/slots_in_use.lua`) and NOSCRIPT's EVAL of it.
pub(crate) fn slots_in_use(slots_key: &str, now_us: u64) -> [Cmd; 2] {
    static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(sources::SLOTS_IN_USE));
    let mut evalsha = redis::cmd("EVALSHA");
    evalsha.arg(SCRIPT.get_hash());
    let mut eval = redis::cmd("EVAL");
    eval.arg(sources::SLOTS_IN_USE);
    for cmd in [&mut evalsha, &mut eval] {
        cmd.arg(1).arg(slots_key).arg(now_us);
    }
    [evalsha, eval]
}

/// The numbering of this process's consuming sliding-log checks.
fn next_check() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The id of the consuming sliding-log check numbered `n`: a random prefix per process,
/// then `n`. Unique across processes with near certainty (a 64-bit random prefix), and
/// within one process for 2^64 checks. Its units are the members `id`, `id .. 2`, ...,
/// `id .. cost` (see `sliding_log_add.lua`).
fn check_id(n: u64) -> [u8; 16] {
    static PREFIX: LazyLock<u64> = LazyLock::new(random::u64);
    let mut id = [0; 16];
    id[..8].copy_from_slice(&PREFIX.to_le_bytes());
    id[8..].copy_from_slice(&n.to_le_bytes());
    id
}

/// The numbers of a check as the scripts read them, in one argument: the call (0 to peek,
/// 1 to consume, 2 to consume and answer the time the check was counted at) plus
/// 4 × block_for in µs, now in µs (0: the server's TIME), the cost, then each rule's
/// count and window in µs, every one a little-endian `f64` (exact: each stays below 2^53;
/// a cost beyond it is above any count however it rounds). Redis parses text numbers
/// slower than a check's own arithmetic, and keeps an argument of at most 44 bytes (one
/// rule's) in one allocation.
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
        // 2 asks a consuming check for the time it was counted at, which only the
        // string-state algorithms' refunds need (the sliding log's name its entries).
        let answer_at = request.refundable && request.algorithm != Algorithm::SlidingLog;
        let call = match (request.consume, answer_at) {
            (false, _) => 0,
            _ if request.draw.is_some() => 3,
            (true, false) => 1,
            (true, true) => 2,
        };
        // 0: no block, as the scripts read it; negated for an escalating lock-out, whose
        // schedule follows in an argument of its own (`Schedule`).
        let first = match request.block_for_us.map(Lockout::of) {
            None => call as f64,
            Some(Lockout::Fixed(us)) => (call + 4 * us) as f64,
            Some(escalating) => -((call + 4 * escalating.duration_us(1)) as f64),
        };
        let head = [first, request.now_us as f64, request.cost.get() as f64];
        write_doubles(out, &head, request.rules);
    }
}

/// The schedule of a check's escalating lock-out, the argument after its id: each
/// duration in µs, a little-endian `f64` (block.lua).
struct Schedule(&'static [Duration]);

impl Schedule {
    /// The schedule `request` carries, if any.
    fn of(request: &Request<'_>) -> Option<Schedule> {
        match request.block_for_us.map(Lockout::of)? {
            Lockout::Escalating(schedule) => Some(Schedule(schedule)),
            Lockout::Fixed(_) => None,
        }
    }
}

impl ToRedisArgs for Schedule {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        let mut arg = out.writer_for_next_arg();
        for &duration in self.0 {
            let us = crate::clock::micros(duration) as f64;
            arg.write_all(&us.to_le_bytes()).expect("writing to memory");
        }
    }
}

/// A draw's numbers as the scripts read them (ARGV[5], `scripts/preamble.lua`): its calls
/// and the hold it asks for, little-endian `f64`s.
fn draw_numbers(draw: &crate::backend::Draw) -> [u8; 16] {
    let mut numbers = [0; 16];
    numbers[..8].copy_from_slice(&(draw.calls.get() as f64).to_le_bytes());
    numbers[8..].copy_from_slice(&(draw.hold_us as f64).to_le_bytes());
    numbers
}

/// Each rule's count and window in µs, in turn; the count negated for a rule counting
/// calls ([`Rule::signed_count`]).
fn rule_numbers(rules: &[Rule]) -> impl Iterator<Item = f64> + '_ {
    rules
        .iter()
        .flat_map(|r| [r.signed_count(), r.script_window()])
}

/// `head` then `rules` as one argument of little-endian `f64`s, written straight into the
/// command's buffer, which cannot fail.
fn write_doubles<W: ?Sized + RedisWrite>(out: &mut W, head: &[f64], rules: &[Rule]) {
    let mut arg = out.writer_for_next_arg();
    let numbers = head.iter().copied().chain(rule_numbers(rules));
    for n in numbers {
        arg.write_all(&n.to_le_bytes()).expect("writing to memory");
    }
}

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

/// The refund scripts of the string-state algorithms, hashed once per process.
fn refund_script(algorithm: Algorithm) -> Option<&'static Script> {
    static SCRIPTS: LazyLock<[Script; 3]> = LazyLock::new(|| {
        [
            sources::FIXED_WINDOW_REFUND,
            sources::SLIDING_WINDOW_REFUND,
            sources::TOKEN_BUCKET_REFUND,
        ]
        .map(Script::new)
    });
    match algorithm {
        Algorithm::SlidingLog => None,
        Algorithm::FixedWindow => Some(&SCRIPTS[0]),
        Algorithm::SlidingWindow => Some(&SCRIPTS[1]),
        Algorithm::TokenBucket => Some(&SCRIPTS[2]),
    }
}

/// The commands that give back what one decision took of a key (see
/// [`Receipt`]): for the sliding log a `ZREM` of exactly its members, which a second run
/// finds gone; for the other algorithms their refund script, which gives back only what
/// the key still holds in the same window (or has not refilled), and which a second run
/// would give back again.
pub(crate) struct Refund<'r> {
    key: &'r str,
    rules: &'r [Rule],
    receipt: Receipt,
    /// An explicit time in µs since the epoch, for differential tests; `None`: `TIME`.
    now_us: Option<u64>,
}

#[allow(dead_code)]
impl<'r> Refund<'r> {
    /// The refund of `receipt` (of a decision Redis made for `key` and `rules`); `None`
    /// when there is nothing to give back: a decision that took nothing, or that the
    /// embedded backend counted.
    pub fn new(
        key: &'r str,
        rules: &'r [Rule],
        receipt: &Receipt,
        now_us: Option<u64>,
    ) -> Option<Self> {
        (!receipt.is_empty() && receipt.counted_by == CountedBy::Redis).then_some(Refund {
            key,
            rules,
            receipt: *receipt,
            now_us,
        })
    }

    /// Whether sending the refund twice gives back once: only the sliding log's, which
    /// removes members by name. Any other is never re-sent after it may have run.
    pub fn rerun_is_harmless(&self) -> bool {
        self.receipt.algorithm == Algorithm::SlidingLog
    }

    /// The sliding log's refund script, for rules counting in calendar periods, whose
    /// counters a `ZREM` does not reach.
    fn sliding_log_script(&self) -> Option<&'static Script> {
        static SCRIPT: LazyLock<Script> =
            LazyLock::new(|| Script::new(sources::SLIDING_LOG_REFUND));
        let calendar = self.rules.iter().any(|rule| rule.calendar().is_some());
        (self.receipt.algorithm == Algorithm::SlidingLog && calendar).then(|| &*SCRIPT)
    }

    /// The command to send first: the `ZREM`, or the `EVALSHA` of the refund script.
    pub fn command(&self) -> Cmd {
        if let Some(script) = self.sliding_log_script() {
            let mut evalsha = redis::cmd("EVALSHA");
            evalsha
                .arg(script.get_hash())
                .arg(1)
                .arg(self.key)
                .arg(RefundNumbers(self))
                .arg(&check_id(self.receipt.id)[..]);
            return evalsha;
        }
        let Some(script) = refund_script(self.receipt.algorithm) else {
            return self.zrem();
        };
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg(script.get_hash())
            .arg(1)
            .arg(self.key)
            .arg(RefundNumbers(self));
        evalsha
    }

    /// The refund as an `EVAL` carrying the script's body, for a server that answered the
    /// `EVALSHA` with NOSCRIPT (the sliding log's `ZREM` needs no script).
    pub fn eval(&self) -> Option<Cmd> {
        if self.sliding_log_script().is_some() {
            let mut eval = redis::cmd("EVAL");
            eval.arg(sources::SLIDING_LOG_REFUND)
                .arg(1)
                .arg(self.key)
                .arg(RefundNumbers(self))
                .arg(&check_id(self.receipt.id)[..]);
            return Some(eval);
        }
        let source = match self.receipt.algorithm {
            Algorithm::SlidingLog => return None,
            Algorithm::FixedWindow => sources::FIXED_WINDOW_REFUND,
            Algorithm::SlidingWindow => sources::SLIDING_WINDOW_REFUND,
            Algorithm::TokenBucket => sources::TOKEN_BUCKET_REFUND,
        };
        let mut eval = redis::cmd("EVAL");
        eval.arg(source)
            .arg(1)
            .arg(self.key)
            .arg(RefundNumbers(self));
        Some(eval)
    }

    /// `ZREM key id id..2 ... id..cost` (and `id..c`, its call, under rules counting
    /// calls): the check's members, as `sliding_log_add.lua` names them.
    fn zrem(&self) -> Cmd {
        let id = check_id(self.receipt.id);
        let mut zrem = redis::cmd("ZREM");
        zrem.arg(self.key).arg(&id[..]);
        let mut member = id.to_vec();
        for k in 2..=self.receipt.cost {
            member.truncate(id.len());
            member.extend_from_slice(k.to_string().as_bytes());
            zrem.arg(&member[..]);
        }
        // The check's one call, which rules counting calls counted.
        if self.rules.iter().any(Rule::counts_calls) {
            member.truncate(id.len());
            member.push(b'c');
            zrem.arg(&member[..]);
        }
        zrem
    }
}

/// The settle scripts (`settle.lua`, `sliding_log_settle.lua`), hashed once per process.
fn settle_script(algorithm: Algorithm) -> &'static Script {
    static SCRIPTS: LazyLock<[Script; 4]> =
        LazyLock::new(|| Algorithm::ALL.map(|algorithm| Script::new(settle_source(algorithm))));
    &SCRIPTS[algorithm as usize]
}

/// A settle script's body: the settle, then the algorithm's check script, which answers
/// as a peek.
fn settle_source(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::SlidingLog => sources::SLIDING_LOG_SETTLE,
        Algorithm::FixedWindow => sources::FIXED_WINDOW_SETTLE,
        Algorithm::SlidingWindow => sources::SLIDING_WINDOW_SETTLE,
        Algorithm::TokenBucket => sources::TOKEN_BUCKET_SETTLE,
    }
}

/// The command that settles what one decision reserved of a key at `actual` units and
/// answers, in the same round trip, as a peek of cost 1 of the key's rules (see
/// `scripts/settle.lua`). The sliding log's settles by name, so a second run changes
/// nothing; the others' would settle again, and are never re-sent once they may have run.
pub(crate) struct Settle<'r> {
    /// The peek that answers.
    peek: Request<'r>,
    receipt: Receipt,
    actual: u64,
}

impl<'r> Settle<'r> {
    /// The settle of `receipt` (of a decision Redis made for `peek.key` and `peek.rules`);
    /// `None` when there is nothing to settle: a decision that took nothing, or that the
    /// embedded backend counted. `peek` is the peek of cost 1 that answers.
    pub fn new(peek: Request<'r>, receipt: &Receipt, actual: u64) -> Option<Self> {
        (!receipt.is_empty() && receipt.counted_by == CountedBy::Redis).then_some(Settle {
            peek,
            receipt: *receipt,
            actual,
        })
    }

    /// Whether sending the settle twice settles once: only the sliding log's.
    pub fn rerun_is_harmless(&self) -> bool {
        self.receipt.algorithm == Algorithm::SlidingLog
    }

    /// The `EVALSHA` of the settle script; with `source`, the `EVAL` of its body instead.
    pub fn command(&self, source: bool) -> Cmd {
        let algorithm = self.receipt.algorithm;
        let mut cmd = match source {
            false => {
                let mut evalsha = redis::cmd("EVALSHA");
                evalsha.arg(settle_script(algorithm).get_hash());
                evalsha
            }
            true => {
                let mut eval = redis::cmd("EVAL");
                eval.arg(settle_source(algorithm));
                eval
            }
        };
        cmd.arg(1).arg(self.peek.key).arg(Numbers(&self.peek));
        let reserved = self.receipt.cost;
        if algorithm == Algorithm::SlidingLog {
            cmd.arg(&check_id(self.receipt.id)[..]);
            let numbers: Vec<u8> = [self.receipt.at_us, reserved, self.actual]
                .iter()
                .flat_map(|&n| (n as f64).to_le_bytes())
                .collect();
            cmd.arg(numbers);
        } else {
            let take = self.actual > reserved;
            cmd.arg(if take { "+" } else { "-" });
            let head = [
                self.receipt.at_us,
                self.actual.abs_diff(reserved),
                self.peek.now_us,
            ];
            let mut numbers: Vec<u8> = head
                .iter()
                .flat_map(|&n| (n as f64).to_le_bytes())
                .collect();
            // Every rule, so that each finds its record at its place; rules counting calls
            // keep their one (settle.lua).
            for rule in self.peek.rules {
                numbers.extend_from_slice(&rule.signed_count().to_le_bytes());
                numbers.extend_from_slice(&rule.script_window().to_le_bytes());
            }
            cmd.arg(numbers).arg(reserved);
        }
        cmd
    }

    /// The peek's answer.
    pub fn decode(&self, reply: &Value) -> Option<RawDecision> {
        decode(reply, self.peek.rules).map(|(raw, _)| raw)
    }
}

/// A refund's numbers, as `refund.lua` reads them: the time the check was counted at, its
/// cost, now in µs (0: `TIME`), then each rule's count and window in µs; every one a
/// little-endian `f64`.
struct RefundNumbers<'a>(&'a Refund<'a>);

impl ToRedisArgs for RefundNumbers<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        let RefundNumbers(refund) = self;
        let head = [
            refund.receipt.at_us as f64,
            refund.receipt.cost as f64,
            refund.now_us.unwrap_or(0) as f64,
        ];
        write_doubles(out, &head, refund.rules);
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;

    use super::*;

    fn args(cmd: &Cmd) -> Vec<Vec<u8>> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => Vec::new(),
            })
            .collect()
    }

    fn request(rules: &[Rule], algorithm: Algorithm, consume: bool) -> Request<'_> {
        Request {
            algorithm,
            cost: NonZeroU64::new(2).unwrap(),
            refundable: false,
            ..Request::new("k", rules, consume)
        }
    }

    #[test]
    fn every_reply_form_decodes() {
        let rules = [Rule::per_second(10), Rule::per_minute(100)];
        let figures = |reply: Value| decode(&reply, &rules).unwrap().0;
        // Rule 1 (count 100) with 57 remaining, free again in 12.5 s.
        let short = Value::Int((12_500_000 * 101 + 57) * 64 + 1);
        assert_eq!(
            (decode(&short, &rules).unwrap()),
            (
                RawDecision {
                    allowed: true,
                    rule_index: 1,
                    remaining: 57,
                    reset_after_us: 12_500_000,
                    retry_after_us: 0,
                    receipt: Receipt::NONE,
                    crossed: None,
                },
                None
            )
        );
        let long = Value::Array([0, 0, 0, 900, 400].map(Value::Int).to_vec());
        let denied = figures(long);
        assert_eq!(
            (denied.allowed, denied.reset_after_us, denied.retry_after_us),
            (false, 900, 400)
        );
        // A peek of a fresh key: all 10 left.
        let fresh = figures(Value::Int((1_000_000 * 11 + 10) * 64));
        assert_eq!((fresh.remaining, fresh.reset_after_us), (10, 1_000_000));
        let never = figures(Value::Array([0, 1, 3, 0, -1].map(Value::Int).to_vec()));
        assert_eq!(
            (never.remaining, never.retry_after_us),
            (3, RawDecision::NEVER)
        );
        assert_eq!(never.into_decision(&rules).retry_after, None);
        // With the time the check was counted at: packed with the short form, or sixth.
        let at = 1_700_000_000_123_456u64;
        let packed = [((12_500_000u64 * 101 + 57) * 64 + 1) as f64, at as f64]
            .map(f64::to_le_bytes)
            .concat();
        let (raw, counted_at) = decode(&Value::BulkString(packed), &rules).unwrap();
        assert_eq!((raw.remaining, counted_at), (57, Some(at)));
        let long = Value::Array([1, 0, 3, 900, 0, at as i64].map(Value::Int).to_vec());
        let (raw, counted_at) = decode(&long, &rules).unwrap();
        assert_eq!(
            (raw.allowed, raw.remaining, counted_at),
            (true, 3, Some(at))
        );
    }

    #[test]
    fn an_admitted_consuming_check_answers_with_its_receipt() {
        let rules = [Rule::per_second(10)];
        let at = 1_700_000_000_123_456u64;
        let packed = [((999u64 * 11 + 8) * 64) as f64, at as f64]
            .map(f64::to_le_bytes)
            .concat();
        let check = request(&rules, Algorithm::FixedWindow, true);
        let raw = Invocation::new(&check)
            .decode(&Value::BulkString(packed.clone()))
            .unwrap();
        let expected = Receipt {
            cost: 2,
            at_us: at,
            // An id of its own, so that decisions alike are settled once each.
            id: raw.receipt.id,
            algorithm: Algorithm::FixedWindow,
            counted_by: CountedBy::Redis,
        };
        assert_eq!(raw.receipt, expected);
        let again = Invocation::new(&check)
            .decode(&Value::BulkString(packed.clone()))
            .unwrap();
        assert_ne!(again.receipt, raw.receipt, "two checks alike, two receipts");
        // A sliding-log receipt names the check's id.
        let check = request(&rules, Algorithm::SlidingLog, true);
        let invocation = Invocation::new(&check);
        let raw = invocation.decode(&Value::Int((999 * 11 + 8) * 64)).unwrap();
        assert_eq!(Some(raw.receipt.id), invocation.id);
        let sent = args(&invocation.evalsha());
        assert_eq!(sent[5], check_id(raw.receipt.id));
        // A denial, or a peek, takes nothing.
        let denied = Value::Array([0, 0, 0, 900, 400].map(Value::Int).to_vec());
        assert!(invocation.decode(&denied).unwrap().receipt.is_empty());
        let peek = request(&rules, Algorithm::SlidingLog, false);
        let raw = Invocation::new(&peek).decode(&Value::Int(64 * 11)).unwrap();
        assert!(raw.receipt.is_empty());
    }

    #[test]
    fn a_consuming_sliding_log_check_carries_an_id_of_its_own() {
        let rules = [Rule::per_second(10)];
        let sent = |algorithm, consume| {
            let request = request(&rules, algorithm, consume);
            let invocation = Invocation::new(&request);
            (args(&invocation.evalsha()), args(&invocation.eval()))
        };
        let (first, first_eval) = sent(Algorithm::SlidingLog, true);
        let (second, _) = sent(Algorithm::SlidingLog, true);
        assert_eq!(first.len(), 6);
        assert_eq!(first[5].len(), 16);
        assert_eq!(first_eval[5], first[5], "the EVAL carries the EVALSHA's id");
        assert_ne!(first[5], second[5], "a fresh id per check");
        assert_eq!(first[5][..8], second[5][..8], "one prefix per process");
        assert_eq!(sent(Algorithm::SlidingLog, false).0.len(), 5);
        assert_eq!(sent(Algorithm::FixedWindow, true).0.len(), 5);
        assert!(rerun_is_harmless(Algorithm::SlidingLog));
        assert!(!rerun_is_harmless(Algorithm::TokenBucket));
    }

    #[test]
    fn a_sliding_log_refund_removes_exactly_its_members_and_may_be_sent_again() {
        let rules = [Rule::per_second(10)];
        let receipt = Receipt {
            cost: 3,
            at_us: 0,
            id: 7,
            algorithm: Algorithm::SlidingLog,
            counted_by: CountedBy::Redis,
        };
        let refund = Refund::new("k", &rules, &receipt, None).unwrap();
        assert!(refund.rerun_is_harmless());
        assert!(refund.eval().is_none());
        let id = check_id(7).to_vec();
        let member = |k: &str| [&id[..], k.as_bytes()].concat();
        assert_eq!(
            args(&refund.command()),
            [
                b"ZREM".to_vec(),
                b"k".to_vec(),
                id.clone(),
                member("2"),
                member("3")
            ]
        );
    }

    #[test]
    fn a_counters_refund_runs_its_script_and_is_not_sent_twice() {
        let rules = [Rule::per_second(10), Rule::per_minute(100)];
        for algorithm in [
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
            Algorithm::TokenBucket,
        ] {
            let receipt = Receipt {
                cost: 2,
                at_us: 1_700_000_000_000_000,
                id: 0,
                algorithm,
                counted_by: CountedBy::Redis,
            };
            let refund = Refund::new("k", &rules, &receipt, None).unwrap();
            assert!(!refund.rerun_is_harmless());
            let sent = args(&refund.command());
            assert_eq!(sent[0], b"EVALSHA");
            assert_eq!(
                sent[1],
                refund_script(algorithm).unwrap().get_hash().as_bytes()
            );
            let numbers: Vec<u64> = sent[4]
                .chunks(8)
                .map(|b| f64::from_le_bytes(b.try_into().unwrap()) as u64)
                .collect();
            assert_eq!(
                numbers,
                [1_700_000_000_000_000, 2, 0, 10, 1_000_000, 100, 60_000_000]
            );
            assert_eq!(args(&refund.eval().unwrap())[4], sent[4]);
        }
    }

    #[test]
    fn nothing_to_refund_sends_nothing() {
        let rules = [Rule::per_second(10)];
        assert!(Refund::new("k", &rules, &Receipt::NONE, None).is_none());
        let counted_in_memory = Receipt {
            cost: 1,
            counted_by: CountedBy::Memory,
            ..Receipt::NONE
        };
        assert!(Refund::new("k", &rules, &counted_in_memory, None).is_none());
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
        let decode = |reply: Value| decode(&reply, &rules);
        assert_eq!(decode(Value::Int(64 + 1)), None); // rule 1 of 1
        assert_eq!(decode(Value::Int(-1)), None);
        assert_eq!(
            decode(Value::Array([2, 0, 0, 0, 0].map(Value::Int).to_vec())),
            None
        );
        assert_eq!(decode(Value::Array(vec![Value::Int(1)])), None);
        assert_eq!(decode(Value::BulkString(vec![0; 15])), None);
        assert_eq!(decode(Value::Nil), None);
    }
}
