//! What the command prints: tables a person reads at a glance, or one JSON document.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_ratelimit::{
    BackendError, BackendErrorKind, KeyState, RuleState, Setting, StoredOverride,
};
use serde_json::{json, Value};
use time::format_description::FormatItem;
use time::macros::format_description;
use time::OffsetDateTime;

/// Where the rules `inspect` shows come from.
pub enum RulesFrom {
    /// The string-state algorithms store each rule's count with its record.
    State,
    /// `--rules`.
    Flag,
    /// The override stored for the key's site path.
    Override(String),
    /// Nowhere: a sliding log without `--rules` or an override.
    Unknown,
}

pub fn no_state(key: &str, slots_in_use: u64, json: bool) {
    if json {
        print_json(&json!({ "key": key, "exists": false, "slots_in_use": slots_in_use }));
    } else if slots_in_use > 0 {
        println!("no counts: `{key}` holds only its slots");
        println!("slots in use  {slots_in_use}");
    } else {
        println!("no state: `{key}` holds nothing (never counted, reset, or expired)");
    }
}

pub fn key_state(key: &str, state: &KeyState, rules: &[RuleState], from: &RulesFrom, json: bool) {
    let read_at = state.read_at();
    if json {
        let rules: Vec<Value> = rules
            .iter()
            .map(|r| {
                json!({
                    "rule": r.rule.to_string(),
                    "count": r.rule.count(),
                    "window_secs": r.rule.window().as_secs_f64(),
                    "counts_calls": r.rule.counts_calls(),
                    "calendar": r.rule.calendar().map(|calendar| calendar.name()),
                    "used": r.used,
                    "debt": r.debt,
                    "remaining": r.remaining,
                    "retry_after_secs": r.retry_after.as_secs_f64(),
                    "reset_after_secs": r.reset_after.as_secs_f64(),
                })
            })
            .collect();
        let block = state.block().map(|b| {
            json!({
                "rule_index": b.rule_index,
                "ends_in_secs": b.ends_in.as_secs_f64(),
                "until_unix_ms": unix_ms(b.until),
            })
        });
        let log = state.log().map(|log| {
            json!({
                "entries": log.entries,
                "oldest_unix_ms": unix_ms(log.oldest),
                "newest_unix_ms": unix_ms(log.newest),
            })
        });
        let rules_from = match from {
            RulesFrom::State => json!("state"),
            RulesFrom::Flag => json!("--rules"),
            RulesFrom::Override(path) => json!(format!("override:{path}")),
            RulesFrom::Unknown => Value::Null,
        };
        print_json(&json!({
            "key": key,
            "exists": true,
            "algorithm": state.algorithm().label(),
            "read_at_unix_ms": unix_ms(read_at),
            "expires_in_secs": state.expires_in().map(|d| d.as_secs_f64()),
            "rules_from": rules_from,
            "rules": rules,
            "block": block,
            "log": log,
            "slots_in_use": state.slots_in_use(),
        }));
        return;
    }

    let mut head = vec![
        ("key", key.to_owned()),
        ("algorithm", state.algorithm().to_string()),
        (
            "expires",
            state
                .expires_in()
                .map_or("never".into(), |d| format!("in {}", duration(d))),
        ),
    ];
    if let Some(log) = state.log() {
        let ago = |t: SystemTime| duration(read_at.duration_since(t).unwrap_or_default());
        head.push((
            "entries",
            format!(
                "{} (oldest {} ago, newest {} ago)",
                log.entries,
                ago(log.oldest),
                ago(log.newest)
            ),
        ));
    }
    head.push((
        "rules",
        match from {
            RulesFrom::State => "as stored with the state".into(),
            RulesFrom::Flag => "from --rules".into(),
            RulesFrom::Override(path) => format!("the override stored for `{path}`"),
            RulesFrom::Unknown => "a sliding log stores none: pass --rules \"5/minute\" (the \
                                   site's rules) to count its entries"
                .into(),
        },
    ));
    match state.block() {
        Some(block) => {
            let by = rules
                .get(block.rule_index)
                .map_or(String::new(), |r| format!(", started by {}", r.rule));
            head.push((
                "blocked",
                format!(
                    "yes, {} more (until {}){by}",
                    duration(block.ends_in),
                    utc(block.until)
                ),
            ));
        }
        None => head.push(("blocked", "no".into())),
    }
    if state.slots_in_use() > 0 {
        head.push(("slots in use", state.slots_in_use().to_string()));
    }
    let width = head.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    for (name, value) in head {
        println!("{name:width$}  {value}");
    }
    if rules.is_empty() {
        return;
    }
    println!();
    let rows = rules
        .iter()
        .map(|r| {
            vec![
                r.rule.to_string(),
                match r.debt {
                    0 => format!("{} / {}", r.used, r.rule.count()),
                    debt => format!("{} / {} (in debt by {debt})", r.used, r.rule.count()),
                },
                r.remaining.to_string(),
                match r.retry_after {
                    Duration::ZERO => "now".into(),
                    d => format!("in {}", duration(d)),
                },
                match r.reset_after {
                    Duration::ZERO => "-".into(),
                    d => format!("in {}", duration(d)),
                },
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &["rule", "used / count", "left", "next unit", "all free"],
            rows
        )
    );
}

pub fn overrides(hash: &str, fields: &[StoredOverride], json: bool) {
    if json {
        let fields: Vec<Value> = fields
            .iter()
            .map(|f| {
                let (setting, error) = match &f.setting {
                    Ok(setting) => (setting_json(setting), Value::Null),
                    Err(why) => (Value::Null, json!(why)),
                };
                json!({
                    "field": f.field,
                    "path": f.path,
                    "value": f.value,
                    "setting": setting,
                    "error": error,
                })
            })
            .collect();
        print_json(&json!({ "hash": hash, "overrides": fields }));
        return;
    }
    let rows = fields
        .iter()
        .map(|f| {
            vec![
                f.field.clone(),
                f.value.clone(),
                match &f.setting {
                    Ok(set) => setting(set),
                    Err(why) => format!("IGNORED by every instance: {why}"),
                },
            ]
        })
        .collect();
    hash_table(hash, "overrides", &["field", "value", "in force"], rows);
}

/// The bans in force: identity and time left.
pub fn bans(hash: &str, bans: &[(String, Duration)], json: bool) {
    if json {
        let bans: Vec<Value> = bans
            .iter()
            .map(|(identity, left)| json!({ "identity": identity, "ends_in_ms": left.as_millis() as u64 }))
            .collect();
        print_json(&json!({ "hash": hash, "bans": bans }));
        return;
    }
    let rows = bans
        .iter()
        .map(|(identity, left)| vec![identity.clone(), duration(*left)])
        .collect();
    hash_table(hash, "bans", &["identity", "ends in"], rows);
}

/// What `hash` holds of `what`, one row each under `headers`; none: says so.
fn hash_table(hash: &str, what: &str, headers: &[&str], rows: Vec<Vec<String>>) {
    if rows.is_empty() {
        println!("no {what} in {hash}");
        return;
    }
    println!("{hash}:");
    print!("{}", table(headers, rows));
}

/// What a stored value sets, in the rules' own words.
pub fn setting(setting: &Setting) -> String {
    match setting {
        Setting::Rules(rules) => list(rules),
        Setting::DuplicateRule(Some(rule)) => format!("duplicate rule {rule}"),
        Setting::DuplicateRule(None) => "no duplicate rule".into(),
        Setting::Mode(mode) => format!("mode {mode}"),
        _ => "a setting this command does not know".into(),
    }
}

fn setting_json(setting: &Setting) -> Value {
    let rules = |rules: &[redis_ratelimit::Rule]| -> Vec<Value> {
        rules
            .iter()
            .map(|r| json!({ "count": r.count(), "window_secs": r.window().as_secs_f64() }))
            .collect()
    };
    match setting {
        Setting::Rules(list) => json!({ "rules": rules(list) }),
        Setting::DuplicateRule(rule) => {
            json!({ "duplicate_rule": rule.map(|r| rules(&[r]).remove(0)) })
        }
        Setting::Mode(mode) => json!({ "mode": mode.as_str() }),
        _ => Value::Null,
    }
}

fn list(rules: &[redis_ratelimit::Rule]) -> String {
    rules
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What to do about a failure of Redis.
pub fn advice(err: &BackendError) -> &'static str {
    match err.kind() {
        BackendErrorKind::Unavailable | BackendErrorKind::Timeout => {
            "Check that Redis is running and reachable from here, and that --url (or \
             RATELIMIT_REDIS_URL) names it; then run the command again (each command can be \
             repeated safely)."
        }
        BackendErrorKind::Misconfigured => {
            "Check --url: the host, the user and password, and for TLS the CA (--tls-ca)."
        }
        _ => "Check the key or path (and --prefix): the limiter did not write what it holds.",
    }
}

/// `rows` under `headers`, in aligned columns.
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, &w)| format!("{cell:w$}"))
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

