//! Deliberately broken fenced stores, each with a bug users make when they check a
//! fence themselves: the fenced-store suite must catch each one with the case named
//! for it, and the same store without the bug passes that case.

// The lock backends' `assert_caught` is not used here: stores have a suite of their own.
#[allow(dead_code)]
mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::fenced::{cases, StoreTarget};
use distlock_conformance::run_case;
use distlock_conformance::Outcome;
use distlock_core::backend::FenceCheck;
use distlock_core::{DynFencedStore, FencedStore, FencedValue, FencingToken, LockKey, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    None,
    /// Reads the fence, then writes in a second step (a SELECT, then an UPDATE).
    CheckThenWrite,
    /// Keeps fences as text and compares them as text, so "9" is above "10".
    TextCompare,
    /// Compares fences as 64-bit floats (Lua's numbers, JSON's), equal above 2^53.
    FloatCompare,
    /// Refuses the fence it has already seen (`<` where `<=` belongs).
    RefusesSameFence,
    /// Refuses a stale write, but writes its value first (the fence column guarded,
    /// the value column not).
    WritesValueWhenStale,
    /// A read under a fence returns the value and leaves the fence where it was.
    ClaimDoesNotRaise,
    /// One fence for the whole store, not one per resource.
    OneFenceForAll,
}

/// The resources as the buggy store keeps them: the fence as text, the value.
#[derive(Debug, Default)]
struct Rows(HashMap<String, (String, Option<Vec<u8>>)>);

#[derive(Debug)]
struct Naive {
    bug: Bug,
    rows: Arc<Mutex<Rows>>,
}

impl Naive {
    fn rows(&self) -> MutexGuard<'_, Rows> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn row_of(&self, resource: &LockKey) -> String {
        if self.bug == Bug::OneFenceForAll {
            "everything".to_owned()
        } else {
            resource.as_str().to_owned()
        }
    }

    /// Whether `offered` may write over `stored`, as this store compares them.
    fn fresh(&self, offered: FencingToken, stored: &str) -> bool {
        let parsed: u64 = stored.parse().unwrap_or(0);
        match self.bug {
            Bug::TextCompare => offered.to_string().as_str() >= stored,
            Bug::FloatCompare => offered.get() as f64 >= parsed as f64,
            Bug::RefusesSameFence => offered.get() > parsed,
            _ => offered.get() >= parsed,
        }
    }

    async fn step(
        &self,
        resource: &LockKey,
        fence: FencingToken,
        value: Option<&[u8]>,
    ) -> FenceCheck<Option<Vec<u8>>> {
        let row = self.row_of(resource);
        let stored = self.rows().0.get(&row).map(|(f, _)| f.clone());
        if let Some(stored) = stored.filter(|s| !self.fresh(fence, s)) {
            if let (Bug::WritesValueWhenStale, Some(value)) = (self.bug, value) {
                if let Some(entry) = self.rows().0.get_mut(&row) {
                    entry.1 = Some(value.to_vec());
                }
            }
            return FenceCheck::Stale {
                current: FencingToken::new(stored.parse().unwrap_or(0)),
            };
        }
        if self.bug == Bug::CheckThenWrite {
            // The second round trip: other writers get in between.
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let mut rows = self.rows();
        let entry = rows.0.entry(row).or_insert((fence.to_string(), None));
        if value.is_some() || self.bug != Bug::ClaimDoesNotRaise {
            entry.0 = fence.to_string();
        }
        if let Some(value) = value {
            entry.1 = Some(value.to_vec());
        }
        FenceCheck::Accepted(entry.1.clone())
    }
}

#[async_trait]
impl FencedStore for Naive {
    fn name(&self) -> &str {
        "naive"
    }

    async fn put_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
        value: &[u8],
    ) -> Result<FenceCheck<()>> {
        Ok(match self.step(resource, fence, Some(value)).await {
            FenceCheck::Accepted(_) => FenceCheck::Accepted(()),
            FenceCheck::Stale { current } => FenceCheck::Stale { current },
        })
    }

    async fn claim_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
    ) -> Result<FenceCheck<Option<Vec<u8>>>> {
        Ok(self.step(resource, fence, None).await)
    }

    async fn inspect_fenced(&self, resource: &LockKey) -> Result<Option<FencedValue>> {
        let row = self.row_of(resource);
        Ok(self
            .rows()
            .0
            .get(&row)
            .map(|(f, v)| FencedValue::new(FencingToken::new(f.parse().unwrap_or(0)), v.clone())))
    }
}

fn target(bug: Bug) -> StoreTarget {
    let rows = Arc::new(Mutex::new(Rows::default()));
    let store: Arc<DynFencedStore> = Arc::new(Naive {
        bug,
        rows: rows.clone(),
    });
    StoreTarget::new(store).with_clients(move || {
        let client: Arc<DynFencedStore> = Arc::new(Naive {
            bug,
            rows: rows.clone(),
        });
        Box::pin(async move { Ok(client) })
    })
}

async fn assert_caught(bug: Bug, case_name: &str, expected: &[&str]) {
    let case = cases()
        .iter()
        .find(|c| c.name() == case_name)
        .unwrap_or_else(|| panic!("no case named {case_name}"));
    let clean = run_case(&target(Bug::None), case).await;
    assert_eq!(
        clean.outcome,
        Outcome::Passed,
        "{case_name} fails even without the bug"
    );
    let outcome = run_case(&target(bug), case).await.outcome;
    support::check_failure(&format!("{bug:?}"), case_name, outcome, expected);
}

/// `test: Bug by case, saying "what the case's failure must say" (or "...")*;`
macro_rules! caught {
    ($($test:ident: $bug:ident by $case:ident, saying $($expected:literal)or+;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            assert_caught(Bug::$bug, stringify!($case), &[$($expected),+]).await;
        }
    )*};
}

caught! {
    check_then_write: CheckThenWrite by concurrent_writers_never_lower_the_fence, saying "the stored fence went down from" or "was accepted after one under";
    text_compare: TextCompare by fences_compare_as_numbers, saying "a write under 10 was refused";
    float_compare: FloatCompare by fences_compare_as_numbers, saying "a write under 9007199254740992 after 9007199254740993 was accepted";
    refuses_same_fence: RefusesSameFence by the_same_fence_is_accepted_again, saying "unexpected error: stale fence";
    writes_value_when_stale: WritesValueWhenStale by a_stale_write_is_refused_after_a_newer_fence, saying "after refused writes the store holds";
    claim_does_not_raise: ClaimDoesNotRaise by a_claiming_read_refuses_older_writers, saying "after a read under 5 was accepted";
    one_fence_for_all: OneFenceForAll by resources_are_independent, saying "unexpected error: stale fence";
}

/// Every case passes on the store without a bug, so each catch above is the bug's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_without_a_bug_passes_every_case() {
    for case in cases() {
        let report = run_case(&target(Bug::None), case).await;
        assert_eq!(report.outcome, Outcome::Passed, "{}", case.name());
    }
}
