//! Faults of the server: pause, restart, kill, killed connections. Each takes the server alone.

use super::support::*;

/// A client of `inner` that counts the releases it is asked to send, and forwards
/// the steps a racing `lock()` takes (no watch: it polls).
#[derive(Debug)]
struct CountedReleases {
    inner: Arc<DynLockBackend>,
    releases: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl distlock_core::LockBackend for CountedReleases {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> &distlock_core::backend::Capabilities {
        self.inner.capabilities()
    }
    async fn try_grant(
        &self,
        request: &distlock_core::backend::AcquireRequest,
    ) -> distlock_core::Result<distlock_core::backend::Grant> {
        self.inner.try_grant(request).await
    }
    async fn release(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> distlock_core::Result<ReleaseOutcome> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(key, owner).await
    }
    async fn renew(
        &self,
        request: &distlock_core::backend::ExtendRequest,
    ) -> distlock_core::Result<distlock_core::backend::Renewal> {
        self.inner.renew(request).await
    }
    async fn inspect(
        &self,
        key: &LockKey,
    ) -> distlock_core::Result<Option<distlock_core::LockInfo>> {
        self.inner.inspect(key).await
    }
}

/// The most cleanup releases one `lock()` waiting through an outage may send, and when
/// the last is sent after the attempt was abandoned: the passes of one abandoned
/// attempt's cleanup (the wait retries as the owner of an attempt whose outcome is
/// unknown, under one cleanup; an attempt that never left the client needs none). A
/// cleanup releases at once, 0.25 s, 1.25 s and 6.25 s later, and once more past the
/// backend's `applied_within` where that is later
/// ([`Capabilities::applied_within`](distlock_core::backend::Capabilities::applied_within)).
fn outage_releases(applied_within: Option<Duration>) -> (u64, Duration) {
    let fixed_last = Duration::from_millis(6250);
    match applied_within.map(|bound| bound + Duration::from_millis(250)) {
        Some(past) if past > fixed_last => (5, past),
        _ => (4, fixed_last),
    }
}

cases! {
    /// A `lock()` waiting through an outage (the server killed: connections refused) sends a bounded number of cleanup releases, none for an attempt that never left the client.
    #[case(Client, needs_control, fault)]
    pub async fn an_outage_costs_a_bounded_number_of_cleanups(t: &Target) -> CaseResult {
        let control = t
            .control()
            .ok_or_else(|| CaseError::Skipped("no server control".into()))?;
        let counted = Arc::new(CountedReleases {
            inner: t.backend().clone(),
            releases: Default::default(),
        });
        let client = LockClient::with_options(counted.clone(), LockOptions::new(fault_ttl(t)))?;
        let key = t.key("outage");
        // Warmed up: the connections are open, and a release is counted as sent.
        client.lock(key.as_str(), Duration::from_secs(5)).await?.release().await?;
        let warm = counted.releases.load(Ordering::SeqCst);
        control.kill().await.map_err(control_err("kill"))?;
        let wait = Duration::from_secs(3);
        let (most, last_pass) = outage_releases(t.backend().capabilities().applied_within);
        let waited = client.lock(key.as_str(), wait).await;
        // Every cleanup's schedule runs out.
        sleep(last_pass + Duration::from_millis(750)).await;
        let sent = counted.releases.load(Ordering::SeqCst) - warm;
        control.start().await.map_err(control_err("start"))?;
        retry_until_up("inspect after the restart", || t.backend().inspect(&key)).await?;
        if let Ok(guard) = waited {
            guard.release().await?;
            return fail("a killed server granted the lock");
        }
        eprintln!(
            "conformance: an_outage_costs_a_bounded_number_of_cleanups on {}: one lock() waiting {wait:?} through an outage sent {sent} cleanup releases (at most {most})",
            t.backend().name()
        );
        ensure!(
            sent <= most,
            "one lock() waiting {wait:?} through an outage sent {sent} cleanup releases (at most {most})"
        );
        Ok(())
    }

    /// `lock()` and `lock_all()` on a paused server return Timeout within their wait (and a small bound), on a fresh client and on one with a watch open while another waiter sets one up.
    #[case(Client, needs_control, fault)]
    pub async fn lock_on_a_paused_server_ends_at_its_deadline(t: &Target) -> CaseResult {
        let control = t
            .control()
            .ok_or_else(|| CaseError::Skipped("no server control".into()))?;
        let held_key = t.key("deadline-held");
        let held = acquire(t, &held_key, t.long_ttl()).await?;
        let (watching, waiter) = with_a_watch_open(t, t.backend(), &held_key).await?;
        let fresh = match t.another_client().await {
            Some(backend) => Some(LockClient::with_options(
                backend?,
                LockOptions::new(fault_ttl(t)),
            )?),
            None => None,
        };
        control.pause().await.map_err(control_err("pause"))?;
        // Another waiter of the same client, whose watch is set up on the paused server.
        let setting_up = {
            let (client, key) = (watching.clone(), t.key("deadline-setting-up"));
            tokio::spawn(async move {
                let _ = client.lock(key.as_str(), Duration::from_secs(120)).await;
            })
        };
        sleep(Duration::from_millis(50)).await;
        let mut clients = vec![("a client with a watch open", &watching)];
        if let Some(fresh) = &fresh {
            clients.push(("a fresh client", fresh));
        }
        let wrong = waits_end_at_their_deadline(t, &clients).await;
        waiter.abort();
        setting_up.abort();
        control.unpause().await.map_err(control_err("unpause"))?;
        retry_until_up("release after the pause", || t.backend().release_lease(&held)).await?;
        ensure!(wrong.is_empty(), "{}", wrong.join("; "));
        Ok(())
    }

    /// A server paused beyond the TTL makes the holder learn it lost the lock, in time.
    #[case(Client, needs_control, fault)]
    pub async fn fault_pause_beyond_ttl_signals_loss(t: &Target) -> CaseResult {
        let control = t
            .control()
            .ok_or_else(|| CaseError::Skipped("no server control".into()))?;
        let ttl = fault_ttl(t);
        let client = client(t, LockOptions::new(ttl))?;
        let key = t.key("pause-loss");
        let Ok(guard) = client.try_lock(key.as_str()).await? else {
            return fail("a fresh key was held");
        };
        control.pause().await.map_err(control_err("pause"))?;
        let outcome = timeout(ttl + Duration::from_secs(1), guard.lost()).await;
        let valid_until = guard.valid_until();
        let noticed = Instant::now();
        control.unpause().await.map_err(control_err("unpause"))?;
        match outcome {
            Ok(Some(LossReason::RenewalFailed | LossReason::NotHeld)) => {}
            Ok(other) => return fail(format!("lost() gave {other:?}")),
            Err(_) => {
                return fail(format!(
                    "lost() did not fire within the ttl ({ttl:?}) plus 1 s of a pause"
                ))
            }
        }
        ensure!(
            noticed < valid_until,
            "the holder was told only {:?} after its validity ran out",
            noticed - valid_until
        );
        let _ = guard.release().await;
        Ok(())
    }

    /// A renewal held up by a pause shorter than the validity is not a loss.
    #[case(Client, needs_control, fault)]
    pub async fn fault_short_pause_is_not_a_loss(t: &Target) -> CaseResult {
        let control = t
            .control()
            .ok_or_else(|| CaseError::Skipped("no server control".into()))?;
        let ttl = fault_ttl(t);
        let client = client(t, LockOptions::new(ttl))?;
        let key = t.key("short-pause");
        let Ok(guard) = client.try_lock(key.as_str()).await? else {
            return fail("a fresh key was held");
        };
        // The pause begins before the first renewal is due (a third of the TTL) and
        // ends after it: that renewal waits on the paused server, then succeeds.
        sleep(ttl / 3 - ttl / 10).await;
        control.pause().await.map_err(control_err("pause"))?;
        sleep(ttl / 5).await;
        control.unpause().await.map_err(control_err("unpause"))?;
        sleep(ttl * 2).await;
        ensure!(
            guard.is_held(),
            "a short pause lost the lock: {:?}",
            guard.loss()
        );
        ensure!(
            holder_fence(t, &key).await? == Some(guard.fence().get()),
            "the server lost the lease"
        );
        guard.release().await?;
        Ok(())
    }

    /// A restart never makes a durable fence go backwards; leases survive it as declared.
    #[case(Fencing, needs_control, fault)]
    pub async fn fault_restart_keeps_fences_and_declared_leases(t: &Target) -> CaseResult {
        let control = t
            .control()
            .ok_or_else(|| CaseError::Skipped("no server control".into()))?;
        let key = t.key("restart");
        let mut max = 0;
        for _ in 0..3 {
            let lease = acquire(t, &key, t.long_ttl()).await?;
            max = max.max(lease.fence().get());
            t.backend().release(&key, lease.owner()).await?;
        }
        let held_key = t.key("restart-held");
        let held = acquire(t, &held_key, t.long_ttl()).await?;
        control.restart().await.map_err(control_err("restart"))?;

        let survived = retry_until_up("inspect", || t.backend().inspect(&held_key)).await?;
        if t.capabilities().leases_survive_restart {
            ensure!(
                survived.map(|i| i.fence) == Some(held.fence()),
                "the lease did not survive the restart as declared"
            );
        } else if let Some(info) = survived {
            // Not promised, but a lease that survived must still be the same lease.
            ensure!(
                info.fence == held.fence(),
                "after the restart the key shows fence {}, not {}",
                info.fence,
                held.fence()
            );
        }
        let outcome = retry_until_up("acquire", || async {
            t.backend().try_acquire(&key, t.long_ttl()).await
        })
        .await?;
        let AcquireOutcome::Acquired(after) = outcome else {
            return fail("a released key was held after the restart");
        };
        match t.capabilities().fence_durability {
            FenceDurability::BestEffort => {}
            _ => ensure!(
                after.fence().get() > max,
                "the fence went back from {max} to {} across a restart",
                after.fence()
            ),
        }
        t.backend().release(&key, after.owner()).await?;
        let _ = t.backend().release(&held_key, held.owner()).await;
        Ok(())
    }

    /// A killed server gives typed errors in bounded time, and the backend recovers.
    #[case(Errors, needs_control, fault)]
    pub async fn fault_killed_server_gives_typed_errors_then_recovers(t: &Target) -> CaseResult {
        let control = t
            .control()
            .ok_or_else(|| CaseError::Skipped("no server control".into()))?;
        let key = t.key("killed");
        control.kill().await.map_err(control_err("kill"))?;
        let attempt = timeout(
            Duration::from_secs(20),
            t.backend().try_acquire(&key, t.long_ttl()),
        )
        .await;
        let started = control.start().await.map_err(control_err("start"));
        match attempt {
            Err(_) => return fail("an acquire against a killed server hung for 20 s"),
            Ok(Ok(outcome)) => {
                return fail(format!(
                    "an acquire against a killed server answered {outcome:?}"
                ))
            }
            Ok(Err(e)) => ensure!(
                matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout) && e.is_retryable(),
                "a killed server gave a {:?} error (retryable: {}): {e}",
                e.kind(),
                e.is_retryable()
            ),
        }
        started?;
        let outcome = retry_until_up("acquire", || async {
            t.backend().try_acquire(&key, t.long_ttl()).await
        })
        .await?;
        let AcquireOutcome::Acquired(lease) = outcome else {
            return fail("a fresh key was held after the server came back");
        };
        t.backend().release(&key, lease.owner()).await?;
        Ok(())
    }

