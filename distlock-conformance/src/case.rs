//! [`Case`]: one case of the suite, with its doc, the contract point it checks, and
//! the gate that says whether a target can run it, all written once, at the case.

use std::fmt;

use distlock_core::Error;
use futures_util::future::BoxFuture;

use crate::target::Target;

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

/// The point of the contract (written in `distlock_core::LockBackend`'s docs, and for
/// the client in `LockClient`'s) that a case checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ContractPoint {
    /// 1. At most one unexpired lease per key.
    MutualExclusion,
    /// 2. Expiry by the server's clock only.
    ServerTime,
    /// 3. A fresh owner token per acquisition, compared atomically on the server.
    OwnerTokens,
    /// 4. Releasing what is not held answers not held and touches nobody.
    Release,
    /// 5. Extend never re-acquires a free key and keeps the fence.
    Extend,
    /// 6. Fences strictly increase per key.
    Fencing,
    /// 7. Validity counted from before the request.
    Validity,
    /// 8. Typed errors: bad input, unreachable servers and wrong credentials.
    Errors,
    /// 9. Each operation takes the round trips the capabilities declare.
    RoundTrips,
    /// 10. Fair waiters are granted in the order they asked; a vanished one leaves.
    Fairness,
    /// What `LockClient` promises on top: waiting, renewal, the loss signal, guards.
    Client,
    /// `PermitBackend`'s contract, as a `Semaphore` uses it: the limit, one limit per
    /// name, fences, places.
    Semaphore,
    /// `PermitBackend`'s contract, as a `RwLock` uses it: never a reader with a
    /// writer, writers first.
    ReadWrite,
    /// `PermitBackend`'s contract, as an `Election` uses it: one leader at a time,
    /// every term observed in order.
    Election,
    /// What operators use beside the contract: listing the held locks, and inspecting
    /// one.
    Operator,
    /// A point of [`distlock_core::FencedStore`]'s contract, by its number there: the
    /// fenced-store suite's.
    FencedStore(u8),
}

impl ContractPoint {
    /// The point's number in `LockBackend`'s contract; `None` for the client's.
    pub fn number(self) -> Option<u8> {
        Some(match self {
            ContractPoint::MutualExclusion => 1,
            ContractPoint::ServerTime => 2,
            ContractPoint::OwnerTokens => 3,
            ContractPoint::Release => 4,
            ContractPoint::Extend => 5,
            ContractPoint::Fencing => 6,
            ContractPoint::Validity => 7,
            ContractPoint::Errors => 8,
            ContractPoint::RoundTrips => 9,
            ContractPoint::Fairness => 10,
            ContractPoint::Client
            | ContractPoint::Semaphore
            | ContractPoint::ReadWrite
            | ContractPoint::Election
            | ContractPoint::Operator
            | ContractPoint::FencedStore(_) => return None,
        })
    }

    /// The point's title.
    pub fn title(self) -> &'static str {
        match self {
            ContractPoint::MutualExclusion => "mutual exclusion",
            ContractPoint::ServerTime => "server time",
            ContractPoint::OwnerTokens => "owner tokens",
            ContractPoint::Release => "release",
            ContractPoint::Extend => "extend",
            ContractPoint::Fencing => "fencing",
            ContractPoint::Validity => "validity",
            ContractPoint::Errors => "errors",
            ContractPoint::RoundTrips => "round trips",
            ContractPoint::Fairness => "fairness",
            ContractPoint::Client => "the client",
            ContractPoint::Semaphore => "permits: semaphores",
            ContractPoint::ReadWrite => "permits: read-write locks",
            ContractPoint::Election => "permits: elections",
            ContractPoint::Operator => "operators: listing and inspecting",
            ContractPoint::FencedStore(_) => "fenced stores",
        }
    }
}

impl fmt::Display for ContractPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self, self.number()) {
            (_, Some(n)) => write!(f, "point {n}, {}", self.title()),
            (ContractPoint::FencedStore(n), None) => write!(f, "{}, point {n}", self.title()),
            (_, None) => f.write_str(self.title()),
        }
    }
}

pub(crate) type CaseFn<T> = for<'a> fn(&'a T) -> BoxFuture<'a, CaseResult>;
pub(crate) type Gate<T> = fn(&T) -> Option<String>;

/// One case of a suite, on what the suite runs on: a [`Target`] (a lock backend), or a
/// [`StoreTarget`](crate::fenced::StoreTarget) (a fenced store).
pub struct Case<T = Target> {
    name: &'static str,
    doc: &'static str,
    point: ContractPoint,
    fault: bool,
    pub(crate) gate: Gate<T>,
    pub(crate) run: CaseFn<T>,
}

impl<T> fmt::Debug for Case<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .field("point", &self.point)
            .field("fault", &self.fault)
            .finish()
    }
}

impl<T> Case<T> {
    pub(crate) const fn new(
        name: &'static str,
        doc: &'static str,
        point: ContractPoint,
        fault: bool,
        gate: Gate<T>,
        run: CaseFn<T>,
    ) -> Self {
        Case {
            name,
            doc,
            point,
            fault,
            gate,
            run,
        }
    }

    /// The case's name, as its function is named.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// One line on what it checks: the function's doc.
    pub fn doc(&self) -> &'static str {
        self.doc.trim()
    }

    /// The contract point it checks.
    pub fn point(&self) -> ContractPoint {
        self.point
    }

    /// Whether it faults the server, and so must have it alone.
    pub fn fault(&self) -> bool {
        self.fault
    }
}

/// Defines an area's cases and its table, `CASES`, from one list. Each case is a
/// `pub async fn` on the suite's target with a one-line doc (a longer doc does not
/// match) and a `#[case(POINT, gate)]` or `#[case(POINT, gate, fault)]` line: the
/// contract point it checks (`FencedStore(2)` for a fenced store's), the gate in
/// [`gates`](crate::gates) that says whether a target can run it, and whether it
/// faults the server.
macro_rules! cases {
    ($(
        #[doc = $doc:literal]
        #[case($point:ident $(($n:literal))?, $gate:ident $(, $fault:ident)?)]
        pub async fn $name:ident($t:ident: &$target:ident) -> CaseResult $body:block
    )*) => {
        $(
            #[doc = $doc]
            pub async fn $name($t: &$target) -> CaseResult $body
        )*

        /// This area's cases, in the order they run.
        pub(crate) static CASES: &[$crate::case::Case<cases!(@first $($target)*)>] = &[$(
            $crate::case::Case::new(
                stringify!($name),
                $doc,
                $crate::case::ContractPoint::$point $(($n))?,
                cases!(@fault $($fault)?),
                $crate::gates::$gate,
                |t| Box::pin($name(t)),
            ),
        )*];
    };
    (@first $first:ident $($rest:ident)*) => { $first };
    (@fault) => { false };
    (@fault fault) => { true };
}

/// Ends a case as failed, with the message `format!` makes of the rest, unless
/// `$cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        {
            let held: bool = $cond;
            if !held {
                return Err($crate::case::CaseError::Failed(format!($($msg)+)));
            }
        }
    };
}
