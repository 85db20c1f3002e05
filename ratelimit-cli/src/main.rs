//! `ratelimit`: the operator's command for redis-ratelimit.
//!
//! Reads and resets keys, and sets the rule overrides, modes and bans every instance reads
//! from the `{prefix}rules` and `{prefix}bans` hashes, through the library itself: its URLs and connections
//! (`Limiter::redis`), its decoding of a key's state (`Limiter::inspect`), its rule grammar
//! and its reading of stored overrides (`Limiter::stored_overrides`).
//!
//! Exit status: 0 done; 2 a usage error (a bad flag, rule text or mode, no URL; nothing
//! was written); 1 Redis failed. Errors go to stderr, data to stdout.

mod show;
mod top;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use redis_ratelimit::{key, BackendError, Limiter, Mode, OverrideError, Rule, Setting};

/// Where the URL comes from when `--url` is not given.
const URL_ENV: &str = redis_ratelimit::REDIS_URL_ENV;

/// How long one command may wait for Redis: long enough for a loaded server, short enough
/// that a black-holed one is reported soon.
const TIMEOUT: Duration = Duration::from_secs(5);

const AFTER_HELP: &str = "\
URLs: redis://[[user]:password@]host[:port][/db], rediss://... (TLS),
      redis+cluster://host:port[,host:port...], redis+sentinel://host:port[,...]/master[/db],
      unix:///path/to/redis.sock[?db=N]

Exit status: 0 done, 2 usage error (nothing written), 1 Redis failed.

Examples:
  ratelimit inspect 'rate_limit:ip:203.0.113.9:my_app::send_code'
  ratelimit rules set my_app::send_code '5/minute, 20/hour'
  ratelimit mode my_app::send_code off
  ratelimit block 'rate_limit:out:payments-api' '15 minutes'
  ratelimit ban ip:203.0.113.0/24 '1 hour'
  ratelimit top my_app::login --since 1h -n 20 --watch";

