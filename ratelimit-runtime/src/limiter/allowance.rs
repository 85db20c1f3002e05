//! Local allowances: the client side of a reservation of part of a key's budget.
//!
//! An instance **draws** an allowance for (key, rules, algorithm) in one round trip (a
//! [`Draw`] riding on a check: all or nothing over every rule, recorded by the backend as
//! spent at the latest moment it may be spent), then admits later checks of that key and
//! rules **locally** from what is left, until the allowance's lifetime ends; what it did not
//! use then goes back, and what it used is re-timed to the last moment it was spent
//! ([`GiveBack`]). Why the bound holds is the guide's chapter `docs/allowances.md`.
//!
//! Like the deny cache beside it, this is a local answer consulted before the backend, with
//! its own small state: the backends only know how to draw and to give back. The table is
//! split over independently locked shards; no lock is held across an `.await`. What this
//! module decides (when to draw, how much, when an allowance ends) is synchronous; the
//! limiter does the round trips ([`Limiter::ask`](super::Limiter)).

// Without Redis only the embedded backend standing for a remote one (tests) draws: the
// hot path's lookup and the give-back task serve Redis alone.
#![cfg_attr(not(feature = "redis"), allow(dead_code))]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use foldhash::quality::RandomState;
use hashbrown::HashMap;
use tokio::sync::{watch, Notify};

use crate::backend::{Draw, GiveBack, Request};
#[cfg(feature = "redis")]
use crate::background::TaskHold;
use crate::background::{HasTask, TaskPlace};
use crate::clock::Clock;
use crate::decision::{Bound, CountedBy, RawDecision, Receipt};
use crate::sharded::Sharded;
use crate::{sync, Algorithm, Rule};

mod seen;
mod sizing;
use self::seen::{Seen, Sight};
use self::sizing::Sizing;

/// How many independently locked maps the allowances are spread over.
const SHARDS: usize = 32;

/// The most keys a shard keeps (live allowances and what sizes the next draw of a key);
/// past it, keys holding no allowance make way, and when none can, a check goes to the
/// backend as without an allowance.
const SHARD_CAPACITY: usize = 8_192;

/// A draw never takes more than this share of what the key had left at its last answer:
/// a few instances cannot strand the rest of a budget.
const SHARE_OF_ROOM: u64 = 8;

/// A draw pays off when this instance's pace fills at least this many checks of an
/// allowance's life: a draw left with units unused costs its give-back too, and a draw's
/// script costs Redis more than a check's. (Drawing four fifths of a warm key's two to
/// six checks, mostly spent whole, was measured: fewer scripts, but more client and Redis
/// CPU per check than sending them alone; see BENCHMARKS.md.)
pub(super) const MIN_EXPECTED_CHECKS: f64 = 6.0;

/// The most checks one draw stands for.
const MAX_DRAW_CHECKS: u64 = 1 << 20;

/// The most calls one draw of the sliding log takes for rules counting calls over a window:
/// it records one member per call, which its draw writes and its give-back re-scores
/// (about 2 ms of Redis for this many); a calendar rule keeps one counter. Its units, from 64 on, are one weighted entry whatever their
/// number (`scripts/sliding_log.lua`), and the other algorithms cost the same whatever
/// the size.
const MAX_SLIDING_LOG_DRAW_CALLS: u64 = 1000;

/// `max_age` as a check carries it: whole milliseconds in 32 bits (49 days), 0 for off.
pub(crate) fn max_age_ms(max_age: Duration) -> u32 {
    match max_age.is_zero() {
        true => 0,
        // At least 1 ms for any allowance that is not off.
        false => u32::try_from(max_age.as_millis().max(1)).unwrap_or(u32::MAX),
    }
}

/// What a limiter's checks spend of local allowances: whether they spend any, the
/// allowance of a check that sets none, and the live ones.
pub(super) struct LocalAllowances {
    /// Whether checks spend allowances: on Redis, and on the embedded backend standing for
    /// a remote one (tests). Elsewhere every check is answered at once anyway, so a
    /// check's allowance resolves to none.
    spends: bool,
    /// The allowance of every check that sets none of its own, in ms (0: none).
    default_ms: u32,
    /// The live allowances, by key; shared with the give-back task.
    pub live: Arc<Allowances>,
}

