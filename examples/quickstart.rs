//! A tour of `#[rate_limiter]`: a few guarded handlers called in a loop, printing which
//! calls pass and which are limited, and why.
//!
//! ```text
//! cargo run --example quickstart                                              # embedded backend
//! RATELIMIT_REDIS_URL=redis://127.0.0.1:6379 cargo run --example quickstart   # shared Redis
//! ```

use std::net::IpAddr;
use std::time::Duration;

use redis_ratelimit::context::{self, RequestContext};
use redis_ratelimit::{rate_limiter, RateLimitError};

/// Per phone number: 3 codes per minute, and never twice within 5 seconds.
#[rate_limiter(rules("3/minute"), prevent_duplicate = true, limit_type = CUSTOM, by = phone)]
async fn send_code(phone: &str) -> Result<String, RateLimitError> {
    Ok(format!("code sent to {phone}"))
}

/// Per client IP (read from the request context): 4 per second and 6 per minute.
#[rate_limiter(rules(rule(count = 4, time = 1), rule(count = 6, time = 1, unit = MINUTES)))]
async fn search(query: &str) -> Result<Vec<String>, RateLimitError> {
    Ok(vec![format!("result for {query:?}")])
}

/// Per user id (read from the request context): 2 per 10 seconds.
#[rate_limiter(rules("2 per 10 seconds"), limit_type = USER_ID, message = "slow down on exports")]
async fn export(report: &str) -> Result<String, RateLimitError> {
    Ok(format!("{report}.csv"))
}

/// One budget for everybody: 5 per second.
#[rate_limiter(rules("5/second"), limit_type = GLOBAL)]
async fn status() -> Result<&'static str, RateLimitError> {
    Ok("up")
}

fn show<T: std::fmt::Debug>(call: &str, result: Result<T, RateLimitError>) {
    match result {
        Ok(value) => println!("  pass     {call:<28} -> {value:?}"),
        Err(err) => println!("  limited  {call:<28} -> {err}"),
    }
}

/// Runs `f` as if serving a request from `ip` (and `user`, if any): a web framework
/// integration does this per request.
async fn as_request<F: std::future::Future>(ip: &str, user: Option<&str>, f: F) -> F::Output {
    let mut ctx = RequestContext::new().with_ip(ip.parse::<IpAddr>().expect("a valid IP"));
    if let Some(user) = user {
        ctx = ctx.with_user_id(user);
    }
    context::scope(ctx, f).await
}

#[tokio::main]
async fn main() {
    // Shows the limiter's own warnings, such as which backend the global limiter chose.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let backend = std::env::var(redis_ratelimit::REDIS_URL_ENV)
        .map(|url| format!("Redis at {url}"))
        .unwrap_or_else(|_| "the embedded memory backend".into());
    println!("redis-ratelimit quickstart on {backend}\n");

    println!("send_code: 3/minute per phone, plus 1 per 5 s against duplicate submissions");
    for phone in ["+1 555 0100", "+1 555 0100", "+1 555 0199"] {
        show(&format!("send_code({phone})"), send_code(phone).await);
    }

    println!("\nsearch: 4 per second and 6 per minute per client IP");
    for i in 1..=5 {
        let call = format!("search #{i} from 203.0.113.9");
        show(&call, as_request("203.0.113.9", None, search("rust")).await);
    }
    show(
        "search from 198.51.100.7",
        as_request("198.51.100.7", None, search("rust")).await,
    );
    println!(
        "  ... one second later the per-second window has slid, but 6 per minute still holds:"
    );
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    for i in 6..=8 {
        let call = format!("search #{i} from 203.0.113.9");
        show(&call, as_request("203.0.113.9", None, search("rust")).await);
    }

    println!("\nexport: 2 per 10 s per user");
    for user in ["alice", "alice", "alice", "bob"] {
        show(
            &format!("export by {user}"),
            as_request("203.0.113.9", Some(user), export("sales")).await,
        );
    }
    show(
        "export with no user id",
        as_request("203.0.113.9", None, export("sales")).await,
    );

    println!("\nstatus: 5 per second shared by everyone");
    for i in 1..=7 {
        show(&format!("status #{i}"), status().await);
    }
}
