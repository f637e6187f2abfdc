//! The suite for fenced stores: one case per point of the contract written in
//! [`distlock_core::FencedStore`]'s docs, run against any store.
//!
//! A third party runs it on its own store with [`fenced_conformance_main!`](crate::fenced_conformance_main):
//!
//! ```ignore
//! // tests/fenced.rs, with `[[test]] name = "fenced" harness = false`
//! distlock_conformance::fenced_conformance_main!(async {
//!     let store = my_store::connect("mystore://localhost").await?;
//!     Ok::<_, my_store::Error>(distlock_conformance::fenced::StoreTarget::new(std::sync::Arc::new(store)))
//! });
//! ```

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{
    DynFencedStore, ErrorKind, FencedStoreExt, FencedValue, FencingToken, MemoryStore, MAX_FENCE,
};
use futures_util::future::{join_all, BoxFuture};
use tokio::time::{sleep, Instant};

use crate::case::Case;
use crate::cases::{CaseError, CaseResult};
use crate::suite::SuiteTarget;

/// Makes another client of the store under test, with connections of its own.
pub type StoreConnector =
    Arc<dyn Fn() -> BoxFuture<'static, distlock_core::Result<Arc<DynFencedStore>>> + Send + Sync>;

/// A fenced store under test.
#[derive(Clone)]
pub struct StoreTarget {
    store: Arc<DynFencedStore>,
    clients: Option<StoreConnector>,
    run: u64,
}

impl fmt::Debug for StoreTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreTarget")
            .field("store", &self.store)
            .field("clients", &self.clients.is_some())
            .finish()
    }
}

impl StoreTarget {
    /// The store under test, through one client.
    pub fn new(store: Arc<DynFencedStore>) -> Self {
        StoreTarget {
            store,
            clients: None,
            run: rand::random(),
        }
    }

    /// Adds a way to make more clients of the same store, so that the concurrent
    /// writers each have their own connections.
    pub fn with_clients(
        mut self,
        connect: impl Fn() -> BoxFuture<'static, distlock_core::Result<Arc<DynFencedStore>>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.clients = Some(Arc::new(connect));
        self
    }

    /// The in-memory reference store.
    pub fn memory() -> Self {
        StoreTarget::new(Arc::new(MemoryStore::new()))
    }

    /// The store under test.
    pub fn store(&self) -> &Arc<DynFencedStore> {
        &self.store
    }

    /// A fresh resource name for one case in this run.
    pub fn resource(&self, case: &str) -> String {
        format!(
            "distlock-conformance/{:016x}/{case}/{:08x}",
            self.run,
            rand::random::<u32>()
        )
    }

    async fn another(&self) -> distlock_core::Result<Arc<DynFencedStore>> {
        match &self.clients {
            Some(connect) => connect().await,
            None => Ok(self.store.clone()),
        }
    }
}

/// One case of the fenced-store suite.
pub type StoreCase = Case<StoreTarget>;

impl SuiteTarget for StoreTarget {
    fn suite() -> Vec<&'static StoreCase> {
        CASES.iter().collect()
    }

    fn subject(&self) -> String {
        self.store().name().to_owned()
    }
}

fn f(n: u64) -> FencingToken {
    FencingToken::new(n)
}

/// Expects `write` to be refused as stale with `current` as the highest fence seen.
fn expect_stale(result: distlock_core::Result<()>, what: &str) -> CaseResult {
    match result {
        Err(e) if e.kind() == ErrorKind::StaleFence => Ok(()),
        Err(e) => Err(CaseError::Failed(format!(
            "{what}: expected a stale-fence error, got {e}"
        ))),
        Ok(()) => Err(CaseError::Failed(format!("{what} was accepted"))),
    }
}

async fn stored(t: &StoreTarget, resource: &str) -> Result<FencedValue, CaseError> {
    t.store()
        .inspect(resource)
        .await?
        .ok_or_else(|| CaseError::Failed(format!("{resource} has nothing stored")))
}

