//! The embedded backend's state file: what it counted, saved so that a restart (a deploy,
//! a crash) does not hand every caller a fresh budget.
//!
//! The format is written by hand rather than with serde and a binary codec: the state is
//! a few kinds of numbers (times, counts, rules) that a varint writes in a few lines
//! (`algorithm/saved.rs`), a dependency would add nothing the runtime does not have, and
//! the format stays ours to version:
//!
//! ```text
//! "RLSTATE" VERSION(1 byte)
//! per key:  1, the key (length, bytes), its expiry (µs since the epoch), its state
//! 0, the number of keys, FNV-1a 64 of every byte before it (8 bytes, little-endian)
//! ```
//!
//! Times are the backend clock's, µs since the Unix epoch (the wall clock): a call admitted
//! 20 s before a restart still counts for the rest of its window after it. A file is
//! written whole to a temporary file beside it, then renamed over it, so a reader sees the
//! old file or the new one, never a part; each save's temporary file is its own, so
//! writers saving to one path at once (two limiters, two processes) never mix. Each
//! shard's lock is held only while a chunk of its slots is copied out, so checks go on
//! while a save runs.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::memory::MemoryBackend;
use crate::algorithm::saved::{Reader, Writer};
use crate::algorithm::StoredState;

const MAGIC: &[u8; 7] = b"RLSTATE";

/// The format's version: a file of another version is set aside, as unreadable.
const VERSION: u8 = 1;

/// How many slots of a shard are copied out under one hold of its lock: about 100 µs.
const CHUNK: usize = 1024;

/// Where and how often an embedded backend saves its state.
#[derive(Debug)]
pub(crate) struct StateFile {
    path: PathBuf,
    /// How often the saver writes the file, in ms.
    every_ms: AtomicU64,
    /// Whether the last save failed (its error was logged; the next failure is not).
    failing: AtomicBool,
    /// One save of this backend at a time (the saver's and `Limiter::save_state`'s): two
    /// would write the same keys twice.
    saving: Mutex<()>,
}

/// What one save wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Saved {
    pub keys: u64,
    pub bytes: u64,
}

impl StateFile {
    pub const DEFAULT_EVERY: Duration = Duration::from_secs(10);

    pub fn new(path: PathBuf) -> Arc<StateFile> {
        Arc::new(StateFile {
            path,
            every_ms: AtomicU64::new(Self::DEFAULT_EVERY.as_millis() as u64),
            failing: AtomicBool::new(false),
            saving: Mutex::new(()),
        })
    }

    pub fn set_every(&self, every: Duration) {
        let ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1);
        self.every_ms.store(ms, Ordering::Relaxed);
    }

    fn every(&self) -> Duration {
        Duration::from_millis(self.every_ms.load(Ordering::Relaxed))
    }

    /// Writes `backend`'s live keys to the file, atomically.
    pub fn save(&self, backend: &MemoryBackend) -> io::Result<Saved> {
        let _one_at_a_time = crate::sync::lock(&self.saving);
        let (temporary, file) = self.temporary()?;
        let written = write(backend, file).and_then(|saved| {
            fs::rename(&temporary, &self.path)?;
            Ok(saved)
        });
        if written.is_err() {
            let _ = fs::remove_file(&temporary);
        }
        written
    }

    /// A new temporary file beside the path, this save's alone: other writers of the path
    /// (another limiter of the process, another process, containers that are all PID 1)
    /// save at the same time, and a name they could share would have one writer's rename
    /// take the other's file, or publish it half written. Hence a random part, and
    /// `create_new`, which never opens a file that exists.
    fn temporary(&self) -> io::Result<(PathBuf, File)> {
        let mut attempts = 0;
        loop {
            let temporary = self.sibling(&format!("tmp.{:016x}", crate::random::u64()));
            let opened = File::options()
                .write(true)
                .create_new(true)
                .open(&temporary);
            match opened {
                // 64 random bits: a name taken three times in a row is no coincidence.
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists && attempts < 2 => {
                    attempts += 1;
                }
                opened => return opened.map(|file| (temporary, file)),
            }
        }
    }

    /// [`save`](Self::save), logging a failure once (until a save succeeds again): a
    /// state file that cannot be written must not fill the log, nor stop the checks.
    pub fn save_logged(&self, backend: &MemoryBackend) -> io::Result<Saved> {
        let saved = self.save(backend);
        match &saved {
            Ok(_) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        target: "redis_ratelimit",
                        path = %self.path.display(),
                        "rate limiter state saved again"
                    );
                }
            }
            Err(err) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        target: "redis_ratelimit",
                        path = %self.path.display(),
                        error = %err,
                        "cannot save the rate limiter's state; limits go on in memory, and \
                         a restart would forget them (this is logged once)"
                    );
                }
            }
        }
        saved
    }

    /// Reads the file into `backend`. A file that is absent is a first start; one that
    /// cannot be read or decoded is renamed aside (its name gains `.corrupt`) and logged,
    /// and the backend starts empty. Returns how many keys were restored.
    pub fn restore(&self, backend: &MemoryBackend) -> u64 {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return 0,
            Err(err) => {
                self.set_aside(&format!("it cannot be read ({err})"));
                return 0;
            }
        };
        match read(backend, &bytes) {
            Ok(keys) => {
                tracing::info!(
                    target: "redis_ratelimit",
                    path = %self.path.display(),
                    keys,
                    "rate limiter state restored"
                );
                keys
            }
            Err(why) => {
                self.set_aside(why);
                0
            }
        }
    }

    fn set_aside(&self, why: &str) {
        let aside = (1..)
            .map(|n| match n {
                1 => self.sibling("corrupt"),
                n => self.sibling(&format!("corrupt.{n}")),
            })
            .find(|aside| !aside.exists())
            .expect("some free name");
        let moved = match fs::rename(&self.path, &aside) {
            Ok(()) => format!("renamed to {}", aside.display()),
            Err(err) => format!("and could not be renamed to {} ({err})", aside.display()),
        };
        tracing::warn!(
            target: "redis_ratelimit",
            path = %self.path.display(),
            "rate limiter state file ignored: {why}; {moved}; starting with no state"
        );
    }

    /// The path with `.{suffix}` added to its name.
    fn sibling(&self, suffix: &str) -> PathBuf {
        let mut name = self.path.file_name().unwrap_or_default().to_owned();
        name.push(".");
        name.push(suffix);
        self.path.with_file_name(name)
    }

    /// Saves `backend` every [`every`](Self::every) from a thread of its own (saving is
    /// blocking file work, and a limiter serves any runtime), until the backend is dropped.
    pub fn save_in_background(self: &Arc<Self>, backend: Weak<MemoryBackend>) {
        let file = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("ratelimit-state".into())
            .spawn(move || {
                // Short naps: a changed interval applies at once, and the thread ends soon
                // after its limiter.
                const NAP: Duration = Duration::from_millis(200);
                let mut last = Instant::now();
                loop {
                    std::thread::sleep(NAP.min(file.every()));
                    let Some(backend) = backend.upgrade() else {
                        return;
                    };
                    if last.elapsed() >= file.every() {
                        let _ = file.save_logged(&backend);
                        last = Instant::now();
                    }
                }
            });
        if let Err(err) = spawned {
            tracing::error!(
                target: "redis_ratelimit",
                error = %err,
                "cannot start the thread that saves the rate limiter's state; it is saved \
                 only by Limiter::save_state"
            );
        }
    }
}

