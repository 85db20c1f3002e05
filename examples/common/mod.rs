//! What the server examples share: their stand-in for authentication, and what they read
//! from their environment.

/// The caller, as the authentication middleware found it.
#[derive(Clone, Debug)]
pub struct UserId(pub String);

/// A stand-in for real authentication (a session cookie, a verified token): it believes the
/// `x-user-id` header (given its text), which any client can send. Anonymous requests go
/// on, so that the examples show what a `USER_ID` route does with them (500: no user id);
/// a real app answers 401 before they reach such a route.
pub fn toy_authentication(x_user_id: Option<&str>) -> Option<UserId> {
    x_user_id.map(|id| UserId(id.to_owned()))
}

/// Logs to stderr at the level `RUST_LOG` sets (default `info`).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
        .init();
}

/// `LISTEN`, the address to serve on, or `default`.
pub fn listen_address(default: &str) -> String {
    std::env::var("LISTEN").unwrap_or_else(|_| default.into())
}

/// `TRUSTED_PROXIES` (`10.0.0.0/8,192.168.0.0/16`): the proxies whose forwarded client
/// address is believed; none when unset.
pub fn trusted_proxies() -> Vec<String> {
    match std::env::var("TRUSTED_PROXIES") {
        Ok(networks) => networks.split(',').map(str::to_owned).collect(),
        Err(_) => Vec::new(),
    }
}
