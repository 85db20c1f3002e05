//! Test support: a real `redis-server` on a free loopback port, started and stopped by
//! the test itself.
#![allow(dead_code)] // each test binary uses a different part of this module

pub mod cluster;
pub mod http;
pub mod sentinel;
pub mod tls;

use std::collections::hash_map::RandomState;
use std::ffi::OsStr;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::ops::Deref;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process bound to 127.0.0.1 on a port of its own; killed on drop.
pub struct RedisServer {
    process: Option<RedisProcess>,
    port: u16,
    dir: ScratchDir,
}

impl RedisServer {
    /// Starts a fresh, empty server. Panics (failing the test) when `redis-server` is not
    /// installed: these tests never pass without a real Redis.
    pub fn start() -> RedisServer {
        let port = free_port();
        let mut server = RedisServer {
            process: None,
            port,
            dir: ScratchDir::new(&port.to_string()),
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
        connect(self.port)
    }

    /// Kills the server (as a crash would) and waits until it is gone.
    pub fn kill(&mut self) {
        self.process = None;
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    fn spawn(&mut self) {
        let mut process = RedisProcess::spawn_node(self.port, &self.dir, &[]);
        process.wait_until_ready();
        self.process = Some(process);
    }
}

/// One `redis-server` child (a data node or a sentinel) listening on 127.0.0.1:`port`,
/// SIGKILLed on drop. It also dies with the thread that spawned it (`PR_SET_PDEATHSIG`), so a
/// test that aborts leaks no server: start servers from the test's own thread, not from
/// one that ends before the test does (`spawn_blocking`).
pub struct RedisProcess {
    child: Child,
    port: u16,
}

impl RedisProcess {
    /// `redis-server <args>`, where `args` make it listen on 127.0.0.1:`port`. Returns at
    /// once: spawn several, then [`wait_until_ready`](Self::wait_until_ready) on each, and
    /// they boot in parallel.
    pub fn spawn(port: u16, args: impl IntoIterator<Item = impl AsRef<OsStr>>) -> RedisProcess {
        let mut command = Command::new("redis-server");
        command
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        RedisProcess {
            child: spawn_dying_with_test(&mut command),
            port,
        }
    }

    /// A data node on 127.0.0.1:`port` that persists nothing, working in `dir` (created
    /// if missing), with `extra` arguments; spawned as [`spawn`](Self::spawn) is.
    pub fn spawn_node(port: u16, dir: &Path, extra: &[&str]) -> RedisProcess {
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|e| panic!("create the redis-server directory {}: {e}", dir.display()));
        let port_arg = port.to_string();
        let mut args = [
            "--port",
            &port_arg,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
        ]
        .map(OsStr::new)
        .to_vec();
        args.push(dir.as_os_str());
        args.extend(extra.iter().map(OsStr::new));
        RedisProcess::spawn(port, args)
    }

    /// Waits until the server answers PING; panics if it exits or is not up within 10 s.
    pub fn wait_until_ready(&mut self) {
        let port = self.port;
        wait_until(
            &format!("redis-server on port {port} to answer PING"),
            Duration::from_secs(10),
            || {
                if let Ok(Some(status)) = self.child.try_wait() {
                    panic!("redis-server on port {port} exited at start: {status}");
                }
                query::<String>(port, &redis::cmd("PING"))
            },
        );
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `command` (a Redis tool) so that the kernel kills it if the spawning thread dies
/// without cleaning up (abort, timeout kill).
pub fn spawn_dying_with_test(command: &mut Command) -> Child {
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command.spawn().unwrap_or_else(|e| {
        panic!(
            "cannot start {:?} ({e}). These tests need a real Redis: install it \
                 (Debian: apt-get install -y redis-server) or run scripts/test, which does.",
            command.get_program()
        )
    })
}

/// Starts this test binary again as a child process that runs only the ignored test
/// `name`, with `envs` set: how a test puts a second process on the same Redis. Read its
/// answer with [`child_report`].
pub fn spawn_child_test(name: &str, envs: &[(&str, String)]) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start a child process")
}

/// Waits for a child of [`spawn_child_test`], requires its test to have passed, and returns
/// what follows `marker` on the line of its stdout that has it, trimmed.
pub fn child_report(child: Child, marker: &str) -> String {
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "child failed: {stdout}");
    stdout
        .lines()
        // libtest may print the test's name on the same line first.
        .find_map(|line| {
            line.split_once(marker)
                .map(|(_, rest)| rest.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no `{marker}` in the child's output: {stdout}"))
}

/// Polls `ready` until it returns `Ok`, first every 10 ms, then less often (up to every
/// 100 ms: long waits need not open hundreds of connections a second); after `timeout`
/// panics, saying what was awaited and the last answer, so a topology that never settles
/// fails with its state.
pub fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(10);
    loop {
        match ready() {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last: {last}")
            }
            Err(_) => std::thread::sleep(pause),
        }
        pause = (pause * 3 / 2).min(Duration::from_millis(100));
    }
}

/// A plain synchronous connection to the server on 127.0.0.1:`port`.
pub fn connect(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .unwrap_or_else(|e| panic!("connect to the test redis-server on port {port}: {e}"))
}

/// A connection for one poll of the node at 127.0.0.1:`port`, with 1 s timeouts so that a
/// stuck or dead node fails the poll instead of hanging it. Errors name the port.
pub fn poll_connection(port: u16) -> Result<redis::Connection, String> {
    let timeout = Some(Duration::from_secs(1));
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
        .and_then(|con| {
            con.set_read_timeout(timeout)?;
            con.set_write_timeout(timeout)?;
            Ok(con)
        })
        .map_err(|e| format!("port {port}: {e}"))
}

/// `cmd` on a [`poll_connection`] to `port`.
pub fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Result<T, String> {
    cmd.query(&mut poll_connection(port)?)
        .map_err(|e| format!("port {port}: {e}"))
}

/// `field`'s value in INFO-style text (`field:value` lines).
pub fn info_field<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// `Ok` once the node on `port` is a replica whose link to its master is up (synced).
pub fn replica_in_sync(port: u16) -> Result<(), String> {
    let info: String = query(port, redis::cmd("INFO").arg("replication"))?;
    match (
        info_field(&info, "role"),
        info_field(&info, "master_link_status"),
    ) {
        (Some("slave"), Some("up")) => Ok(()),
        (role, link) => Err(format!("port {port}: role {role:?}, master link {link:?}")),
    }
}

/// A directory of its own under the system temp dir, emptied when made (a crashed run
/// with the same pid may have left files: a stale cluster config would be loaded) and
/// removed on drop.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    pub fn new(name: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!(
            "redis-ratelimit-test-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("create the test directory {}: {e}", dir.display()));
        ScratchDir(dir)
    }
}

