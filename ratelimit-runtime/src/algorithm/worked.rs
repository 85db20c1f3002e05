// The hand-worked sequences of worked.txt, read for the tests of both implementations:
// declared as a module of the runtime's tests (src/algorithm.rs) and included with
// `include!` by tests/algorithms.rs, so both read the same file the same way.

/// When every sequence starts, in µs since the epoch: a whole minute.
pub const START_US: u64 = 1_700_000_040_000_000;

/// One sequence of calls on one fresh key.
pub struct Sequence {
    /// The algorithm's metrics spelling (`fixed_window`, ...).
    pub algorithm: &'static str,
    /// Each rule's count and window in µs.
    pub rules: Vec<(u64, u64)>,
    pub steps: Vec<Step>,
}

/// One call, at `now_us` (µs since the epoch); `line` is its line in worked.txt.
pub struct Step {
    pub line: usize,
    pub now_us: u64,
    pub call: Call,
}

pub enum Call {
    /// A check (or a peek) and its answer.
    Check {
        consume: bool,
        cost: u64,
        block_for_us: u64,
        /// allowed (1 or 0), rule_index, remaining, reset_after_us, retry_after_us
        /// (`u64::MAX`: never).
        expected: [u64; 5],
        /// The name a later refund gives the decision.
        name: Option<&'static str>,
    },
    /// The refund of the decision named so.
    Refund(&'static str),
    /// The key forgotten.
    Reset,
}

/// Every sequence of worked.txt.
pub fn sequences() -> Vec<Sequence> {
    let mut sequences: Vec<Sequence> = Vec::new();
    let text: &'static str = include_str!("worked.txt");
    for (n, line) in text.lines().enumerate() {
        let at = |what: &str| -> String { format!("worked.txt:{}: {what}", n + 1) };
        let number = |word: &str| -> u64 {
            match word {
                "never" => u64::MAX,
                _ => word
                    .parse()
                    .unwrap_or_else(|_| panic!("{}", at(&format!("`{word}` is not a number")))),
            }
        };
        let words: Vec<&'static str> = line.split_whitespace().collect();
        let call = match words.as_slice() {
            [] => continue,
            [first, ..] if first.starts_with('#') => continue,
            [time, "refund", name] => Some((time, Call::Refund(name))),
            [time, "reset"] => Some((time, Call::Reset)),
            [time, kind @ ("check" | "peek"), rest @ ..] => {
                let (mut cost, mut block_for_us) = (1, 0);
                let mut rest = rest;
                while let [option, more @ ..] = rest {
                    match option.split_once('=') {
                        Some(("cost", n)) => cost = number(n),
                        Some(("block", n)) => block_for_us = number(n),
                        _ => break,
                    }
                    rest = more;
                }
                let (verdict, figures, name) = match rest {
                    [verdict, a, b, c, d] => (verdict, [a, b, c, d], None),
                    [verdict, a, b, c, d, "as", name] => (verdict, [a, b, c, d], Some(*name)),
                    _ => panic!(
                        "{}",
                        at("a check: allowed|denied rule remaining reset retry")
                    ),
                };
                let allowed = match *verdict {
                    "allowed" => 1,
                    "denied" => 0,
                    other => panic!("{}", at(&format!("`{other}`: allowed or denied"))),
                };
                let [rule, remaining, reset, retry] = figures.map(|w| number(w));
                Some((
                    time,
                    Call::Check {
                        consume: *kind == "check",
                        cost,
                        block_for_us,
                        expected: [allowed, rule, remaining, reset, retry],
                        name,
                    },
                ))
            }
            _ => None,
        };
        match call {
            Some((time, call)) => sequences
                .last_mut()
                .expect("a sequence's first line names its algorithm")
                .steps
                .push(Step {
                    line: n + 1,
                    now_us: START_US + number(time),
                    call,
                }),
            None => {
                let (algorithm, rules) = words.split_first().expect("not empty");
                let rules = rules
                    .iter()
                    .map(|rule| {
                        let (count, window) = rule
                            .split_once('/')
                            .unwrap_or_else(|| panic!("{}", at("count/window_us")));
                        (number(count), number(window))
                    })
                    .collect();
                sequences.push(Sequence {
                    algorithm,
                    rules,
                    steps: Vec::new(),
                });
            }
        }
    }
    sequences
}
