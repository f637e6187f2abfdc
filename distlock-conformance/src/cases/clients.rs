//! Independent clients of one server, each with connections of its own: what a backend
//! whose state, fences or notifications live in the client gets wrong.

use super::support::*;

/// `n` clients of the target's server: its own backend, then new ones.
async fn clients(t: &Target, n: usize) -> Result<Vec<Arc<DynLockBackend>>, CaseError> {
    let mut all = vec![t.backend().clone()];
    while all.len() < n {
        match t.another_client().await {
            Some(client) => all.push(client?),
            None => {
                return Err(CaseError::Skipped(
                    "the target makes no other clients".into(),
                ))
            }
        }
    }
    Ok(all)
}

cases! {
    /// Tasks on four independent clients contend for one key: at no instant do two hold it.
    #[case(MutualExclusion, needs_clients)]
    pub async fn exclusion_holds_across_clients(t: &Target) -> CaseResult {
        let clients = clients(t, 4).await?;
        contend(t, &clients, 2, 6).await
    }

    /// Fences strictly increase in grant order whichever client was granted, takeovers included.
    #[case(Fencing, needs_clients)]
    pub async fn fences_increase_across_clients(t: &Target) -> CaseResult {
        let clients = clients(t, 3).await?;
        let key = t.key("fence-clients");
        let mut last = None;
        for round in 0..12 {
            let client = &clients[round % clients.len()];
            let Some(lease) = grant(client, &key, t.long_ttl()).await? else {
                return fail(format!("round {round}: a released key was held"));
            };
            if let Some(prev) = last {
                ensure!(
                    t.fence_rose(prev, lease.fence()),
                    "round {round}: client {} got fence {} after {prev}",
                    round % clients.len(),
                    lease.fence()
                );
            }
            last = Some(lease.fence());
            client.release_lease(&lease).await?;
        }
        // A takeover after expiry by another client.
        let old = grant(&clients[0], &key, t.short_ttl())
            .await?
            .ok_or_else(|| CaseError::Failed("a released key was held".into()))?;
        let give_up = Instant::now() + t.short_ttl() * 4 + t.expiry_slack() * 4;
        let (new, _) = grant_when_free(&clients[1], &key, t.long_ttl(), give_up).await?;
        ensure!(
            t.fence_rose(old.fence(), new.fence()),
            "a takeover by another client got fence {} after {}",
            new.fence(),
            old.fence()
        );
        clients[1].release_lease(&new).await?;
        Ok(())
    }

    /// Another client sees the holder, cannot take, release or extend its lease (not with an owner token of its own, nor with its own earlier lease of the key), and takes the key once released.
    #[case(OwnerTokens, needs_clients)]
    pub async fn a_lease_is_untouched_by_other_clients(t: &Target) -> CaseResult {
        let clients = clients(t, 2).await?;
        let (holder, other) = (&clients[0], &clients[1]);
        let key = t.key("other-client");
        // Both clients warmed up first (their connections open), so that the short
        // lease below is not spent opening one on a loaded machine.
        for client in [holder, other] {
            client.inspect(&t.key("warm-up")).await?;
        }
        // The other client held the key first; its lease ran out.
        let earlier = grant(other, &key, t.short_ttl())
            .await?
            .ok_or_else(|| CaseError::Failed("a fresh key was held".into()))?;
        sleep(earlier.valid_until().saturating_duration_since(Instant::now()) + t.expiry_slack())
            .await;
        // The other client's lease ends on the server no earlier than it told the
        // client, and may end later: the client counts from before its request was
        // sent, the server from when it applied it. How soon an expired key frees is
        // the validity cases' point, not this one's.
        let give_up = Instant::now() + t.short_ttl() * 4 + t.expiry_slack() * 4;
        let (lease, _) = grant_when_free(holder, &key, t.long_ttl(), give_up).await?;
        ensure!(
            grant(other, &key, t.long_ttl()).await?.is_none(),
            "another client acquired a held key"
        );
        let seen = other.inspect(&key).await?.map(|i| i.fence);
        ensure!(
            seen == Some(lease.fence()),
            "another client sees {seen:?}, not the holder's fence {}",
            lease.fence()
        );
        let stranger = other.release(&key, &OwnerToken::random()).await?;
        ensure!(
            stranger == ReleaseOutcome::NotHeld,
            "another client's release answered {stranger:?}"
        );
        let extended = other.extend(&earlier, t.renewal_ttl(&earlier)).await?;
        ensure!(
            extended == ExtendOutcome::NotHeld,
            "another client extended its expired lease of the held key: {extended:?}"
        );
        ensure!(
            holder_fence(t, &key).await? == Some(lease.fence().get()),
            "another client's extend changed the holder's lease"
        );
        ensure!(
            matches!(
                holder.extend(&lease, t.renewal_ttl(&lease)).await?,
                ExtendOutcome::Extended(_)
            ),
            "the holder lost its lease to another client"
        );
        ensure!(
            holder.release_lease(&lease).await? == ReleaseOutcome::Released,
            "the holder could not release"
        );
        let next = grant(other, &key, t.long_ttl())
            .await?
            .ok_or_else(|| CaseError::Failed("a released key was held".into()))?;
        ensure!(
            t.fence_rose(lease.fence(), next.fence()),
            "the next client got fence {} after {}",
            next.fence(),
            lease.fence()
        );
        other.release_lease(&next).await?;
        Ok(())
    }

    /// A waiter on one client is woken by a release on another, not by its next poll.
    #[case(Client, needs_clients_and_notification)]
    pub async fn a_release_wakes_a_waiter_on_another_client(t: &Target) -> CaseResult {
        let clients = clients(t, 2).await?;
        waiter_woken(t, &clients[0], &clients[1]).await
    }
}
