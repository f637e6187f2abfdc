//! [`ZooKeeperStore`]: fenced writes to ZooKeeper, each one version-checked write of
//! one node.

use async_trait::async_trait;
use distlock_core::backend::FenceCheck;
use distlock_core::{Error, ErrorKind, FencedStore, FencedValue, FencingToken, LockKey, Result};
use zookeeper_client::Error as ZkError;

use crate::backend::ZooKeeperBackend;
use crate::config::encode_key;

const NAME: &str = "zookeeper";

/// The bytes before a resource's value in its node: the fence (8, big-endian) and
/// whether a value was ever written (1).
const HEADER: usize = 9;

/// Fenced writes to the ensemble of a [`ZooKeeperBackend`], on its session.
///
/// A resource `r` is the persistent node `<root>/fenced/k-<r, percent-encoded>`
/// ([`resource_node`](Self::resource_node)), whose data is the highest fence it has
/// seen (8 bytes, big-endian, so numbers compare as numbers over the whole range),
/// a byte saying whether a value was written, and the value. ZooKeeper has no
/// compare on a node's data, but every write can be made conditional on the version
/// it read, so a step is:
///
/// ```text
/// read node (data, version)                 -- missing: create it with f (or retry)
/// if fence(data) > f then stale(fence(data))
/// else set_data(node, f ++ value, version)  -- another write came between: read again
/// ```
///
/// The compare and the write are one step in the sense of the contract: the write
/// takes effect only on the version that was compared, so no other write can come
/// between them (point 1). A claiming read is such a write too (the value kept, the
/// fence raised), even under the fence already stored: a read alone could be served
/// stale by a follower, while a version-checked write is ordered by the leader, so
/// every accepted step is linearizable. A step takes two round trips (three to create
/// a resource), and a contended one more.
///
/// Values are bounded by ZooKeeper's `jute.maxbuffer` (1 MiB by default) less 9
/// bytes. Fences are as durable as the ensemble's data. Never delete a resource's
/// node or make it a TTL node: a node that forgets its fence accepts any writer.
/// [`inspect_fenced`](FencedStore::inspect_fenced) syncs, then reads: it sees every
/// step acknowledged before it, short of a leader change in between
/// (ZOOKEEPER-1675).
#[derive(Debug, Clone)]
pub struct ZooKeeperStore {
    backend: ZooKeeperBackend,
    parent: String,
}

/// A resource's node as stored.
struct Stored {
    fence: FencingToken,
    value: Option<Vec<u8>>,
}

fn decode(data: &[u8]) -> Result<Stored> {
    let (Some(fence), Some(flag)) = (data.get(..8), data.get(8)) else {
        return Err(Error::new(
            ErrorKind::Backend,
            format!(
                "a fenced resource's node holds {} bytes, fewer than its header",
                data.len()
            ),
        )
        .with_backend(NAME));
    };
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(fence);
    Ok(Stored {
        fence: FencingToken::new(u64::from_be_bytes(bytes)),
        value: (*flag == 1).then(|| data[HEADER..].to_vec()),
    })
}

fn encode(fence: FencingToken, value: Option<&[u8]>) -> Vec<u8> {
    let mut data = Vec::with_capacity(HEADER + value.map_or(0, <[u8]>::len));
    data.extend_from_slice(&fence.get().to_be_bytes());
    data.push(u8::from(value.is_some()));
    data.extend_from_slice(value.unwrap_or_default());
    data
}

impl ZooKeeperStore {
    /// Fenced writes on `backend`'s ensemble and session, under its root node.
    pub fn new(backend: &ZooKeeperBackend) -> Self {
        ZooKeeperStore {
            backend: backend.clone(),
            parent: format!("{}/fenced", backend.config().root),
        }
    }

    /// The node that keeps `resource`'s fence and value.
    pub fn resource_node(&self, resource: &LockKey) -> String {
        format!("{}/{}", self.parent, encode_key(resource.as_str()))
    }

