//! What a backend author uses: [`LockBackend`], the one trait every backend
//! implements, and the contract it keeps (written once, in its docs); the traits of its
//! optional features ([`FairBackend`], [`SetBackend`], [`OperatorBackend`],
//! [`PermitBackend`]); the requests and grants it takes and gives; [`Capabilities`],
//! the limits it declares; [`Descriptor`], what a backend crate says of itself for
//! whoever chooses backends by URL; [`WakeRegistry`], the one registry
//! of waiters per key; and the helpers every backend needs in the same form (one URL
//! reader, [`ConnectionUrl`], with its options policy; errors from drivers, with
//! credentials scrubbed). A service needs none of it beyond [`LockBackend`] and
//! [`DynLockBackend`], which the crate's root also exports.

mod contract;
mod descriptor;
mod ext;

pub use contract::{
    DynLockBackend, FairBackend, Handoffs, LockBackend, OperatorBackend, SetBackend,
};
pub use descriptor::{BoxFuture, ConnectFn, Descriptor, Migration, Scheme};
pub use ext::LockBackendExt;
pub(crate) use ext::{acquire_all_as, acquire_as, acquire_in_turn_as, next_change};

pub use crate::capabilities::{
    Capabilities, ClockDrift, FenceDurability, HolderRecords, RoundTrips,
};
pub use crate::fenced::{check_fence, FenceCheck};
pub use crate::handoff::{Handoff, HandoffBook};
pub use crate::holder::{tag_holder, untag_holder};
pub use crate::lease::{
    AcquireOutcome, AcquireRequest, ExtendOutcome, ExtendRequest, Grant, Lease, LockInfo,
    ReleaseOutcome, Renewal, SetGrant, SetOutcome,
};
pub use crate::permits::{Claim, PermitBackend, PermitHolder, Term, MAX_CLAIM_VALUE, TERMS_KEPT};
pub use crate::redact::redact_url;
pub use crate::support::{
    config_error, driver_error, encode, error_chain, find_cause, is_certificate_refused,
    is_secret_name, key_prefix, positive_millis, probe_endpoint, scrub, wrong_protocol,
    ConnectionUrl, Endpoint, Options, Probe,
};
pub use crate::token::OwnerToken;
pub use crate::wake::{ChangeStream, Registration, WakeRegistry};
