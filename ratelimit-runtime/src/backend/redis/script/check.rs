//! A check's command: its `EVALSHA` (or `EVAL`), its arguments, and how its answer is read.

use std::io::Write;
use std::num::NonZeroU64;
use std::time::Duration;

use redis::{Cmd, RedisWrite, ToRedisArgs, Value};

use super::{
    check_id, decode, drawn_key, has_witness, lua, next_check, slots_key, write_doubles, Op,
    SLOT_ALONE,
};
use crate::backend::Request;
use crate::concurrency::SlotAsk;
use crate::decision::{CountedBy, RawDecision, Receipt};
use crate::lockout::{Lockout, Packed};
use crate::Algorithm;

/// One check's commands and how to read its answer. A consuming sliding-log check gets
/// its id here, once: its EVALSHA, the EVAL sent instead when the server does not know
/// the script, and a re-sent command all carry the same, and its answer's receipt names
/// it.
pub(crate) struct Invocation<'r> {
    pub(super) request: &'r Request<'r>,
    /// The counter part of the check's id (see [`check_id`]).
    pub(super) id: Option<u64>,
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

    /// The EVALSHA of the check.
    pub fn evalsha(&self) -> Cmd {
        self.command(true)
    }

    /// The same check as an `EVAL` carrying the script's body, for a server that does not
    /// know the script (first use, `SCRIPT FLUSH`, a restart, a failover).
    pub fn eval(&self) -> Cmd {
        self.command(false)
    }

    /// The check's `EVALSHA` (`by_hash`) or `EVAL`, built directly, once, in a buffer of its
    /// final size: a `ScriptInvocation` would collect every argument in a Vec of its own and
    /// then copy them all into a command, and a growing buffer would be reallocated several
    /// times.
    fn command(&self, by_hash: bool) -> Cmd {
        let request = self.request;
        if let Some(ask) = request.slot {
            return self.taking_slot(ask, by_hash);
        }
        // The common check: its id, if any, is the last argument (see `optional_args`).
        let id_len = if self.id.is_some() { 16 } else { 0 };
        let size = 1 + request.key.len() + Numbers::len(request) + id_len;
        let args = 3 + usize::from(self.id.is_some());
        let mut cmd = lua(Op::Check, request.algorithm).command_for(by_hash, args, size);
        self.keys(&mut cmd);
        cmd.arg(Numbers(request));
        self.optional_args(&mut cmd);
        cmd
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
            let id = match (request.draw, request.algorithm) {
                (Some(_), algorithm) if has_witness(algorithm, request.rules) => raw.receipt.id,
                (Some(_), _) => self.id.unwrap_or(0),
                (None, algorithm) => Receipt::check_id(algorithm, self.id.unwrap_or(0)),
            };
            raw.receipt = Receipt::new(cost, at_us, id, request.algorithm, CountedBy::Redis);
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
        let lua = match request.rules.is_empty() {
            true => &SLOT_ALONE,
            false => lua(Op::TakingSlot, request.algorithm),
        };
        let mut cmd = lua.command(by_hash);
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

/// The numbers of a check as the scripts read them, in one argument: the call (0 to peek,
/// 1 to consume, 2 to consume and answer the time the check was counted at) plus
/// 4 × block_for in µs, now in µs (0: the server's TIME), the cost, then each rule's
/// count and window in µs, every one a little-endian `f64` (exact: each stays below 2^53;
/// a cost beyond it is above any count however it rounds). Redis parses text numbers
/// slower than a check's own arithmetic, and keeps an argument of at most 44 bytes (one
/// rule's) in one allocation.
pub(super) struct Numbers<'a>(pub(super) &'a Request<'a>);

impl Numbers<'_> {
    /// The argument's size in bytes.
    pub(super) fn len(request: &Request<'_>) -> usize {
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
        let first = match request.lockout.map(Packed::lockout) {
            None => call as f64,
            Some(fixed @ Lockout::For(_)) => (call + 4 * fixed.duration_us(1)) as f64,
            Some(escalating) => -((call + 4 * escalating.duration_us(1)) as f64),
        };
        // 0: the server's clock, as the scripts read it.
        let now_us = request.now_us.map_or(0, NonZeroU64::get);
        let head = [first, now_us as f64, request.cost.get() as f64];
        write_doubles(out, &head, request.rules);
    }
}

/// The schedule of a check's escalating lock-out, the argument after its id: each
/// duration in µs, a little-endian `f64` (block.lua).
pub(super) struct Schedule(&'static [Duration]);

impl Schedule {
    /// The schedule `request` carries, if any.
    pub(super) fn of(request: &Request<'_>) -> Option<Schedule> {
        match request.lockout?.lockout() {
            Lockout::Escalating(schedule) => Some(Schedule(schedule)),
            Lockout::For(_) => None,
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
pub(super) fn draw_numbers(draw: &crate::backend::Draw) -> [u8; 16] {
    let mut numbers = [0; 16];
    numbers[..8].copy_from_slice(&(draw.calls.get() as f64).to_le_bytes());
    numbers[8..].copy_from_slice(&(draw.hold_us as f64).to_le_bytes());
    numbers
}
