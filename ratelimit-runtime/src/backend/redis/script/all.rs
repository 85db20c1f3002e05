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

/// The list's script: `check_all_head.lua`, each algorithm's check script as a function
/// of its own that judges the checks after it before it writes (see [`judging_the_rest`]),
/// then `check_all.lua`. The check scripts' text is used as it is, so a list counts
/// exactly as its checks would alone. Composed and hashed once per process.
fn list_script() -> &'static (String, Script) {
    static SCRIPT: LazyLock<(String, Script)> = LazyLock::new(|| {
        let mut source_text = String::from(include_str!("../../../scripts/check_all_head.lua"));
        for algorithm in Algorithm::ALL {
            source_text.push_str(&judging_the_rest(algorithm.label(), source(algorithm)));
        }
        source_text.push_str(sources::CHECK_ALL);
        let script = Script::new(&source_text);
        (source_text, script)
    });
    &SCRIPT
}

/// What ends a check's judging: after streak.lua, every fragment but the writes
/// (save.lua, sliding_log_add.lua and what comes with them) and the reply has run.
const JUDGED: &str = include_str!("../../../scripts/streak.lua");
/// Where a check's reply starts, after its writes.
const ANSWER: &str = include_str!("../../../scripts/warn_reply.lua");
/// The preamble's TIME, which a list reads once (`list_time`).
const TIME: &str = "time = call('TIME')\n";

/// `check`, a check script, as `check_all.lua`'s `function name(KEYS, ARGV, i)`: its text
/// with TIME read once a list, and, where its writes start, the checks after it judged
/// (`judge_from`), then its writes only as the list's verdict says, then its reply.
/// Panics when `check` is not composed as sources.rs composes a check.
fn judging_the_rest(name: &str, check: &str) -> String {
    let once = |part: &str| {
        let at = check
            .find(part)
            .expect("a check script holds each part of its tail");
        assert!(
            check[at + 1..].find(part).is_none(),
            "a check script holds {part:?} once"
        );
        at
    };
    let (time, judged, answer) = (once(TIME), once(JUDGED) + JUDGED.len(), once(ANSWER));
    assert!(time < judged && judged <= answer);
    format!(
        "local function {name}(KEYS, ARGV, i)\n{}time = list_time or call('TIME')\n\
         list_time = time\n{}if denied then\nadmitted = false\nend\njudge_from(i + 1)\n\
         if write_all or (denied and write_refused) then\n{}end\n{}end\n",
        &check[..time],
        &check[time + TIME.len()..judged],
        &check[judged..answer],
        &check[answer..],
    )
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
            .flat_map(|check| [check.request.algorithm as u8, check.list_args_sent()])
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
    /// How many of its five arguments this check sends in a list's script
    /// (`check_all.lua`): up to its last one that is not empty (at least its numbers and
    /// its id). Each argument costs Redis a few hundred instructions to read and to hand
    /// the script, and most checks have none of the optional three.
    fn list_args_sent(&self) -> u8 {
        let request = self.request;
        if request.draw.is_some() {
            5
        } else if Schedule::of(request).is_some() {
            4
        } else if request.warn_at != 0 && request.consume {
            3
        } else {
            2
        }
    }

    /// This check's arguments in a list's script (`check_all.lua`), as many as
    /// [`Self::list_args_sent`] says: its numbers, then every optional argument's place up to
    /// the last it has, empty where it has none.
    fn list_args(&self, cmd: &mut Cmd) {
        let request = self.request;
        let sent = self.list_args_sent();
        cmd.arg(Numbers(request));
        match self.id {
            Some(id) => cmd.arg(&check_id(id)[..]),
            None => cmd.arg(&b""[..]),
        };
        if sent > 2 {
            match request.warn_at != 0 && request.consume {
                true => cmd.arg(&[request.warn_at][..]),
                false => cmd.arg(&b""[..]),
            };
        }
        if sent > 3 {
            match Schedule::of(request) {
                Some(schedule) => cmd.arg(schedule),
                None => cmd.arg(&b""[..]),
            };
        }
        if sent > 4 {
            match request.draw {
                Some(draw) => cmd.arg(&draw_numbers(draw)[..]),
                None => cmd.arg(&b""[..]),
            };
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_check_script_is_cut_where_its_writes_start() {
        let (source, _) = list_script();
        for algorithm in Algorithm::ALL {
            let head = format!("local function {}(KEYS, ARGV, i)\n", algorithm.label());
            assert_eq!(source.matches(&head).count(), 1, "{algorithm:?}");
        }
        // Each check reads TIME once a list, and judges the rest before it writes.
        assert_eq!(
            source.matches("time = list_time or call('TIME')").count(),
            4
        );
        assert_eq!(source.matches("judge_from(i + 1)\n").count(), 4);
        assert!(!source.contains("time = call('TIME')"));
    }
}
