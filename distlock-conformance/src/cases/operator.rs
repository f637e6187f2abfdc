//! What operators use: listing the held locks (`distlock list`).

use std::time::SystemTime;

use distlock_core::{Holder, KeyState, LockClient, LockInfo};
use futures_util::StreamExt as _;

use super::support::*;

/// How long a case waits for a lock another holder releases.
const WAIT: Duration = Duration::from_secs(20);

/// How far a grant time may be from this process's clock: the server's clock and
/// this one, each as a host keeps it.
const CLOCKS_APART: Duration = Duration::from_secs(5);

/// `key`'s holder as `inspect` shows it; a failure when it is free.
async fn inspected(t: &Target, key: &LockKey) -> Result<LockInfo, CaseError> {
    match t.backend().inspect(key).await? {
        Some(info) => Ok(info),
        None => fail(format!("{key} was free while held")),
    }
}

/// That `shown` names `holder`, granted between `before` and `after` (by the clocks
/// of this process and the server, which may be apart); its grant time.
fn shows(
    what: &str,
    shown: (Option<&Holder>, Option<SystemTime>),
    holder: &Holder,
    (before, after): (SystemTime, SystemTime),
) -> Result<SystemTime, CaseError> {
    ensure!(
        shown.0 == Some(holder),
        "{what} showed the holder {:?}, not {holder:?}",
        shown.0
    );
    let Some(granted) = shown.1 else {
        return fail(format!("{what} showed the holder without its grant time"));
    };
    ensure!(
        granted + CLOCKS_APART >= before && granted <= after + CLOCKS_APART,
        "{what} showed a grant time {:?} from a grant made between {:?} and {:?} (Unix time)",
        granted
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
        before
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
        after
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
    );
    Ok(granted)
}

/// A key made of `prefix` and `rest`.
fn under(prefix: &str, rest: &str) -> Result<LockKey, CaseError> {
    LockKey::new(format!("{prefix}{rest}")).map_err(|e| CaseError::Failed(e.to_string()))
}