impl Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `CONFIG SET requirepass password` over `connection`, which stays authenticated (as do
/// the server's other connections): new connections must then give the password.
pub fn require_password(connection: &mut redis::Connection, password: &str) {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(password)
        .query::<()>(connection)
        .unwrap_or_else(|e| panic!("CONFIG SET requirepass: {e}"));
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("find a free loopback port")
        .port()
}

/// `n` distinct loopback ports that were free a moment ago, each with `port + offset` free
/// too (a cluster node's bus port is its port + 10000; 0 asks for nothing more). They lie
/// below Linux's ephemeral range (32768 and up), so no outgoing connection can take one
/// before the server binds it, and each is held until all are found, so none comes twice.
pub fn free_ports(n: usize, offset: u16) -> Vec<u16> {
    const LOWEST: u16 = 10_000;
    const EPHEMERAL: u16 = 32_768;
    let span = u64::from(EPHEMERAL - offset - LOWEST);
    let mut random = RandomState::new().build_hasher().finish();
    let mut held = Vec::new();
    for _ in 0..1000 {
        if held.len() == n {
            break;
        }
        random = random
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let port = LOWEST + ((random >> 33) % span) as u16;
        let bind = |port: u16| TcpListener::bind(("127.0.0.1", port));
        let listeners = match offset {
            0 => bind(port).map(|l| vec![l]),
            _ => bind(port).and_then(|l| Ok(vec![l, bind(port + offset)?])),
        };
        if let Ok(listeners) = listeners {
            held.push((port, listeners));
        }
    }
    assert_eq!(
        held.len(),
        n,
        "too few free loopback ports (offset {offset})"
    );
    held.into_iter().map(|(port, _)| port).collect()
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