/// Operate redis-ratelimit: read and reset keys, and set the rule overrides and modes that
/// every instance reads from Redis.
#[derive(Parser)]
#[command(name = "ratelimit", version, after_help = AFTER_HELP)]
struct Cli {
    /// The Redis the limiters use, in any form `Limiter::redis` takes (`ratelimit --help`
    /// lists them).
    #[arg(long, global = true, env = URL_ENV, hide_env_values = true, value_name = "URL")]
    url: Option<String>,
    /// The key prefix of the sites (the attribute's `key`): overrides live in `{prefix}rules`.
    #[arg(
        long,
        global = true,
        env = "RATELIMIT_PREFIX",
        hide_env_values = true,
        default_value = redis_ratelimit::key::DEFAULT_PREFIX,
        value_name = "PREFIX"
    )]
    prefix: String,
    /// Trust the CA certificates in this PEM file for a TLS URL, instead of the system's.
    #[cfg(feature = "tls")]
    #[arg(long, global = true, value_name = "PATH")]
    tls_ca: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// What a key holds: algorithm, each rule's used / count, when it frees up, a block.
    ///
    /// The fixed window, sliding window and token bucket store each rule's count with its
    /// state. The sliding log stores only the times of its entries: its rules are taken
    /// from `--rules`, else from the override stored for the key's site path; without
    /// either, only the entries are shown.
    ///
    /// Example: ratelimit inspect 'rate_limit:user:42:my_app::export' --json | jq .rules
    Inspect {
        /// The key, e.g. `rate_limit:ip:203.0.113.9:my_app::send_code`.
        key: String,
        /// The rules to count a sliding log's entries under (rule text, e.g. "5/minute").
        #[arg(long, value_name = "RULES")]
        rules: Option<String>,
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Forget a key: everything counted for it, and any block.
    ///
    /// Example: ratelimit reset 'rate_limit:ip:203.0.113.9:my_app::send_code'
    Reset {
        /// The key.
        key: String,
    },
    /// Block a key for a while: every check of it is refused until then, by every
    /// instance, with the time left as `retry_after`.
    ///
    /// The block a refusal with `block_for` starts (or an API's `Retry-After` through the
    /// outbound middleware), kept with the key's state, whatever its algorithm; a key with
    /// no state yet is blocked too. A longer block already in place stays. `ratelimit reset
    /// KEY` lifts it.
    ///
    /// Example: ratelimit block 'rate_limit:out:payments-api' '15 minutes'
    Block {
        /// The key, e.g. `rate_limit:ip:203.0.113.9:my_app::send_code`.
        key: String,
        /// How long, in the rules' units: "15 minutes", "900s", "1 hour", "500ms".
        #[arg(value_parser = parse_duration)]
        duration: Duration,
    },
    /// Ban an identity or a network from every site, on every instance, for a while.
    ///
    /// Every guarded check whose key has the identity is refused, whatever its counts,
    /// with the time left as `retry_after`. Identities: ip:ADDRESS, ip:NETWORK/BITS (IPv4
    /// or IPv6, /8 or /16 at widest), user:ID, custom:VALUE (unescaped, as the guarded
    /// call gives it), global. Stored in `{prefix}bans`; instances apply it within their
    /// poll interval. Banning again sets the ban's end anew; a ban lasts 100 years at most.
    ///
    /// Example: ratelimit ban ip:203.0.113.0/24 '1 hour'
    Ban {
        /// ip:203.0.113.9, ip:203.0.113.0/24, ip:2001:db8::/48, user:42, custom:alice, global.
        identity: String,
        /// How long, in the rules' units: "15 minutes", "900s", "1 hour", "2 days".
        #[arg(value_parser = parse_duration)]
        duration: Duration,
    },
    /// Lift the ban on an identity, on every instance within its poll interval.
    ///
    /// Example: ratelimit unban ip:203.0.113.0/24
    Unban {
        /// The identity, as banned.
        identity: String,
    },
    /// Every ban in force, and how long each lasts still.
    ///
    /// Example: ratelimit bans --json | jq '.bans[].identity'
    Bans(ListArgs),
    /// The identities of a site with the most refusals, across every instance.
    ///
    /// Each instance counts its site's refusals (the deny cache's too) and sends them every
    /// second: they show within 2 s. Exact while the site refuses at most 1,000 identities
    /// a minute; past that each minute keeps its 1,000 heaviest. Identities read
    /// `ip:203.0.113.9`, `user:42`, `custom:alice` or `global`. `--watch` redraws the
    /// table every second until q, Esc or Ctrl-C.
    ///
    /// Example: ratelimit top my_app::login --since 1h -n 20 --watch
    Top {
        /// The site's path: the function's path or its `name`, as in its keys.
        site: String,
        /// How far back: whole minutes, at most an hour ("15m", "90s", "1 hour").
        #[arg(long, default_value = "15m", value_parser = parse_since)]
        since: Duration,
        /// How many identities.
        #[arg(short = 'n', value_name = "N", default_value_t = 10)]
        n: usize,
        /// Print one JSON document instead of a table.
        #[arg(long, conflicts_with = "watch")]
        json: bool,
        /// Redraw the table every second, as a live view (q, Esc or Ctrl-C quits).
        #[arg(long)]
        watch: bool,
    },
    /// The rule overrides stored in `{prefix}rules`, read by every instance.
    #[command(subcommand)]
    Rules(RulesCommand),
    /// Set a site's mode for every instance: enforce, shadow (count, never refuse) or off.
    ///
    /// Writes the field `{path}#mode` of `{prefix}rules`. `ratelimit rules clear
    /// 'PATH#mode'` removes it.
    ///
    /// Example: ratelimit mode my_app::send_code off
    Mode {
        /// The site's path: the function's path or its `name`, as in its keys.
        path: String,
        /// enforce, shadow or off.
        #[arg(value_parser = parse_mode)]
        mode: Mode,
    },
}

