//! The distlock conformance suite: one case per point of the lock contract (written in
//! [`distlock_core::LockBackend`]'s docs) and per known bug of other lock libraries, run
//! against any backend.
//!
//! - [`cases`] holds the cases, one `pub async fn` each, on their own random keys, so
//!   they can run in parallel against one server.
//! - [`conformance_main!`] turns the suite into a test target for any backend; the
//!   cases the backend cannot run (by its [`Capabilities`](distlock_core::Capabilities),
//!   or for lack of server control) are reported as ignored, with the reason.
//! - [`run_suite`] returns a per-case report (passed, failed with its message,
//!   skipped with its reason, duration) for comparison reports.
//! - [`servers`] starts real Redis, PostgreSQL and etcd servers in containers, with a
//!   handle to pause, restart and kill them.
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub, rust_2018_idioms)]

pub mod cases;
pub mod servers;
mod suite;
mod target;

pub use suite::{
    case, run_as_tests, run_case, run_suite, Case, CaseReport, Outcome, SuiteReport, CASES,
};
pub use target::{MemoryControl, ServerControl, Target};