cases! {
    /// A stale holder's write is refused once a newer fence has written, and changes nothing.
    #[case(FencedStore(2), always)]
    pub async fn a_stale_write_is_refused_after_a_newer_fence(t: &StoreTarget) -> CaseResult {
        let r = t.resource("stale");
        let s = t.store();
        s.write(&r, f(5), b"five").await?;
        s.write(&r, f(7), b"seven").await?;
        expect_stale(s.write(&r, f(5), b"five again").await, "a write under 5 after 7")?;
        expect_stale(s.write(&r, f(6), b"six").await, "a write under 6 after 7")?;
        let now = stored(t, &r).await?;
        ensure!(
            now.fence == f(7) && now.value.as_deref() == Some(&b"seven"[..]),
            "after refused writes the store holds fence {} and {:?}",
            now.fence,
            now.value
        );
        Ok(())
    }

    /// The same fence is accepted again: one holder may write twice.
    #[case(FencedStore(3), always)]
    pub async fn the_same_fence_is_accepted_again(t: &StoreTarget) -> CaseResult {
        let r = t.resource("same");
        let s = t.store();
        s.write(&r, f(7), b"first").await?;
        s.write(&r, f(7), b"second").await?;
        ensure!(
            s.read(&r, f(7)).await?.as_deref() == Some(&b"second"[..]),
            "the second write under the same fence did not take"
        );
        s.write(&r, f(7), b"third").await?;
        let now = stored(t, &r).await?;
        ensure!(
            now.fence == f(7) && now.value.as_deref() == Some(&b"third"[..]),
            "the store holds fence {} and {:?}",
            now.fence,
            now.value
        );
        Ok(())
    }

    /// Fences compare as numbers over the whole range: 10 is above 9, and 2^53 + 1 above 2^53.
    #[case(FencedStore(4), always)]
    pub async fn fences_compare_as_numbers(t: &StoreTarget) -> CaseResult {
        let r = t.resource("numbers");
        let s = t.store();
        let p53 = 1u64 << 53;
        // Each rise must be accepted; each fall after it refused.
        let steps = [
            (9, 8),
            (10, 9),
            (99, 10),
            (100, 99),
            (1_000_000_000, 999_999_999),
            (p53, p53 - 1),
            (p53 + 1, p53),
            (MAX_FENCE.get() - 1, p53 + 1),
            (MAX_FENCE.get(), MAX_FENCE.get() - 1),
        ];
        for (up, down) in steps {
            if let Err(e) = s.write(&r, f(up), up.to_string().as_bytes()).await {
                return Err(CaseError::Failed(format!("a write under {up} was refused: {e}")));
            }
            expect_stale(
                s.write(&r, f(down), down.to_string().as_bytes()).await,
                &format!("a write under {down} after {up}"),
            )?;
            let now = stored(t, &r).await?;
            ensure!(now.fence == f(up), "after {up} the store holds fence {}", now.fence);
        }
        Ok(())
    }

    /// A lease without a fence (an efficiency lock's) can neither write nor claim, and leaves nothing stored.
    #[case(FencedStore(4), always)]
    pub async fn a_lease_without_a_fence_is_refused(t: &StoreTarget) -> CaseResult {
        let r = t.resource("no-fence");
        let s = t.store();
        let write = s.write(&r, FencingToken::NONE, b"unfenced").await;
        let read = s.read(&r, FencingToken::NONE).await.map(drop);
        for (what, result) in [("a write", write), ("a claiming read", read)] {
            match result {
                Err(e) if e.kind() == ErrorKind::InvalidInput => {}
                other => {
                    return Err(CaseError::Failed(format!(
                        "{what} under no fence gave {other:?}, not an invalid-input error"
                    )))
                }
            }
        }
        ensure!(
            s.inspect(&r).await?.is_none(),
            "a refused step under no fence left something stored"
        );
        s.write(&r, f(1), b"one").await?;
        Ok(())
    }

    /// A claiming read raises the fence: an older holder can no longer write after it.
    #[case(FencedStore(5), always)]
    pub async fn a_claiming_read_refuses_older_writers(t: &StoreTarget) -> CaseResult {
        let r = t.resource("claim");
        let s = t.store();
        s.write(&r, f(3), b"three").await?;
        let seen = s.read(&r, f(5)).await?;
        ensure!(seen.as_deref() == Some(&b"three"[..]), "the read under 5 saw {seen:?}");
        expect_stale(s.write(&r, f(4), b"four").await, "a write under 4 after a read under 5")?;
        s.write(&r, f(5), b"five").await?;
        // A claim on a resource never written stores the fence without a value.
        let fresh = t.resource("claim-fresh");
        ensure!(s.read(&fresh, f(8)).await?.is_none(), "a fresh resource had a value");
        expect_stale(s.write(&fresh, f(7), b"seven").await, "a write under 7 after a read under 8")?;
        let now = stored(t, &fresh).await?;
        ensure!(
            now.fence == f(8) && now.value.is_none(),
            "after the claim the store holds fence {} and {:?}",
            now.fence,
            now.value
        );
        match s.read(&r, f(4)).await {
            Err(e) if e.kind() == ErrorKind::StaleFence => Ok(()),
            other => Err(CaseError::Failed(format!("a read under 4 after 5 gave {other:?}"))),
        }
    }

    /// Resources are independent: a high fence on one leaves another open to low fences.
    #[case(FencedStore(6), always)]
    pub async fn resources_are_independent(t: &StoreTarget) -> CaseResult {
        let (a, b) = (t.resource("independent-a"), t.resource("independent-b"));
        let s = t.store();
        s.write(&a, f(100), b"a").await?;
        s.write(&b, f(1), b"b").await?;
        expect_stale(s.write(&a, f(1), b"a1").await, "a write under 1 after 100")?;
        ensure!(stored(t, &b).await?.fence == f(1), "the other resource's fence moved");
        Ok(())
    }

    /// Writers on several clients under interleaved fences: no accepted write is stale, the fence never goes down.
    #[case(FencedStore(1), always)]
    pub async fn concurrent_writers_never_lower_the_fence(t: &StoreTarget) -> CaseResult {
        const WRITERS: u64 = 8;
        const EACH: u64 = 24;
        let r = t.resource("concurrent");
        // The highest fence whose write was accepted and had returned.
        let done = Arc::new(AtomicU64::new(0));
        let problems = Arc::new(Mutex::new(Vec::<String>::new()));
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let store = t.another().await?;
            let (r, done, problems) = (r.clone(), done.clone(), problems.clone());
            writers.push(async move {
                for round in 0..EACH {
                    // Writer w writes fences w+1, w+1+8, ...: every writer falls
                    // behind the others now and then.
                    let fence = 1 + w + round * WRITERS;
                    let floor = done.load(Ordering::SeqCst);
                    match store.write(&r, f(fence), fence.to_string().as_bytes()).await {
                        Ok(()) => {
                            if fence < floor {
                                problems.lock().map(|mut p| p.push(format!(
                                    "a write under {fence} was accepted after one under {floor} had been"
                                ))).ok();
                            }
                            done.fetch_max(fence, Ordering::SeqCst);
                        }
                        Err(e) if e.kind() == ErrorKind::StaleFence => {}
                        Err(e) => return Err(CaseError::from(e)),
                    }
                    if rand::random::<u8>() < 64 {
                        sleep(Duration::from_millis(1)).await;
                    }
                }
                Ok(())
            });
        }
        let watch_store = t.another().await?;
        let stop = Arc::new(AtomicU64::new(0));
        let watcher = {
            let (r, stop, problems) = (r.clone(), stop.clone(), problems.clone());
            async move {
                let mut last = 0u64;
                let mut seen = BTreeSet::new();
                while stop.load(Ordering::SeqCst) == 0 {
                    match watch_store.inspect(&r).await {
                        Ok(None) => {}
                        Err(e) => {
                            problems.lock().map(|mut p| p.push(format!(
                                "inspecting the resource while the writers wrote failed: {e}"
                            ))).ok();
                        }
                        Ok(Some(now)) => {
                            let fence = now.fence.get();
                            if fence < last {
                                problems.lock().map(|mut p| p.push(format!(
                                    "the stored fence went down from {last} to {fence}"
                                ))).ok();
                            }
                            let expected = fence.to_string().into_bytes();
                            if now.value.as_deref() != Some(&expected[..]) {
                                problems.lock().map(|mut p| p.push(format!(
                                    "fence {fence} was stored with another writer's value {:?}",
                                    now.value.as_deref().map(String::from_utf8_lossy)
                                ))).ok();
                            }
                            last = last.max(fence);
                            seen.insert(fence);
                        }
                    }
                    tokio::task::yield_now().await;
                }
                seen.len()
            }
        };
        let started = Instant::now();
        let all = async {
            let results = join_all(writers).await;
            stop.store(1, Ordering::SeqCst);
            results
        };
        let (results, seen) = tokio::join!(all, watcher);
        for result in results {
            result?;
        }
        ensure!(
            seen >= 2,
            "the watcher saw {seen} distinct fences while the writers wrote: it watched nothing move, so the order it checks was never put to the test"
        );
        let top = WRITERS * EACH;
        let now = stored(t, &r).await?;
        let problems = problems.lock().map(|p| p.clone()).unwrap_or_default();
        ensure!(
            problems.is_empty(),
            "{} problems in {:?}, the first: {}",
            problems.len(),
            started.elapsed(),
            problems.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
        );
        ensure!(
            now.fence == f(top) && now.value.as_deref() == Some(top.to_string().as_bytes()),
            "after every writer the store holds fence {} (value {:?}), not the highest, {top}",
            now.fence,
            now.value.as_deref().map(String::from_utf8_lossy)
        );
        Ok(())
    }
}

/// Every case of the fenced-store suite, in the order they run.
pub fn cases() -> &'static [StoreCase] {
    CASES
}

/// Expands into the `main` of a `harness = false` test target that runs the
/// fenced-store suite on the [`StoreTarget`] built by the given async expression.
#[macro_export]
macro_rules! fenced_conformance_main {
    ($make:expr) => {
        $crate::conformance_main!($make);
    };
}
