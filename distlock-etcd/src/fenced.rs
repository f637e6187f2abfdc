//! [`EtcdStore`]: fenced puts, each one transaction that compares a fence key.

use async_trait::async_trait;
use distlock_core::backend::{check_fence, FenceCheck};
use distlock_core::{Error, ErrorKind, FencedStore, FencedValue, FencingToken, LockKey, Result};
use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse, TxnResponse};

use crate::backend::EtcdBackend;

const NAME: &str = "etcd";

/// Fenced writes to the etcd cluster of an [`EtcdBackend`], on its connection.
///
/// The fence of the key `k` is kept in the key `<fence prefix>k` (`distlock-fence/k`
/// unless [`with_fence_prefix`](Self::with_fence_prefix) says otherwise), as 20
/// decimal digits with leading zeros: etcd compares values as bytes, and at a fixed
/// width byte order is number order, over the whole range of fences. A step is one
/// transaction, so one round trip, atomic and linearizable on the cluster:
///
/// ```text
/// if value(fence key) > f then get(fence key)             -- stale: report the fence
/// else put(fence key, f), put(k, value)                   -- a missing fence key is below any f
/// ```
///
/// - [`put`](Self::put) writes one of *your* keys, [`get`](Self::get) reads one under
///   a fence (a claiming read). A key under the fence prefix or the resource prefix
///   is refused as [`ErrorKind::InvalidKey`]: a write there would reset a fence.
/// - As a [`FencedStore`], a resource named `r` is the key
///   `<resource prefix>r` (`distlock-fenced/r` unless
///   [`with_resource_prefix`](Self::with_resource_prefix) says otherwise).
///
/// Fences are as durable as etcd's data. Never delete a fence key or attach it to a
/// lease: a key that forgets its fence accepts any writer.
#[derive(Debug, Clone)]
pub struct EtcdStore {
    backend: EtcdBackend,
    fence_prefix: String,
    resource_prefix: String,
}

/// A fence as stored: 20 digits, so that etcd's byte order is number order.
fn encode(fence: FencingToken) -> String {
    format!("{:020}", fence.get())
}

enum Step<'a> {
    Put(&'a [u8]),
    Claim,
}

impl EtcdStore {
    /// Fenced writes on `backend`'s cluster and connection.
    pub fn new(backend: &EtcdBackend) -> Self {
        EtcdStore {
            backend: backend.clone(),
            fence_prefix: "distlock-fence/".to_owned(),
            resource_prefix: "distlock-fenced/".to_owned(),
        }
    }

    /// Keeps fences under `prefix` (not empty: a fence key must differ from its key).
    pub fn with_fence_prefix(mut self, prefix: impl Into<String>) -> Result<Self> {
        self.fence_prefix = non_empty(prefix.into(), "fence")?;
        Ok(self)
    }

    /// Keeps the [`FencedStore`]'s resources under `prefix`.
    pub fn with_resource_prefix(mut self, prefix: impl Into<String>) -> Result<Self> {
        self.resource_prefix = non_empty(prefix.into(), "resource")?;
        Ok(self)
    }

    /// The key that keeps the fence of `key`.
    pub fn fence_key(&self, key: &str) -> String {
        format!("{}{key}", self.fence_prefix)
    }

    /// Puts `value` at your key `key` if `fence` is not below the highest fence the key
    /// has seen, and stores `fence`, in one transaction. An
    /// [`ErrorKind::StaleFence`] error otherwise.
    pub async fn put(&self, key: &str, fence: FencingToken, value: &[u8]) -> Result<()> {
        self.checked(key, fence)?;
        let check = self.step(key, fence, Step::Put(value)).await?;
        check.into_result(NAME, key, fence).map(drop)
    }

    /// Reads your key `key` under `fence`, raising its fence to `fence` (a claiming
    /// read). An [`ErrorKind::StaleFence`] error when the key has seen a higher fence.
    pub async fn get(&self, key: &str, fence: FencingToken) -> Result<Option<Vec<u8>>> {
        self.checked(key, fence)?;
        let check = self.step(key, fence, Step::Claim).await?;
        check.into_result(NAME, key, fence)
    }

    fn resource_key(&self, resource: &LockKey) -> String {
        format!("{}{resource}", self.resource_prefix)
    }

