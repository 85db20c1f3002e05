use std::io::Write as _;
use std::num::NonZeroU64;
use std::path::Path;
use std::process::{Command, Stdio};

use redis::Value;

use super::*;
use crate::backend::{Refund, Request};
use crate::decision::{Bound, CountedBy, RawDecision, Receipt};

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
                bound: Bound::Rule,
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
    let refund = refund_of(&rules, receipt);
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
        let refund = refund_of(&rules, receipt);
        assert!(!refund.rerun_is_harmless());
        let sent = args(&refund.command());
        assert_eq!(sent[0], b"EVALSHA");
        assert_eq!(
            sent[1],
            lua(Op::Refund, algorithm).script().get_hash().as_bytes()
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

/// The refund of what `receipt` took of `k` under `rules`, at the server's clock.
fn refund_of(rules: &[Rule], receipt: Receipt) -> Refund<'_> {
    Refund {
        key: "k",
        rules,
        receipt,
        now_us: None,
    }
}

/// Every operation of every algorithm runs that algorithm's own script, and a check its
/// own however it is sent.
#[test]
fn each_algorithm_runs_its_own_script() {
    let ops = [
        Op::Check,
        Op::TakingSlot,
        Op::Refund,
        Op::Settle,
        Op::GiveBack,
    ];
    let rules = [Rule::per_second(10)];
    for algorithm in Algorithm::ALL {
        let check = source(algorithm);
        let request = request(&rules, algorithm, true);
        let sent = args(&Invocation::new(&request).evalsha());
        assert_eq!(
            sent[1],
            lua(Op::Check, algorithm).script().get_hash().as_bytes()
        );
        assert_eq!(args(&Invocation::new(&request).eval())[1], check.as_bytes());
        // A settle answers by the check, which a check taking a slot calls.
        assert!(
            lua(Op::Settle, algorithm).source.ends_with(check),
            "{algorithm}"
        );
        assert!(
            lua(Op::TakingSlot, algorithm).source.contains(check),
            "{algorithm}"
        );
        for op in ops {
            for other in Algorithm::ALL
                .into_iter()
                .filter(|&other| other != algorithm)
            {
                assert_ne!(
                    lua(op, algorithm).source,
                    lua(op, other).source,
                    "{algorithm}"
                );
            }
        }
        if algorithm != Algorithm::SlidingLog {
            let name = format!("local NAME, SIZE, ARGS = '{}'", algorithm.label());
            for op in [Op::Refund, Op::Settle, Op::GiveBack] {
                assert!(lua(op, algorithm).source.contains(&name), "{algorithm}");
            }
        }
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

/// Every fragment and template (`scripts/*.lua`, `scripts/templates/*.lua`) parses alone
/// and opens with its header comment, and every composed script parses, by `luac5.1 -p`
/// (Debian's lua5.1, which scripts/test installs) when it is there; the suites run every
/// composed script on Redis either way.
#[test]
fn every_fragment_and_script_parses_alone() {
    if Command::new("luac5.1").arg("-v").output().is_err() {
        eprintln!("luac5.1 is missing (apt-get install -y lua5.1): the Lua is not parsed here");
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/scripts");
    let mut files = Vec::new();
    for dir in [dir.clone(), dir.join("templates")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|ext| ext == "lua") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 60, "{} Lua files", files.len());
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let name = path.display().to_string();
        let header: Vec<&str> = text
            .lines()
            .map(str::trim_start)
            .take_while(|line| line.starts_with("--"))
            .collect();
        assert!(!header.is_empty(), "{name} opens with its header comment");
        // A fragment's header says what it takes from the script around it and gives it
        // (templates say what they are made of instead).
        let fragment = !name.contains("templates") && !name.ends_with("check_all.lua");
        let shares = ["-- Reads `", "-- Sets `", "-- Defines `"];
        assert!(
            !fragment
                || header
                    .iter()
                    .any(|line| shares.iter().any(|s| line.starts_with(s))),
            "{name}: its header says what it reads, sets or defines"
        );
        parses(&name, &text);
    }
    for op in [
        Op::Check,
        Op::TakingSlot,
        Op::Refund,
        Op::Settle,
        Op::GiveBack,
    ] {
        for algorithm in Algorithm::ALL {
            parses(&format!("{algorithm}'s script"), lua(op, algorithm).source);
        }
    }
    for lua in [&SLOT_ALONE, &SLOT_RENEW, &SLOTS_IN_USE] {
        parses("a slot's script", lua.source);
    }
    parses("BLOCK_KEY", sources::BLOCK_KEY);
}

/// Asserts that `luac5.1 -p` parses `text`.
fn parses(name: &str, text: &str) {
    let mut luac = Command::new("luac5.1")
        .args(["-p", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    luac.stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = luac.wait_with_output().unwrap();
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} does not parse alone: {error}");
}
