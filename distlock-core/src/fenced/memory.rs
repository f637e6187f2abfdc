//! [`MemoryStore`]: the in-process reference fenced store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use super::{FenceCheck, FencedStore, FencedValue};
use crate::error::Result;
use crate::key::LockKey;
use crate::token::FencingToken;

/// Resources kept in this process's memory: the reference for the fenced-store
/// contract, and a store for tests. Clones share the resources.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    resources: Arc<Mutex<HashMap<LockKey, FencedValue>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    fn resources(&self) -> MutexGuard<'_, HashMap<LockKey, FencedValue>> {
        // A panic elsewhere cannot leave an entry half written: every change is one
        // assignment.
        self.resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Compares and raises the fence under the one lock, then lets `apply` change the
    /// entry.
    fn step<T>(
        &self,
        resource: &LockKey,
        fence: FencingToken,
        apply: impl FnOnce(&mut FencedValue) -> T,
    ) -> FenceCheck<T> {
        let mut resources = self.resources();
        let entry = resources
            .entry(resource.clone())
            .or_insert(FencedValue { fence, value: None });
        if fence < entry.fence {
            return FenceCheck::Stale {
                current: entry.fence,
            };
        }
        entry.fence = fence;
        FenceCheck::Accepted(apply(entry))
    }
}

#[async_trait]
impl FencedStore for MemoryStore {
    fn name(&self) -> &str {
        "memory"
    }

    async fn put_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
        value: &[u8],
    ) -> Result<FenceCheck<()>> {
        Ok(self.step(resource, fence, |entry| entry.value = Some(value.to_vec())))
    }

    async fn claim_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
    ) -> Result<FenceCheck<Option<Vec<u8>>>> {
        Ok(self.step(resource, fence, |entry| entry.value.clone()))
    }

    async fn inspect_fenced(&self, resource: &LockKey) -> Result<Option<FencedValue>> {
        Ok(self.resources().get(resource).cloned())
    }
}