cases! {
    /// `list(prefix)` shows exactly the keys held under the prefix, sorted, each with its holder's fence and a remaining TTL within its own: not a released or an expired key, not a key outside the prefix, not a queue's or a semaphore's records; a bad prefix is a typed error.
    #[case(Operator, needs_list)]
    pub async fn operator_list_shows_exactly_the_held_keys(t: &Target) -> CaseResult {
        let base = t.key("list");
        let prefix = format!("{base}/");
        let ttl = t.long_ttl();
        let b = acquire(t, &under(&prefix, "b")?, ttl).await?;
        let a = acquire(t, &under(&prefix, "a")?, ttl).await?;
        let released = acquire(t, &under(&prefix, "released")?, ttl).await?;
        ensure!(
            t.backend().release_lease(&released).await? == ReleaseOutcome::Released,
            "the release of a held key was not Released"
        );
        let lapsed = acquire(t, &under(&prefix, "lapsed")?, t.short_ttl()).await?;
        // Beside the prefix, not under it.
        let outside = acquire(t, &under(base.as_str(), "-outside")?, ttl).await?;
        if t.backend().fair().is_some() {
            // A waiter queued on a held key leaves a record of its own.
            let queued = t
                .backend()
                .try_acquire_in_turn(a.key(), ttl, OwnerToken::random(), ttl)
                .await?;
            ensure!(
                matches!(queued, AcquireOutcome::Held { .. }),
                "a queued waiter was granted a held key"
            );
        }
        let permit = if t.backend().permits().is_some() {
            let semaphore = LockClient::with_options(t.backend().clone(), LockOptions::new(ttl)).and_then(|c| c.semaphore(&format!("{prefix}permits"), 2))?;
            let Ok(permit) = semaphore.try_acquire().await? else {
                return fail("a fresh semaphore of 2 refused its first permit");
            };
            Some(permit)
        } else {
            None
        };
        sleep(lapsed.valid_until().saturating_duration_since(Instant::now()) + t.expiry_slack())
            .await;

        let listed = t.backend().list(&prefix).await?;
        let names: Vec<&str> = listed.iter().map(|(k, _)| k.as_str()).collect();
        let wanted = [a.key().as_str(), b.key().as_str()];
        ensure!(names == wanted, "list({prefix:?}) gave {names:?}, not {wanted:?}");
        for ((key, info), lease) in listed.iter().zip([&a, &b]) {
            ensure!(
                info.fence == lease.fence(),
                "{key} listed with fence {}, held with {}",
                info.fence,
                lease.fence()
            );
            ensure!(
                !info.remaining.is_zero() && info.remaining <= ttl,
                "{key} listed with {:?} left of a {ttl:?} ttl",
                info.remaining
            );
        }
        let everything = t.backend().list("").await?;
        for key in [a.key(), b.key(), outside.key()] {
            ensure!(
                everything.iter().any(|(k, _)| k == key),
                "list(\"\") left out {key}"
            );
        }
        let bad = t.backend().list("bad\nprefix").await.map(|_| ()).map_err(|e| e.kind());
        ensure!(
            bad == Err(ErrorKind::InvalidKey),
            "a prefix with a control character gave {bad:?}"
        );
        if let Some(permit) = permit {
            permit.release().await?;
        }
        for lease in [a, b, outside] {
            t.backend().release_lease(&lease).await?;
        }
        Ok(())
    }

    /// Every grant stores its holder (the client's, with its payload) and its grant time: `inspect`, `list`, a semaphore's holders and an election's leader show them, for a set's keys, a fair step's grant and the waiter a release passes the key to too; a renewal and an owner's own retry keep the grant time; the next holder, after a release or after an expiry, is shown in place of the last.
    #[case(Operator, needs_holders)]
    pub async fn every_grant_shows_its_holder_and_when_it_was_granted(t: &Target) -> CaseResult {
        let key = t.key("holder");
        let ttl = t.long_ttl();
        // A payload with what a store's encoding could trip on.
        let first = Holder::new("conformance-first:1")?
            .with_payload("build 7 / x;y:z! \"quoted\" ' \\ ünïcode\nsecond line!")?;
        let second = Holder::new("conformance-second:2")?;
        let a = client(t, LockOptions::new(ttl).with_holder(first.clone()))?;
        let b = client(t, LockOptions::new(ttl).with_holder(second.clone()))?;
        let before = SystemTime::now();
        let Ok(guard) = a.try_lock(key.as_str()).await? else {
            return fail("a fresh key was held");
        };
        let span = (before, SystemTime::now());
        let info = inspected(t, &key).await?;
        let shown = (info.holder.as_ref(), info.granted_at);
        let granted = shows("inspect", shown, &first, span)?;
        if t.backend().operator().is_some() {
            let listed = t.backend().list(key.as_str()).await?;
            let Some((_, info)) = listed.iter().find(|(k, _)| *k == key) else {
                return fail(format!("list left out the held {key}"));
            };
            let shown = (info.holder.as_ref(), info.granted_at);
            ensure!(
                shows("list", shown, &first, span)? == granted,
                "list and inspect showed two grant times"
            );
        }
        guard.release().await?;

        // After a release, the next grant (this process, through the backend) is shown.
        let before = SystemTime::now();
        let lease = acquire(t, &key, ttl).await?;
        let span = (before, SystemTime::now());
        let info = inspected(t, &key).await?;
        let shown = (info.holder.as_ref(), info.granted_at);
        let granted = shows("inspect after a release", shown, &Holder::this_process(), span)?;
        // A renewal, and a retry of the owner's own grant (a lost reply's), keep it.
        sleep(Duration::from_millis(1_100)).await;
        let Ok(ExtendOutcome::Extended(lease)) = t.backend().extend(&lease, ttl).await else {
            return fail("a held lease was not extended");
        };
        let retried = t.backend().try_acquire_as(&key, ttl, *lease.owner()).await?;
        ensure!(
            matches!(retried, AcquireOutcome::Acquired(_)),
            "the owner's own retry was refused"
        );
        let kept = inspected(t, &key).await?;
        ensure!(
            kept.granted_at == Some(granted) && kept.holder == Some(Holder::this_process()),
            "a renewal and a retry changed the grant to {:?} at {:?}, from {granted:?}",
            kept.holder,
            kept.granted_at
        );
        t.backend().release_lease(&lease).await?;

        // After an expiry, the next holder is shown.
        let lapsed = acquire(t, &key, t.short_ttl()).await?;
        sleep(lapsed.valid_until().saturating_duration_since(Instant::now()) + t.expiry_slack())
            .await;
        let before = SystemTime::now();
        let Ok(guard) = b.try_lock(key.as_str()).await? else {
            return fail("a key whose lease ran out was still held");
        };
        let span = (before, SystemTime::now());
        let info = inspected(t, &key).await?;
        let shown = (info.holder.as_ref(), info.granted_at);
        shows("inspect after an expiry", shown, &second, span)?;
        guard.release().await?;

        // A set: each of its keys shows the set's holder.
        let keys = [t.key("holder-set-a"), t.key("holder-set-b")];
        let before = SystemTime::now();
        let set = a.lock_all(keys.iter().map(LockKey::as_str), WAIT).await?;
        let span = (before, SystemTime::now());
        for key in &keys {
            let info = inspected(t, key).await?;
            shows("inspect of a set's key", (info.holder.as_ref(), info.granted_at), &first, span)?;
        }
        set.release().await?;

        // In fair mode: a fair step's grant, then the waiter it passes to, each shown.
        if t.backend().fair().is_some() {
            let key = t.key("holder-fair");
            let fair_a = client(t, LockOptions::new(ttl).with_holder(first.clone()).with_fair(true))?;
            let fair_b = client(t, LockOptions::new(ttl).with_holder(second.clone()).with_fair(true))?;
            let before = SystemTime::now();
            let held = fair_a.lock(key.as_str(), WAIT).await?;
            let span = (before, SystemTime::now());
            let info = inspected(t, &key).await?;
            shows("inspect of a fair grant", (info.holder.as_ref(), info.granted_at), &first, span)?;
            let waiting = tokio::spawn({
                let key = key.clone();
                async move { fair_b.lock(key.as_str(), WAIT).await }
            });
            // The waiter queues before the release hands the key over.
            sleep(Duration::from_millis(300)).await;
            let before = SystemTime::now();
            held.release().await?;
            let next = match waiting.await {
                Ok(next) => next?,
                Err(e) => return fail(format!("the fair waiter panicked: {e}")),
            };
            let span = (before, SystemTime::now());
            let info = inspected(t, &key).await?;
            shows("inspect after a fair release", (info.holder.as_ref(), info.granted_at), &second, span)?;
            next.release().await?;
        }

        // An election's leader, on every backend: its term's holder.
        let election = b.election(&format!("{key}-election"))?;
        let before = SystemTime::now();
        let Ok(leadership) = election.try_campaign("10.0.0.2:80").await? else {
            return fail("a campaign in a fresh election was refused");
        };
        let span = (before, SystemTime::now());
        let Some(leader) = election.leader().await? else {
            return fail("an election with a leader showed none");
        };
        let shown = (leader.holder.as_ref(), leader.granted_at);
        shows("an election's leader", shown, &second, span)?;
        leadership.resign().await?;

        if t.backend().permits().is_some() {
            let name = format!("{key}-permits");
            let before = SystemTime::now();
            let Ok(permit) = a.semaphore(&name, 2)?.try_acquire().await? else {
                return fail("a fresh semaphore of 2 refused its first permit");
            };
            let span = (before, SystemTime::now());
            let holders = a.semaphore(&name, 2)?.holders().await?;
            let [held] = holders.as_slice() else {
                return fail(format!("a semaphore with one permit taken showed {holders:?}"));
            };
            let shown = (held.holder.as_ref(), held.granted_at);
            shows("a semaphore's holders", shown, &first, span)?;
            permit.release().await?;
        }
        Ok(())
    }

    /// `observe(key)` reports the key as it is, then each change of its holder, each within the client's polling period (or, for an expiry, of the lease's end): a grant with its fence, a release, an expiry, and the next grant with a larger fence; a holder's renewal is not a change.
    #[case(Operator, always)]
    pub async fn observing_a_key_reports_each_change_of_holder(t: &Target) -> CaseResult {
        let key = t.key("observed");
        let client = LockClient::new(t.backend().clone());
        let mut states = client.observe(key.as_str())?;
        // A poll period (500 ms), a round trip on a loaded server, and room to spare.
        let soon = Duration::from_secs(5);
        ensure!(
            next_state(&mut states, "the start", soon).await? == KeyState::Free,
            "a free key was first reported held"
        );
        let first = acquire(t, &key, t.long_ttl()).await?;
        held(next_state(&mut states, "a grant", soon).await?, &first, "the first grant")?;
        let ExtendOutcome::Extended(first) = t.backend().extend(&first, t.renewal_ttl(&first)).await?
        else {
            return fail("the holder could not renew its lease");
        };
        // Two poll periods under the renewed lease: looks that find the same holder.
        sleep(Duration::from_secs(1)).await;
        t.backend().release_lease(&first).await?;
        let after_release = next_state(&mut states, "a release", soon).await?;
        ensure!(
            after_release == KeyState::Free,
            "after a release (and a renewal before it) the key was reported {after_release:?}, not free"
        );
        let ttl = t.capabilities().ttl_at_least(Duration::from_secs(2));
        let lapsing = acquire(t, &key, ttl).await?;
        held(next_state(&mut states, "a grant", soon).await?, &lapsing, "a grant after a release")?;
        let within = ttl + t.expiry_slack() + soon;
        let after_expiry = next_state(&mut states, "an expiry", within).await?;
        ensure!(
            after_expiry == KeyState::Free,
            "after an expiry the key was reported {after_expiry:?}, not free"
        );
        let last = acquire(t, &key, t.long_ttl()).await?;
        held(next_state(&mut states, "a grant", soon).await?, &last, "a grant after an expiry")?;
        ensure!(
            last.fence().is_none() || last.fence() > lapsing.fence(),
            "the grant after an expiry has fence {}, not above {}",
            last.fence(),
            lapsing.fence()
        );
        t.backend().release_lease(&last).await?;
        Ok(())
    }
}

/// That `state` reports `lease`'s holder, by its fence.
fn held(state: KeyState, lease: &Lease, what: &str) -> Result<(), CaseError> {
    match state {
        KeyState::Held(info) if info.fence == lease.fence() => Ok(()),
        KeyState::Held(info) => fail(format!(
            "{what} (fence {}) was reported held under fence {}",
            lease.fence(),
            info.fence
        )),
        state => fail(format!(
            "{what} (fence {}) was reported {state:?}",
            lease.fence()
        )),
    }
}

/// The next state `states` reports, within `within` of `what`.
async fn next_state(
    states: &mut distlock_core::KeyStates,
    what: &str,
    within: Duration,
) -> Result<KeyState, CaseError> {
    match timeout(within, states.next()).await {
        Ok(Some(state)) => Ok(state?),
        Ok(None) => fail("the observation stream ended"),
        Err(_) => fail(format!("no change reported within {within:?} of {what}")),
    }
}
