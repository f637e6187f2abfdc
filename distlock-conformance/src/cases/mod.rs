//! The cases, one file per area of the contract: one `pub async fn` each, on its own
//! random keys, declared with its one-line doc, the contract point it checks and its
//! gate in one place (the `cases!` macro). Each returns `Ok(())`, a failure with its
//! message, or a skip with its reason (a skip is never a pass).

pub use crate::case::{CaseError, CaseResult};

use crate::case::Case;

pub mod client;
pub mod clients;
pub mod errors;
pub mod exclusion;
pub mod extend;
pub mod fairness;
pub mod faults;
pub mod fencing;
pub mod operator;
pub mod partitions;
pub mod permits;
pub mod quorum;
pub mod release;
pub mod round_trips;
pub mod sets;
mod support;
pub mod validity;

/// Every area's cases, in the order the runner runs them (fault cases last).
pub(crate) const AREAS: [&[Case]; 16] = [
    exclusion::CASES,
    release::CASES,
    extend::CASES,
    validity::CASES,
    fencing::CASES,
    errors::CASES,
    round_trips::CASES,
    client::CASES,
    sets::CASES,
    operator::CASES,
    clients::CASES,
    fairness::CASES,
    permits::CASES,
    partitions::CASES,
    faults::CASES,
    quorum::CASES,
];
