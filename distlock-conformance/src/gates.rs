//! The gates: whether a target can run a case, and if not, why. A case names its gate
//! in its `#[case(...)]` line.

use crate::target::Target;

/// Any target, of either suite, can run the case.
pub(crate) fn always<T>(_: &T) -> Option<String> {
    None
}

pub(crate) fn needs_force_release(t: &Target) -> Option<String> {
    t.backend()
        .operator()
        .is_none()
        .then(|| "the backend cannot force a release (LockBackend::operator)".into())
}

pub(crate) fn needs_list(t: &Target) -> Option<String> {
    t.backend()
        .operator()
        .is_none()
        .then(|| "the backend cannot list its locks (LockBackend::operator)".into())
}

pub(crate) fn needs_holders(t: &Target) -> Option<String> {
    (t.capabilities().holder_records == distlock_core::backend::HolderRecords::NotKept)
        .then(|| "the backend keeps no holders (capabilities.holder_records)".into())
}

pub(crate) fn needs_notification(t: &Target) -> Option<String> {
    (!t.capabilities().change_notification)
        .then(|| "the backend has no change notification (capabilities.change_notification)".into())
}

pub(crate) fn needs_control(t: &Target) -> Option<String> {
    t.control()
        .is_none()
        .then(|| "no server control was given (Target::with_control)".into())
}

pub(crate) fn needs_connection_kill(t: &Target) -> Option<String> {
    match t.control() {
        None => needs_control(t),
        Some(c) if !c.can_kill_connections() => {
            Some("the server control cannot kill connections".into())
        }
        Some(_) => None,
    }
}

pub(crate) fn needs_round_trip_meter(t: &Target) -> Option<String> {
    t.round_trip_meter()
        .is_none()
        .then(|| "no round-trip meter was given (Target::with_round_trip_meter)".into())
}

pub(crate) fn needs_wrong_credentials(t: &Target) -> Option<String> {
    t.wrong_credentials().is_none().then(|| {
        "no way to connect with wrong credentials was given (Target::with_wrong_credentials)".into()
    })
}

pub(crate) fn needs_clients(t: &Target) -> Option<String> {
    (!t.has_clients())
        .then(|| "no way to make more clients was given (Target::with_clients)".into())
}

pub(crate) fn needs_clients_and_notification(t: &Target) -> Option<String> {
    needs_clients(t).or_else(|| needs_notification(t))
}

pub(crate) fn needs_links(t: &Target) -> Option<String> {
    (!t.has_links()).then(|| {
        "no way to make clients whose link can be cut was given (Target::with_links)".into()
    })
}

pub(crate) fn needs_connection_failing_links(t: &Target) -> Option<String> {
    needs_links(t).or_else(|| match t.links_fail_connections() {
        Some(true) => None,
        Some(false) => Some(
            "the target's links cannot reset or refuse connections (LinkControl::can_fail_connections)"
                .into(),
        ),
        None => {
            Some("the target's links were not asked what they offer (Target::probe_links)".into())
        }
    })
}

pub(crate) fn needs_reply_holding_links(t: &Target) -> Option<String> {
    needs_links(t).or_else(|| match t.links_hold_replies() {
        Some(true) => None,
        Some(false) => Some(
            "the target's links cannot hold the replies alone (LinkControl::can_hold_replies)"
                .into(),
        ),
        None => {
            Some("the target's links were not asked what they offer (Target::probe_links)".into())
        }
    })
}

pub(crate) fn needs_extend_any_ttl(t: &Target) -> Option<String> {
    (!t.capabilities().extend_any_ttl).then(|| {
        "the backend renews a lease only to the TTL it was granted (capabilities.extend_any_ttl)"
            .into()
    })
}

pub(crate) fn needs_members(t: &Target) -> Option<String> {
    (t.members().len() < 3).then(|| {
        "the target has no three or more members with their controls (Target::with_members)".into()
    })
}

/// [`needs_members`], whose members the client asks one by one (Redlock), not
/// members that pass a client's requests to each other.
pub(crate) fn needs_client_quorum(t: &Target) -> Option<String> {
    needs_members(t).or_else(|| {
        t.replicated_members().then(|| {
            "the members replicate each lease among themselves (Target::members_replicate): a client that reaches one member of the majority is served by the majority".into()
        })
    })
}

pub(crate) fn needs_fair(t: &Target) -> Option<String> {
    t.backend()
        .fair()
        .is_none()
        .then(|| "the backend has no fair mode (LockBackend::fair)".into())
}

pub(crate) fn needs_fair_handoff(t: &Target) -> Option<String> {
    needs_fair(t).or_else(|| {
        t.backend().fair()?.handoffs().is_none().then(|| {
            "the backend's releases do not hand the key to the head of its queue (FairBackend::handoffs)"
                .into()
        })
    })
}

pub(crate) fn needs_atomic_sets(t: &Target) -> Option<String> {
    t.backend().sets().is_none().then(|| {
        "the backend takes a set of keys one by one, not in one step (LockBackend::sets)".into()
    })
}

pub(crate) fn needs_atomic_sets_over_reply_holding_links(t: &Target) -> Option<String> {
    needs_atomic_sets(t).or_else(|| needs_reply_holding_links(t))
}

pub(crate) fn needs_terms(t: &Target) -> Option<String> {
    t.backend().permits().is_none().then(|| {
        "the backend records no election terms: its elections run over a lease (LockBackend::permits)".into()
    })
}

pub(crate) fn needs_permits(t: &Target) -> Option<String> {
    t.backend()
        .permits()
        .is_none()
        .then(|| "the backend has no semaphores or read-write locks (LockBackend::permits)".into())
}
