//! End to end: the `llm_gateway` example's app served on loopback, its limiter the global
//! one on a real `redis-server`.

mod support;

#[allow(dead_code)] // the example's `main` is not run here
#[path = "../examples/llm_gateway.rs"]
mod llm_gateway;

use redis_ratelimit::Limiter;
use reqwest::StatusCode;
use support::http::{client_from, serve_axum};

/// A reservation above the sliding log's 10,000 units a check is served: the example's
/// rules take any `max_tokens` up to the minute's 90,000, and an empty one is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_tokens_above_ten_thousand_is_served() {
    let limiter = Limiter::redis(support::process_server_url()).unwrap();
    redis_ratelimit::init(limiter).unwrap();
    let served = serve_axum(llm_gateway::app(), "127.0.0.1");
    let client = client_from("127.0.0.1");
    let complete = |max_tokens: u64| {
        let body =
            serde_json::json!({ "prompt": "a haiku about limits", "max_tokens": max_tokens });
        let url = format!("{}/v1/completions", served.base);
        let request = client.post(url).header("x-user-id", "ann");
        request
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };

    let answer = complete(16_000).await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let completion: llm_gateway::Completion =
        serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    assert_eq!(completion.usage.total_tokens, 4 + 8);

    assert_eq!(complete(0).await.unwrap().status(), StatusCode::BAD_REQUEST);
}