/// A duration in human units: `850ms`, `42.5s`, `3m12s`, `2h05m`, `3d04h`.
pub fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0 if d.subsec_micros() < 1_000 => format!("{}µs", d.subsec_micros()),
        0 => format!("{}ms", d.subsec_millis()),
        1..=59 => {
            let tenths = d.as_millis().div_ceil(100);
            format!("{}.{}s", tenths / 10, tenths % 10)
        }
        60..=3_599 => format!("{}m{:02}s", secs / 60, secs % 60),
        3_600..=86_399 => format!("{}h{:02}m", secs / 3_600, secs % 3_600 / 60),
        _ => format!("{}d{:02}h", secs / 86_400, secs % 86_400 / 3_600),
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// `t` as `2025-01-31 23:59:59 UTC`.
fn utc(t: SystemTime) -> String {
    const FORMAT: &[FormatItem<'_>] =
        format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    OffsetDateTime::from(t)
        .format(FORMAT)
        .expect("every field of the format is in a UTC time")
}

/// `t` as `2025-01-31 23:59:59 UTC`, for a live view's heading.
pub fn utc_now(t: SystemTime) -> String {
    utc(t)
}

fn print_json(value: &Value) {
    println!("{value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_human_units() {
        let cases = [
            (Duration::from_micros(250), "250µs"),
            (Duration::from_millis(850), "850ms"),
            (Duration::from_millis(42_450), "42.5s"),
            (Duration::from_secs(192), "3m12s"),
            (Duration::from_secs(2 * 3_600 + 5 * 60), "2h05m"),
            (Duration::from_secs(3 * 86_400 + 4 * 3_600), "3d04h"),
        ];
        for (d, text) in cases {
            assert_eq!(duration(d), text);
        }
    }

    #[test]
    fn times_read_as_utc_dates() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        let t = UNIX_EPOCH + Duration::from_secs(1_709_251_199); // the day before a leap day
        assert_eq!(utc(t), "2024-02-29 23:59:59 UTC");
    }
}
