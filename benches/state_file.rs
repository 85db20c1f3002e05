//! The embedded backend's state file with 1,000,000 keys: how long a save and a restore
//! take, how large the file is, and what a save does to the checks running meanwhile
//! (their p99 against the same checks without a save). BENCHMARKS.md, "The embedded
//! backend's state file", gives the command and the figures.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis_ratelimit::{Algorithm, Limiter, Rule};

const KEYS: usize = 1_000_000;
const CHECKERS: usize = 1;
static RULES: [Rule; 2] = [Rule::per_minute(100), Rule::per_hour(1000)];

fn key(i: usize) -> String {
    format!(
        "rate_limit:ip:10.{}.{}.{}:app::search",
        i >> 16,
        (i >> 8) & 255,
        i & 255
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Checks random keys until `stop`; each check's latency.
fn check_until(limiter: &'static Limiter, stop: &'static AtomicBool) -> Vec<Duration> {
    let rt = runtime();
    let mut latencies = Vec::with_capacity(1 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = x as usize % KEYS;
        let key = key(i);
        let start = Instant::now();
        let peek = limiter.peek(&key, &RULES).algorithm(Algorithm::ALL[i % 4]);
        rt.block_on(peek).unwrap();
        latencies.push(start.elapsed());
    }
    latencies
}

fn p(latencies: &mut [Duration], q: f64) -> Duration {
    latencies.sort_unstable();
    latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)]
}

/// Checks for `during` alongside `work` (run on this thread); the checks' p50, p99, p99.9
/// and max.
fn checks_during(limiter: &'static Limiter, work: impl FnOnce()) -> [Duration; 4] {
    static STOP: AtomicBool = AtomicBool::new(false);
    STOP.store(false, Ordering::Relaxed);
    let checkers: Vec<_> = (0..CHECKERS)
        .map(|_| std::thread::spawn(move || check_until(limiter, &STOP)))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    work();
    STOP.store(true, Ordering::Relaxed);
    let mut all: Vec<Duration> = checkers
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    [
        p(&mut all, 0.5),
        p(&mut all, 0.99),
        p(&mut all, 0.999),
        p(&mut all, 1.0),
    ]
}

fn main() {
    let path = std::env::temp_dir().join(format!("ratelimit-bench-{}.state", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let limiter: &'static Limiter = Box::leak(Box::new(Limiter::memory().state_file(&path)));
    let rt = runtime();
    let fill = Instant::now();
    for i in 0..KEYS {
        let algorithm = Algorithm::ALL[i % 4];
        let key = key(i);
        rt.block_on(limiter.check(&key, &RULES).algorithm(algorithm))
            .unwrap();
    }
    println!("filled {KEYS} keys in {:.2?}", fill.elapsed());

    let quiet = checks_during(limiter, || std::thread::sleep(Duration::from_secs(2)));
    let mut saved = Duration::ZERO;
    let saving = checks_during(limiter, || {
        let start = Instant::now();
        rt.block_on(limiter.save_state()).unwrap();
        saved = start.elapsed();
    });
    let bytes = std::fs::metadata(&path).unwrap().len();
    println!(
        "save: {saved:.2?}, {:.1} MB ({:.1} bytes a key)",
        bytes as f64 / 1e6,
        bytes as f64 / KEYS as f64
    );
    println!(
        "checks without a save: p50 {:?}, p99 {:?}, p99.9 {:?}, max {:?}",
        quiet[0], quiet[1], quiet[2], quiet[3]
    );
    println!(
        "checks during a save:  p50 {:?}, p99 {:?}, p99.9 {:?}, max {:?}",
        saving[0], saving[1], saving[2], saving[3]
    );

    let restore = Instant::now();
    let restored = Limiter::memory().state_file(&path);
    println!("restore: {:.2?}", restore.elapsed());
    // A sliding log's key: its one call still counts.
    let peek = rt.block_on(restored.peek(&key(KEYS - 4), &RULES));
    assert_eq!(peek.unwrap().remaining, 99, "a key came back");
    let _ = std::fs::remove_file(&path);
}
