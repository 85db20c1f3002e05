//! The scripts' protocol: which script runs an operation of an algorithm (one table,
//! [`lua`]), how a check is encoded into one EVALSHA ([`check`]), how the reply is decoded
//! ([`decode`]), and the refunds, settles and give-backs ([`refund`]). Nothing here touches
//! a connection.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, OnceLock};

use redis::{Cmd, RedisWrite, Script};

use crate::concurrency::SlotId;
use crate::{random, Algorithm, Rule};

/// The scripts' sources, composed from shared fragments.
pub(super) mod sources {
    include!("../../../scripts/sources.rs");
}

pub(crate) mod all;
mod check;
mod decode;
mod refund;
#[cfg(test)]
mod tests;

pub(crate) use check::Invocation;
use check::{draw_numbers, Numbers, Schedule};
pub(crate) use decode::decode;
pub(crate) use refund::give_back;

/// What a script of an algorithm's does: each has one per algorithm ([`lua`]).
#[derive(Clone, Copy)]
enum Op {
    /// A check (and a peek, and a draw).
    Check,
    /// A check that also takes a slot (`scripts/slot.lua`).
    TakingSlot,
    /// The refund of a check: the sliding log's only for rules counting in calendar
    /// periods (a `ZREM` does the others').
    Refund,
    /// A settle, which then answers as a peek.
    Settle,
    /// A draw's give-back (`backend::GiveBack`).
    GiveBack,
}

/// A script: its source, and its hash, made once per process on first use.
struct Lua {
    source: &'static str,
    script: OnceLock<Script>,
}

impl Lua {
    const fn new(source: &'static str) -> Self {
        Lua {
            source,
            script: OnceLock::new(),
        }
    }

    fn script(&self) -> &Script {
        self.script.get_or_init(|| Script::new(self.source))
    }

    /// The head of a command running the script: its `EVALSHA` (`by_hash`), or NOSCRIPT's
    /// `EVAL` of its source.
    fn command(&self, by_hash: bool) -> Cmd {
        evalsha_or_eval(by_hash, self.source, self.script())
    }

    /// [`command`](Self::command) with room for `args` more arguments of `bytes` in all.
    fn command_for(&self, by_hash: bool, args: usize, bytes: usize) -> Cmd {
        script_head(by_hash, self.source, self.script(), args, bytes)
    }
}

/// Each operation's script, for each algorithm in [`Algorithm::ALL`]'s order.
static SCRIPTS: [[Lua; 4]; 5] = {
    use sources::*;
    const fn row([a, b, c, d]: [&'static str; 4]) -> [Lua; 4] {
        [Lua::new(a), Lua::new(b), Lua::new(c), Lua::new(d)]
    }
    [
        row([SLIDING_LOG, FIXED_WINDOW, SLIDING_WINDOW, TOKEN_BUCKET]),
        row([
            SLIDING_LOG_SLOT,
            FIXED_WINDOW_SLOT,
            SLIDING_WINDOW_SLOT,
            TOKEN_BUCKET_SLOT,
        ]),
        row([
            SLIDING_LOG_REFUND,
            FIXED_WINDOW_REFUND,
            SLIDING_WINDOW_REFUND,
            TOKEN_BUCKET_REFUND,
        ]),
        row([
            SLIDING_LOG_SETTLE,
            FIXED_WINDOW_SETTLE,
            SLIDING_WINDOW_SETTLE,
            TOKEN_BUCKET_SETTLE,
        ]),
        row([
            SLIDING_LOG_GIVE_BACK,
            FIXED_WINDOW_GIVE_BACK,
            SLIDING_WINDOW_GIVE_BACK,
            TOKEN_BUCKET_GIVE_BACK,
        ]),
    ]
};

/// The script that runs `op` for `algorithm`.
fn lua(op: Op, algorithm: Algorithm) -> &'static Lua {
    &SCRIPTS[op as usize][algorithm as usize]
}

/// A slot taken without rules (`scripts/slot.lua`).
static SLOT_ALONE: Lua = Lua::new(sources::SLOT_ALONE);

/// A slot's renewal (`scripts/slot_renew.lua`).
static SLOT_RENEW: Lua = Lua::new(sources::SLOT_RENEW);

/// The count of a key's slots held (`scripts/slots_in_use.lua`).
static SLOTS_IN_USE: Lua = Lua::new(sources::SLOTS_IN_USE);

/// The Lua source of the check script of `algorithm`.
fn source(algorithm: Algorithm) -> &'static str {
    lua(Op::Check, algorithm).source
}

/// `EVALSHA` and the hash of `script` (`by_hash`), or `EVAL` and its `source`: a command's
/// head, its keys and arguments to follow. Every script's command starts here.
pub(super) fn evalsha_or_eval(by_hash: bool, source: &str, script: &Script) -> Cmd {
    script_head(by_hash, source, script, 0, 0)
}

/// [`evalsha_or_eval`] in a buffer with room for `args` more arguments of `bytes` in all,
/// so that a check's command is written without growing it.
fn script_head(by_hash: bool, source: &str, script: &Script, args: usize, bytes: usize) -> Cmd {
    let (name, body) = match by_hash {
        true => ("EVALSHA", script.get_hash()),
        false => ("EVAL", source),
    };
    let mut cmd = Cmd::with_capacity(2 + args, name.len() + body.len() + bytes);
    cmd.arg(name).arg(body);
    cmd
}

/// Whether running the same encoded check twice counts it once: a command that may have
/// executed is re-sent only when this holds.
pub(crate) fn rerun_is_harmless(algorithm: Algorithm) -> bool {
    // The sliding log's entries are named by the check's id, carried in the command: a
    // re-run finds them and writes nothing. The other algorithms would count it again.
    algorithm == Algorithm::SlidingLog
}

/// Whether a draw of `rules` by `algorithm` is named by its witness (the token bucket's
/// first rule counting in windows: `scripts/token_bucket.lua`), rather than by its
/// check's id.
fn has_witness(algorithm: Algorithm, rules: &[Rule]) -> bool {
    algorithm == Algorithm::TokenBucket && rules.iter().any(|rule| rule.calendar().is_none())
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

/// A slot's renewal (`scripts/slot_renew.lua`): its `EVALSHA`, then NOSCRIPT's `EVAL`.
pub(crate) fn renew_slot(slots_key: &str, id: SlotId, lease_us: u64, now_us: u64) -> [Cmd; 2] {
    let mut numbers = Vec::with_capacity(16);
    numbers.extend_from_slice(&(now_us as f64).to_le_bytes());
    numbers.extend_from_slice(&(lease_us as f64).to_le_bytes());
    [true, false].map(|by_hash| {
        let mut cmd = SLOT_RENEW.command(by_hash);
        cmd.arg(1).arg(slots_key).arg(&numbers[..]).arg(&id.0[..]);
        cmd
    })
}

/// The count of the slots held (`scripts/slots_in_use.lua`): its `EVALSHA`, then
/// NOSCRIPT's `EVAL`.
pub(crate) fn slots_in_use(slots_key: &str, now_us: u64) -> [Cmd; 2] {
    [true, false].map(|by_hash| {
        let mut cmd = SLOTS_IN_USE.command(by_hash);
        cmd.arg(1).arg(slots_key).arg(now_us);
        cmd
    })
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
