// The hand-worked sequences of worked.txt, read for the tests of both implementations:
// declared as a module of the runtime's tests (src/algorithm.rs) and included with
// `include!` by tests/algorithms.rs, so both read the same file the same way.

/// When every sequence starts, in µs since the epoch: a whole minute.
pub const START_US: u64 = 1_700_000_040_000_000;

/// One sequence of checks of one fresh key.
pub struct Sequence {
    /// The algorithm's metrics spelling (`fixed_window`, ...).
    pub algorithm: &'static str,
    /// Each rule's count and window in µs.
    pub rules: Vec<(u64, u64)>,
    pub steps: Vec<Step>,
}

/// One call of cost 1 and its answer.
pub struct Step {
    /// The line of worked.txt, for failures.
    pub line: usize,
    /// µs since the epoch.
    pub now_us: u64,
    pub consume: bool,
    /// allowed (1 or 0), rule_index, remaining, reset_after_us, retry_after_us.
    pub expected: [u64; 5],
}

/// Every sequence of worked.txt.
pub fn sequences() -> Vec<Sequence> {
    let mut sequences: Vec<Sequence> = Vec::new();
    let text = include_str!("worked.txt");
    for (n, line) in text.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let number = |word: &str| -> u64 {
            word.parse()
                .unwrap_or_else(|_| panic!("worked.txt:{}: `{word}` is not a number", n + 1))
        };
        match words.as_slice() {
            [] => {}
            [first, ..] if first.starts_with('#') => {}
            [at, call, verdict, figures @ ..] if figures.len() == 4 => {
                let consume = match *call {
                    "check" => true,
                    "peek" => false,
                    other => panic!("worked.txt:{}: `{other}`: check or peek", n + 1),
                };
                let allowed = match *verdict {
                    "allowed" => 1,
                    "denied" => 0,
                    other => panic!("worked.txt:{}: `{other}`: allowed or denied", n + 1),
                };
                let figures: Vec<u64> = figures.iter().map(|w| number(w)).collect();
                sequences
                    .last_mut()
                    .expect("a sequence's first line names its algorithm")
                    .steps
                    .push(Step {
                        line: n + 1,
                        now_us: START_US + number(at),
                        consume,
                        expected: [allowed, figures[0], figures[1], figures[2], figures[3]],
                    });
            }
            &[algorithm, ref rules @ ..] => sequences.push(Sequence {
                algorithm,
                rules: rules
                    .iter()
                    .map(|rule| {
                        let (count, window) = rule.split_once('/').expect("count/window_us");
                        (number(count), number(window))
                    })
                    .collect(),
                steps: Vec::new(),
            }),
        }
    }
    sequences
}
