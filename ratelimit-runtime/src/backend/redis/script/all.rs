//! The protocol of a list of checks as one script (`scripts/check_all.lua`): how the
//! script is composed, how a list is encoded into one EVALSHA, how its reply is read.

use std::sync::LazyLock;

use redis::{Cmd, Script, Value};

use super::{
    check_id, draw_numbers, evalsha_or_eval, source, sources, Invocation, Numbers, Schedule,
};
use crate::backend::Request;
use crate::decision::RawDecision;
use crate::Algorithm;

/// The list's script: each algorithm's check script as a function of its own (of the
/// `KEYS`, `ARGV` and `redis` it reads), then `check_all.lua`. The check scripts are used
/// as they are, so a list counts exactly as its checks would alone. Composed and hashed
/// once per process.
fn list_script() -> &'static (String, Script) {
    static SCRIPT: LazyLock<(String, Script)> = LazyLock::new(|| {
        let mut source_text = String::new();
        for algorithm in Algorithm::ALL {
            source_text.push_str(&format!(
                "local function {}(KEYS, ARGV, redis)\n{}\nend\n",
                function_name(algorithm),
                source(algorithm)
            ));
        }
        source_text.push_str(sources::CHECK_ALL);
        let script = Script::new(&source_text);
        (source_text, script)
    });
    &SCRIPT
}

/// The Lua name `check_all.lua` calls `algorithm`'s check by.
fn function_name(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::SlidingLog => "sliding_log",
        Algorithm::FixedWindow => "fixed_window",
        Algorithm::SlidingWindow => "sliding_window",
        Algorithm::TokenBucket => "token_bucket",
    }
}

/// A list of checks, each with its own id (see [`Invocation`]), as one script.
pub(crate) struct ListInvocation<'r> {
    checks: Vec<Invocation<'r>>,
}

impl<'r> ListInvocation<'r> {
    /// The list of `requests`, which name each key once and live in one hash slot.
    pub fn new(requests: &'r [Request<'r>]) -> Self {
        ListInvocation {
            checks: requests.iter().map(Invocation::new).collect(),
        }
    }

    /// The list's EVALSHA (`by_hash`) or EVAL.
    pub fn command(&self, by_hash: bool) -> Cmd {
        let (source, script) = list_script();
        let mut cmd = evalsha_or_eval(by_hash, source, script);
        cmd.arg(self.checks.len());
        for check in &self.checks {
            cmd.arg(check.request.key);
        }
        let kinds: Vec<u8> = self
            .checks
            .iter()
            .map(|check| check.request.algorithm as u8)
            .collect();
        cmd.arg(kinds);
        for check in &self.checks {
            check.list_args(&mut cmd);
        }
        cmd
    }

    /// The list's answers: whether it was admitted, and each check's decision (with its
    /// receipt when admitted; a refused list's decisions took nothing: see
    /// [`uncounted`]). `None` when the reply is not one the script gives.
    pub fn decode(&self, reply: &Value) -> Option<(bool, Vec<RawDecision>)> {
        let Value::Array(items) = reply else {
            return None;
        };
        let (first, replies) = items.split_first()?;
        let admitted = match first {
            Value::Int(1) => true,
            Value::Int(0) => false,
            _ => return None,
        };
        if replies.len() != self.checks.len() {
            return None;
        }
        let mut raws = Vec::with_capacity(replies.len());
        for (check, reply) in self.checks.iter().zip(replies) {
            let raw = match admitted {
                true => check.decode(reply)?,
                // A refused list counted nothing: no receipt to refund, and what a check
                // that would pass has left is what it has now.
                false => uncounted(
                    Invocation {
                        request: &Request {
                            consume: false,
                            ..*check.request
                        },
                        id: None,
                    }
                    .decode(reply)?,
                    check.request,
                ),
            };
            raws.push(raw);
        }
        Some((admitted, raws))
    }
}

impl Invocation<'_> {
    /// This check's five arguments in a list's script (`check_all.lua`): its numbers, then
    /// every optional argument's place, empty where it has none.
    fn list_args(&self, cmd: &mut Cmd) {
        let request = self.request;
        cmd.arg(Numbers(request));
        match self.id {
            Some(id) => cmd.arg(&check_id(id)[..]),
            None => cmd.arg(&b""[..]),
        };
        match request.warn_at != 0 && request.consume {
            true => cmd.arg(&[request.warn_at][..]),
            false => cmd.arg(&b""[..]),
        };
        match Schedule::of(request) {
            Some(schedule) => cmd.arg(schedule),
            None => cmd.arg(&b""[..]),
        };
        match request.draw {
            Some(draw) => cmd.arg(&draw_numbers(draw)[..]),
            None => cmd.arg(&b""[..]),
        };
    }
}

/// The answer `raw` to `request`, a check of a list that counted nothing: what it would
/// have taken given back to `remaining` (the binding rule's units: one call of a rule
/// counting calls), with no receipt and no warning.
pub(crate) fn uncounted(mut raw: RawDecision, request: &Request<'_>) -> RawDecision {
    if raw.allowed && request.consume {
        let rule = &request.rules[raw.rule_index];
        let units = match rule.counts_calls() {
            true => 1,
            false => request.cost.get(),
        };
        raw.remaining = (raw.remaining + units).min(rule.count());
    }
    raw.receipt = crate::decision::Receipt::NONE;
    raw.crossed = None;
    raw
}
