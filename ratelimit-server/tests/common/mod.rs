//! The built `ratelimit-server` on free loopback ports (it binds port 0 and logs what it
//! bound), driven over the wire by Envoy's generated client (envoy-types) and a plain HTTP
//! client: none of the server's own code is used to talk to it.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

use crate::support::{spawn_dying_with_test, wait_until, ScratchDir};

/// How long a server may take to start, or a change to show, before a test gives up: an
/// order of magnitude more than it should, for a busy machine.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(30);

/// A running `ratelimit-server`; killed on drop.
pub struct Server {
    child: Option<Child>,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    log: Arc<Mutex<String>>,
}

/// The binary with `args`, its environment free of the variables it reads.
pub fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ratelimit-server"));
    command.args(args);
    for var in [
        "RATELIMIT_CONFIG",
        "RATELIMIT_REDIS_URL",
        "RATELIMIT_GRPC",
        "RATELIMIT_HTTP",
        "RATELIMIT_STATE_FILE",
        "RATELIMIT_ALLOWANCE",
        "RATELIMIT_FAIL_OPEN",
        "RATELIMIT_RESPONSE_HEADERS",
        "RATELIMIT_PREFIX",
        "RATELIMIT_TIMEOUT",
        "RATELIMIT_LOG_FORMAT",
        "RATELIMIT_LOG",
    ] {
        command.env_remove(var);
    }
    command
}

impl Server {
    /// Starts the server on `config` with `extra` flags, on ports of its choosing, and
    /// waits until it says where it listens.
    pub fn start(config: &Path, extra: &[&str]) -> Server {
        let config = config.to_str().expect("a UTF-8 path");
        let mut args = vec![
            "--config",
            config,
            "--grpc",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
        ];
        // A timeout no answer of a loaded machine reaches, unless the test sets its own.
        if !extra.contains(&"--timeout") {
            args.extend_from_slice(&["--timeout", "5s"]);
        }
        args.extend_from_slice(extra);
        let mut command = command(&args);
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = spawn_dying_with_test(&mut command);
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let mut server = Server {
            child: Some(child),
            grpc: "0.0.0.0:0".parse().unwrap(),
            http: "0.0.0.0:0".parse().unwrap(),
            log,
        };
        let (grpc, http) = wait_until("the server to listen", GIVE_UP_AFTER, || {
            if let Some(status) = server.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("the server exited at start ({status}):\n{}", server.log());
            }
            let log = server.log();
            let line = log
                .lines()
                .find(|l| l.contains("listening"))
                .ok_or_else(|| log.clone())?;
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(name))
                    .and_then(|a| a.parse::<SocketAddr>().ok())
            };
            match (field("grpc="), field("http=")) {
                (Some(g), Some(h)) => Ok((g, h)),
                _ => Err(format!("no addresses in {line:?}")),
            }
        });
        server.grpc = grpc;
        server.http = http;
        server
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// A client on one HTTP/2 connection to the gRPC port.
    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .expect("connect to the gRPC port")
    }

    /// `ShouldRateLimit`, which must answer.
    pub async fn ask(&self, request: RateLimitRequest) -> RateLimitResponse {
        self.client()
            .await
            .should_rate_limit(request)
            .await
            .unwrap_or_else(|s| panic!("ShouldRateLimit failed: {s:?}\n{}", self.log()))
            .into_inner()
    }

    /// The overall code of the answer to [`one`]`(domain, entries)`.
    pub async fn code(&self, domain: &str, entries: &[(&str, &str)]) -> i32 {
        self.ask(one(domain, entries)).await.overall_code
    }

    /// `ShouldRateLimit`'s failure.
    pub async fn refuse(&self, request: RateLimitRequest) -> tonic::Status {
        match self.client().await.should_rate_limit(request).await {
            Ok(answer) => panic!("answered {answer:?}"),
            Err(status) => status,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    /// `GET path` on the HTTP port: status and body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let response = reqwest::get(self.url(path)).await.expect("GET");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    }

    /// `POST /json` with `body`: status and body.
    pub async fn post_json(&self, body: &str) -> (u16, String) {
        let response = reqwest::Client::new()
            .post(self.url("/json"))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .expect("POST /json");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    }

    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Sends `signal` and waits for the process to exit, the test's runtime running
    /// meanwhile (its clients must see the server's GOAWAY to let it drain).
    pub async fn stop_with(mut self, signal: libc::c_int) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on our own child, not yet reaped.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
        crate::support::eventually("the server to exit", GIVE_UP_AFTER, || {
            let exited = child.try_wait().unwrap();
            async move { exited.ok_or_else(|| "still running".to_owned()) }
        })
        .await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A folder holding one configuration file `name` with `yaml`.
pub fn config_dir(test: &str, name: &str, yaml: &str) -> ScratchDir {
    let dir = ScratchDir::new(&format!("server-{test}"));
    write(&dir.join(name), yaml);
    dir
}

/// Writes `text` to `path` in place (truncating it), as an editor saving a file does.
pub fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A descriptor of `entries`.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|&(key, value)| Entry {
                key: key.into(),
                value: value.into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

/// A request of `domain` with `descriptors`.
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

/// A request of one descriptor.
pub fn one(domain: &str, entries: &[(&str, &str)]) -> RateLimitRequest {
    request(domain, vec![descriptor(entries)])
}

/// A request of one descriptor per item of `descriptors`, in their order.
pub fn several(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    request(domain, descriptors.iter().map(|d| descriptor(d)).collect())
}

pub fn ok() -> i32 {
    Code::Ok as i32
}

pub fn over() -> i32 {
    Code::OverLimit as i32
}

/// The scratch folder's path as a `PathBuf`.
pub fn path(dir: &ScratchDir) -> PathBuf {
    dir.to_path_buf()
}
