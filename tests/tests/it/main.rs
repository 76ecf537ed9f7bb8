//! The end-to-end and cross-crate tests of fluxio, in one binary (every test
//! binary links the facade, sqlx, redis-rs, tokio and the rest once more).
//!
//! Tests of a docs/CONTRACT.md rule carry its number in their name
//! (`durable::rule6_...`). `decode_fuzz` is a binary of its own: it installs
//! a panic hook for the whole process and reruns itself under `ulimit -v`.

mod branches;
mod callbacks;
mod cancel;
mod child;
mod common;
mod compensation;
mod conformance_memory;
mod context;
mod crash;
mod crash_child;
mod crash_compensation;
mod crash_waits;
mod deadline;
mod durability;
mod durable;
mod empty_pipeline;
mod facade_stores;
mod fix_and_resume;
mod fork_patch;
mod golden_checkpoints;
mod hardening;
mod helpers;
mod history;
mod lifecycle;
mod logging_callback;
mod max_parallel;
mod middleware;
mod middleware_builtins;
mod multiprocess;
mod not_durable;
mod pipeline;
mod queue;
mod queue_processes;
mod ready_stages;
mod recovery;
mod recovery_processes;
mod release;
mod resources;
mod retention;
mod run_ids;
mod schedule;
mod schedule_processes;
mod settings;
mod shape;
mod stage_errors;
mod store_faults;
mod streaming;
mod terminal;
mod testing_kit;
mod typed_keys;
mod value_limits;
mod waits;
mod waits_processes;
