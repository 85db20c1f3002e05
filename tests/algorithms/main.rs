//! The counting algorithms against a real redis-server.
//!
//! `scripts::*` run each Lua script with `EVAL` on hand-worked sequences and on what only
//! Redis can show (writes, TTLs, the server clock, a key of another algorithm).
//! `differential::*` drive the Redis and the memory backend through the same random calls
//! at the same explicit times and require identical decisions, and check on those calls
//! the bound each algorithm promises and that `retry_after` is exact.

#[path = "../support/mod.rs"]
mod support;

mod api;
mod differential;
mod scripts;
