#[path = "../../tests/support/mod.rs"]
mod support;

#[test]
fn compiles() {
    let _ = support::RedisServer::start();
}
