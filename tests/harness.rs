//! The test topologies themselves behave as their docs say: a TLS port that speaks only
//! TLS, a cluster that routes and fails over, sentinels that fail over.

mod support;

use redis::Commands;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;
use support::cluster::RedisCluster;
use support::sentinel::RedisSentinels;
use support::tls::TlsRedisServer;
use support::{info_field, query, wait_until, ScratchDir, Topology};

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

#[test]
fn cluster_routes_keys_to_three_masters_and_fails_over() {
    let mut cluster = RedisCluster::start();
    assert_eq!(cluster.ports().len(), 6);
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3, "{masters:?}");
    let seeds: Vec<u16> = cluster
        .url()
        .trim_start_matches("redis+cluster://")
        .split(',')
        .map(|seed| port_of(&format!("redis://{seed}")))
        .collect();
    assert_eq!(seeds, masters);

    // Keys spread over all three masters; a master answers MOVED for a key it does not own.
    let mut owners: Vec<(String, u16)> = Vec::new();
    for key in (0..100).map(|i| format!("key{i}")) {
        let master = cluster.master_of(&key);
        if owners.iter().all(|(_, m)| *m != master) {
            owners.push((key, master));
        }
    }
    assert_eq!(owners.len(), 3, "{owners:?}");
    let (key, master) = owners[0].clone();
    let () = cluster.connection(master).set(&key, "v").unwrap();
    let moved = cluster.connection(owners[1].1).get::<_, String>(&key);
    assert_eq!(moved.unwrap_err().code(), Some("MOVED"));

    // After a failover the replica serves the key, with its value; the old master follows it.
    let replica = cluster.replica_of(master);
    wait_until(
        "the write to reach the replica",
        Duration::from_secs(30),
        || {
            let mut con = cluster.connection(replica);
            let () = redis::cmd("READONLY").query(&mut con).unwrap();
            con.get::<_, Option<String>>(&key)
                .unwrap()
                .ok_or_else(|| "not yet".to_owned())
        },
    );
    assert_eq!(cluster.failover(master), replica);
    assert_eq!(cluster.master_of(&key), replica);
    let value: String = cluster.connection(replica).get(&key).unwrap();
    assert_eq!(value, "v");
    assert!(!cluster.masters().contains(&master));
    assert_eq!(cluster.replica_of(replica), master);

    // A crashed master is replaced by its replica.
    let (other_key, other_master) = owners[2].clone();
    let other_replica = cluster.replica_of(other_master);
    cluster.kill(other_master);
    assert_eq!(cluster.ports().len(), 5);
    cluster.wait_until_ok();
    assert_eq!(cluster.master_of(&other_key), other_replica);
}

#[test]
fn sentinel_failover_moves_the_master_and_demotes_the_old_one() {
    let sentinels = RedisSentinels::start();
    let (master, replica) = (sentinels.master(), sentinels.replica());
    assert_ne!(master, replica);

    let (old, new) = sentinels.failover();
    assert_eq!((old, new), (master, replica));
    assert_eq!(sentinels.master(), new);
    assert_eq!(sentinels.replica(), old);

    let ports: Vec<u16> = sentinels
        .url()
        .trim_start_matches("redis+sentinel://")
        .trim_end_matches(&format!("/{}", RedisSentinels::MASTER_NAME))
        .split(',')
        .map(|s| port_of(&format!("redis://{s}")))
        .collect();
    assert_eq!(ports.len(), 3);
    for sentinel in ports {
        wait_until(
            "every sentinel to report the new master",
            Duration::from_secs(30),
            || {
                let (_, port): (String, u16) = query(
                    sentinel,
                    redis::cmd("SENTINEL")
                        .arg("GET-MASTER-ADDR-BY-NAME")
                        .arg(RedisSentinels::MASTER_NAME),
                )?;
                (port == new).then_some(()).ok_or(format!("{port}"))
            },
        );
    }
    wait_until(
        "the old master to replicate the new one",
        Duration::from_secs(30),
        || {
            // The sentinels' reconfiguration kills its clients: a query may fail.
            let info: String = query(old, redis::cmd("INFO").arg("replication"))?;
            let role = info_field(&info, "role");
            let of = info_field(&info, "master_port");
            (role == Some("slave") && of == Some(&new.to_string()))
                .then_some(())
                .ok_or(format!("role {role:?}, master_port {of:?}"))
        },
    );
}
