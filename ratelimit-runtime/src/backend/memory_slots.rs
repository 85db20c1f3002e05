//! The embedded backend's slots (calls in flight, `slot.rs`): the same sets as the Redis
//! scripts keep (`scripts/slot.lua`), each slot with the end of its lease by the backend's
//! clock.
//!
//! One lock over every key's set: only checks that take a slot, and their releases and
//! renewals, take it; a check without a slot never does. A check that takes a slot holds
//! it across its rules' check (taking the rules' shard lock inside it, never the reverse),
//! so that the slot and the units are taken together or not at all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::clock::Clock;
use crate::concurrency::{SlotAsk, SlotId};
use crate::sync;

/// Each key's slots: their ids and the ends of their leases (µs).
type Sets = HashMap<Box<str>, Vec<(SlotId, u64)>>;

pub(crate) struct MemorySlots {
    clock: Arc<dyn Clock>,
    /// A key whose slots are all released or lapsed is removed when next looked at.
    sets: Mutex<Sets>,
}

/// The slots of every key, locked for one check that takes a slot.
pub(crate) struct Taking<'a> {
    sets: MutexGuard<'a, Sets>,
}

impl MemorySlots {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemorySlots {
            clock,
            sets: Mutex::new(HashMap::new()),
        }
    }

    pub fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    /// Locks the sets for a check that takes a slot.
    pub fn lock(&self) -> Taking<'_> {
        Taking {
            sets: sync::lock(&self.sets),
        }
    }

    /// Frees the slot `id` of `key`, if it is held.
    pub fn release(&self, key: &str, id: SlotId) {
        let mut sets = sync::lock(&self.sets);
        if let Some(set) = sets.get_mut(key) {
            set.retain(|(held, _)| *held != id);
            if set.is_empty() {
                sets.remove(key);
            }
        }
    }

    /// Moves the end of the lease of the slot `id` of `key` to `lease_us` from now; `false`
    /// when it is no longer held (it lapsed, or the key was reset).
    pub fn renew(&self, key: &str, id: SlotId, lease_us: u64) -> bool {
        let mut sets = sync::lock(&self.sets);
        let now_us = self.clock.now_us();
        let Some(set) = sets.get_mut(key) else {
            return false;
        };
        match set.iter_mut().find(|(held, _)| *held == id) {
            Some((_, ends)) if *ends > now_us => {
                *ends = now_us + lease_us;
                true
            }
            _ => false,
        }
    }

    /// Forgets every slot of `key`.
    pub fn reset(&self, key: &str) {
        sync::lock(&self.sets).remove(key);
    }

    /// The slots of `key` held at `now_us` (their leases not ended).
    pub fn in_use(&self, key: &str, now_us: u64) -> u64 {
        sync::lock(&self.sets).get(key).map_or(0, |set| {
            set.iter().filter(|(_, ends)| *ends > now_us).count() as u64
        })
    }
}

impl Taking<'_> {
    /// Whether `ask` may take a slot of `key` at `now_us`: its own slot is held already
    /// (the check ran before), or one is free. Drops the lapsed slots it finds. `Err`:
    /// every slot is taken.
    pub fn free(&mut self, key: &str, ask: &SlotAsk, now_us: u64) -> Result<u64, ()> {
        let Some(set) = self.sets.get_mut(key) else {
            return Ok(ask.max);
        };
        set.retain(|(_, ends)| *ends > now_us);
        if set.iter().any(|(held, _)| *held == ask.id) {
            return Ok(ask.max.saturating_sub(set.len() as u64) + 1);
        }
        let in_use = set.len() as u64;
        if in_use >= ask.max {
            return Err(());
        }
        Ok(ask.max - in_use)
    }

    /// Takes the slot `ask` asks for, of `key`, at `now_us`.
    pub fn take(&mut self, key: &str, ask: &SlotAsk, now_us: u64) {
        let ends = now_us + ask.lease_us;
        let set = self.sets.entry(Box::from(key)).or_default();
        match set.iter_mut().find(|(held, _)| *held == ask.id) {
            Some((_, held_until)) => *held_until = ends,
            None => set.push((ask.id, ends)),
        }
    }
}
