//! Child test processes: this test binary run again, spoken to over its stdin and stdout.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use super::spawn_dying_with_test;

/// This test binary run again as a child process, running only the ignored tests that
/// `libtest_args` select: how a test puts a second process on the same server. The parent
/// and the child speak over the child's stdout ([`ChildTest::wait_for`]) and stdin
/// ([`ChildTest::send`], read there with [`parent_says`]): a handshake, never a sleep.
pub struct ChildTest {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Everything read from its stdout so far, for failure messages.
    seen: String,
}

impl ChildTest {
    /// Starts the child with `envs` set; e.g. `&["child_checks", "--exact"]` runs one test.
    pub fn spawn(libtest_args: &[&str], envs: &[(&str, String)]) -> ChildTest {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(libtest_args)
            .args(["--ignored", "--nocapture"])
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = spawn_dying_with_test(&mut command);
        ChildTest {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child,
            seen: String::new(),
        }
    }

    /// Reads the child's stdout until a line has `marker`; returns what follows it on that
    /// line, trimmed. Panics, with what the child printed, if it ends first.
    pub fn wait_for(&mut self, marker: &str) -> String {
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).unwrap() == 0 {
                let status = self.child.wait().unwrap();
                panic!(
                    "the child ended ({status}) without `{marker}`: {}",
                    self.seen
                );
            }
            self.seen += &line;
            // libtest may print the test's name on the same line first.
            if let Some((_, rest)) = line.split_once(marker) {
                return rest.trim().to_owned();
            }
        }
    }

    /// Writes `line` to the child's stdin.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to the child");
    }

    /// [`wait_for`](Self::wait_for) `marker`, then waits for the child to end and requires
    /// its tests to have passed.
    pub fn finish(mut self, marker: &str) -> String {
        let found = self.wait_for(marker);
        self.stdin = None;
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.stdout, &mut rest).unwrap();
        self.seen += &rest;
        let status = self.child.wait().unwrap();
        assert!(status.success(), "child failed ({status}): {}", self.seen);
        found
    }
}

impl ChildTest {
    /// Kills the child with SIGKILL, as a crash or the OOM killer would: no destructor,
    /// no shutdown hook runs.
    pub fn kill(mut self) {
        self.child.kill().expect("kill the child");
        let status = self.child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL),
            "{status}"
        );
    }
}

/// In a [`ChildTest`]: the value of `name` in the environment its parent gave it; panics,
/// saying so, when the test runs without a parent.
pub fn from_parent(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("this test only runs as a child of the test that starts it, which sets {name}")
    })
}

/// In a [`ChildTest`]: waits for the parent to send `line`. Blocks its thread: call it from
/// `spawn_blocking` in an async test.
pub fn parent_says(line: &str) {
    let mut got = String::new();
    std::io::stdin().read_line(&mut got).unwrap();
    assert_eq!(got.trim(), line, "the parent said something else");
}

/// In a [`ChildTest`]: prints `marker` for the parent's [`ChildTest::wait_for`], then
/// waits for the parent to send `line`, on a blocking thread so that the runtime's tasks go on.
pub async fn tell_parent_then_await(marker: &str, line: &'static str) {
    println!("{marker}");
    tokio::task::spawn_blocking(move || parent_says(line))
        .await
        .unwrap();
}
