//! The test topologies themselves behave as their docs say: a TLS port that speaks only
//! TLS.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;
use support::tls::TlsRedisServer;
use support::ScratchDir;

fn port_of(url: &str) -> u16 {
    let authority = url.split("://").nth(1).unwrap().trim_end_matches('/');
    authority.rsplit(':').next().unwrap().parse().unwrap()
}

#[test]
fn tls_port_speaks_only_tls_with_the_test_ca() {
    let server = TlsRedisServer::start();
    let tls_port = port_of(&server.url());
    let pong: String = redis::cmd("PING").query(&mut server.connection()).unwrap();
    assert_eq!(pong, "PONG");

    // Plaintext on the TLS port is a failed handshake: the server hangs up, never answers.
    let mut plain = TcpStream::connect(("127.0.0.1", tls_port)).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    plain.write_all(b"PING\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).contains("PONG"),
        "{answer:?}"
    );

    // A verifying TLS client that trusts the CA (and only it) gets through.
    let dir = ScratchDir::new("harness-tls-client");
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, server.ca_pem()).unwrap();
    let cli = |ca: &std::path::Path| {
        let output = Command::new("redis-cli")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &tls_port.to_string(),
                "--tls",
                "--cacert",
            ])
            .arg(ca)
            .arg("PING")
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr)
    };
    assert_eq!(cli(&ca).trim(), "PONG");
    let other_ca = dir.join("other.crt");
    std::fs::write(&other_ca, TlsRedisServer::start().ca_pem()).unwrap();
    assert!(!cli(&other_ca).contains("PONG"));
}
