//! Limits that survive restarts: the embedded backend's state file (the format and its
//! handling are `backend/memory_state.rs`'s).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::unused::UnusedOption;
use super::{Limiter, Store};
use crate::backend::memory::MemoryBackend;
use crate::backend::memory_state::StateFile;

impl Limiter {
    /// Keeps the embedded backend's state in the file at `path`, so that a restart (a
    /// deploy, a crash) does not hand every caller a fresh budget: what `path` holds is
    /// restored at the limiter's first use (building it reads nothing), and the state is
    /// saved there every 10 seconds from then on ([`state_every`](Self::state_every)) and
    /// on [`save_state`](Self::save_state).
    ///
    /// Everything a check decides from is kept: every algorithm's records, the sliding
    /// log's entries, calendar periods, blocks and lock-out streaks, with their wall-clock
    /// times, so a call admitted 20 s before a restart still counts for the rest of its
    /// window after it, and a key whose windows passed while the process was down is
    /// simply gone. Calls in flight ([`Limiter::acquire`]) are not kept: their holders are
    /// gone with the process.
    ///
    /// - Each save is atomic: written to a temporary file beside `path` that is its own
    ///   (a random name, created new), synced, then renamed over it. A save copies the
    ///   keys a shard at a time, a thousand keys per hold of the shard's lock, so checks
    ///   go on while it runs (BENCHMARKS.md measures it).
    /// - A file that cannot be read or decoded (damaged, cut short, not a state file, or
    ///   of another version of the format) is renamed aside (its name gains `.corrupt`)
    ///   and logged at `WARN`; the limiter starts empty. It never panics and never refuses
    ///   to start.
    /// - A save that fails (a full disk, a read-only directory) is logged once, at
    ///   `ERROR`, until one succeeds again; checks go on in memory.
    /// - The saves run on a thread of their own; it ends with the limiter. What was counted
    ///   after the last save is lost when the process dies: call
    ///   [`save_state`](Self::save_state) at shutdown.
    ///
    /// The global limiter on the embedded backend reads the path from
    /// `RATELIMIT_STATE_FILE`. Call it while building the limiter (keys counted before are
    /// forgotten); it has no effect on a Redis limiter (Redis keeps the state itself; give
    /// its fallback a state file if it matters), and a `WARN` says so at its first check.
    /// Give each limiter a file of its own: limiters (of one process or of several) saving
    /// to one path each write whole files, so the file is never damaged, but it holds only
    /// the last one's state.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const LOGIN: [Rule; 1] = [Rule::per_minute(3)];
    /// let path = std::env::temp_dir().join(format!("ratelimit-doc-{}.state", std::process::id()));
    /// let limiter = Limiter::memory().state_file(&path);
    /// limiter.check("login:tom", &LOGIN).await?;
    /// limiter.save_state().await?;
    ///
    /// // The next process, or this one after a restart:
    /// let restarted = Limiter::memory().state_file(&path);
    /// assert_eq!(restarted.peek("login:tom", &LOGIN).await?.remaining, 2);
    /// # std::fs::remove_file(&path)?;
    /// # Ok(()) }
    /// ```
    pub fn state_file(mut self, path: impl Into<PathBuf>) -> Self {
        match &mut self.store {
            Store::Memory(memory) => {
                let file = StateFile::new(path.into());
                *memory = kept_in(memory, memory.max_keys(), Some(&file));
                self.state_file = Some(file);
            }
            store => self.unused.add_on(store, UnusedOption::StateFile),
        }
        self
    }

    /// How often the embedded backend saves its [state file](Self::state_file) (default
    /// every 10 seconds). What was counted since the last save is what a crash loses.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::Limiter;
    ///
    /// let limiter = Limiter::memory()
    ///     .state_file(std::env::temp_dir().join("ratelimit-doc-every.state"))
    ///     .state_every(Duration::from_secs(2));
    /// # drop(limiter);
    /// ```
    pub fn state_every(self, every: Duration) -> Self {
        if let Some(file) = &self.state_file {
            file.set_every(every);
        }
        self
    }

