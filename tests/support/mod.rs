//! Test support: a real `redis-server` on a loopback port of its own, started and stopped
//! by the test itself; polling with a deadline; child test processes spoken to over their
//! stdin and stdout.
//!
//! # The server binary
//! `redis-server` from `PATH`, or the server `RATELIMIT_TEST_SERVER` names (e.g. a
//! `valkey-server`: `scripts/test` runs the Redis-backed suites on Valkey that way). Cluster
//! creation uses the `-cli` beside it (`valkey-cli` for `valkey-server`). A server that
//! cannot be started fails the test: these tests never pass without a real server.
//!
//! # Ports
//! A server is told its port on the command line, so a port must be chosen before the
//! server binds it. Three things make that safe on a machine running many tests at once:
//! - ports are chosen below Linux's ephemeral range (32768 and up), so the kernel never
//!   hands one out for an outgoing connection or a `bind` to port 0 in the meantime;
//! - each is *reserved* ([`PortReservation`]: a lock on its byte of a file every test
//!   process shares), held for the server's life, also while it is killed and restarted,
//!   so no other test of this suite picks it;
//! - a process that takes a port without asking (another program) makes the server fail to
//!   bind: it exits saying "Address already in use" in its log, and the start is retried
//!   on other ports. Readiness is checked by the server's pid (`INFO server`), so a test
//!   never mistakes another process's server for its own.
#![allow(dead_code)] // each test binary uses a different part of this module

pub mod bound;
mod child;
pub mod cluster;
pub mod http;
pub mod sentinel;
pub mod tls;

#[allow(unused_imports)] // each test binary uses a different part of this module
pub use child::{from_parent, parent_says, tell_parent_then_await, ChildTest};

use std::collections::hash_map::RandomState;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::ops::Deref;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis_ratelimit::Limiter;

/// The environment variable a [`ChildTest`]'s parent names its server's URL in.
pub const CHILD_URL_ENV: &str = "RATELIMIT_CHILD_REDIS_URL";

/// The environment variable naming the server binary to test against.
pub const SERVER_ENV: &str = "RATELIMIT_TEST_SERVER";

/// The server binary: [`SERVER_ENV`], else `redis-server`.
pub fn server_binary() -> &'static OsStr {
    static BINARY: LazyLock<OsString> =
        LazyLock::new(|| std::env::var_os(SERVER_ENV).unwrap_or_else(|| "redis-server".into()));
    &BINARY
}

/// The command-line client beside [`server_binary`]: its name with `-server` made `-cli`.
pub fn cli_binary() -> PathBuf {
    let server = Path::new(server_binary());
    let name = server
        .file_name()
        .and_then(OsStr::to_str)
        .unwrap_or_default();
    match name.strip_suffix("-server") {
        Some(stem) => server.with_file_name(format!("{stem}-cli")),
        None => panic!("{SERVER_ENV}={server:?} is not named `<name>-server`: where is its cli?"),
    }
}

/// A check timeout that no answer of a loaded test machine reaches: for tests that count
/// checks, not time them.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// A limiter on `url` with [`CHECK_TIMEOUT`].
pub fn redis_limiter(url: &str) -> Limiter {
    Limiter::redis(url).unwrap().timeout(CHECK_TIMEOUT)
}

/// A fail-closed limiter on `url` with [`CHECK_TIMEOUT`]: a backend error shows as one,
/// never as a call let through.
pub fn counting_limiter(url: &str) -> Limiter {
    Limiter::redis(url)
        .unwrap()
        .fail_open(false)
        .timeout(CHECK_TIMEOUT)
}

/// `value` for `'static` use (guarded functions, spawned tasks); leaked, as a test's
/// value lives until the process ends anyway.
pub fn leak<T>(value: T) -> &'static T {
    Box::leak(Box::new(value))
}

/// A `redis-server` child process bound to 127.0.0.1 on a port of its own; killed on drop.
pub struct RedisServer {
    process: Option<RedisProcess>,
    port: PortReservation,
    dir: ScratchDir,
    /// Arguments the server is started with, also when restarted.
    extra: &'static [&'static str],
}

