//! The efficiency lock (`LockOptions::with_fenced(false)`): what core does with grants
//! that carry no fence, on a backend that makes them and on one that does not.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, Capabilities, ExtendRequest, Grant, LockBackendExt, OwnerToken, ReleaseOutcome,
    Renewal,
};
use distlock_core::{
    DynLockBackend, ErrorKind, FencingToken, LockBackend, LockClient, LockInfo, LockKey,
    LockOptions, MemoryBackend, MemoryStore, Result,
};

const WAIT: Duration = Duration::from_secs(1);

/// The memory backend, answering with no fence: every unfenced request's grant where
/// `unfenced_grants` is declared, or (`broken`) every grant.
#[derive(Debug)]
struct NoFence {
    memory: MemoryBackend,
    capabilities: Capabilities,
    broken: bool,
}

impl NoFence {
    fn new(unfenced_grants: bool, broken: bool) -> Self {
        let memory = MemoryBackend::new();
        let mut capabilities = memory.capabilities().clone();
        capabilities.unfenced_grants = unfenced_grants;
        NoFence {
            memory,
            capabilities,
            broken,
        }
    }
}

#[async_trait]
impl LockBackend for NoFence {
    fn name(&self) -> &str {
        "no-fence"
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        let grant = self.memory.try_grant(request).await?;
        let unfenced = self.broken || (self.capabilities.unfenced_grants && !request.fenced());
        Ok(match grant {
            Grant::Granted(_) if unfenced => Grant::Granted(FencingToken::NONE),
            other => other,
        })
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.memory.release(key, owner).await
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.memory.renew(request).await
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.memory.inspect(key).await
    }
}

fn client(backend: NoFence, fenced: bool) -> (Arc<NoFence>, LockClient) {
    let backend = Arc::new(backend);
    let dyn_backend: Arc<DynLockBackend> = backend.clone();
    let options = LockOptions::new(Duration::from_secs(5)).with_fenced(fenced);
    let client = LockClient::with_options(dyn_backend, options).expect("options");
    (backend, client)
}

#[tokio::test]
async fn an_efficiency_lock_holds_a_lease_without_a_fence_that_no_store_takes() {
    let (backend, client) = client(NoFence::new(true, false), false);
    let guard = client.lock("job", WAIT).await.expect("lock");
    assert_eq!(guard.fence(), FencingToken::NONE);
    let err = guard
        .fenced(MemoryStore::new())
        .write("job", b"done")
        .await
        .expect_err("a fenced write under no fence");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.message().contains("efficiency lock"), "{err}");
    // Mutual exclusion and release are the lock's as ever.
    let key = LockKey::new("job").expect("key");
    assert!(matches!(
        backend.try_acquire(&key, Duration::from_secs(5)).await,
        Ok(distlock_core::backend::AcquireOutcome::Held { .. })
    ));
    guard.release().await.expect("release");
    assert_eq!(backend.inspect(&key).await.expect("inspect"), None);
}

#[tokio::test]
async fn where_the_fence_costs_nothing_an_efficiency_lock_still_carries_one() {
    let (_, client) = client(NoFence::new(false, false), false);
    let guard = client.lock("job", WAIT).await.expect("lock");
    assert!(guard.fence() > FencingToken::NONE);
}

#[tokio::test]
async fn with_fenced_lock_refuses_an_efficiency_lock_before_it_asks() {
    let (backend, client) = client(NoFence::new(false, false), false);
    let err = client
        .with_fenced_lock("job", WAIT, MemoryStore::new(), |_| async {})
        .await
        .expect_err("an efficiency lock");
    assert_eq!(err.kind(), ErrorKind::Configuration);
    let key = LockKey::new("job").expect("key");
    assert_eq!(backend.inspect(&key).await.expect("inspect"), None);
}

#[tokio::test]
async fn a_fenced_grant_without_a_fence_is_refused_and_given_back() {
    let (backend, client) = client(NoFence::new(false, true), true);
    let err = client
        .try_lock("job")
        .await
        .expect_err("a fenced lock granted without a fence");
    assert_eq!(err.kind(), ErrorKind::Backend);
    let key = LockKey::new("job").expect("key");
    assert_eq!(backend.inspect(&key).await.expect("inspect"), None);
}

#[tokio::test]
async fn an_efficiency_clients_elections_are_fenced() {
    // No permits here: the election runs over a lease on the backend's locks, which
    // must carry a fence whatever the client's options say (a term is its fence).
    let (_, client) = client(NoFence::new(true, false), false);
    let election = client.election("leader").expect("election");
    let first = election.campaign("a", WAIT).await.expect("campaign");
    let term = first.fence();
    assert!(term > FencingToken::NONE, "the term's fence was {term}");
    first.resign().await.expect("resign");
    let second = election.campaign("b", WAIT).await.expect("campaign");
    assert!(second.fence() > term, "{} after {term}", second.fence());
}