impl LocalAllowances {
    /// No default allowance; `spends`: whether checks spend allowances at all.
    pub fn new(spends: bool, live: Allowances) -> Self {
        LocalAllowances {
            spends,
            default_ms: 0,
            live: Arc::new(live),
        }
    }

    /// Whether checks spend allowances.
    #[cfg(feature = "test-clock")]
    pub fn spends(&self) -> bool {
        self.spends
    }

    /// The same spending and default, with live allowances of its own (another instance's).
    #[cfg(feature = "test-clock")]
    pub fn beside(&self, live: Allowances) -> Self {
        LocalAllowances {
            live: Arc::new(live),
            ..*self
        }
    }

    /// Sets the allowance of every check that sets none of its own.
    pub fn set_default(&mut self, max_age: Duration) {
        self.default_ms = max_age_ms(max_age);
    }

    /// The allowance of a check whose own (a check's, else its site's) is `own`: that one,
    /// else the default; none where checks spend no allowance. In ms, 0 for none.
    #[inline]
    pub fn ms(&self, own: Option<Duration>) -> u32 {
        match self.spends {
            true => own.map_or(self.default_ms, max_age_ms),
            false => 0,
        }
    }
}

/// The live allowances of one limiter, by key.
pub(crate) struct Allowances {
    shards: Sharded<Shard>,
    clock: LocalClock,
    /// Allowances taken out of the table whose give-back is not yet sent.
    due: Mutex<Vec<GiveBack>>,
    /// When each live allowance ends (local µs), with its number and key, soonest first:
    /// the give-back task finds what is due without a pass over every key. An allowance
    /// retired earlier leaves its entry behind, skipped when it comes up.
    ends: Mutex<BinaryHeap<Reverse<End>>>,
    /// Numbers the allowances, so that a decision admitted from one names it.
    next_id: AtomicU64,
    /// Draws made (round trips for keys with an allowance), for tests and benchmarks.
    draws: AtomicU64,
    /// The give-back task's place (see `background.rs`).
    giving_back: TaskPlace,
    /// Wakes the give-back task early: something is due.
    wake: Notify,
    /// Records drawn units when drawn and spends them for as long as a real hold: the design
    /// that over-admits, kept to show that the differential test catches it.
    naive: AtomicBool,
}

/// When a live allowance ends (local µs), its number and its key.
type End = (u64, u64, Box<str>);

/// The local clock allowances end by. On Redis a monotonic one (a wall clock stepping back
/// would let an allowance be spent past the time its units are recorded at); over the
/// embedded backend made remote for tests, the backend's own.
enum LocalClock {
    Monotonic(Instant),
    #[cfg_attr(not(feature = "test-clock"), allow(dead_code))]
    Backend(Arc<dyn Clock>),
}

impl LocalClock {
    fn now_us(&self) -> u64 {
        match self {
            LocalClock::Monotonic(base) => crate::clock::micros(base.elapsed()) + 1,
            LocalClock::Backend(clock) => clock.now_us(),
        }
    }
}

struct Shard {
    /// The keys checked here again within their `max_age`: those that may draw.
    // foldhash: a check looks its key up two or three times, which SipHash made a
    // measurable part of a check that goes to Redis anyway.
    held: HashMap<Box<str>, Held, RandomState>,
    /// The keys checked here lately that are not in `held`, and their pace (see
    /// [`Seen`]): a key enters `held` once it is checked at a pace that may draw; until
    /// then each check of it is its own round trip, as it would be anyway, and costs one
    /// look there. So `held` keeps the warm keys alone, and its lookups stay in cache
    /// whatever the number of cold keys checked.
    seen: Seen,
}

/// One key's allowance, and what sizes its next draw.
struct Held {
    rules: Box<[Rule]>,
    algorithm: Algorithm,
    live: Option<Live>,
    /// The draw in flight that other checks of the key wait for, and its number; its value
    /// turns `true` when the draw was answered (`false` to the end: it failed, or its check
    /// was dropped).
    drawing: Option<(u64, watch::Receiver<bool>)>,
    /// Checks that waited for the draw in flight: the next draw stands for them too.
    waiting: u64,
    sizing: Sizing,
}

