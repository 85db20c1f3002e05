//! A third-party API on loopback, for the outbound middleware's tests: an axum server on a
//! listener bound to port 0 (and kept), recording when each request arrives, answering
//! `200 ok`, or, for `/busy?status=429&retry_after=2`, that status with that `Retry-After`
//! and the body `slow down`.
//!
//! Included by `tests/outbound.rs` with `#[path]`: only that test needs it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;

/// One request as the API saw it.
#[derive(Clone, Debug)]
pub struct Arrival {
    /// When it arrived.
    pub at: Instant,
    /// Its path and query.
    pub target: String,
}

/// The API, served until the runtime it was started in ends.
#[derive(Clone)]
pub struct FakeApi {
    /// `http://127.0.0.1:{port}`.
    pub base: String,
    /// The port it listens on.
    pub port: u16,
    arrivals: Arc<Mutex<Vec<Arrival>>>,
}

impl FakeApi {
    /// Starts it on 127.0.0.1, port 0. Call it inside the runtime that is to serve it.
    pub fn start() -> FakeApi {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new().fallback(answer).with_state(arrivals.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
        FakeApi {
            base: format!("http://127.0.0.1:{port}"),
            port,
            arrivals,
        }
    }

    /// `base` followed by `target` (a path and query).
    pub fn url(&self, target: &str) -> String {
        format!("{}{target}", self.base)
    }

    /// Every request so far, in order of arrival.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().unwrap().clone()
    }

    /// The requests so far whose path and query start with `prefix`.
    pub fn arrivals_at(&self, prefix: &str) -> Vec<Arrival> {
        let mut arrivals = self.arrivals();
        arrivals.retain(|a| a.target.starts_with(prefix));
        arrivals
    }
}

async fn answer(State(arrivals): State<Arc<Mutex<Vec<Arrival>>>>, request: Request) -> Response {
    let at = Instant::now();
    let uri = request.uri();
    let target = uri
        .path_and_query()
        .map_or(uri.path().to_owned(), |pq| pq.as_str().to_owned());
    arrivals.lock().unwrap().push(Arrival {
        at,
        target: target.clone(),
    });
    if uri.path() != "/busy" {
        return "ok".into_response();
    }
    let mut status = StatusCode::TOO_MANY_REQUESTS;
    let mut retry_after = None;
    for pair in uri.query().unwrap_or("").split('&') {
        match pair.split_once('=') {
            Some(("status", code)) => status = code.parse().expect("a status code"),
            Some(("retry_after", value)) => {
                retry_after = Some(value.replace("%20", " ").replace("%2C", ","))
            }
            _ => {}
        }
    }
    let mut response = (status, "slow down").into_response();
    if let Some(value) = retry_after {
        let value = HeaderValue::from_str(&value).expect("a header value");
        response.headers_mut().insert("retry-after", value);
    }
    response
}

/// The most arrivals any span of `span` (from one arrival on) holds.
pub fn most_in_any(arrivals: &[Arrival], span: Duration) -> usize {
    let mut times: Vec<Instant> = arrivals.iter().map(|a| a.at).collect();
    times.sort();
    (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|&&t| t - times[i] < span)
                .count()
        })
        .max()
        .unwrap_or(0)
}
