//! The one sharded map: values kept by key over independently locked shards (the embedded
//! backend's keys, the allowances, the deny cache), so that checks of different keys
//! rarely wait for one lock. Keys are placed by a hash seeded at random per process and
//! per map, so identities chosen by a client cannot be aimed at one lock or one bucket.

use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, MutexGuard, OnceLock};

use foldhash::quality::SeedableRandomState;
use foldhash::SharedSeed;

use crate::{random, sync};

/// The keys' hasher: foldhash's `quality` variant, the `fast` one with one more folded
/// multiply at the end. The shard is taken from bits a shard's table does not use (see
/// [`Sharded::index`]), and `fast` ends a string of more than 16 bytes with one folded
/// multiply: under about 1 seed in 100, keys differing in a few bytes (client IPs, user
/// ids) clustered there, leaving some shards empty and giving others up to 5 times their
/// share of the keys, and of the checks contending for their lock.
type KeyHasher = SeedableRandomState;

/// Values of type `T` (a shard's table and what goes with it) over locked shards.
pub(crate) struct Sharded<T> {
    hasher: KeyHasher,
    shards: Box<[Mutex<T>]>,
}

impl<T> Sharded<T> {
    /// `count` shards, the `i`th made by `shard(i)`.
    pub fn new(count: usize, shard: impl FnMut(usize) -> T) -> Self {
        Sharded {
            hasher: KeyHasher::with_seed(random::u64(), shared_seed()),
            shards: (0..count).map(shard).map(Mutex::new).collect(),
        }
    }

    /// The hash of `key`'s text alone: `str`'s `Hash` also writes a terminating byte, one
    /// more round of the hasher, which tells apart only strings hashed one after another.
    #[inline]
    pub fn hash(&self, key: &str) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        hasher.write(key.as_bytes());
        hasher.finish()
    }

    /// The shard of a key's hash. Takes bits 25..57: hashbrown indexes its buckets with
    /// the low bits and tags them with the top 7, so keys sharing a shard still differ there.
    #[inline]
    pub fn index(&self, hash: u64) -> usize {
        (((hash >> 25) as u32 as u64 * self.shards.len() as u64) >> 32) as usize
    }

    /// The shard of a key's hash, locked.
    #[inline]
    pub fn lock(&self, hash: u64) -> MutexGuard<'_, T> {
        self.lock_at(self.index(hash))
    }

    /// Shard `index`, locked.
    #[inline]
    pub fn lock_at(&self, index: usize) -> MutexGuard<'_, T> {
        sync::lock(&self.shards[index])
    }

    /// How many shards there are.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Every shard, in order, each locked as the iteration reaches it.
    pub fn iter(&self) -> impl Iterator<Item = MutexGuard<'_, T>> {
        self.shards.iter().map(sync::lock)
    }

    /// Places keys by a hasher of `seed` and `shared` instead (tests of the spread).
    #[cfg(test)]
    pub fn reseed(&mut self, seed: u64, shared: &'static SharedSeed) {
        self.hasher = KeyHasher::with_seed(seed, shared);
    }
}

/// The seed every map of this process shares; each map adds its own on top. foldhash
/// seeds itself from address-space layout and time only, so it is given one drawn from
/// the operating system instead.
fn shared_seed() -> &'static SharedSeed {
    static SEED: OnceLock<SharedSeed> = OnceLock::new();
    SEED.get_or_init(|| SharedSeed::from_u64(random::u64()))
}
