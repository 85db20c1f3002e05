//! One lock's keys: the slab, the table from key to slot and the recency list the
//! embedded backend's eviction walks.

// `HashTable` lets the shard keep only slot numbers in the table and hash each key once
// per check, for both the shard and the table; std's `HashMap` cannot take a precomputed
// hash. 0.15 is the newest line within the workspace's rust-version.
use hashbrown::HashTable;

use crate::algorithm::{Call, StoredState};
use crate::backend::Request;
use crate::decision::RawDecision;
use crate::{BackendError, BackendErrorKind};

/// How many stored keys each new key lets the sweep look at.
const SWEEP_STEP: usize = 4;

/// How many of the least recently used keys a full shard looks through for an expired
/// one before it drops the least recently used.
const EVICTION_SCAN: usize = 8;

/// The end of a list.
const NIL: u32 = u32::MAX;

/// One lock's keys: a slab of slots, a table from key to slot, and the slots in use in a
/// doubly linked list from the most to the least recently used (a small intrusive LRU
/// rather than a crate: the sweep and the eviction need to walk it and the slab directly).
pub(super) struct Shard {
    /// Entry numbers, hashed by their key's hash.
    pub(super) index: HashTable<u32>,
    /// `None` for a free slot, listed in `free`.
    pub(super) slots: Vec<Option<Entry>>,
    /// The recency list, beside the slots so that moving a key to its front touches a few
    /// small records rather than the slots themselves.
    pub(super) links: Vec<Recency>,
    pub(super) free: Vec<u32>,
    /// Most recently used slot, or `NIL`.
    pub(super) head: u32,
    /// Least recently used slot, or `NIL`.
    pub(super) tail: u32,
    /// Slots in use.
    pub(super) len: usize,
    /// At most this many slots in use.
    pub(super) capacity: usize,
    /// The next slot the sweep looks at.
    pub(super) hand: usize,
}

pub(super) struct Entry {
    pub(super) key: Box<str>,
    pub(super) hash: u64,
    pub(super) state: StoredState,
    /// When the key stops existing (µs since the epoch), as `PEXPIRE` would make it.
    pub(super) expires_at_us: u64,
}

#[derive(Clone, Copy)]
pub(super) struct Recency {
    /// Towards the most recently used.
    pub(super) prev: u32,
    /// Towards the least recently used.
    pub(super) next: u32,
}

impl Shard {
    /// [`check`](Self::check), with the rules an admitted check asking for warnings
    /// (`warn_at`) took to their warning share (`warning.rs`), judged under the same lock
    /// from what each rule had left: the embedded backend's `warn.lua`.
    #[inline]
    pub(super) fn check_warned(
        &mut self,
        request: &Request<'_>,
        hash: u64,
        now_us: u64,
    ) -> Result<RawDecision, BackendError> {
        if request.warn_at == 0 || !request.consume {
            return self.check(request, hash, now_us);
        }
        self.check_crossing(request, hash, now_us)
    }

    #[cold]
    #[inline(never)]
    pub(super) fn check_crossing(
        &mut self,
        request: &Request<'_>,
        hash: u64,
        now_us: u64,
    ) -> Result<RawDecision, BackendError> {
        let held = self
            .find(hash, request.key)
            .and_then(|id| self.slots[id as usize].as_ref())
            .filter(|slot| {
                slot.expires_at_us > now_us && slot.state.algorithm() == request.algorithm
            });
        let left: Vec<u64> = request
            .rules
            .iter()
            .map(|rule| held.map_or(rule.count(), |slot| slot.state.standing(rule, now_us).left))
            .collect();
        let mut raw = self.check(request, hash, now_us)?;
        if raw.allowed {
            raw.crossed = crate::warning::crossings(
                request.rules,
                &left,
                request.cost.get(),
                request.warn_at,
            );
        }
        Ok(raw)
    }

    pub(super) fn new(capacity: usize) -> Self {
        Shard {
            index: HashTable::new(),
            slots: Vec::new(),
            links: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
            capacity,
            hand: 0,
        }
    }

    pub(super) fn check(
        &mut self,
        request: &Request<'_>,
        hash: u64,
        now_us: u64,
    ) -> Result<RawDecision, BackendError> {
        let (key, algorithm) = (request.key, request.algorithm);
        let call = request.call(now_us);
        if let Some(id) = self.find(hash, key) {
            let slot = self.slots[id as usize]
                .as_mut()
                .expect("the index lists only slots in use");
            if slot.expires_at_us > now_us {
                let held = slot.state.algorithm();
                if held != algorithm {
                    // A key blocked while it held nothing (`Limiter::block`) is anyone's.
                    if let Some(taken) = slot.state.taken_over_by(algorithm) {
                        slot.state = taken;
                    } else {
                        return Err(BackendError::new(
                            BackendErrorKind::Command,
                            format!(
                                "key `{key}` holds {held} state; it cannot be checked with \
                             {algorithm} (use one algorithm per key)"
                            ),
                        ));
                    }
                }
            } else {
                // Expired: start over as if the key were absent. A check that writes
                // nothing leaves the (still expired) entry for the sweep.
                slot.state = StoredState::new(algorithm);
            }
            let outcome = slot.state.check(&call);
            if let Some(ttl) = outcome.ttl_us {
                slot.expires_at_us = now_us.saturating_add(ttl);
            }
            self.touch(id);
            return Ok(outcome.decision);
        }
        self.check_absent(request, &call, hash)
    }

