//! The cases, one file per area of the contract: one `pub async fn` each, on its own
//! random keys, declared with its one-line doc, the contract point it checks and its
//! gate in one place (the `cases!` macro). Each returns `Ok(())`, a failure with its
//! message, or a skip with its reason (a skip is never a pass).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{
    AcquireOutcome, Error, ErrorKind, ExtendOutcome, FenceDurability, Lease, LockBackendExt,
    LockClient, LockKey, LockOptions, LossReason, OwnerToken, ReleaseOutcome,
};
use futures_util::future::join_all;
use tokio::time::{sleep, sleep_until, timeout, Instant};

use crate::case::Case;
use crate::target::{RoundTripMeter, Target};

/// Why a case did not pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaseError {
    /// The backend broke the contract, or misbehaved; the message says how.
    #[error("failed: {0}")]
    Failed(String),
    /// The case cannot run on this target; the reason says why.
    #[error("skipped: {0}")]
    Skipped(String),
}

/// What a case returns.
pub type CaseResult = Result<(), CaseError>;

impl From<Error> for CaseError {
    fn from(e: Error) -> Self {
        CaseError::Failed(format!("unexpected error: {e}"))
    }
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        {
            let held: bool = $cond;
            if !held {
                return Err(CaseError::Failed(format!($($msg)+)));
            }
        }
    };
}

pub mod client;
pub mod errors;
pub mod exclusion;
pub mod extend;
pub mod faults;
pub mod fencing;
pub mod release;
pub mod round_trips;
pub mod validity;

fn fail<T>(msg: impl Into<String>) -> Result<T, CaseError> {
    Err(CaseError::Failed(msg.into()))
}

fn control_err(what: &str) -> impl FnOnce(distlock_core::BoxError) -> CaseError + '_ {
    move |e| CaseError::Failed(format!("server control could not {what}: {e}"))
}

async fn try_acquire(t: &Target, key: &LockKey, ttl: Duration) -> Result<Option<Lease>, CaseError> {
    match t.backend().try_acquire(key, ttl).await? {
        AcquireOutcome::Acquired(lease) => Ok(Some(lease)),
        AcquireOutcome::Held { .. } => Ok(None),
    }
}

async fn acquire(t: &Target, key: &LockKey, ttl: Duration) -> Result<Lease, CaseError> {
    match try_acquire(t, key, ttl).await? {
        Some(lease) => Ok(lease),
        None => fail(format!("{key} was held although nobody should hold it")),
    }
}

async fn holder_fence(t: &Target, key: &LockKey) -> Result<Option<u64>, CaseError> {
    Ok(t.backend().inspect(key).await?.map(|i| i.fence.get()))
}

/// Polls until `key` can be acquired; the instant the successful request was sent.
async fn acquire_when_free(
    t: &Target,
    key: &LockKey,
    ttl: Duration,
    give_up: Instant,
) -> Result<(Lease, Instant), CaseError> {
    loop {
        let sent = Instant::now();
        if let Some(lease) = try_acquire(t, key, ttl).await? {
            return Ok((lease, sent));
        }
        if Instant::now() > give_up {
            return fail(format!("{key} never became free"));
        }
        sleep(Duration::from_millis(5)).await;
    }
}

fn client(t: &Target, options: LockOptions) -> Result<LockClient, CaseError> {
    Ok(LockClient::with_options(t.backend().clone(), options)?)
}

/// Every area's cases, in the order the runner runs them (fault cases last).
pub(crate) const AREAS: [&[Case]; 9] = [
    exclusion::CASES,
    release::CASES,
    extend::CASES,
    validity::CASES,
    fencing::CASES,
    errors::CASES,
    round_trips::CASES,
    client::CASES,
    faults::CASES,
];