/// An allowance being spent.
struct Live {
    id: u64,
    draw: Draw,
    /// The draw's receipt: where and when the backend counted it (`at_us` = its time `d`).
    receipt: Receipt,
    /// When the draw was sent, on the local clock (before the backend counted it).
    sent_at_us: u64,
    /// When it stops being spent, on the local clock: `sent_at + hold`, so never later
    /// than the time its units are recorded at.
    ends_at_us: u64,
    /// The hold the backend gave it.
    hold_us: u64,
    calls_left: u64,
    units_left: u64,
    /// The last local spend (the draw's own check at the least).
    last_spend_us: u64,
    /// The draw's answer: the binding rule and what the key had left after the draw.
    rule_index: usize,
    room_after_draw: u64,
    reset_after_us: u64,
    /// Checks admitted from it, the draw's own included.
    checks: u64,
}

/// Whether the give-back of an allowance is not worth a round trip: everything was used.
/// Re-timing it would only let its units leave their windows a little earlier (they stay
/// recorded at the end of the hold, at most `max_age` after they were spent: the safe
/// side); a hot key then costs one command per allowance, the draw.
fn changes_nothing(back: &GiveBack) -> bool {
    back.used_units == back.receipt.cost && back.used_calls == back.draw.calls.get()
}

/// What a check with an allowance on Redis does first (see [`Allowances::admit`]).
pub(crate) enum Admission {
    /// Admitted from the allowance: no round trip.
    Local(RawDecision),
    /// Its key is not warm: a plain check, as without an allowance (its round trip
    /// counted).
    Alone,
    /// Its key may draw, or wait for a draw: see [`Allowances::step`].
    Step,
}

/// What a check of a key with an allowance does next.
pub(crate) enum Step {
    /// Admitted from the allowance: no round trip.
    Local(RawDecision),
    /// A draw of the key is in flight: wait for it, then look again (see [`answered`]).
    Wait(watch::Receiver<bool>),
    /// Ask the backend: with the ticket's draw, or (none) a plain check.
    Ask(Ticket),
}

/// Whether the draw a check waited for was answered: when it was not (it failed, or its
/// check was dropped), the waiters go to the backend alone, side by side, rather than one
/// after the other (a hung server would otherwise cost each of them a timeout in turn).
pub(crate) fn answered(drawing: &watch::Receiver<bool>) -> bool {
    *drawing.borrow()
}

/// A round trip this check makes for its key: a draw, or a plain check.
pub(crate) struct Ticket {
    /// `None`: a plain check (the key's first, or near its limit).
    pub draw: Option<Draw>,
    /// The draw's units (the request's cost for a plain check).
    pub units: NonZeroU64,
    /// When it was sent, local clock.
    sent_at_us: u64,
    /// Other checks wait for it; dropping it (a cancelled check) wakes them.
    shared: Option<(u64, watch::Sender<bool>)>,
    /// Whether its key may be in `held`: `false` for a key that is not warm, whose answer
    /// then teaches nothing.
    in_table: bool,
}

/// What a round trip's answer did.
pub(crate) enum Drawn {
    /// The caller's answer.
    Answer(RawDecision),
    /// A draw larger than the check was refused: ask again for the check alone.
    Retry,
}

impl Allowances {
    /// Allowances ending by a monotonic local clock (Redis).
    pub fn new() -> Self {
        Self::with_clock(LocalClock::Monotonic(Instant::now()))
    }

    /// Allowances over a backend whose clock is `clock` (the embedded backend made remote
    /// for tests): local and backend times are then one.
    #[cfg_attr(not(feature = "test-clock"), allow(dead_code))]
    pub fn on_clock(clock: Arc<dyn Clock>) -> Self {
        Self::with_clock(LocalClock::Backend(clock))
    }

