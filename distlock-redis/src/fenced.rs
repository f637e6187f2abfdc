//! [`RedisStore`]: fenced writes to Redis strings and hash fields, each one script
//! that compares and stores the fence.

use async_trait::async_trait;
use distlock_core::backend::{check_fence, FenceCheck};
use distlock_core::{Error, ErrorKind, FencedStore, FencedValue, FencingToken, LockKey, Result};

use crate::backend::RedisBackend;
use crate::error::unexpected;
use crate::scripts::Lua;

/// The hash field that keeps a hash's fence, unless [`RedisStore::with_fence_field`]
/// names another.
pub const FENCE_FIELD: &str = "distlock:fence";

/// Fenced writes to the Redis server of a [`RedisBackend`], on its connection.
///
/// Each step is one Lua script, so the compare and the write are one atomic step on
/// the server, in one round trip (with `WAIT` in the same round trip when the backend
/// waits for replicas). Fences are stored in decimal and compared as numbers, length
/// first, never as text or as Lua's doubles.
///
/// - [`set`](Self::set) writes one of *your* string keys (`SET`, which clears an
///   expiry the key had), with its fence in a key beside it, [`fence_key`]; the two
///   share a hash slot.
/// - [`hset`](Self::hset) writes a field of one of your hashes; the fence of the whole
///   hash is kept in the hash itself, in the field [`FENCE_FIELD`].
/// - As a [`FencedStore`], a resource named `r` is the string `<prefix>fenced:{r}`
///   (the backend's key prefix), or with [`in_hashes`](Self::in_hashes) the field
///   `value` of the hash `<prefix>fenced-hash:{r}`.
///
/// A fence is only as durable as the server: on a Redis that restarts empty, a fence
/// key is lost with the data it fences, and the next write under any fence is
/// accepted. Persist the server (AOF with `appendfsync always`) where that matters,
/// run it with `maxmemory-policy noeviction`, and never delete or expire the fence
/// keys (deleting a hash deletes its fence).
#[derive(Debug, Clone)]
pub struct RedisStore {
    backend: RedisBackend,
    hashes: bool,
    fence_field: String,
    script: Lua,
}

/// The key that keeps the fence of the string key `key`: where `key` has a hash tag,
/// `<key>:distlock-fence` (the tag still comes first); else `{<key>}:distlock-fence`.
/// Both share `key`'s Redis Cluster hash slot, except for a key that holds a `}` but
/// no hash tag (such as `{}x`), which no tag can name.
pub fn fence_key(key: &str) -> String {
    if hash_tag(key).is_some() || key.contains('}') {
        format!("{key}:distlock-fence")
    } else {
        format!("{{{key}}}:distlock-fence")
    }
}

/// The part of `key` Redis Cluster hashes, when it is not the whole key.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

enum Step<'a> {
    Put(&'a [u8]),
    Claim,
    Peek,
}

/// Where one step reads and writes: the value's key and field, the fence's key and
/// field (an empty field for a string key).
struct Place<'a> {
    key: &'a str,
    field: &'a str,
    fence_key: &'a str,
    fence_field: &'a str,
}

impl<'a> Place<'a> {
    /// A string key with its fence in a string key of its own.
    fn string(key: &'a str, fence_key: &'a str) -> Self {
        Place {
            key,
            field: "",
            fence_key,
            fence_field: "",
        }
    }
}

impl RedisStore {
    /// Fenced writes on `backend`'s server and connection.
    pub fn new(backend: &RedisBackend) -> Self {
        RedisStore {
            backend: backend.clone(),
            hashes: false,
            fence_field: FENCE_FIELD.to_owned(),
            script: Lua::new(include_str!("scripts/fenced.lua")),
        }
    }

    /// Keeps resources (as a [`FencedStore`]) in hash fields rather than strings.
    pub fn in_hashes(mut self) -> Self {
        self.hashes = true;
        self
    }

    /// Keeps hashes' fences in `field` rather than [`FENCE_FIELD`].
    pub fn with_fence_field(mut self, field: impl Into<String>) -> Result<Self> {
        let field = field.into();
        if field.is_empty() {
            return Err(Error::new(
                ErrorKind::Configuration,
                "the fence field must not be empty",
            )
            .with_backend(NAME));
        }
        self.fence_field = field;
        Ok(self)
    }

    /// Sets the string `key` to `value` if `fence` is not below the highest fence the
    /// key has seen, and stores `fence` in [`fence_key`]`(key)`, in one step. An
    /// [`ErrorKind::StaleFence`] error otherwise.
    pub async fn set(&self, key: &str, fence: FencingToken, value: &[u8]) -> Result<()> {
        let fence_key = fence_key(checked(key, fence)?);
        let check = self
            .step(&Place::string(key, &fence_key), fence, Step::Put(value))
            .await?;
        check.into_result(NAME, key, fence).map(drop)
    }

    /// Reads the string `key` under `fence`, raising its fence to `fence` (a claiming
    /// read, as [`FencedStore::claim_fenced`]). An [`ErrorKind::StaleFence`] error when
    /// the key has seen a higher fence.
    pub async fn get(&self, key: &str, fence: FencingToken) -> Result<Option<Vec<u8>>> {
        let fence_key = fence_key(checked(key, fence)?);
        let check = self
            .step(&Place::string(key, &fence_key), fence, Step::Claim)
            .await?;
        check.into_result(NAME, key, fence).map(|(_, value)| value)
    }