#[derive(Subcommand)]
enum RulesCommand {
    /// Every field of `{prefix}rules`, and what the instances make of it.
    ///
    /// Example: ratelimit rules list --json
    List(ListArgs),
    /// A site's fields: its rules, duplicate-submission rule and mode.
    ///
    /// Example: ratelimit rules get my_app::send_code
    Get {
        /// The site's path.
        path: String,
    },
    /// Override a site's rules for every instance, after checking them with the rule
    /// grammar (nothing is written when they do not parse).
    ///
    /// `PATH#duplicate` sets the duplicate-submission rule instead (one rule, or `none`).
    ///
    /// Example: ratelimit rules set my_app::send_code '5/minute, 20/hour'
    Set {
        /// The site's path (or `PATH#duplicate`).
        path: String,
        /// The rules, as the attribute's `rules("...")` takes them.
        rules: String,
    },
    /// Clear a site's overrides: rules, duplicate-submission rule and mode (its compiled
    /// ones are back in force); `PATH#mode` or `PATH#duplicate` clears that field alone.
    ///
    /// Example: ratelimit rules clear my_app::send_code
    Clear {
        /// The site's path, or one of its fields.
        path: String,
    },
}

#[derive(Args)]
struct ListArgs {
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

fn parse_duration(text: &str) -> Result<Duration, ratelimit_rule_text::RuleTextError> {
    ratelimit_rule_text::parse_duration(text)
}

fn parse_since(text: &str) -> Result<Duration, String> {
    let since = parse_duration(text).map_err(|err| err.to_string())?;
    if since > Duration::from_secs(3_600) {
        return Err("at most 1 hour: refusals are kept an hour".to_owned());
    }
    Ok(since)
}

fn parse_mode(text: &str) -> Result<Mode, redis_ratelimit::ParseModeError> {
    text.parse()
}

/// Why a command failed, and so its exit status.
enum Failure {
    /// 2: the command line asked for something that cannot be done; nothing was written.
    Usage(String),
    /// 1: Redis failed.
    Redis(BackendError),
}

impl From<BackendError> for Failure {
    fn from(err: BackendError) -> Self {
        Failure::Redis(err)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(why)) => {
            eprintln!("error: {why}");
            ExitCode::from(2)
        }
        Err(Failure::Redis(err)) => {
            eprintln!("error: {err}");
            eprintln!("{}", show::advice(&err));
            ExitCode::from(1)
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let limiter = limiter(&cli)?;
    let prefix = cli.prefix.as_str();
    let stored = limiter.stored_overrides(prefix);
    match cli.command {
        Command::Inspect { key, rules, json } => {
            let given = rules
                .map(|text| {
                    Rule::parse_list(&text)
                        .map_err(|err| Failure::Usage(format!("--rules {text:?}: {err}")))
                })
                .transpose()?;
            let Some(state) = limiter.inspect(&key).await? else {
                show::no_state(&key, limiter.slots_in_use(&key).await?, json);
                return Ok(());
            };
            let rules = match (state.rules(), given) {
                (stored_with_state, _) if !stored_with_state.is_empty() => {
                    (stored_with_state, show::RulesFrom::State)
                }
                (_, Some(given)) => (
                    given.into_iter().map(|rule| state.rule(rule)).collect(),
                    show::RulesFrom::Flag,
                ),
                (_, None) => match site_rules(&stored, &key, prefix).await? {
                    Some((path, rules)) => (
                        rules.into_iter().map(|rule| state.rule(rule)).collect(),
                        show::RulesFrom::Override(path),
                    ),
                    None => (Vec::new(), show::RulesFrom::Unknown),
                },
            };
            show::key_state(&key, &state, &rules.0, &rules.1, json);
        }
        Command::Reset { key } => {
            limiter.reset(&key).await?;
            println!("reset `{key}`: its counts and any block are gone");
        }
        Command::Block { key, duration } => {
            limiter.block(&key, duration).await?;
            println!(
                "blocked `{key}` for {}: every check is refused until then (a longer block \
                 stays); `ratelimit reset` lifts it",
                show::duration(duration)
            );
        }
        Command::Ban { identity, duration } => {
            limiter
                .ban_under(prefix, &identity, duration)
                .await
                .map_err(usage_or_redis)?;
            println!(
                "{prefix}bans: banned `{identity}` for {} at every site; instances apply it \
                 within their poll interval (about a second by default)",
                show::duration(duration)
            );
        }
        Command::Unban { identity } => {
            limiter
                .unban_under(prefix, &identity)
                .await
                .map_err(usage_or_redis)?;
            println!("{prefix}bans: `{identity}` is not banned");
        }
        Command::Bans(ListArgs { json }) => {
            let hash = format!("{prefix}bans");
            show::bans(&hash, &limiter.bans_under(prefix).await?, json);
        }
        Command::Rules(RulesCommand::List(ListArgs { json })) => {
            show::overrides(stored.hash(), &stored.list().await?, json);
        }
        Command::Rules(RulesCommand::Get { path }) => {
            let fields = stored.get(&path).await?;
            if fields.is_empty() {
                println!("no override of `{path}` in {}", stored.hash());
            }
            for field in fields {
                println!("{} = {}", field.field, field.value);
            }
        }
        Command::Rules(RulesCommand::Set { path, rules }) => {
            let setting = stored.set(&path, &rules).await.map_err(|err| match err {
                OverrideError::Invalid { reason, .. } => {
                    Failure::Usage(format!("not written: {rules:?} for `{path}`: {reason}"))
                }
                OverrideError::Backend(err) => Failure::Redis(err),
                _ => Failure::Usage(err.to_string()),
            })?;
            println!(
                "{}: `{path}` = {rules:?} ({}); instances apply it within their poll interval \
                 (about a second by default)",
                stored.hash(),
                show::setting(&setting)
            );
        }
        Command::Rules(RulesCommand::Clear { path }) => match stored.clear(&path).await? {
            0 => println!(
                "nothing to clear: no override of `{path}` in {}",
                stored.hash()
            ),
            n => println!(
                "{}: cleared {n} field(s) of `{path}`; its compiled rules and mode are back in \
                 force",
                stored.hash()
            ),
        },
        Command::Top {
            site,
            since,
            n,
            json,
            watch,
        } => {
            let top = top::Top {
                limiter: &limiter,
                prefix,
                site: &site,
                since,
                n,
            };
            if watch {
                top.watch().await.map_err(Failure::Usage)?;
            } else {
                top.once(json).await?;
            }
        }
        Command::Mode { path, mode } => {
            stored.set_mode(&path, mode).await?;
            println!("{}: `{path}#mode` = {mode}", stored.hash());
        }
    }
    Ok(())
}

/// A refused identity is a usage error (nothing was written); anything else, Redis's.
fn usage_or_redis(err: BackendError) -> Failure {
    match err.kind() {
        redis_ratelimit::BackendErrorKind::Misconfigured => Failure::Usage(err.to_string()),
        _ => Failure::Redis(err),
    }
}

/// The limiter on the command's Redis, fail-closed (every error is reported).
fn limiter(cli: &Cli) -> Result<Limiter, Failure> {
    let url = cli.url.as_deref().ok_or_else(|| {
        Failure::Usage(format!(
            "no Redis to talk to: pass --url redis://host:port or set {URL_ENV}"
        ))
    })?;
    let bad_url = |err: redis_ratelimit::ConfigError| Failure::Usage(format!("--url: {err}"));
    let limiter = Limiter::redis(url).map_err(bad_url)?;
    #[cfg(feature = "tls")]
    let limiter = match &cli.tls_ca {
        Some(path) => {
            let pem = std::fs::read(path)
                .map_err(|err| Failure::Usage(format!("--tls-ca {}: {err}", path.display())))?;
            limiter.with_tls_ca(&pem).map_err(bad_url)?
        }
        None => limiter,
    };
    Ok(limiter.fail_open(false).timeout(TIMEOUT))
}

/// The rules stored for the site of `key` (its ordinary rules: the sliding log's count
/// them), with its path, when there is such an override.
async fn site_rules(
    stored: &redis_ratelimit::StoredOverrides<'_>,
    key: &str,
    prefix: &str,
) -> Result<Option<(String, Vec<Rule>)>, BackendError> {
    let Some(path) = key::site_path(key, prefix) else {
        return Ok(None);
    };
    Ok(stored
        .get(path)
        .await?
        .into_iter()
        .find_map(|field| match field.setting {
            Ok(Setting::Rules(rules)) => Some((path.to_owned(), rules)),
            _ => None,
        }))
}