    async fn step(
        &self,
        key: &str,
        fence: FencingToken,
        step: Step<'_>,
    ) -> Result<FenceCheck<Option<Vec<u8>>>> {
        let fence_key = self.fence_key(key);
        let encoded = encode(fence);
        let mut then = vec![TxnOp::put(fence_key.clone(), encoded.clone(), None)];
        then.push(match step {
            Step::Put(value) => TxnOp::put(key, value.to_vec(), None),
            Step::Claim => TxnOp::get(key, None),
        });
        let txn = Txn::new()
            .when([Compare::value(
                fence_key.clone(),
                CompareOp::Greater,
                encoded,
            )])
            .and_then([TxnOp::get(fence_key, None)])
            .or_else(then);
        let reply = self.backend.txn(&txn).await?;
        if reply.succeeded() {
            let current = first_value(&reply, 0)
                .map(|raw| decode(&raw))
                .transpose()?
                .ok_or_else(|| unexpected("a stale answer without the fence"))?;
            return Ok(FenceCheck::Stale { current });
        }
        Ok(FenceCheck::Accepted(first_value(&reply, 1)))
    }
}

fn non_empty(prefix: String, what: &str) -> Result<String> {
    if prefix.is_empty() {
        return Err(Error::new(
            ErrorKind::Configuration,
            format!("the {what} prefix must not be empty"),
        )
        .with_backend(NAME));
    }
    Ok(prefix)
}

impl EtcdStore {
    /// A key of the user's, checked: not empty, and under neither the fence prefix
    /// (a write there would reset another key's fence) nor the resource prefix (the
    /// [`FencedStore`]'s own values).
    fn checked(&self, key: &str, fence: FencingToken) -> Result<()> {
        check_fence(fence)?;
        let refused = if key.is_empty() {
            "an etcd key must not be empty".to_owned()
        } else if key.starts_with(&self.fence_prefix) {
            format!(
                "a fenced key must not start with the fence prefix {:?}: that names a fence key, and writing it would reset a fence",
                self.fence_prefix
            )
        } else if key.starts_with(&self.resource_prefix) {
            format!(
                "a fenced key must not start with the resource prefix {:?}: the fenced store keeps its resources there",
                self.resource_prefix
            )
        } else {
            return Ok(());
        };
        Err(Error::new(ErrorKind::InvalidKey, refused).with_backend(NAME))
    }
}

fn unexpected(what: &str) -> Error {
    Error::new(
        ErrorKind::Backend,
        format!("unexpected reply from etcd: {what}"),
    )
    .with_backend(NAME)
}

fn decode(raw: &[u8]) -> Result<FencingToken> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|text| text.parse::<u64>().ok())
        .map(FencingToken::new)
        .ok_or_else(|| unexpected("a stored fence that is not a number"))
}

/// The value of the first key the `index`th operation of the transaction read.
fn first_value(reply: &TxnResponse, index: usize) -> Option<Vec<u8>> {
    match reply.op_responses().get(index) {
        Some(TxnOpResponse::Get(get)) => get.kvs().first().map(|kv| kv.value().to_vec()),
        _ => None,
    }
}

#[async_trait]
impl FencedStore for EtcdStore {
    fn name(&self) -> &str {
        NAME
    }

    async fn put_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
        value: &[u8],
    ) -> Result<FenceCheck<()>> {
        let key = self.resource_key(resource);
        Ok(self.step(&key, fence, Step::Put(value)).await?.map(drop))
    }

    async fn claim_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
    ) -> Result<FenceCheck<Option<Vec<u8>>>> {
        self.step(&self.resource_key(resource), fence, Step::Claim)
            .await
    }

    async fn inspect_fenced(&self, resource: &LockKey) -> Result<Option<FencedValue>> {
        let key = self.resource_key(resource);
        // Both reads in one transaction: one revision, so a consistent pair.
        let txn = Txn::new().and_then([
            TxnOp::get(self.fence_key(&key), None),
            TxnOp::get(key, None),
        ]);
        let reply = self.backend.txn(&txn).await?;
        let Some(fence) = first_value(&reply, 0) else {
            return Ok(None);
        };
        Ok(Some(FencedValue::new(
            decode(&fence)?,
            first_value(&reply, 1),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_fences_sort_as_numbers() {
        let fences = [0, 9, 10, 99, 100, 1 << 53, (1 << 53) + 1, i64::MAX as u64];
        for pair in fences.windows(2) {
            let (a, b) = (
                encode(FencingToken::new(pair[0])),
                encode(FencingToken::new(pair[1])),
            );
            assert!(a.as_bytes() < b.as_bytes(), "{a} {b}");
            assert_eq!(decode(b.as_bytes()).ok(), Some(FencingToken::new(pair[1])));
        }
    }
}