/// Writes every live key of `backend` to `file`, synced to disk.
fn write(backend: &MemoryBackend, file: File) -> io::Result<Saved> {
    let mut out = Checksummed {
        file: BufWriter::with_capacity(1 << 16, file),
        hash: Fnv::new(),
        bytes: 0,
    };
    out.write_all(MAGIC)?;
    out.write_all(&[VERSION])?;
    let now_us = backend.now_us();
    let (mut chunk, mut keys) = (Vec::with_capacity(1 << 16), 0u64);
    for shard in 0..backend.shard_count() {
        let mut from = Some(0);
        while let Some(start) = from {
            from = backend.copy_out(shard, start, CHUNK, now_us, |key, state, expires_at_us| {
                let mut w = Writer(&mut chunk);
                w.number(1);
                w.bytes(key.as_bytes());
                w.number(expires_at_us);
                state.save(&mut w);
                keys += 1;
            });
            out.write_all(&chunk)?;
            chunk.clear();
        }
    }
    let mut w = Writer(&mut chunk);
    w.number(0);
    w.number(keys);
    out.write_all(&chunk)?;
    let checksum = out.hash.finish();
    let mut file = out
        .file
        .into_inner()
        .map_err(io::IntoInnerError::into_error)?;
    file.write_all(&checksum.to_le_bytes())?;
    file.sync_all()?;
    Ok(Saved {
        keys,
        bytes: out.bytes + 8,
    })
}

/// Puts the keys of a file's `bytes` into `backend`, those still live; how many, or why
/// the bytes are no state file of this version.
fn read(backend: &MemoryBackend, bytes: &[u8]) -> Result<u64, &'static str> {
    let body = bytes
        .strip_prefix(MAGIC)
        .ok_or("it is not a rate limiter state file")?;
    match body.first() {
        Some(&VERSION) => {}
        Some(_) => return Err("it was written in another version of the format"),
        None => return Err("it is cut short"),
    }
    let (body, checksum) = bytes.split_at(bytes.len().saturating_sub(8).max(MAGIC.len() + 1));
    let mut hash = Fnv::new();
    hash.write(body);
    if checksum.len() != 8 || hash.finish().to_le_bytes() != checksum {
        return Err("its checksum does not match (damaged or cut short)");
    }
    const DAMAGED: &str = "it is damaged";
    // Decoded whole before any key is stored: a damaged file restores nothing.
    let mut reader = Reader::new(&body[MAGIC.len() + 1..]);
    let mut entries: Vec<(&[u8], u64, StoredState)> = Vec::new();
    loop {
        match reader.number().ok_or(DAMAGED)? {
            0 => break,
            1 => {}
            _ => return Err(DAMAGED),
        }
        let key = reader.bytes().ok_or(DAMAGED)?;
        let expires_at_us = reader.number().ok_or(DAMAGED)?;
        let state = StoredState::restore(&mut reader).ok_or(DAMAGED)?;
        entries.push((key, expires_at_us, state));
    }
    if reader.number() != Some(entries.len() as u64) || !reader.is_empty() {
        return Err(DAMAGED);
    }
    let now_us = backend.now_us();
    let mut restored = 0;
    for (key, expires_at_us, state) in entries {
        let key = std::str::from_utf8(key).map_err(|_| DAMAGED)?;
        if expires_at_us > now_us {
            backend.put(key, state, expires_at_us, now_us);
            restored += 1;
        }
    }
    Ok(restored)
}

/// A writer that hashes what it writes.
struct Checksummed<W> {
    file: W,
    hash: Fnv,
    bytes: u64,
}

impl<W: Write> Write for Checksummed<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = self.file.write(bytes)?;
        self.hash.write(&bytes[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// FNV-1a, 64 bits: a fixed, documented function, so a file stays readable by every
/// later version (a hasher of the standard library or a crate may change its output).
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
