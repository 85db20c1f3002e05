// The hand-worked sequences of worked.txt, read for the tests of both implementations:
// declared as a module of the runtime's tests (src/algorithm.rs) and included with
// `include!` by tests/algorithms/scripts.rs, so both read the same file the same way.

/// When every sequence starts, in µs since the epoch: a whole minute.
pub const START_US: u64 = 1_700_000_040_000_000;

/// One sequence of calls on one fresh key.
struct Sequence {
    /// The algorithm's metrics spelling (`fixed_window`, ...).
    algorithm: &'static str,
    /// Each rule's count and window in µs.
    rules: Vec<(u64, u64)>,
    steps: Vec<WorkedCall>,
}

/// One call, at `now_us` (µs since the epoch); `line` is its line in worked.txt.
struct WorkedCall {
    line: usize,
    now_us: u64,
    call: Call,
}

enum Call {
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

/// What runs a sequence: one implementation of the algorithms, on one fresh key.
pub trait Runner {
    /// What a refund of a decision needs.
    type Receipt;

    /// Runs `check`; answers `[allowed (1 or 0), rule_index, remaining, reset_after_us,
    /// retry_after_us]` (a retry that never comes: `u64::MAX`), and the decision's receipt.
    fn check(&mut self, check: &Check<'_>) -> ([u64; 5], Self::Receipt);

    /// Gives back what the decision of `receipt` took.
    fn refund(
        &mut self,
        algorithm: &str,
        rules: &[(u64, u64)],
        receipt: &Self::Receipt,
        now_us: u64,
    );

    /// Forgets the key.
    fn reset(&mut self);

    /// Moves to a fresh key, for the `n`-th sequence.
    fn start(&mut self, n: usize);
}

/// A check (or peek) of a sequence's key.
pub struct Check<'a> {
    /// The metrics' spelling.
    pub algorithm: &'a str,
    /// Each rule's count and window in µs.
    pub rules: &'a [(u64, u64)],
    pub now_us: u64,
    pub consume: bool,
    pub cost: u64,
    pub block_for_us: u64,
}

/// Runs every sequence of worked.txt on `runner`, each on a fresh key, and requires every
/// answer to be the one worked out.
pub fn replay(runner: &mut impl Runner) {
    for (n, sequence) in sequences().into_iter().enumerate() {
        runner.start(n);
        let (algorithm, rules) = (sequence.algorithm, &sequence.rules[..]);
        let mut receipts = std::collections::HashMap::new();
        for step in &sequence.steps {
            match step.call {
                Call::Check {
                    consume,
                    cost,
                    block_for_us,
                    expected,
                    name,
                } => {
                    let (answer, receipt) = runner.check(&Check {
                        algorithm,
                        rules,
                        now_us: step.now_us,
                        consume,
                        cost,
                        block_for_us,
                    });
                    assert_eq!(answer, expected, "worked.txt:{}", step.line);
                    if let Some(name) = name {
                        receipts.insert(name, receipt);
                    }
                }
                Call::Refund(name) => runner.refund(algorithm, rules, &receipts[name], step.now_us),
                Call::Reset => runner.reset(),
            }
        }
    }
}

/// Every sequence of worked.txt.
fn sequences() -> Vec<Sequence> {
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
                .push(WorkedCall {
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
