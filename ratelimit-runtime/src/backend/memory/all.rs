//! A list of checks as one (`Limiter::check_all`), all or nothing, under the locks of
//! every key it names at once.

use std::sync::MutexGuard;

use super::{MemoryBackend, Shard};
use crate::backend::Request;
use crate::decision::RawDecision;
use crate::BackendError;

impl MemoryBackend {
    /// Checks `requests` as one: every one admitted and counted, or none counted. Each
    /// answer says whether its own check would pass. Under the locks of every shard the
    /// keys live in, taken in the shards' order (so two lists cannot deadlock, and a
    /// single check takes one lock), and at one time read under them: first every check
    /// is peeked; when all would pass, each is counted in turn (a key named twice may then
    /// refuse its second check: what the list counted before is given back, still under
    /// the locks); else only the refusing checks that start a block are counted, refused
    /// again.
    pub(crate) fn check_all_now(
        &self,
        requests: &[Request<'_>],
    ) -> Result<Vec<RawDecision>, BackendError> {
        self.started();
        let hashes: Vec<u64> = requests.iter().map(|r| self.hash(r.key)).collect();
        let mut indices: Vec<usize> = hashes.iter().map(|&h| self.shard_index(h)).collect();
        indices.sort_unstable();
        indices.dedup();
        let mut locked: Vec<(usize, MutexGuard<'_, Shard>)> = indices
            .into_iter()
            .map(|index| (index, self.shards.lock_at(index)))
            .collect();
        // Read once, under every lock: no check of the list acts on state newer than it.
        let clock_us = self.clock.now_us();
        let now_of = |request: &Request<'_>| request.now_us_or(|| clock_us);

        let mut peeked = Vec::with_capacity(requests.len());
        for (request, &hash) in requests.iter().zip(&hashes) {
            let peek = Request {
                consume: false,
                warn_at: 0,
                ..*request
            };
            peeked.push(locked_shard(&mut locked, self.shard_index(hash)).check(
                &peek,
                hash,
                now_of(request),
            )?);
        }
        if !peeked.iter().all(|raw| raw.allowed) {
            for ((request, &hash), raw) in requests.iter().zip(&hashes).zip(&mut peeked) {
                if !raw.allowed && request.consume && request.lockout.is_some() {
                    *raw = locked_shard(&mut locked, self.shard_index(hash)).check(
                        request,
                        hash,
                        now_of(request),
                    )?;
                }
            }
            return Ok(peeked);
        }
        let mut counted: Vec<RawDecision> = Vec::with_capacity(requests.len());
        for (request, &hash) in requests.iter().zip(&hashes) {
            let raw = locked_shard(&mut locked, self.shard_index(hash)).check_warned(
                request,
                hash,
                now_of(request),
            )?;
            if !raw.allowed {
                // Only a key named twice comes here: its earlier check took the room.
                for (earlier, (request, &hash)) in counted.iter().zip(requests.iter().zip(&hashes))
                {
                    locked_shard(&mut locked, self.shard_index(hash)).refund_now(
                        request,
                        hash,
                        &earlier.receipt,
                        now_of(request),
                    );
                }
                peeked[counted.len()] = raw;
                return Ok(peeked);
            }
            counted.push(raw);
        }
        Ok(counted)
    }
}

/// The shard numbered `index` of those `locked`, in their order.
fn locked_shard<'l, 's>(
    locked: &'l mut [(usize, MutexGuard<'s, Shard>)],
    index: usize,
) -> &'l mut Shard {
    let at = locked
        .binary_search_by_key(&index, |(index, _)| *index)
        .expect("every key's shard is locked");
    &mut locked[at].1
}

impl Shard {
    /// Gives back what `receipt` of a check of `request` took (see `MemoryBackend::refund`),
    /// under this shard's lock, held by the caller.
    fn refund_now(
        &mut self,
        request: &Request<'_>,
        hash: u64,
        receipt: &crate::decision::Receipt,
        now_us: u64,
    ) {
        if receipt.is_empty() {
            return;
        }
        if let Some(id) = self.find(hash, request.key) {
            let slot = self.slots[id as usize]
                .as_mut()
                .expect("the index lists only slots in use");
            if slot.expires_at_us > now_us {
                slot.state.refund(request.rules, receipt, now_us);
            }
        }
    }
}