impl RedisServer {
    /// Starts a fresh, empty server on a reserved port (retried on other ports while one
    /// turns out taken). Panics (failing the test) when the server cannot be started.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// [`start`](Self::start) with `extra` arguments for the server, e.g.
    /// `["--rename-command", "TIME", ""]`.
    pub fn start_with(extra: &'static [&'static str]) -> RedisServer {
        retry_on_taken_ports(|| {
            let port = PortReservation::any(0);
            let mut server = RedisServer {
                process: None,
                dir: ScratchDir::new(&port.to_string()),
                port,
                extra,
            };
            server.spawn()?;
            Ok(server)
        })
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port())
    }

    pub fn port(&self) -> u16 {
        *self.port
    }

    /// A plain synchronous connection, for inspecting and disturbing the server.
    pub fn connection(&self) -> redis::Connection {
        connect(self.port())
    }

    /// Kills the server (as a crash would) and waits until it is gone. Its port stays
    /// reserved for [`restart`](Self::restart).
    pub fn kill(&mut self) {
        self.process = None;
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        let port = self.port();
        self.spawn().unwrap_or_else(|PortTaken| {
            panic!(
                "port {port} was taken by a process outside this suite while its server was down"
            )
        });
    }

    /// Stops the server process (SIGSTOP) without closing anything: connections stay open
    /// and nothing is answered, as a hung server or a black-holed route looks to a client.
    /// Until [`thaw`](Self::thaw), the server's own connections hang too.
    pub fn freeze(&self) {
        self.running().signal(libc::SIGSTOP);
    }

    /// Lets a [frozen](Self::freeze) server go on (SIGCONT): it reads what was sent
    /// meanwhile and answers it.
    pub fn thaw(&self) {
        self.running().signal(libc::SIGCONT);
    }

    /// Breaks every connection but its own `times` times, 10 ms apart, as a flaky network
    /// would: the limiter's connections, mid-call. Blocks; returns how many it closed.
    pub fn kill_clients_repeatedly(&self, times: usize) -> u64 {
        let mut conn = self.connection();
        let mut killed = 0;
        for _ in 0..times {
            std::thread::sleep(std::time::Duration::from_millis(10));
            let n: u64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .query(&mut conn)
                .unwrap();
            killed += n;
        }
        killed
    }

    /// Calls in flight while [connections are killed](Self::kill_clients_repeatedly)
    /// `kills` times: `workers` tasks each call `call` with the next number (0, 1, …) until
    /// the killing ends or `call` has nothing left to do (`None`). Returns how many
    /// connections were closed and what every call returned.
    pub async fn calls_while_killing<T, F, Fut>(
        &self,
        kills: usize,
        workers: usize,
        call: F,
    ) -> (u64, Vec<T>)
    where
        F: Fn(usize) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Option<T>> + Send,
        T: Send + 'static,
    {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::Arc;

        let (killing, next) = (
            Arc::new(AtomicBool::new(true)),
            Arc::new(AtomicUsize::new(0)),
        );
        let workers: Vec<_> = (0..workers)
            .map(|_| {
                let (killing, next, call) = (killing.clone(), next.clone(), call.clone());
                tokio::spawn(async move {
                    let mut outcomes = Vec::new();
                    while killing.load(Ordering::SeqCst) {
                        let Some(outcome) = call(next.fetch_add(1, Ordering::SeqCst)).await else {
                            break;
                        };
                        outcomes.push(outcome);
                    }
                    outcomes
                })
            })
            .collect();
        let killed = tokio::task::block_in_place(|| self.kill_clients_repeatedly(kills));
        killing.store(false, Ordering::SeqCst);
        let mut outcomes = Vec::new();
        for worker in workers {
            outcomes.extend(worker.await.unwrap());
        }
        (killed, outcomes)
    }

    fn running(&self) -> &RedisProcess {
        self.process.as_ref().expect("the server is not running")
    }

    fn spawn(&mut self) -> Result<(), PortTaken> {
        let mut process = RedisProcess::spawn_node(self.port(), &self.dir, self.extra);
        process.wait_until_ready()?;
        self.process = Some(process);
        Ok(())
    }
}

/// A server that could not bind its port: another process holds it.
#[derive(Debug)]
pub struct PortTaken;

/// Runs `start` until it does not meet a taken port (a handful of tries: each picks new
/// random ports, so only a machine out of ports fails them all).
pub fn retry_on_taken_ports<T>(mut start: impl FnMut() -> Result<T, PortTaken>) -> T {
    for _ in 0..5 {
        if let Ok(started) = start() {
            return started;
        }
    }
    panic!("5 starts in a row found a chosen port taken by a process outside this suite")
}