    /// One step under `fence`: a write of `value`, or a claim (`None`) that keeps the
    /// value. What the resource held before, or the fence that made it stale.
    async fn step(
        &self,
        resource: &LockKey,
        fence: FencingToken,
        value: Option<&[u8]>,
    ) -> Result<FenceCheck<Option<Vec<u8>>>> {
        let node = self.resource_node(resource);
        let parent = self.parent.clone();
        let options = self.backend.persistent();
        let value = value.map(<[u8]>::to_vec);
        let outcome = self
            .backend
            .run(|client| async move {
                loop {
                    match client.get_data(&node).await {
                        Ok((data, stat)) => {
                            let Ok(stored) = decode(&data) else {
                                return Ok(Err(data.len()));
                            };
                            if fence < stored.fence {
                                return Ok(Ok(FenceCheck::Stale {
                                    current: stored.fence,
                                }));
                            }
                            let next = match &value {
                                Some(v) => encode(fence, Some(v.as_slice())),
                                None => encode(fence, stored.value.as_deref()),
                            };
                            match client.set_data(&node, &next, Some(stat.version)).await {
                                Ok(_) => return Ok(Ok(FenceCheck::Accepted(stored.value))),
                                // Another step came between: judge again.
                                Err(ZkError::BadVersion | ZkError::NoNode) => continue,
                                Err(e) => return Err(e),
                            }
                        }
                        Err(ZkError::NoNode) => {
                            let first = encode(fence, value.as_deref());
                            match client.create(&node, &first, &options).await {
                                Ok(_) => return Ok(Ok(FenceCheck::Accepted(None))),
                                Err(ZkError::NodeExists) => continue,
                                Err(ZkError::NoNode) => {
                                    client.mkdir(&parent, &options).await?;
                                    continue;
                                }
                                Err(e) => return Err(e),
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
            })
            .await?;
        outcome.map_err(|bytes| {
            Error::new(
                ErrorKind::Backend,
                format!(
                    "the node of {resource:?} holds {bytes} bytes, fewer than a fenced resource's header: it is not a resource of this store"
                ),
            )
            .with_backend(NAME)
        })
    }
}

#[async_trait]
impl FencedStore for ZooKeeperStore {
    fn name(&self) -> &str {
        NAME
    }

    async fn put_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
        value: &[u8],
    ) -> Result<FenceCheck<()>> {
        Ok(match self.step(resource, fence, Some(value)).await? {
            FenceCheck::Accepted(_) => FenceCheck::Accepted(()),
            FenceCheck::Stale { current } => FenceCheck::Stale { current },
        })
    }

    async fn claim_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
    ) -> Result<FenceCheck<Option<Vec<u8>>>> {
        self.step(resource, fence, None).await
    }

    async fn inspect_fenced(&self, resource: &LockKey) -> Result<Option<FencedValue>> {
        let node = self.resource_node(resource);
        let parent = self.parent.clone();
        let data = self
            .backend
            .run(|client| async move {
                // Catch this server up with the leader first; a missing parent is
                // a store nothing was written to yet.
                match client.sync(&parent).await {
                    Ok(()) | Err(ZkError::NoNode) => {}
                    Err(e) => return Err(e),
                }
                match client.get_data(&node).await {
                    Ok((data, _)) => Ok(Some(data)),
                    Err(ZkError::NoNode) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await?;
        data.map(|data| decode(&data).map(|stored| FencedValue::new(stored.fence, stored.value)))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_keeps_the_fence_as_a_number_and_whether_a_value_was_written() {
        for (fence, value) in [
            (0, None),
            (9, Some(&b""[..])),
            (10, Some(&b"ten"[..])),
            (i64::MAX as u64, Some(&b"\x00\x01"[..])),
        ] {
            let stored = decode(&encode(FencingToken::new(fence), value)).expect("decoded");
            assert_eq!(stored.fence.get(), fence);
            assert_eq!(stored.value.as_deref(), value);
        }
        assert!(decode(b"short").is_err());
    }
}
