//! The distlock conformance suite: one case per point of the lock contract (written in
//! [`distlock_core::LockBackend`]'s docs) and per known bug of other lock libraries, run
//! against any backend.
//!
//! - [`cases`](mod@cases) holds the cases, one file per area of the contract, one
//!   `pub async fn` each on its own random keys, so they can run in parallel against
//!   one server; each names the [`ContractPoint`] it checks.
//! - [`conformance_main!`] turns the suite into a test target for any backend; the
//!   cases the backend cannot run (by its [`Capabilities`](distlock_core::backend::Capabilities),
//!   or for lack of server control) are reported as ignored, with the reason.
//! - [`run_suite`] returns a per-case report (passed, failed with its message,
//!   skipped with its reason, duration) for comparison reports.
//! - One runner serves both suites: [`run_case`], [`run_suite`] and [`run_as_tests`]
//!   take any [`SuiteTarget`], a lock backend's [`Target`] or a fenced store's
//!   [`fenced::StoreTarget`].
//!
//! - [`adoption`] checks what a service meets when it adopts a backend: an
//!   unreachable endpoint named with its setting, and passwords as operators write
//!   them.
//! - [`fenced`] is the suite for fenced stores ([`distlock_core::FencedStore`]), run
//!   the same way with [`fenced_conformance_main!`].
//!
//! This crate is the specification only: besides the core and the test harness, it
//! uses only crates the core already depends on. Real servers for it (Redis,
//! PostgreSQL and etcd in containers, with their fault controls) are in the
//! unpublished `distlock-testservers`.
// On docs.rs, each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub, rust_2018_idioms)]

#[macro_use]
mod case;
pub mod adoption;
pub mod cases;
pub mod fenced;
mod gates;
mod suite;
mod target;
mod unfenced;

pub use case::{Case, ContractPoint};
pub use suite::{
    case, cases, run_as_tests, run_case, run_selected_as_tests, run_suite, CaseReport, Outcome,
    SuiteReport, SuiteTarget,
};
pub use target::{
    Connector, LinkControl, LinkedClient, LinkedConnector, MemberConnector, MemberLinkedClient,
    MemoryControl, MemoryLink, RoundTripMeter, ServerControl, Target,
};