/// Servers started together (a cluster, a sentinel set), plain or speaking TLS throughout
/// with a certificate from a throwaway CA; killed on drop, their files removed.
pub trait Topology: Sized {
    /// Starts it on newly reserved ports, or says one turned out taken.
    fn try_start(tls: bool) -> Result<Self, PortTaken>;

    /// Starts it plain, retried on other ports while one turns out taken.
    fn start() -> Self {
        retry_on_taken_ports(|| Self::try_start(false))
    }

    /// Starts it speaking TLS, as [`start`](Self::start) does.
    fn start_tls() -> Self {
        retry_on_taken_ports(|| Self::try_start(true))
    }
}

/// One `redis-server` child (a data node or a sentinel) listening on 127.0.0.1:`port`,
/// logging to a file, SIGKILLed on drop. It also dies with the thread that spawned it
/// (`PR_SET_PDEATHSIG`), so a test that aborts leaks no server: start servers from the
/// test's own thread, not from one that ends before the test does (`spawn_blocking`).
pub struct RedisProcess {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl RedisProcess {
    /// The server binary with `args`, which make it listen on 127.0.0.1:`port`, logging to
    /// `log`. Returns at once: spawn several, then [`wait_until_ready`](Self::wait_until_ready)
    /// on each, and they boot in parallel.
    pub fn spawn(
        port: u16,
        log: PathBuf,
        args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    ) -> RedisProcess {
        let mut command = Command::new(server_binary());
        command
            .args(args)
            .arg("--logfile")
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        RedisProcess {
            child: spawn_dying_with_test(&mut command),
            port,
            log,
        }
    }

    /// A data node on 127.0.0.1:`port` that persists nothing, working (and logging) in
    /// `dir` (created if missing), with `extra` arguments; spawned as [`spawn`](Self::spawn) is.
    pub fn spawn_node(port: u16, dir: &Path, extra: &[&str]) -> RedisProcess {
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|e| panic!("create the server directory {}: {e}", dir.display()));
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
        RedisProcess::spawn(port, dir.join(format!("server-{port}.log")), args)
    }

    /// Waits until this process answers on its port (its own pid in `INFO server`, so not
    /// another process's server). `Err` when it exited because a port it was given is
    /// taken; panics, with its log, when it exits for another reason or is not up in 20 s.
    pub fn wait_until_ready(&mut self) -> Result<(), PortTaken> {
        let (port, pid) = (self.port, self.child.id().to_string());
        let mut exited = None;
        wait_until(
            &format!("the server on port {port} to answer"),
            Duration::from_secs(20),
            || {
                if let Ok(Some(status)) = self.child.try_wait() {
                    exited = Some(status);
                    return Ok(());
                }
                let info: String = query(port, redis::cmd("INFO").arg("server"))?;
                match info_field(&info, "process_id") {
                    Some(id) if id == pid => Ok(()),
                    other => Err(format!("port {port} is answered by process {other:?}")),
                }
            },
        );
        let Some(status) = exited else {
            return Ok(());
        };
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        if log.contains("Address already in use") {
            return Err(PortTaken);
        }
        panic!(
            "{:?} on port {port} exited at start ({status}); its log:\n{log}",
            server_binary()
        )
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid, which it keeps until we reap it on drop.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(
            sent, 0,
            "signal {signal} to the server on port {}",
            self.port
        );
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `command` (a server tool) so that the kernel kills it if the spawning thread
/// dies without cleaning up (abort, timeout kill).
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
            "cannot start {:?} ({e}). These tests need a real Redis: install it (Debian: \
             apt-get install -y redis-server) or run scripts/test, which does; or name the \
             server binary in {SERVER_ENV}.",
            command.get_program()
        )
    })
}

/// A loopback port this test process holds for a server: no other test process of this
/// suite takes it until the reservation is dropped (or the process ends). See the module's
/// docs.
pub struct PortReservation {
    port: u16,
    /// The open file description that owns the lock on the port's byte.
    _lock: File,
}

impl PortReservation {
    /// The lowest port chosen; below it lie well-known services.
    const LOWEST: u16 = 10_000;
    /// Where Linux's ephemeral range begins (`net.ipv4.ip_local_port_range`).
    const EPHEMERAL: u16 = 32_768;