    /// Saves the embedded backend's state to its [state file](Self::state_file) now, as
    /// the periodic saves do (atomically, a shard at a time), on Tokio's blocking threads:
    /// at shutdown, so that a restart loses nothing.
    ///
    /// # Errors
    ///
    /// When the file cannot be written (the error is also logged, once, as a periodic
    /// save's), and when this limiter has no state file (a Redis limiter, or none set:
    /// [`io::ErrorKind::Unsupported`]).
    pub async fn save_state(&self) -> io::Result<()> {
        let (Store::Memory(memory), Some(file)) = (&self.store, &self.state_file) else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this limiter has no state file: only the embedded backend keeps one \
                 (Limiter::memory().state_file(path))",
            ));
        };
        let (memory, file) = (Arc::clone(memory), Arc::clone(file));
        tokio::task::spawn_blocking(move || file.save_logged(&memory).map(drop))
            .await
            .map_err(io::Error::other)?
    }
}

/// An empty embedded backend on `memory`'s clock, of `max_keys`, kept in `file` if any:
/// restored from it at its first use, saved to it from then on.
pub(super) fn kept_in(
    memory: &MemoryBackend,
    max_keys: usize,
    file: Option<&Arc<StateFile>>,
) -> Arc<MemoryBackend> {
    let Some(file) = file else {
        return Arc::new(memory.resized(max_keys));
    };
    Arc::new_cyclic(|backend| {
        let (file, backend) = (Arc::clone(file), backend.clone());
        memory
            .resized(max_keys)
            .on_first_use(Box::new(move |memory| {
                file.restore(memory);
                file.save_in_background(backend.clone());
            }))
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::clock::ManualClock;
    use crate::{Algorithm, Calendar, Rule};

    const START: Duration = Duration::from_secs(1_700_000_000);
    const RULES: [Rule; 2] = [
        Rule::new(5, Duration::from_secs(60)),
        Rule::per_calendar(8, Calendar::Day),
    ];

    /// A fresh path in the temporary directory, unique to the test.
    fn path(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ratelimit-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(test);
        for stale in [path.clone(), aside(&path)] {
            let _ = std::fs::remove_file(stale);
        }
        path
    }

    fn aside(path: &Path) -> PathBuf {
        let mut name = path.file_name().unwrap().to_owned();
        name.push(".corrupt");
        path.with_file_name(name)
    }

    fn limiter(clock: &ManualClock, path: &Path) -> Limiter {
        Limiter::memory_with_clock(clock.clone()).state_file(path)
    }

    async fn left(limiter: &Limiter, key: &str, algorithm: Algorithm) -> u64 {
        let peek = limiter
            .peek(key, &RULES)
            .algorithm(algorithm)
            .await
            .unwrap();
        peek.remaining
    }

    /// The same checks on a limiter that restarts and on one that never does: after the
    /// restart, both answer alike, at every later time.
    #[tokio::test]
    async fn every_algorithm_s_counts_and_blocks_come_back_with_their_times() {
        let path = path("every-algorithm");
        let clock = ManualClock::new(START);
        let before = limiter(&clock, &path);
        let never_restarted = Limiter::memory_with_clock(clock.clone());
        for limiter in [&before, &never_restarted] {
            for algorithm in Algorithm::ALL {
                let key = format!("counted:{algorithm}");
                for _ in 0..3 {
                    limiter
                        .check(&key, &RULES)
                        .algorithm(algorithm)
                        .await
                        .unwrap();
                }
                let blocked = format!("blocked:{algorithm}");
                for _ in 0..6 {
                    let check = limiter.check(&blocked, &RULES).algorithm(algorithm);
                    check.block_for(Duration::from_secs(600)).await.unwrap();
                }
            }
        }
        before.save_state().await.unwrap();
        drop(before);

        // 20 s later, the calls still count for the rest of their minute, the calendar
        // day's count and the block for the rest of theirs.
        clock.advance(Duration::from_secs(20));
        let after = limiter(&clock, &path);
        for step in [0, 30, 60, 600, 86_400] {
            clock.advance(Duration::from_secs(step));
            for algorithm in Algorithm::ALL {
                for key in [
                    format!("counted:{algorithm}"),
                    format!("blocked:{algorithm}"),
                ] {
                    assert_eq!(
                        standing(&after, &key, algorithm).await,
                        standing(&never_restarted, &key, algorithm).await,
                        "{key} after {step} s more"
                    );
                }
            }
        }
    }

    async fn standing(
        limiter: &Limiter,
        key: &str,
        algorithm: Algorithm,
    ) -> (bool, usize, u64, Option<Duration>) {
        let d = limiter
            .peek(key, &RULES)
            .algorithm(algorithm)
            .await
            .unwrap();
        (d.allowed, d.rule_index, d.remaining, d.retry_after)
    }

    #[tokio::test]
    async fn keys_whose_windows_passed_while_down_are_not_restored() {
        let path = path("expired");
        let clock = ManualClock::new(START);
        let before = limiter(&clock, &path);
        before.check("short", &[Rule::per_second(1)]).await.unwrap();
        before.save_state().await.unwrap();
        clock.advance(Duration::from_secs(3));
        let after = limiter(&clock, &path);
        let Store::Memory(memory) = &after.store else {
            unreachable!()
        };
        assert!(memory.inspect("short").is_none());
    }

    #[tokio::test]
    async fn an_unreadable_file_is_set_aside_and_the_limiter_starts_empty() {
        let clock = ManualClock::new(START);
        let saved = {
            let path = path("good");
            let limiter = limiter(&clock, &path);
            limiter.check("k", &RULES).await.unwrap();
            limiter.save_state().await.unwrap();
            std::fs::read(&path).unwrap()
        };
        let mut older = saved.clone();
        older[7] = 0;
        let mut flipped = saved.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0x10;
        let files: [(&str, Vec<u8>); 5] = [
            ("foreign", b"{\"not\": \"ours\"}".to_vec()),
            ("older", older),
            ("flipped", flipped),
            ("cut-short", saved[..saved.len() - 3].to_vec()),
            ("empty", Vec::new()),
        ];
        for (name, bytes) in files {
            let path = path(name);
            std::fs::write(&path, &bytes).unwrap();
            let limiter = limiter(&clock, &path);
            assert_eq!(
                left(&limiter, "k", Algorithm::SlidingLog).await,
                5,
                "{name}"
            );
            assert!(!path.exists(), "{name}: set aside");
            assert_eq!(std::fs::read(aside(&path)).unwrap(), bytes, "{name}");
            // And it goes on saving to the path.
            limiter.save_state().await.unwrap();
            assert!(path.exists(), "{name}");
        }
    }

    #[tokio::test]
    async fn building_reads_nothing_and_the_first_use_restores() {
        let path = path("first-use");
        std::fs::write(&path, b"not a state file").unwrap();
        let clock = ManualClock::new(START);
        let limiter = limiter(&clock, &path).max_keys(100);
        assert!(
            path.exists(),
            "the file was read while building the limiter"
        );
        assert!(!aside(&path).exists());
        assert_eq!(left(&limiter, "k", Algorithm::SlidingLog).await, 5);
        assert!(!path.exists(), "the first use did not read the file");
        assert!(aside(&path).exists());
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_written_fails_the_save_and_checks_go_on() {
        let dir = path("no-such-dir");
        let limiter = Limiter::memory().state_file(dir.join("state"));
        assert!(limiter.check("k", &RULES).await.unwrap().allowed);
        let err = limiter.save_state().await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert!(limiter.check("k", &RULES).await.unwrap().allowed);
    }

    #[tokio::test]
    async fn a_save_that_fails_after_writing_removes_its_temporary_file() {
        // A directory in the way: the temporary file is written, the rename over it fails.
        let path = path("in-the-way");
        let limiter = Limiter::memory().state_file(&path);
        // After the first use, which reads the path (a directory there would be set aside).
        limiter.check("k", &RULES).await.unwrap();
        std::fs::create_dir_all(path.join("occupied")).unwrap();
        assert!(limiter.save_state().await.is_err());
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|other| other.starts_with(&format!("{name}.")))
            .collect();
        assert_eq!(left, Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_limiter_without_a_state_file_says_so() {
        let err = Limiter::memory().save_state().await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::Unsupported);
    }

    #[tokio::test]
    async fn the_state_is_saved_in_the_background_and_max_keys_keeps_it() {
        let path = path("background");
        let clock = ManualClock::new(START);
        let before = Limiter::memory_with_clock(clock.clone())
            .state_file(&path)
            .state_every(Duration::from_millis(1))
            .max_keys(10);
        before.check("k", &RULES).await.unwrap();
        // The saver thread writes on its own; wait for a file holding the check.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let restored = limiter(&clock, &path);
            if left(&restored, "k", Algorithm::SlidingLog).await == 4 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never saved");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
