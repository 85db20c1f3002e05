mod support;

#[test]
fn harness_starts_a_real_server_of_the_kind_asked_for() {
    let server = support::RedisServer::start();
    let mut conn = server.connection();
    let pong: String = redis::cmd("PING").query(&mut conn).unwrap();
    assert_eq!(pong, "PONG");
    // `RATELIMIT_TEST_SERVER=.../valkey-server` runs the suites on Valkey, not on a Redis
    // found some other way.
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).unwrap();
    let binary = std::path::Path::new(support::server_binary());
    let valkey = binary
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("valkey");
    let server_name = support::info_field(&info, "server_name");
    assert_eq!(server_name == Some("valkey"), valkey, "{binary:?}: {info}");
}