    /// A random port, below the ephemeral range, that is free now, reserved together with
    /// `port + offset` when `offset` is not 0 (a cluster node's bus port is its port +
    /// 10000).
    pub fn any(offset: u16) -> PortReservation {
        let span = u64::from(Self::EPHEMERAL - offset - Self::LOWEST);
        let mut random = RandomState::new().build_hasher().finish();
        for _ in 0..1000 {
            random = random
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let port = Self::LOWEST + ((random >> 33) % span) as u16;
            if let Some(reserved) = Self::try_port(port, offset) {
                return reserved;
            }
        }
        panic!("no free loopback port pair (offset {offset}) in 1000 tries")
    }

    /// `n` distinct reservations, as [`any`](Self::any) makes them, and their ports.
    pub fn many(n: usize, offset: u16) -> (Vec<PortReservation>, Vec<u16>) {
        let reserved: Vec<PortReservation> = (0..n).map(|_| PortReservation::any(offset)).collect();
        let ports = reserved.iter().map(|port| port.port).collect();
        (reserved, ports)
    }

    /// `port` (and `port + offset`), when no test process holds it and it can be bound now.
    fn try_port(port: u16, offset: u16) -> Option<PortReservation> {
        let lock = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(std::env::temp_dir().join("redis-ratelimit-test-ports.lock"))
            .expect("open the test port lock file");
        let ports = [Some(port), (offset != 0).then(|| port + offset)];
        for port in ports.into_iter().flatten() {
            // An open-file-description lock: released when this `File` closes, whoever else
            // in this process holds other ports of the same file.
            let mut byte: libc::flock = unsafe { std::mem::zeroed() };
            byte.l_type = libc::F_WRLCK as libc::c_short;
            byte.l_whence = libc::SEEK_SET as libc::c_short;
            byte.l_start = libc::off_t::from(port);
            byte.l_len = 1;
            // SAFETY: fcntl on an fd we own, with a fully initialised `flock`.
            if unsafe { libc::fcntl(lock.as_raw_fd(), libc::F_OFD_SETLK, &byte) } != 0 {
                return None;
            }
            // Skip a port some other program holds now; one it takes later is caught by
            // the server's failure to bind.
            TcpListener::bind(("127.0.0.1", port)).ok()?;
        }
        Some(PortReservation { port, _lock: lock })
    }
}

impl Deref for PortReservation {
    type Target = u16;
    fn deref(&self) -> &u16 {
        &self.port
    }
}

/// How a poll waits between tries: first 10 ms, then longer (up to 100 ms: long waits need
/// not open hundreds of connections a second), until a deadline.
struct Backoff {
    deadline: Instant,
    pause: Duration,
}

impl Backoff {
    fn new(timeout: Duration) -> Backoff {
        Backoff {
            deadline: Instant::now() + timeout,
            pause: Duration::from_millis(10),
        }
    }

    /// The pause before the next try; panics past the deadline, with what was awaited and
    /// the last answer.
    fn next(&mut self, what: &str, timeout: Duration, last: String) -> Duration {
        if Instant::now() >= self.deadline {
            panic!("timed out after {timeout:?} waiting for {what}; last: {last}")
        }
        let pause = self.pause;
        self.pause = (pause * 3 / 2).min(Duration::from_millis(100));
        pause
    }
}

/// Polls `ready` until it returns `Ok`, for at most `timeout` (a failure detector, not a
/// measurement: give it an order of magnitude more than the awaited thing should take);
/// then panics, saying what was awaited and the last answer, so a topology that never
/// settles fails with its state. For threads; tasks use [`eventually`].
pub fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> Result<T, String>,
) -> T {
    let mut backoff = Backoff::new(timeout);
    loop {
        match ready() {
            Ok(value) => return value,
            Err(last) => std::thread::sleep(backoff.next(what, timeout, last)),
        }
    }
}

/// [`wait_until`] for async tests: polls the future `ready` makes until it gives `Ok`,
/// sleeping on the runtime's timer in between.
pub async fn eventually<T, F>(what: &str, timeout: Duration, mut ready: impl FnMut() -> F) -> T
where
    F: Future<Output = Result<T, String>>,
{
    let mut backoff = Backoff::new(timeout);
    loop {
        match ready().await {
            Ok(value) => return value,
            Err(last) => tokio::time::sleep(backoff.next(what, timeout, last)).await,
        }
    }
}

