//! Test support: a real `redis-server` on a free loopback port, started and stopped by
//! the test itself.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::future::Future;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process bound to 127.0.0.1 on a port of its own; killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts a fresh, empty server. Panics (failing the test) when `redis-server` is not
    /// installed: these tests never pass without a real Redis.
    pub fn start() -> RedisServer {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "redis-ratelimit-test-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("create the redis-server working directory");
        let mut server = RedisServer {
            child: None,
            port,
            dir,
        };
        server.spawn();
        server
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A plain synchronous connection, for inspecting and disturbing the server.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .expect("connect to the test redis-server")
    }

    /// Kills the server (as a crash would) and waits until it is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    fn spawn(&mut self) {
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // If the test process dies without dropping us (abort, timeout kill), take the
        // server down with it instead of leaking it.
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start redis-server ({e}). These tests need a real Redis: install it \
                     (Debian: apt-get install -y redis-server) or run scripts/test, which does."
            )
        });
        self.child = Some(child);
        self.wait_until_ready();
    }

    fn wait_until_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ping = redis::Client::open(self.url())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            if ping.is_ok() {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "redis-server on port {} exited at start: {status}",
                    self.port
                );
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not become ready within 10s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("find a free loopback port")
        .port()
}

tokio::task_local! {
    static LIMITER: &'static Limiter;
}

use redis_ratelimit::Limiter;

/// The limiter of the running scenario (see [`backend_tests!`]); guarded functions in
/// scenarios use it with `limiter = support::limiter()`.
pub fn limiter() -> &'static Limiter {
    LIMITER.with(|l| *l)
}

/// Runs `scenario` with `limiter` as [`limiter()`]. The limiter is leaked: a test's
/// guarded functions need it for `'static`.
pub async fn with_limiter<F: Future>(limiter: Limiter, scenario: F) -> F::Output {
    LIMITER.scope(Box::leak(Box::new(limiter)), scenario).await
}

/// Writes each scenario once and runs it against both backends:
/// `redis_backend::<name>` on a fresh `redis-server`, `memory_backend::<name>` in process.
///
/// ```ignore
/// backend_tests! {
///     async fn denied_calls_consume_nothing() { let l = support::limiter(); ... }
/// }
/// ```
#[macro_export]
macro_rules! backend_tests {
    ($( $(#[$meta:meta])* async fn $name:ident() $body:block )*) => {
        mod redis_backend {
            #[allow(unused_imports)]
            use super::*;
            $(
                $(#[$meta])*
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let server = $crate::support::RedisServer::start();
                    // Scenarios test counting, not latency: a loaded machine running an
                    // unoptimised build must not turn a slow answer into a failure.
                    let limiter = ::redis_ratelimit::Limiter::redis(&server.url())
                        .unwrap()
                        .timeout(::std::time::Duration::from_secs(5));
                    $crate::support::with_limiter(limiter, async move $body).await;
                    drop(server);
                }
            )*
        }
        mod memory_backend {
            #[allow(unused_imports)]
            use super::*;
            $(
                $(#[$meta])*
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let limiter = ::redis_ratelimit::Limiter::memory();
                    $crate::support::with_limiter(limiter, async move $body).await;
                }
            )*
        }
    };
}

/// A check (`consume`) or a peek of `rules` for `key` with `algorithm`, at the explicit time
/// `now` instead of the backend's clock.
pub async fn run_at(
    limiter: &Limiter,
    algorithm: redis_ratelimit::Algorithm,
    key: &str,
    rules: &[redis_ratelimit::Rule],
    consume: bool,
    now: Duration,
) -> Result<redis_ratelimit::Decision, redis_ratelimit::BackendError> {
    let check = if consume {
        limiter.check(key, rules)
    } else {
        limiter.peek(key, rules)
    };
    check.algorithm(algorithm).at(now).await
}

/// Milliseconds since the UNIX epoch: a moment several processes can agree on.
pub fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// What `tracing` logged, as captured by [`capture_logs`].
pub struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// What `tracing` logs while the returned guard lives, on this thread (a current-thread
/// runtime's tasks included).
pub fn capture_logs() -> (Logs, impl Sized) {
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::util::SubscriberInitExt as _;

    #[derive(Clone)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let logs = Arc::new(Mutex::new(Vec::new()));
    let buffer = Buffer(logs.clone());
    let guard = tracing_subscriber::fmt()
        .with_writer(move || buffer.clone())
        .without_time()
        .finish()
        .set_default();
    (Logs(logs), guard)
}
