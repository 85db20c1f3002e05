//! Operating the built service: `--check-config`, a start refused for a bad file,
//! reloading (a file written in place, a ConfigMap's symlink swap, a bad change that keeps
//! the previous configuration), `/healthcheck`, `/metrics`, `grpc.health.v1`, and SIGTERM
//! draining and saving the state file.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::os::unix::fs::symlink;
use std::path::Path;

use common::{command, config_dir, ok, one, over, write, Server, GIVE_UP_AFTER};
use support::{eventually, ScratchDir};

fn limit_of(count: u32) -> String {
    format!(
        "domain: ops\nalgorithm: sliding_log\ndescriptors:\n  - key: user\n    rate_limit: {{unit: hour, requests_per_unit: {count}}}\n"
    )
}

/// The requests_per_unit the service answers for `user`.
async fn limit_in_force(server: &Server, user: &str) -> Result<u32, String> {
    let answer = server.ask(one("ops", &[("user", user)])).await;
    answer.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.requests_per_unit)
        .ok_or_else(|| "no limit".to_owned())
}

/// Polls until the service answers `count` for new users.
async fn until_limit(server: &Server, count: u32) {
    let mut n = 0;
    eventually(
        &format!("the limit {count} to be in force"),
        GIVE_UP_AFTER,
        || {
            n += 1;
            let user = format!("u{n}");
            async move {
                match limit_in_force(server, &user).await? {
                    c if c == count => Ok(()),
                    c => Err(format!("still {c}")),
                }
            }
        },
    )
    .await
}

#[test]
fn check_config_prints_what_it_loaded_and_exits_0() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/server");
    let out = command(&["--config", example.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("domain edge"), "{stdout}");
    assert!(
        stdout.contains("remote_address: 100 per 60s (fixed_window)"),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("api_key: 10 per 1s, 1000 per 3600s, 20000 per calendar month (sliding_log)"),
        "{stdout}"
    );
}