/// [`eventually`] for a count: until `count()` is at least `at_least`.
pub async fn until_counted<N>(what: &str, timeout: Duration, at_least: N, count: impl Fn() -> N)
where
    N: PartialOrd + std::fmt::Display,
{
    eventually(what, timeout, || async {
        match count() {
            n if n >= at_least => Ok(()),
            n => Err(format!("{n} of {at_least}")),
        }
    })
    .await
}

/// Waits, for at most `timeout`, until `limiter` applies `rules` at the site `path` (an
/// override it reads in the background).
pub async fn until_rules_in_force(
    limiter: &Limiter,
    path: &str,
    rules: &[redis_ratelimit::Rule],
    timeout: Duration,
) {
    let what = format!("the rules of {path} to reach the limiter");
    eventually(&what, timeout, || async {
        match limiter.rules_in_force(path) {
            in_force if in_force == rules => Ok(()),
            in_force => Err(format!("{in_force:?}")),
        }
    })
    .await
}

/// Checks fresh keys `{prefix}:{n}` until one is answered and `landed(key)` says it was
/// counted where it should be, for at most 30 s (a topology that changed may take a few
/// seconds to route again on a loaded machine); how long that took.
pub async fn until_a_check_lands(
    limiter: &Limiter,
    prefix: &str,
    landed: impl Fn(&str) -> bool,
) -> Duration {
    static PROBE: [redis_ratelimit::Rule; 1] = [redis_ratelimit::Rule::per_minute(1_000)];
    let (started, landed) = (Instant::now(), &landed);
    let mut probe = 0;
    eventually(
        &format!("a check on {prefix} to land"),
        Duration::from_secs(30),
        || {
            probe += 1;
            let key = format!("{prefix}:{probe}");
            async move {
                match limiter.check(&key, &PROBE).await {
                    Ok(_) if landed(&key) => Ok(()),
                    Ok(_) => Err(format!("{key} was counted elsewhere")),
                    Err(err) => Err(err.to_string()),
                }
            }
        },
    )
    .await;
    started.elapsed()
}

/// A plain synchronous connection to the server on 127.0.0.1:`port`.
pub fn connect(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .unwrap_or_else(|e| panic!("connect to the test server on port {port}: {e}"))
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

/// How many times the server behind `connection` has run `command` (lower case), from
/// `INFO commandstats`.
pub fn command_calls(connection: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(connection)
        .unwrap();
    info_field(&info, &format!("cmdstat_{command}"))
        .and_then(|stats| stats.strip_prefix("calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
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

tokio::task_local! {
    static LIMITER: &'static Limiter;
}

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

/// The URL of a `redis-server` started once per test process, for the `static` limiters
/// that many tests share (as an application shares one). A thread that lives as long as
/// the process starts it: the server is killed when the thread that started it ends.
pub fn process_server_url() -> &'static str {
    static URL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let (started, url) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let server = RedisServer::start();
            started.send(server.url()).unwrap();
            loop {
                std::thread::park();
            }
        });
        url.recv().expect("the test redis-server started")
    });
    &URL
}