    /// [`check`](Self::check) of a key not stored: apart, so that the check of a stored key
    /// (nearly every one) is small enough to be inlined where its answer is used.
    #[inline(never)]
    pub(super) fn check_absent(
        &mut self,
        request: &Request<'_>,
        call: &Call<'_>,
        hash: u64,
    ) -> Result<RawDecision, BackendError> {
        let (key, now_us) = (request.key, call.now_us);
        let mut state = StoredState::new(request.algorithm);
        let outcome = state.check(call);
        // A peek, or a denial, of an absent key stores nothing (unless it starts a block).
        if let Some(ttl) = outcome.ttl_us {
            self.insert(
                Entry {
                    key: Box::from(key),
                    hash,
                    state,
                    expires_at_us: now_us.saturating_add(ttl),
                },
                now_us,
            );
        }
        Ok(outcome.decision)
    }

    pub(super) fn find(&self, hash: u64, key: &str) -> Option<u32> {
        let slots = &self.slots;
        // A slot whose hash matches is almost always the key's: its state's memory is
        // asked for before the key's text is compared, so the two cache misses overlap.
        self.index
            .find(hash, |&id| {
                slots[id as usize].as_ref().is_some_and(|slot| {
                    slot.hash == hash && {
                        slot.state.prefetch();
                        &*slot.key == key
                    }
                })
            })
            .copied()
    }

    /// Stores a new key as the most recently used, making room first.
    pub(super) fn insert(&mut self, slot: Entry, now_us: u64) {
        self.sweep(now_us);
        if self.len >= self.capacity {
            self.evict(now_us);
        }
        let hash = slot.hash;
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(slot);
                id
            }
            None => {
                // Grow by doubling, but never past the capacity: the slab is the bulk of a
                // shard's memory.
                if self.slots.len() == self.slots.capacity() {
                    let more = self
                        .slots
                        .len()
                        .max(16)
                        .min(self.capacity - self.slots.len());
                    self.slots.reserve_exact(more);
                    self.links.reserve_exact(more);
                }
                self.slots.push(Some(slot));
                self.links.push(Recency {
                    prev: NIL,
                    next: NIL,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slots = &self.slots;
        self.index.insert_unique(hash, id, |&id| {
            slots[id as usize]
                .as_ref()
                .expect("the index lists only slots in use")
                .hash
        });
        self.push_front(id);
        self.len += 1;
    }

    /// Looks at the next [`SWEEP_STEP`] slots, dropping the expired keys among them: a
    /// bounded share of the work per new key, so an expired key is dropped within about
    /// `capacity / SWEEP_STEP` new keys of the shard, with no pass over the whole shard.
    pub(super) fn sweep(&mut self, now_us: u64) {
        for _ in 0..SWEEP_STEP.min(self.slots.len()) {
            self.hand = (self.hand + 1) % self.slots.len();
            if self.slots[self.hand]
                .as_ref()
                .is_some_and(|slot| slot.expires_at_us <= now_us)
            {
                self.remove(self.hand as u32);
            }
        }
    }

    /// Frees one slot of a full shard: an expired key among the [`EVICTION_SCAN`] least
    /// recently used, else the least recently used.
    pub(super) fn evict(&mut self, now_us: u64) {
        let mut id = self.tail;
        for _ in 0..EVICTION_SCAN {
            if id == NIL {
                break;
            }
            if self.slots[id as usize]
                .as_ref()
                .is_some_and(|slot| slot.expires_at_us <= now_us)
            {
                self.remove(id);
                return;
            }
            id = self.links[id as usize].prev;
        }
        self.remove(self.tail);
    }

    pub(super) fn remove(&mut self, id: u32) {
        let slot = self.slots[id as usize]
            .take()
            .expect("only slots in use are removed");
        self.index
            .find_entry(slot.hash, |&other| other == id)
            .expect("every slot in use is indexed")
            .remove();
        self.unlink(id);
        self.free.push(id);
        self.len -= 1;
    }

    /// Makes `id` the most recently used.
    pub(super) fn touch(&mut self, id: u32) {
        if self.head != id {
            self.unlink(id);
            self.push_front(id);
        }
    }

    pub(super) fn unlink(&mut self, id: u32) {
        let Recency { prev, next } = self.links[id as usize];
        match prev {
            NIL => self.head = next,
            prev => self.links[prev as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            next => self.links[next as usize].prev = prev,
        }
    }

    pub(super) fn push_front(&mut self, id: u32) {
        self.links[id as usize] = Recency {
            prev: NIL,
            next: self.head,
        };
        match self.head {
            NIL => self.tail = id,
            head => self.links[head as usize].prev = id,
        }
        self.head = id;
    }
}