    /// Sets `field` of the hash `key` to `value` if `fence` is not below the highest
    /// fence the hash has seen, and stores `fence` in the hash's fence field, in one
    /// step. An [`ErrorKind::StaleFence`] error otherwise.
    pub async fn hset(
        &self,
        key: &str,
        field: &str,
        fence: FencingToken,
        value: &[u8],
    ) -> Result<()> {
        let place = self.hash_place(key, field, fence)?;
        let check = self.step(&place, fence, Step::Put(value)).await?;
        check.into_result(NAME, key, fence).map(drop)
    }

    /// Reads `field` of the hash `key` under `fence`, raising the hash's fence to it
    /// (a claiming read). An [`ErrorKind::StaleFence`] error when the hash has seen a
    /// higher fence.
    pub async fn hget(
        &self,
        key: &str,
        field: &str,
        fence: FencingToken,
    ) -> Result<Option<Vec<u8>>> {
        let place = self.hash_place(key, field, fence)?;
        let check = self.step(&place, fence, Step::Claim).await?;
        check.into_result(NAME, key, fence).map(|(_, value)| value)
    }

    fn hash_place<'a>(
        &'a self,
        key: &'a str,
        field: &'a str,
        fence: FencingToken,
    ) -> Result<Place<'a>> {
        checked(key, fence)?;
        if field.is_empty() || field == self.fence_field {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "a fenced hash field must be neither empty nor the fence field {:?}",
                    self.fence_field
                ),
            )
            .with_backend(NAME));
        }
        Ok(Place {
            key,
            field,
            fence_key: key,
            fence_field: &self.fence_field,
        })
    }

    /// One step on the resource `resource`, wherever this store keeps resources.
    async fn resource_step(
        &self,
        resource: &LockKey,
        fence: FencingToken,
        step: Step<'_>,
    ) -> Result<FenceCheck<(Option<FencingToken>, Option<Vec<u8>>)>> {
        let prefix = self.backend.config().prefix();
        if self.hashes {
            let key = format!("{prefix}fenced-hash:{{{resource}}}");
            let place = Place {
                key: &key,
                field: "value",
                fence_key: &key,
                fence_field: &self.fence_field,
            };
            self.step(&place, fence, step).await
        } else {
            let key = format!("{prefix}fenced:{{{resource}}}");
            let fence_key = format!("{key}:fence");
            self.step(&Place::string(&key, &fence_key), fence, step)
                .await
        }
    }

    /// Runs the script: accepted with the stored fence and value, or stale.
    async fn step(
        &self,
        place: &Place<'_>,
        fence: FencingToken,
        step: Step<'_>,
    ) -> Result<FenceCheck<(Option<FencingToken>, Option<Vec<u8>>)>> {
        let (op, value): (&[u8], &[u8]) = match step {
            Step::Put(value) => (b"put", value),
            Step::Claim => (b"claim", b""),
            Step::Peek => (b"peek", b""),
        };
        let fence_text = fence.to_string();
        let args: [&[u8]; 5] = [
            fence_text.as_bytes(),
            op,
            value,
            place.field.as_bytes(),
            place.fence_field.as_bytes(),
        ];
        let writes = !matches!(step, Step::Peek);
        let (accepted, stored, value): (u8, Option<String>, Option<Vec<u8>>) = self
            .backend
            .run(&self.script, &[place.key, place.fence_key], &args, writes)
            .await?;
        let stored = stored
            .map(|f| f.parse::<u64>().map(FencingToken::new))
            .transpose()
            .map_err(|_| unexpected("a stored fence that is not a number"))?;
        match (accepted, stored) {
            (1, stored) => Ok(FenceCheck::Accepted((stored, value))),
            (0, Some(current)) => Ok(FenceCheck::Stale { current }),
            _ => Err(unexpected("the answer of a fenced step")),
        }
    }
}

const NAME: &str = "redis";

fn checked(key: &str, fence: FencingToken) -> Result<&str> {
    check_fence(fence)?;
    if key.is_empty() {
        return Err(
            Error::new(ErrorKind::InvalidKey, "a Redis key must not be empty").with_backend(NAME),
        );
    }
    Ok(key)
}

#[async_trait]
impl FencedStore for RedisStore {
    fn name(&self) -> &str {
        NAME
    }

    async fn put_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
        value: &[u8],
    ) -> Result<FenceCheck<()>> {
        Ok(self
            .resource_step(resource, fence, Step::Put(value))
            .await?
            .map(drop))
    }

    async fn claim_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
    ) -> Result<FenceCheck<Option<Vec<u8>>>> {
        Ok(self
            .resource_step(resource, fence, Step::Claim)
            .await?
            .map(|(_, value)| value))
    }

    async fn inspect_fenced(&self, resource: &LockKey) -> Result<Option<FencedValue>> {
        match self
            .resource_step(resource, FencingToken::new(0), Step::Peek)
            .await?
        {
            FenceCheck::Accepted((Some(fence), value)) => Ok(Some(FencedValue { fence, value })),
            FenceCheck::Accepted((None, _)) => Ok(None),
            FenceCheck::Stale { .. } => Err(unexpected("a peek answered stale")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_key_shares_its_keys_hash_slot() {
        for key in ["orders:7", "{user:1}:cart", "a{b}c", "x{", "x{{y}", "plain"] {
            let slot_part = |k: &str| hash_tag(k).unwrap_or(k).to_owned();
            assert_eq!(slot_part(&fence_key(key)), slot_part(key), "{key}");
        }
    }
}