/// Writes each scenario once and runs it against both backends:
/// `redis_backend::<name>` on a fresh `redis-server`, `memory_backend::<name>` in process.
/// A scenario without arguments reads its limiter from [`limiter()`]; one that names a
/// `Limiter` argument is given it, to own (e.g. to add a hook).
///
/// ```ignore
/// backend_tests! {
///     async fn denied_calls_consume_nothing() { let l = support::limiter(); ... }
/// }
/// backend_tests! {
///     async fn warns(limiter: Limiter) { let limiter = limiter.on_warning(...); ... }
/// }
/// backend_tests! {
///     memory = leak(Backend::memory()), redis = |url: &str| leak(Backend::redis(url));
///     async fn draws(backend: &'static Backend) { ... } // given what each builds
/// }
/// ```
#[macro_export]
macro_rules! backend_tests {
    (
        memory = $memory:expr, redis = $redis:expr;
        $( $(#[$meta:meta])* async fn $name:ident($arg:ident: $ty:ty) $body:block )*
    ) => {
        mod memory_backend {
            use super::*;
            $(
                $(#[$meta])*
                #[tokio::test]
                async fn $name() {
                    let $arg: $ty = $memory;
                    $body
                }
            )*
        }
        mod redis_backend {
            use super::*;
            $(
                $(#[$meta])*
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let server = $crate::support::RedisServer::start();
                    let $arg: $ty = ($redis)(&server.url());
                    $body
                    drop(server);
                }
            )*
        }
    };
    ($( $(#[$meta:meta])* async fn $name:ident() $body:block )*) => {
        $crate::backend_tests! {
            @both $( $(#[$meta])* $name(limiter) {
                $crate::support::with_limiter(limiter, async move $body).await;
            } )*
        }
    };
    ($( $(#[$meta:meta])* async fn $name:ident($limiter:ident: Limiter) $body:block )*) => {
        $crate::backend_tests! { @both $( $(#[$meta])* $name($limiter) $body )* }
    };
    (@both $( $(#[$meta:meta])* $name:ident($limiter:ident) $run:block )*) => {
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
                    let $limiter = $crate::support::redis_limiter(&server.url());
                    $run
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
                    let $limiter = ::redis_ratelimit::Limiter::memory();
                    $run
                }
            )*
        }
    };
}

/// Guarded sites charging `tokens` units a call to `who`, on the scenario's [`limiter()`]:
/// each `name(policies);` is `async fn name(who: &str, tokens: u64)` with those policies,
/// `cost = tokens, limit_type = CUSTOM, by = who`.
#[macro_export]
macro_rules! metered_sites {
    ($($name:ident($($policy:tt)*);)*) => {$(
        #[::redis_ratelimit::rate_limiter(
            $($policy)*,
            cost = tokens,
            limit_type = CUSTOM,
            by = who,
            limiter = $crate::support::limiter()
        )]
        async fn $name(who: &str, tokens: u64) -> Result<(), ::redis_ratelimit::RateLimitError> {
            Ok(())
        }
    )*};
}

/// Guarded sites counting `who`'s calls on the limiter each call is given: each
/// `name(policies);` is `async fn name(limiter: &'static Limiter, who: &str)` returning
/// `Ok(())`, with those policies, `limit_type = CUSTOM, by = who`.
#[macro_export]
macro_rules! custom_sites {
    ($($name:ident($($policy:tt)*);)*) => {$(
        #[::redis_ratelimit::rate_limiter($($policy)*, limit_type = CUSTOM, by = who, limiter = limiter)]
        async fn $name(
            limiter: &'static ::redis_ratelimit::Limiter,
            who: &str,
        ) -> Result<(), ::redis_ratelimit::RateLimitError> {
            Ok(())
        }
    )*};
}

/// A guarded call's error: refused by its rules, or failed itself.
#[derive(Debug)]
pub enum CallError {
    /// The limiter refused the call (any [`RateLimitError`](redis_ratelimit::RateLimitError)).
    Limited,
    /// The call ran and failed.
    Failed,
}

impl From<redis_ratelimit::RateLimitError> for CallError {
    fn from(_: redis_ratelimit::RateLimitError) -> Self {
        CallError::Limited
    }
}

/// What a peek of `rules` for `key` with `algorithm` finds left.
pub async fn remaining(
    limiter: &Limiter,
    algorithm: redis_ratelimit::Algorithm,
    key: &str,
    rules: &[redis_ratelimit::Rule],
) -> u64 {
    limiter
        .peek(key, rules)
        .algorithm(algorithm)
        .await
        .unwrap()
        .remaining
}

/// Asserts that `err` is a reply lost with its connection, or (on a loaded machine) a late
/// one.
#[track_caller]
pub fn assert_lost_reply(err: &redis_ratelimit::BackendError) {
    use redis_ratelimit::BackendErrorKind::{Timeout, Unavailable};
    assert!(matches!(err.kind(), Unavailable | Timeout), "{err}");
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
    capture_logs_up_to(tracing_subscriber::fmt::Subscriber::DEFAULT_MAX_LEVEL)
}

/// [`capture_logs`], of the events up to `level`.
pub fn capture_logs_up_to(level: tracing_subscriber::filter::LevelFilter) -> (Logs, impl Sized) {
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
        .with_max_level(level)
        .with_writer(move || buffer.clone())
        // Plain text to search: the workspace's other crates turn tracing-subscriber's
        // `ansi` feature on, and with it colours by default.
        .with_ansi(false)
        .without_time()
        .finish()
        .set_default();
    (Logs(logs), guard)
}

/// A small deterministic generator (xorshift64) for tests that walk many cases: each call
/// answers a number below `bound`. The same seed gives the same cases on every run.
pub fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |bound: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % bound
    }
}