#[test]
fn check_config_prints_every_error_with_its_file_and_line_and_exits_2() {
    let dir = ScratchDir::new("server-check-bad");
    write(
        &dir.join("a.yaml"),
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - value: v\n",
    );
    write(
        &dir.join("b.yml"),
        "domain: a\ndescriptors:\n  - key: k\n    ratelimit: {}\n  - key: r\n    rate_limit:\n      name: me\n      replaces: [{name: me}]\n      unit: second\n      requests_per_unit: 1\n",
    );
    std::fs::create_dir(dir.join("nested")).unwrap();
    write(&dir.join("nested/c.yaml"), "domain: c\ndescriptors: [\n");
    let out = command(&["--config", dir.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let a = dir.join("a.yaml").display().to_string();
    let b = dir.join("b.yml").display().to_string();
    let c = dir.join("nested/c.yaml").display().to_string();
    for expected in [
        format!("{a}:4: invalid rate limit unit 'fortnight'"),
        format!("{a}:5: descriptor has empty key"),
        format!("{b}:1: duplicate domain 'a'"),
        format!("{b}:4: unknown field `ratelimit`"),
        format!("{b}:8: replaces should not contain name of same descriptor"),
        format!("{c}:"),
    ] {
        assert!(stderr.contains(&expected), "no {expected:?} in\n{stderr}");
    }
    assert!(stderr.contains("6 error(s)"), "{stderr}");
}

#[test]
fn a_configuration_that_does_not_load_refuses_to_start_with_status_2() {
    let dir = config_dir(
        "start-bad",
        "x.yaml",
        "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: day}\n",
    );
    let out = command(&[
        "--config",
        dir.to_str().unwrap(),
        "--grpc",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
    ])
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("x.yaml:4: `rate_limit` has no `requests_per_unit`"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_file_written_in_place_is_in_force_without_a_restart_or_losing_counts() {
    let dir = config_dir("reload-in-place", "ops.yaml", &limit_of(3));
    let server = Server::start(&dir, &[]);
    assert_eq!(
        server.ask(one("ops", &[("user", "kept")])).await.statuses[0].limit_remaining,
        2
    );
    write(&dir.join("ops.yaml"), &limit_of(5));
    until_limit(&server, 5).await;
    // The count taken under the old file is still there.
    let answer = server.ask(one("ops", &[("user", "kept")])).await;
    assert_eq!(answer.statuses[0].limit_remaining, 3);
}

#[tokio::test]
async fn a_configmap_symlink_swap_is_in_force() {
    // A ConfigMap's volume: ops.yaml -> ..data/ops.yaml, ..data -> ..v1; an update writes
    // ..v2 and renames a new ..data link over the old one.
    let dir = ScratchDir::new("server-reload-symlink");
    std::fs::create_dir(dir.join("..v1")).unwrap();
    write(&dir.join("..v1/ops.yaml"), &limit_of(3));
    symlink("..v1", dir.join("..data")).unwrap();
    symlink("..data/ops.yaml", dir.join("ops.yaml")).unwrap();
    let server = Server::start(&dir, &[]);
    assert_eq!(limit_in_force(&server, "a").await, Ok(3));
    std::fs::create_dir(dir.join("..v2")).unwrap();
    write(&dir.join("..v2/ops.yaml"), &limit_of(7));
    symlink("..v2", dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    until_limit(&server, 7).await;
}

#[tokio::test]
async fn a_bad_change_keeps_the_configuration_in_force_and_is_counted() {
    let dir = config_dir("reload-bad", "ops.yaml", &limit_of(3));
    let server = Server::start(&dir, &[]);
    write(
        &dir.join("ops.yaml"),
        "domain: ops\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 9}\n",
    );
    eventually("the bad change to be counted", GIVE_UP_AFTER, || async {
        let (_, metrics) = server.get("/metrics").await;
        match metrics
            .lines()
            .find(|l| l.starts_with("ratelimit_server_config_errors_total"))
        {
            Some(line) if line.ends_with(" 1") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(
        server
            .log()
            .contains("ops.yaml:4: invalid rate limit unit 'fortnight'"),
        "{}",
        server.log()
    );
    assert!(server.log().contains("ERROR"), "{}", server.log());
    assert_eq!(limit_in_force(&server, "b").await, Ok(3));
    // A good file after it is taken.
    write(&dir.join("ops.yaml"), &limit_of(4));
    until_limit(&server, 4).await;
}

#[tokio::test]
async fn health_and_metrics_are_served() {
    let dir = config_dir("health", "ops.yaml", &limit_of(1));
    let server = Server::start(&dir, &[]);
    assert_eq!(server.get("/healthcheck").await, (200, "OK\n".to_owned()));
    assert_eq!(server.code("ops", &[("user", "m")]).await, ok());
    assert_eq!(server.code("ops", &[("user", "m")]).await, over());
    server.ask(one("not-configured", &[("user", "m")])).await;
    let (status, metrics) = server.get("/metrics").await;
    assert_eq!(status, 200);
    for expected in [
        "ratelimit_server_requests_total{domain=\"ops\",code=\"OK\"} 1",
        "ratelimit_server_requests_total{domain=\"ops\",code=\"OVER_LIMIT\"} 1",
        "ratelimit_server_requests_total{domain=\"unknown\",code=\"OK\"} 1",
        "ratelimit_server_hits_total{domain=\"ops\",descriptor=\"user\",result=\"near_limit\"} 1",
        "ratelimit_server_hits_total{domain=\"ops\",descriptor=\"user\",result=\"over_limit\"} 1",
        "ratelimit_server_request_duration_seconds",
        "ratelimit_checks_total",
    ] {
        assert!(metrics.contains(expected), "no {expected:?} in\n{metrics}");
    }
    assert!(
        !metrics.contains("not-configured"),
        "a request's domain is no label"
    );

    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let serving = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "envoy.service.ratelimit.v3.RateLimitService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        serving.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

#[tokio::test]
async fn sigterm_exits_0_and_saves_the_state_file_that_the_next_start_restores() {
    let dir = config_dir("sigterm", "ops.yaml", &limit_of(3));
    let state = dir.join("state.bin");
    let state_arg = state.to_str().unwrap().to_owned();
    let server = Server::start(&dir, &["--state-file", &state_arg]);
    for remaining in [2, 1] {
        assert_eq!(
            server.ask(one("ops", &[("user", "s")])).await.statuses[0].limit_remaining,
            remaining
        );
    }
    let status = server.stop_with(libc::SIGTERM).await;
    assert_eq!(status.code(), Some(0));
    assert!(state.exists(), "no state file at {}", state.display());
    let again = Server::start(&dir, &["--state-file", &state_arg]);
    assert_eq!(
        again.ask(one("ops", &[("user", "s")])).await.statuses[0].limit_remaining,
        0
    );
    assert_eq!(again.code("ops", &[("user", "s")]).await, over());
    assert_eq!(again.stop_with(libc::SIGINT).await.code(), Some(0));
}
