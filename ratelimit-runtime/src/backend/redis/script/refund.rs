//! What follows a check: a refund of what it took ([`Refund`]), a settle of what it
//! reserved ([`Settle`]), a draw's give-back ([`give_back`]).

use std::num::NonZeroU64;

use redis::{Cmd, RedisWrite, ToRedisArgs, Value};

use super::{
    check_id, decode, drawn_key, has_witness, lua, rule_numbers, write_doubles, Lua, Numbers, Op,
};
use crate::backend::{Refund, Settle};
use crate::decision::RawDecision;
use crate::{Algorithm, Rule};

/// A draw's give-back (`backend::GiveBack`), as one script: the sliding log's
/// (`scripts/sliding_log_give_back.lua`) names the draw's members by its id; the others'
/// (`scripts/give_back.lua`) take the draw's name out of the key's draws
/// (`scripts/drawn.lua`), and change nothing when it is not there. Either way, sent twice
/// it changes the key once, so it is re-sent like a sliding-log check. Returns the
/// `EVALSHA`, then NOSCRIPT's `EVAL`.
pub(crate) fn give_back(give_back: &crate::backend::GiveBack) -> [Cmd; 2] {
    let receipt = &give_back.receipt;
    let returned = give_back.returned();
    let algorithm = receipt.algorithm;
    let mut numbers = Vec::with_capacity(8 * (3 + 2 * give_back.rules.len()));
    let head = [returned.at_us, returned.units, 0];
    let doubles = head
        .iter()
        .map(|&n| n as f64)
        .chain(rule_numbers(&give_back.rules));
    for n in doubles {
        numbers.extend_from_slice(&n.to_le_bytes());
    }
    let id = check_id(receipt.id);
    let commands = [true, false].map(|by_hash| {
        let mut cmd = lua(Op::GiveBack, algorithm).command(by_hash);
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
                .arg(&*give_back.key)
                .arg(&numbers[..])
                .arg(&id[..])
                .arg(spent);
        } else {
            let mut calls = Vec::with_capacity(16);
            calls.extend_from_slice(&(returned.calls as f64).to_le_bytes());
            calls.extend_from_slice(&(returned.id as f64).to_le_bytes());
            // The draw's name among the key's draws (`scripts/drawn.lua`): the token
            // bucket's is its witness and the time it was counted at.
            let mut witness = [0; 16];
            witness[..8].copy_from_slice(&(returned.id as f64).to_le_bytes());
            witness[8..].copy_from_slice(&(returned.at_us as f64).to_le_bytes());
            let name = match has_witness(algorithm, &give_back.rules) {
                true => &witness[..],
                false => &id[..],
            };
            cmd.arg(2)
                .arg(&*give_back.key)
                .arg(drawn_key(&give_back.key))
                .arg(&numbers[..])
                .arg(calls)
                .arg(name);
        }
        cmd
    });
    commands
}

/// The commands that give back what one decision took of a key (see
/// [`Receipt`]): for the sliding log a `ZREM` of exactly its members, which a second run
/// finds gone; for the other algorithms their refund script, which gives back only what
/// the key still holds in the same window (or has not refilled), and which a second run
/// would give back again.
impl Refund<'_> {
    /// Whether sending the refund twice gives back once: only the sliding log's, which
    /// removes members by name. Any other is never re-sent after it may have run.
    pub fn rerun_is_harmless(&self) -> bool {
        self.receipt.algorithm == Algorithm::SlidingLog
    }

    /// The refund's script: the algorithm's, but for the sliding log's check without rules
    /// counting in calendar periods, whose counters alone a `ZREM` does not reach.
    fn script(&self) -> Option<&'static Lua> {
        let algorithm = self.receipt.algorithm;
        let calendar = self.rules.iter().any(|rule| rule.calendar().is_some());
        (algorithm != Algorithm::SlidingLog || calendar).then(|| lua(Op::Refund, algorithm))
    }

    /// The command to send first: the `ZREM`, or the `EVALSHA` of the refund script.
    pub fn command(&self) -> Cmd {
        match self.script() {
            Some(script) => self.run(script, true),
            None => self.zrem(),
        }
    }

    /// The refund as an `EVAL` carrying the script's body, for a server that answered the
    /// `EVALSHA` with NOSCRIPT (the sliding log's `ZREM` needs no script).
    pub fn eval(&self) -> Option<Cmd> {
        self.script().map(|script| self.run(script, false))
    }

    /// The `EVALSHA` (`by_hash`) or `EVAL` of the refund's `script`.
    fn run(&self, script: &Lua, by_hash: bool) -> Cmd {
        let mut cmd = script.command(by_hash);
        cmd.arg(1).arg(self.key).arg(RefundNumbers(self));
        if self.receipt.algorithm == Algorithm::SlidingLog {
            cmd.arg(&check_id(self.receipt.id)[..]);
        }
        cmd
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

/// The command that settles what one decision reserved of a key at `actual` units and
/// answers, in the same round trip, as a peek of cost 1 of the key's rules (see
/// `scripts/settle.lua`). The sliding log's settles by name, so a second run changes
/// nothing; the others' would settle again, and are never re-sent once they may have run.
impl Settle<'_> {
    /// Whether sending the settle twice settles once: only the sliding log's.
    pub fn rerun_is_harmless(&self) -> bool {
        self.receipt.algorithm == Algorithm::SlidingLog
    }

    /// The `EVALSHA` of the settle script; with `source`, the `EVAL` of its body instead.
    pub fn command(&self, source: bool) -> Cmd {
        let algorithm = self.receipt.algorithm;
        let mut cmd = lua(Op::Settle, algorithm).command(!source);
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
                // 0: the server's clock, as the scripts read it.
                self.peek.now_us.map_or(0, NonZeroU64::get),
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
