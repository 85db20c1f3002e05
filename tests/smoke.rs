mod support;

#[test]
fn harness_starts_a_real_redis() {
    let server = support::RedisServer::start();
    let mut conn = server.connection();
    let pong: String = redis::cmd("PING").query(&mut conn).unwrap();
    assert_eq!(pong, "PONG");
}