    /// Renewal survives the server closing every connection (Redisson #2515, #3194); the kill is checked to have closed a connection where the control can count.
    #[case(Client, needs_connection_kill, fault)]
    pub async fn fault_killed_connections_do_not_stop_renewal(t: &Target) -> CaseResult {
        let control = t
            .control()
            .ok_or_else(|| CaseError::Skipped("no server control".into()))?;
        if !control.can_kill_connections() {
            return Err(CaseError::Skipped(
                "the server control cannot kill connections".into(),
            ));
        }
        let ttl = fault_ttl(t);
        let client = client(t, LockOptions::new(ttl))?;
        let key = t.key("killed-connections");
        let Ok(guard) = client.try_lock(key.as_str()).await? else {
            return fail("a fresh key was held");
        };
        for _ in 0..2 {
            let killed = control
                .kill_connections_counted()
                .await
                .map_err(control_err("kill connections"))?;
            // The client talks to the server over at least one connection: a kill that
            // closed none did not happen, and the case would prove nothing.
            ensure!(
                killed != Some(0),
                "the connection kill closed no connection, though this client holds a lock over one"
            );
            sleep(ttl).await;
        }
        ensure!(
            guard.is_held(),
            "renewal stopped after the connections were killed: {:?}",
            guard.loss()
        );
        ensure!(
            holder_fence(t, &key).await? == Some(guard.fence().get()),
            "the lease expired on the server"
        );
        guard.release().await?;
        Ok(())
    }
}
