//! What goes wrong in the Redis layer, in the layer's own terms ([`Failure`]), and what the
//! limiter is told about it ([`Failure::into_backend_error`], the one place that words a
//! [`BackendError`]).
//!
//! Routing (send again, follow a redirect, read the slot map again, ask the sentinels
//! again) branches on a [`Failure`], which the layer makes from what it saw itself: a
//! connect that failed, a connection that broke before or after the command was written
//! (the [write counter](super::write_counter)), or the error code that starts Redis's
//! answer (`MOVED`, `ASK`, `READONLY`, `NOSCRIPT`). How redis-rs classifies its errors
//! never decides where a command goes; it only helps word the message.

use std::borrow::Cow;
use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerError, Value};

use super::breaker::Health;
use crate::{BackendError, BackendErrorKind};

#[derive(Clone, Debug)]
pub(super) enum Failure {
    /// No connection could be made (refused, unreachable, too slow, its setup or TLS
    /// refused), or a question on one got no answer: nothing was counted.
    Unreachable(RedisError),
    /// The connection broke before anything was written on it: the command did not run.
    Unsent(RedisError),
    /// The connection broke after the command may have been written: it may have run.
    Interrupted(RedisError),
    /// `MOVED`: the key's slot is served by the node at this `host:port` from now on. The
    /// command did not run.
    Moved(Box<str>),
    /// `ASK`: the key's slot is being migrated; this command goes to the node at this
    /// `host:port`, after `ASKING`. It did not run.
    Ask(Box<str>),
    /// `READONLY`: the server is a replica now (its master was failed over). The command
    /// did not run.
    ReadOnly(ServerError),
    /// `NOSCRIPT`: the server does not know the script. Nothing ran.
    NoScript,
    /// Another error answer: the command did not run, or the script stopped with an error.
    Answer(ServerError),
    /// Redis answered something the command never answers.
    Unexpected(Cow<'static, str>),
    /// The topology knows no server for the key now (no master serves its slot, no
    /// sentinel answered).
    NoServer(&'static str),
    /// The sentinels do not know the master named in the URL.
    UnknownMaster,
    /// Redis redirected the command more times than a change of masters explains.
    Redirects,
    /// A connection cannot be made without a Tokio runtime (none, or it is shutting down).
    NoRuntime(&'static str),
    /// No answer within the check's timeout.
    Timeout,
    /// The server's circuit breaker is open: the command was not sent. Says why.
    BreakerOpen(String),
}

impl Failure {
    /// `reply`, or the failure it is when Redis answered with an error.
    pub fn from_reply(reply: Value) -> Result<Value, Failure> {
        let Value::ServerError(err) = reply else {
            return Ok(reply);
        };
        // `MOVED <slot> <host:port>`, `ASK <slot> <host:port>`.
        let address = || {
            let detail = err.details()?;
            Some(Box::<str>::from(detail.split_ascii_whitespace().nth(1)?))
        };
        Err(match err.code() {
            "MOVED" => address().map_or(Failure::Answer(err.clone()), Failure::Moved),
            "ASK" => address().map_or(Failure::Answer(err.clone()), Failure::Ask),
            "READONLY" => Failure::ReadOnly(err),
            "NOSCRIPT" => Failure::NoScript,
            _ => Failure::Answer(err),
        })
    }

    /// Whether the server refused a command that a script called (`TIME`, on servers that
    /// refuse it in scripts or have it renamed away): the script stopped there, before any
    /// write.
    pub fn refuses_a_command_in_scripts(&self) -> bool {
        let Failure::Answer(err) = self else {
            return false;
        };
        err.code() == "ERR"
            && names_a_command_refused_in_a_script(err.details().unwrap_or_default())
    }

    /// What this failure of a call says about the server it was sent to.
    pub fn health(&self) -> Health {
        match self {
            Failure::Unreachable(_) | Failure::Interrupted(_) | Failure::Timeout => Health::Failed,
            // Refusing the limiter: every call would be refused alike. Other error answers
            // (a busy server's included) come back in a round trip, not a timeout.
            Failure::Answer(err) => match err.code() {
                "NOPERM" | "NOAUTH" | "WRONGPASS" => Health::Failed,
                _ => Health::Answered,
            },
            Failure::Moved(_)
            | Failure::Ask(_)
            | Failure::ReadOnly(_)
            | Failure::NoScript
            | Failure::Unexpected(_) => Health::Answered,
            Failure::Unsent(_)
            | Failure::NoServer(_)
            | Failure::UnknownMaster
            | Failure::Redirects
            | Failure::NoRuntime(_)
            | Failure::BreakerOpen(_) => Health::Unknown,
        }
    }

    /// What the limiter reports: the kind, and a message that names the server (`shown`)
    /// and the key, never the URL. Redis's (or redis-rs's) error is the source, and its text
    /// ends the message. `timeout` is the check's.
    pub fn into_backend_error(self, shown: &str, key: &str, timeout: Duration) -> BackendError {
        let unreachable = || format!("cannot reach {shown}; is it running?");
        let (kind, detail, source) = match self {
            Failure::Interrupted(err) => (
                BackendErrorKind::Unavailable,
                format!(
                    "cannot reach {shown}; is it running? The connection broke while `{key}` was \
                     checked, so the check may have been counted; it was not sent again"
                ),
                Some(err),
            ),
            Failure::Unreachable(err) | Failure::Unsent(err) => {
                let (kind, detail) = match err.kind() {
                    ErrorKind::Io if err.is_timeout() => (
                        BackendErrorKind::Timeout,
                        format!("{shown} did not answer in time"),
                    ),
                    ErrorKind::Io => (BackendErrorKind::Unavailable, unreachable()),
                    ErrorKind::AuthenticationFailed => refused(shown),
                    // A TLS certificate that is not trusted, no trusted roots: retrying
                    // cannot help.
                    ErrorKind::InvalidClientConfig => (
                        BackendErrorKind::Misconfigured,
                        format!("cannot connect to {shown} as configured"),
                    ),
                    _ => match err.code() {
                        Some(code) => answered(code, err.detail().unwrap_or_default(), shown, key),
                        None => (BackendErrorKind::Unavailable, unreachable()),
                    },
                };
                (kind, detail, Some(err))
            }
            Failure::Moved(_) | Failure::Ask(_) | Failure::Redirects => (
                BackendErrorKind::Unavailable,
                format!(
                    "{shown} kept redirecting the check of `{key}` to other nodes (its slots are \
                     moving); it did not run"
                ),
                None,
            ),
            Failure::ReadOnly(err) | Failure::Answer(err) => {
                let (kind, detail) =
                    answered(err.code(), err.details().unwrap_or_default(), shown, key);
                (kind, detail, Some(err.into()))
            }
            Failure::NoScript => (
                BackendErrorKind::Command,
                format!("{shown} does not keep the rate-limit script (NOSCRIPT after EVAL)"),
                None,
            ),
            Failure::Unexpected(what) => (
                BackendErrorKind::Command,
                format!("{shown} failed the rate-limit check of `{key}`: {what}"),
                None,
            ),
            Failure::NoServer(why) => (
                BackendErrorKind::Unavailable,
                format!("{shown} cannot serve `{key}` now: {why}"),
                None,
            ),
            Failure::UnknownMaster => (
                BackendErrorKind::Misconfigured,
                format!(
                    "the sentinels do not know {shown}; check the name after the hosts \
                     (`…/master_name`) against `sentinel monitor` in their configuration"
                ),
                None,
            ),
            Failure::NoRuntime(why) => (BackendErrorKind::Command, why.to_owned(), None),
            Failure::Timeout => return BackendError::timeout(timeout),
            Failure::BreakerOpen(why) => (BackendErrorKind::Unavailable, why, None),
        };
        let err = BackendError::new(kind, detail);
        match source {
            Some(source) => err.with_source(source),
            None => err,
        }
    }
}

/// The kind and message of Redis's error answer: its `code` and the `detail` after it.
fn answered(code: &str, detail: &str, shown: &str, key: &str) -> (BackendErrorKind, String) {
    if refuses_scripts(code, detail) {
        return (
            BackendErrorKind::Misconfigured,
            format!(
                "{shown} refuses Lua scripts, and every check is one script (EVALSHA, EVAL): \
                 allow them for the limiter's user (ACL `+evalsha +eval`, or `+@scripting`), \
                 or use a server that runs scripts"
            ),
        );
    }
    match code {
        "LOADING" | "TRYAGAIN" | "MASTERDOWN" | "CLUSTERDOWN" | "READONLY" => (
            BackendErrorKind::Unavailable,
            format!("{shown} cannot serve writes right now"),
        ),
        "NOPERM" | "NOAUTH" | "WRONGPASS" => refused(shown),
        "WRONGTYPE" => (
            BackendErrorKind::Command,
            format!(
                "key `{key}` holds a value of another type (another algorithm's state, or data \
                 the limiter did not write); use one algorithm per key"
            ),
        ),
        _ => (
            BackendErrorKind::Command,
            format!("{shown} failed the rate-limit check of `{key}`"),
        ),
    }
}

/// Whether an error answer refuses the scripts themselves: `EVALSHA` or `EVAL` unknown (renamed
/// away), or not permitted to the user, or a command a script called refused even with
/// this process's clock (so not `TIME`).
fn refuses_scripts(code: &str, detail: &str) -> bool {
    let lower = detail.to_ascii_lowercase();
    let script_command = ["'evalsha'", "'eval'"]
        .iter()
        .any(|name| lower.contains(name));
    (script_command && (code == "NOPERM" || lower.contains("unknown command")))
        || names_a_command_refused_in_a_script(detail)
}

/// Whether Redis's error `detail` says a script called a command it may not: renamed away
/// (`Unknown Redis command called from script`), refused to scripts (`... not allowed from
/// script`), or refused to the user by an ACL (Redis: `The user executing the script can't
/// run this command`; Valkey: `ACL failure in script`).
fn names_a_command_refused_in_a_script(detail: &str) -> bool {
    [
        "command called from script",
        "not allowed from script",
        "executing the script can't run",
        "ACL failure in script",
    ]
    .iter()
    .any(|words| detail.contains(words))
}

fn refused(shown: &str) -> (BackendErrorKind, String) {
    (
        BackendErrorKind::Misconfigured,
        format!(
            "{shown} refused the limiter; check the user and password in the URL and the \
             user's ACL (it needs EVALSHA, EVAL and DEL)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis's error answer `text`, as a connection reads it.
    fn server_error(text: &str) -> Value {
        let resp = format!("-{text}\r\n");
        let value = redis::parse_redis_value(resp.as_bytes()).expect("a RESP error");
        assert!(matches!(value, Value::ServerError(_)), "{value:?}");
        value
    }

    #[test]
    fn a_command_refused_in_a_script_is_told_from_scripts_refused() {
        let time = Failure::from_reply(server_error(
            "ERR Unknown Redis command called from script script: 104ae65d, on @user_script:1.",
        ))
        .unwrap_err();
        assert!(time.refuses_a_command_in_scripts());
        let elsewhere =
            Failure::from_reply(server_error("ERR value is not an integer")).unwrap_err();
        assert!(!elsewhere.refuses_a_command_in_scripts());

        let misconfigured = |text| {
            let failure = Failure::from_reply(server_error(text)).unwrap_err();
            let err = failure.into_backend_error("redis://127.0.0.1:6379", "k", Duration::ZERO);
            (err.kind(), err.to_string())
        };
        let (kind, text) =
            misconfigured("NOPERM User limiter has no permissions to run the 'evalsha' command");
        assert_eq!(kind, BackendErrorKind::Misconfigured);
        assert!(
            text.contains("refuses Lua scripts") && text.contains("+@scripting"),
            "{text}"
        );
        let (kind, _) = misconfigured("ERR unknown command 'EVALSHA', with args beginning with: ");
        assert_eq!(kind, BackendErrorKind::Misconfigured);
        // A refusal seen again with this process's clock is not about TIME: scripts are refused.
        let (kind, _) = misconfigured("ERR This Redis command is not allowed from script");
        assert_eq!(kind, BackendErrorKind::Misconfigured);
    }

    #[test]
    fn redirects_and_refusals_are_read_from_the_error_code() {
        let moved = Failure::from_reply(server_error("MOVED 3999 127.0.0.1:6381"));
        assert!(matches!(moved, Err(Failure::Moved(a)) if &*a == "127.0.0.1:6381"));
        let ask = Failure::from_reply(server_error("ASK 3999 10.0.0.2:7000"));
        assert!(matches!(ask, Err(Failure::Ask(a)) if &*a == "10.0.0.2:7000"));
        let readonly = server_error("READONLY You can't write against a read only replica.");
        assert!(matches!(
            Failure::from_reply(readonly),
            Err(Failure::ReadOnly(_))
        ));
        let noscript = server_error("NOSCRIPT No matching script.");
        assert!(matches!(
            Failure::from_reply(noscript),
            Err(Failure::NoScript)
        ));
        let wrongtype = server_error("WRONGTYPE Operation against a key");
        let Err(failure) = Failure::from_reply(wrongtype) else {
            panic!("an error answer")
        };
        let err = failure.into_backend_error("Redis at h:1", "k", Duration::from_millis(100));
        assert_eq!(err.kind(), BackendErrorKind::Command);
        assert!(err.to_string().contains("another type"), "{err}");
        assert!(matches!(
            Failure::from_reply(Value::Int(7)),
            Ok(Value::Int(7))
        ));
    }

    #[test]
    fn what_counts_against_a_server_is_silence_and_refusal() {
        let health = |text| {
            Failure::from_reply(server_error(text))
                .unwrap_err()
                .health()
        };
        assert_eq!(health("CLUSTERDOWN The cluster is down"), Health::Answered);
        assert_eq!(health("LOADING Redis is loading"), Health::Answered);
        assert_eq!(
            health("WRONGTYPE Operation against a key"),
            Health::Answered
        );
        assert_eq!(health("MOVED 1 h:1"), Health::Answered);
        assert_eq!(
            health("NOPERM this user has no permissions"),
            Health::Failed
        );
        let io = || RedisError::from(std::io::Error::other("reset"));
        assert_eq!(Failure::Unreachable(io()).health(), Health::Failed);
        assert_eq!(Failure::Interrupted(io()).health(), Health::Failed);
        assert_eq!(Failure::Timeout.health(), Health::Failed);
        assert_eq!(Failure::Unsent(io()).health(), Health::Unknown);
    }

    #[test]
    fn a_malformed_redirect_is_an_answer() {
        let moved = Failure::from_reply(server_error("MOVED nowhere"));
        assert!(matches!(moved, Err(Failure::Answer(_))));
    }

    #[test]
    fn messages_name_the_server_and_the_key() {
        let busy = Failure::from_reply(server_error("LOADING Redis is loading"))
            .unwrap_err()
            .into_backend_error("Redis at h:1", "k", Duration::from_millis(100));
        assert_eq!(busy.kind(), BackendErrorKind::Unavailable);
        assert!(busy
            .to_string()
            .starts_with("Redis at h:1 cannot serve writes"));
        let interrupted = Failure::Interrupted(std::io::Error::other("reset").into())
            .into_backend_error("Redis at h:1", "k", Duration::from_millis(100));
        assert_eq!(interrupted.kind(), BackendErrorKind::Unavailable);
        assert!(interrupted.to_string().contains("may have been counted"));
        let refused = Failure::from_reply(server_error("WRONGPASS invalid username-password"))
            .unwrap_err()
            .into_backend_error("Redis at h:1", "k", Duration::from_millis(100));
        assert_eq!(refused.kind(), BackendErrorKind::Misconfigured);
        assert!(refused.to_string().contains("password"));
    }
}