    fn with_clock(clock: LocalClock) -> Self {
        Allowances {
            shards: Sharded::new(SHARDS, |_| Shard {
                held: HashMap::default(),
                seen: Seen::default(),
            }),
            clock,
            due: Mutex::new(Vec::new()),
            ends: Mutex::new(BinaryHeap::new()),
            next_id: AtomicU64::new(1),
            draws: AtomicU64::new(0),
            giving_back: TaskPlace::default(),
            wake: Notify::new(),
            naive: AtomicBool::new(false),
        }
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, Shard> {
        self.locate(key).1
    }

    /// `key`'s hash and its shard, locked.
    fn locate(&self, key: &str) -> (u64, MutexGuard<'_, Shard>) {
        let hash = self.shards.hash(key);
        (hash, self.shards.lock(hash))
    }

    /// The local time of `request`: its explicit one (tests), else the local clock's.
    fn now_us(&self, request: &Request<'_>) -> u64 {
        request.now_us_or(|| self.clock.now_us())
    }

    /// Draws made so far.
    pub fn draws(&self) -> u64 {
        self.draws.load(Ordering::Relaxed)
    }

    /// Switches to the naive design (see `naive`).
    #[cfg_attr(not(feature = "test-clock"), allow(dead_code))]
    pub fn set_naive(&self, naive: bool) {
        self.naive.store(naive, Ordering::Relaxed);
    }

    /// What `request` (a consuming check with an allowance, on Redis) does first: admitted
    /// from its key's live allowance when one holds room for it (the hot path: one lookup
    /// and a few additions); sent alone, as without an allowance, when its key is not warm
    /// (one look at [`Shard::seen`], none in `held`); else [`step`](Self::step).
    #[inline]
    pub fn admit(&self, request: &Request<'_>) -> Admission {
        let (hash, mut shard) = self.locate(request.key);
        let now_us = self.now_us(request);
        match shard.seen.again(hash, now_us, request.allowance_ms) {
            Sight::Cold => {
                drop(shard);
                self.draws.fetch_add(1, Ordering::Relaxed);
                return Admission::Alone;
            }
            // `step` lets it in (its second look, a gap of 0, keeps it warm).
            Sight::Warm => return Admission::Step,
            Sight::Held => {}
        }
        let Some(held) = shard.held.get_mut(request.key) else {
            // Another key's slot, or its own left behind: the next check notes its pace.
            shard.seen.left(hash);
            drop(shard);
            self.draws.fetch_add(1, Ordering::Relaxed);
            return Admission::Alone;
        };
        if held.algorithm != request.algorithm || *held.rules != *request.rules {
            return Admission::Step;
        }
        let Some(live) = held.live.as_mut() else {
            return Admission::Step;
        };
        match live.admit(request, now_us) {
            Some(raw) => Admission::Local(raw),
            None => Admission::Step,
        }
    }

    /// What `request` (a consuming check with an allowance) does next; an
    /// allowance that has ended, or cannot admit it, is retired on the way.
    pub fn step(&self, request: &Request<'_>) -> Step {
        let now_us = self.now_us(request);
        let mut retired = None;
        let step = {
            let (hash, mut shard) = self.locate(request.key);
            // A key not checked here at a pace that may draw goes to the backend alone,
            // leaving nothing in `held` (see `Shard::seen`).
            if !shard.held.contains_key(request.key) {
                if shard.seen.again(hash, now_us, request.allowance_ms) != Sight::Warm {
                    return Step::Ask(Ticket::cold(request));
                }
                shard.seen.held(hash);
            }
            let Some(held) = shard.entry(request) else {
                return Step::Ask(Ticket::plain(request, now_us));
            };
            if let Some(live) = held.live.as_mut() {
                if now_us < live.ends_at_us {
                    if let Some(raw) = live.admit(request, now_us) {
                        return Step::Local(raw);
                    }
                }
                let live = held.live.take().expect("just seen");
                held.sizing.spent(&live, now_us);
                retired = Some(live);
            } else {
                held.sizing.arrived(now_us);
            }
            match &held.drawing {
                // Its sender gone (a check dropped mid-draw) it wakes nobody: draw again.
                Some((_, drawing)) if drawing.has_changed().is_ok() => {
                    held.waiting += 1;
                    Step::Wait(drawing.clone())
                }
                _ => Step::Ask(self.ticket(held, request, now_us)),
            }
        };
        if let Some(live) = retired {
            self.retire(request.key, request.rules, live);
        }
        step
    }

    /// The round trip of a check that found no room here for `request`.
    fn ticket(&self, held: &mut Held, request: &Request<'_>, now_us: u64) -> Ticket {
        let (cost, max_age_ms) = (request.cost, request.allowance_ms);
        let demand = std::mem::take(&mut held.waiting) + 1;
        let checks = held
            .sizing
            .next_checks(u64::from(max_age_ms) * 1000, demand);
        held.drawing = None;
        let shared = |held: &mut Held| {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = watch::channel(false);
            held.drawing = Some((id, rx));
            Some((id, tx))
        };
        // The key's first check finds out how much room it has; the others wait for it.
        if !held.sizing.known {
            return Ticket {
                shared: shared(held),
                ..Ticket::plain(request, now_us)
            };
        }
        // A receipt counts units in 32 bits.
        let mut checks = checks.min(u64::from(u32::MAX) / cost.get());
        let calls_over_a_window = |rule: &Rule| rule.counts_calls() && rule.calendar().is_none();
        if request.algorithm == Algorithm::SlidingLog
            && request.rules.iter().any(calls_over_a_window)
        {
            checks = checks.min(MAX_SLIDING_LOG_DRAW_CALLS);
        }
        let units = cost.saturating_mul(NonZeroU64::new(checks).unwrap_or(NonZeroU64::MIN));
        // Near the limit: a round trip per check, side by side, as without an allowance.
        if checks <= 1 || units.get() > Rule::MAX_COUNT {
            return Ticket::plain(request, now_us);
        }
        let hold_us = intended_hold_us(request);
        Ticket {
            draw: Some(Draw {
                calls: NonZeroU64::new(checks).expect("more than one"),
                hold_us: match self.naive.load(Ordering::Relaxed) {
                    true => 0,
                    false => hold_us,
                },
            }),
            units,
            sent_at_us: now_us,
            shared: shared(held),
            in_table: true,
        }
    }

    /// Takes the backend's answer to `ticket`'s round trip for `request`: a draw admitted
    /// becomes the key's live allowance, its own check admitted from it; any answer tells
    /// how much room the key has.
    pub fn drawn(&self, request: &Request<'_>, ticket: Ticket, raw: RawDecision) -> Drawn {
        self.draws.fetch_add(1, Ordering::Relaxed);
        let Ticket {
            draw,
            units,
            sent_at_us,
            shared,
            in_table,
        } = ticket;
        // A check of a key not in `held` (not warm yet) leaves it out, and looks at nothing.
        if !in_table {
            return Drawn::Answer(raw);
        }
        let mut shard = self.shard(request.key);
        let held = match (&draw, &shared) {
            (None, None) => shard.held.get_mut(request.key).filter(|held| {
                held.algorithm == request.algorithm && *held.rules == *request.rules
            }),
            _ => shard.entry(request),
        };
        let Some(held) = held else {
            return Drawn::Answer(raw);
        };
        if let Some((id, answered)) = &shared {
            answered.send_replace(true);
            if held
                .drawing
                .as_ref()
                .is_some_and(|(drawing, _)| drawing == id)
            {
                held.drawing = None;
            }
        }
        held.sizing.answered(request, &raw);
        let Some(draw) = draw else {
            return Drawn::Answer(raw);
        };
        if !raw.allowed {
            // Refused for its size, perhaps: the check alone may still pass.
            held.sizing.room_checks = 0;
            return Drawn::Retry;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let hold_us = draw.hold_at(request.rules, request.algorithm, raw.receipt.at_us);
        let lifetime_us = match self.naive.load(Ordering::Relaxed) {
            // Spent as long as a real hold, though recorded when drawn.
            true => Draw {
                hold_us: intended_hold_us(request),
                ..draw
            }
            .hold_at(request.rules, request.algorithm, raw.receipt.at_us),
            false => hold_us,
        };
        let mut live = Live {
            id,
            draw,
            receipt: raw.receipt,
            sent_at_us,
            ends_at_us: sent_at_us.saturating_add(lifetime_us),
            hold_us,
            calls_left: draw.calls.get(),
            units_left: units.get(),
            last_spend_us: sent_at_us,
            rule_index: raw.rule_index,
            room_after_draw: raw.remaining,
            reset_after_us: raw.reset_after_us,
            checks: 0,
        };
        // The draw's own check was counted with it, after it was sent: admitted whatever
        // the hold, none included (a draw counted in the last µs of its aligned window or
        // UTC day), where an allowance has no life left to spend the rest in.
        let mut answer = live.spend(request, sent_at_us);
        // A rule the draw took over its warning share warns through the check that drew
        // (the backend decided it once, fleet-wide, from the counts it holds).
        answer.crossed = raw.crossed;
        if lifetime_us == 0 {
            drop(shard);
            self.retire(request.key, request.rules, live);
            return Drawn::Answer(answer);
        }
        let replaced = held.live.replace(live);
        drop(shard);
        sync::lock(&self.ends).push(Reverse((
            sent_at_us.saturating_add(lifetime_us),
            id,
            Box::from(request.key),
        )));
        if let Some(old) = replaced {
            self.retire(request.key, request.rules, old);
        }
        Drawn::Answer(answer)
    }

    /// The backend answered `request` as without an allowance (the retry of a refused
    /// draw): what it says of the key's room sizes the next draw.
    pub fn learn(&self, request: &Request<'_>, raw: &RawDecision) {
        self.draws.fetch_add(1, Ordering::Relaxed);
        if let Some(held) = self.shard(request.key).entry(request) {
            held.sizing.answered(request, raw);
        }
    }

    /// Queues the give-back of `live`, an allowance of `key` and `rules`, and wakes the
    /// give-back task.
    fn retire(&self, key: &str, rules: &[Rule], live: Live) {
        let retired = live.retired(key, rules);
        if changes_nothing(&retired) {
            return;
        }
        sync::lock(&self.due).push(retired);
        self.wake.notify_one();
    }

    /// Gives `receipt`'s units (a decision admitted from an allowance) back to that
    /// allowance, or settles them at `actual` there (`None`: a refund, its call too), when
    /// it is still live: `Some` of the key's figures then, as a peek would answer them.
    /// `None` once it has ended: its give-back has counted them as used.
    pub fn settle_local(
        &self,
        key: &str,
        rules: &[Rule],
        receipt: &Receipt,
        actual: Option<u64>,
    ) -> Option<RawDecision> {
        let mut shard = self.shard(key);
        let held = shard.held.get_mut(key)?;
        let live = held.live.as_mut().filter(|live| live.id == receipt.id)?;
        if held.algorithm != receipt.algorithm || *held.rules != *rules {
            return None;
        }
        let reserved = receipt.cost;
        match actual {
            None => {
                live.units_left += reserved;
                live.calls_left += 1;
            }
            Some(actual) if actual <= reserved => live.units_left += reserved - actual,
            // The excess comes from what the allowance holds; past it, the work is done
            // and the rest stays unrecorded (see the chapter: settling with allowances).
            Some(actual) => live.units_left -= live.units_left.min(actual - reserved),
        }
        Some(live.figures(rules, 0, false))
    }

    /// Ends every allowance now (`release_allowances`), and takes every give-back due.
    pub fn release_all(&self) -> Vec<GiveBack> {
        self.collect(|_| true)
    }

    /// Takes the give-backs due: the allowances retired, and those whose life has ended by
    /// the local clock.
    pub fn collect_due(&self) -> Vec<GiveBack> {
        let now_us = self.clock.now_us();
        let mut out = self.take_retired();
        loop {
            let (id, key) = {
                let mut ends = sync::lock(&self.ends);
                match ends.peek() {
                    Some(Reverse((end_us, _, _))) if *end_us <= now_us => {}
                    _ => break,
                }
                let Reverse((_, id, key)) = ends.pop().expect("just seen");
                (id, key)
            };
            let mut shard = self.shard(&key);
            let Some(held) = shard.held.get_mut(&*key) else {
                continue;
            };
            if held.live.as_ref().is_some_and(|live| live.id == id) {
                let live = held.live.take().expect("just seen");
                held.sizing.spent(&live, now_us);
                let retired = live.retired(&key, &held.rules);
                if !changes_nothing(&retired) {
                    out.push(retired);
                }
            }
        }
        out
    }

    /// Takes the give-backs of the allowances retired by checks.
    pub fn take_retired(&self) -> Vec<GiveBack> {
        std::mem::take(&mut *sync::lock(&self.due))
    }

    fn collect(&self, ended: impl Fn(&Live) -> bool) -> Vec<GiveBack> {
        let now_us = self.clock.now_us();
        let mut out = std::mem::take(&mut *sync::lock(&self.due));
        for mut shard in self.shards.iter() {
            for (key, held) in shard.held.iter_mut() {
                if held.live.as_ref().is_some_and(&ended) {
                    let live = held.live.take().expect("just seen");
                    held.sizing.spent(&live, now_us);
                    let retired = live.retired(key, &held.rules);
                    if !changes_nothing(&retired) {
                        out.push(retired);
                    }
                }
            }
        }
        out
    }

    /// Forgets `key`'s allowance without giving it back (the key was reset: nothing of it
    /// is counted any more).
    pub fn forget(&self, key: &str) {
        let (hash, mut shard) = self.locate(key);
        shard.held.remove(key);
        shard.seen.left(hash);
    }

    /// Ends `key`'s allowances now (a block written through this limiter), giving them back.
    pub fn end(&self, key: &str) {
        let now_us = self.clock.now_us();
        let mut shard = self.shard(key);
        let Some(held) = shard.held.get_mut(key) else {
            return;
        };
        let Some(live) = held.live.take() else {
            return;
        };
        held.sizing.spent(&live, now_us);
        let rules = held.rules.clone();
        drop(shard);
        self.retire(key, &rules, live);
    }

    /// When the next live allowance ends (local µs), if any lives.
    fn next_end_us(&self) -> Option<u64> {
        let ends = sync::lock(&self.ends);
        ends.peek().map(|Reverse((end_us, _, _))| *end_us)
    }

    /// How long the give-back task may sleep: until the next allowance ends; `None` when
    /// none lives and nothing is due.
    pub fn next_wait(&self) -> Option<Duration> {
        if !sync::lock(&self.due).is_empty() {
            return Some(Duration::ZERO);
        }
        let now_us = self.clock.now_us();
        self.next_end_us()
            .map(|end_us| Duration::from_micros(end_us.saturating_sub(now_us)))
    }

    /// Resolves when something is due before the task's sleep ends.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }
}

/// The give-back task of one limiter on Redis: sends the give-backs due, batched, then
/// sleeps until the next allowance ends (or something is retired); ends when no allowance
/// lives, when the limiter is gone, or with its runtime.
#[cfg(feature = "redis")]
pub(crate) async fn give_backs(
    mut hold: TaskHold<Allowances>,
    redis: std::sync::Weak<crate::backend::redis::RedisBackend>,
) {
    loop {
        let Some(this) = hold.owner() else {
            return;
        };
        let due = this.collect_due();
        if !due.is_empty() {
            let Some(redis) = redis.upgrade() else {
                return;
            };
            for result in redis.give_back_all(&due).await {
                if let Err(err) = result {
                    report_give_back_failed(&err);
                }
            }
        }
        let Some(wait) = this.next_wait() else {
            drop(this);
            // A draw made meanwhile found the task running, and started none: go on.
            match hold.end_if_idle(|allowances| allowances.next_wait().is_none()) {
                Some(again) => hold = again,
                None => return,
            }
            continue;
        };
        // Early when something is retired meanwhile; at least 1 ms apart, so that many
        // allowances ending close together go back in one batch.
        let _ = tokio::time::timeout(wait, this.woken()).await;
        drop(this);
        tokio::time::sleep(GIVE_BACK_BATCH).await;
    }
}

impl HasTask for Allowances {
    fn task_place(&self) -> &TaskPlace {
        &self.giving_back
    }
}

/// How long the give-back task waits, after an allowance ends, for others to batch with.
const GIVE_BACK_BATCH: Duration = Duration::from_millis(1);

/// Logs a give-back that could not reach the backend (its units stay counted as spent until
/// their windows pass, the safe side), at most once per
/// [`LogThrottle::INTERVAL`](crate::throttle::LogThrottle::INTERVAL).
#[cfg(feature = "redis")]
pub(crate) fn report_give_back_failed(err: &crate::BackendError) {
    crate::throttle::throttled!(
        warn,
        [error = %err],
        "could not give an unused allowance back; what it held stays counted as spent \
         until its windows pass",
    );
}

impl Shard {
    /// `request`'s entry, made when absent; a different set of rules or algorithm for the
    /// key starts over (a change of the site's rules ends an allowance: its give-back is
    /// then sent by the give-back task's sweep). `None` when the shard is full.
    fn entry(&mut self, request: &Request<'_>) -> Option<&mut Held> {
        if self.held.len() >= SHARD_CAPACITY && !self.held.contains_key(request.key) {
            self.held
                .retain(|_, held| held.live.is_some() || held.drawing.is_some());
            if self.held.len() >= SHARD_CAPACITY {
                return None;
            }
        }
        // Looked up once, by `&str`: a key already here costs no allocation.
        let held = self
            .held
            .entry_ref(request.key)
            .or_insert_with(|| Held::new(request));
        if held.algorithm != request.algorithm || *held.rules != *request.rules {
            // Kept until the sweep gives the old allowance back: only its sizing resets.
            if held.live.is_none() && held.drawing.is_none() {
                *held = Held::new(request);
            } else {
                return None;
            }
        }
        Some(held)
    }
}

impl Held {
    fn new(request: &Request<'_>) -> Self {
        Held {
            rules: request.rules.into(),
            algorithm: request.algorithm,
            live: None,
            drawing: None,
            waiting: 0,
            sizing: Sizing::default(),
        }
    }
}

impl Live {
    /// Admits `request` at local `now_us` when the allowance holds room for it.
    #[inline]
    fn admit(&mut self, request: &Request<'_>, now_us: u64) -> Option<RawDecision> {
        let cost = request.cost.get();
        if now_us >= self.ends_at_us || self.units_left < cost || self.calls_left == 0 {
            return None;
        }
        Some(self.spend(request, now_us))
    }

    /// Spends `request`'s cost, which the allowance holds, at local `now_us`.
    #[inline]
    fn spend(&mut self, request: &Request<'_>, now_us: u64) -> RawDecision {
        let cost = request.cost.get();
        self.units_left -= cost;
        self.calls_left -= 1;
        self.checks += 1;
        self.last_spend_us = self.last_spend_us.max(now_us);
        self.figures(request.rules, cost, true)
    }

    /// How the key stands in this instance's view: what the backend had left after the draw
    /// plus what this allowance still holds, under the draw's binding rule.
    fn figures(&self, rules: &[Rule], cost: u64, admitted: bool) -> RawDecision {
        let held = match rules.get(self.rule_index).is_some_and(Rule::counts_calls) {
            true => self.calls_left,
            false => self.units_left,
        };
        let elapsed_us = self.last_spend_us.saturating_sub(self.sent_at_us);
        RawDecision {
            allowed: true,
            rule_index: self.rule_index,
            remaining: self.room_after_draw.saturating_add(held),
            reset_after_us: self.reset_after_us.saturating_sub(elapsed_us),
            retry_after_us: 0,
            // Named by the allowance (a settle finds it by that, and never reaches a later
            // one), and numbered by the check within it where a backend's receipt has its
            // time, so that each check's refund or settle is recorded once.
            receipt: match admitted {
                true => Receipt::new(
                    cost,
                    self.checks,
                    self.id,
                    self.receipt.algorithm,
                    CountedBy::Allowance,
                ),
                false => Receipt::NONE,
            },
            bound: Bound::Rule,
            crossed: None,
        }
    }

    /// Its give-back: the units and calls it did not spend go back; those it spent are
    /// re-timed to its last spend on the backend's clock, `d + (last - sent)`, which is no
    /// earlier than that spend (the backend counted the draw at `d`, after it was sent) and
    /// no later than its record time.
    fn retired(self, key: &str, rules: &[Rule]) -> GiveBack {
        let units_drawn = self.receipt.cost;
        let used_units = units_drawn.saturating_sub(self.units_left);
        let used_calls = self.draw.calls.get().saturating_sub(self.calls_left);
        let since_sent = self.last_spend_us.saturating_sub(self.sent_at_us);
        GiveBack {
            key: key.into(),
            rules: rules.into(),
            draw: Draw {
                hold_us: self.hold_us,
                ..self.draw
            },
            receipt: self.receipt,
            used_calls,
            used_units,
            last_spend_us: self.receipt.at_us + since_sent.min(self.hold_us),
        }
    }
}

impl Ticket {
    /// A plain check of `request` that waits for no draw in flight.
    pub fn alone(request: &Request<'_>) -> Self {
        Ticket::plain(request, 0)
    }

    /// A plain check of `request`, shared with nobody.
    fn plain(request: &Request<'_>, now_us: u64) -> Self {
        Ticket {
            draw: None,
            units: request.cost,
            sent_at_us: now_us,
            shared: None,
            in_table: true,
        }
    }

    /// A plain check of `request`, whose key is not in `held`: its answer is the caller's
    /// alone.
    fn cold(request: &Request<'_>) -> Self {
        Ticket {
            in_table: false,
            ..Ticket::plain(request, 0)
        }
    }
}

/// The hold a draw for `request` asks for: its allowance's `max_age` (the backend shortens
/// it to a quarter of the shortest window and to the end of an aligned window or calendar
/// period: see `Draw::hold_at`).
fn intended_hold_us(request: &Request<'_>) -> u64 {
    u64::from(request.allowance_ms) * 1000
}
