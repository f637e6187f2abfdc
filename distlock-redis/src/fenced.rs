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

/// How every fence key of [`RedisStore::set`] ends: a key of yours that ends so is
/// refused, so that no write of yours can land on a fence.
pub const FENCE_KEY_SUFFIX: &str = ":distlock-fence";

/// The key that keeps the fence of the string key `key`: where `key` has a hash tag
/// (or a `}`), `<key>:tagged:distlock-fence` (the tag still comes first); else
/// `{<key>}:distlock-fence`. Both share `key`'s Redis Cluster hash slot, except for a
/// key that holds a `}` but no hash tag (such as `{}x`), which no tag can name.
///
/// The mapping is one to one: two keys never share a fence (`a` and `{a}` have
/// `{a}:distlock-fence` and `{a}:tagged:distlock-fence`), and no key that
/// [`RedisStore::set`] accepts is a fence key (it refuses every key that ends with
/// [`FENCE_KEY_SUFFIX`]).
pub fn fence_key(key: &str) -> String {
    if hash_tag(key).is_some() || key.contains('}') {
        format!("{key}:tagged{FENCE_KEY_SUFFIX}")
    } else {
        format!("{{{key}}}{FENCE_KEY_SUFFIX}")
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
        let fence_key = fence_key(checked(key, fence, self.backend.config().prefix())?);
        let check = self
            .step(&Place::string(key, &fence_key), fence, Step::Put(value))
            .await?;
        check.into_result(NAME, key, fence).map(drop)
    }

    /// Reads the string `key` under `fence`, raising its fence to `fence` (a claiming
    /// read, as [`FencedStore::claim_fenced`]). An [`ErrorKind::StaleFence`] error when
    /// the key has seen a higher fence.
    pub async fn get(&self, key: &str, fence: FencingToken) -> Result<Option<Vec<u8>>> {
        let fence_key = fence_key(checked(key, fence, self.backend.config().prefix())?);
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
        checked(key, fence, self.backend.config().prefix())?;
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

/// A key of the user's, checked: not empty, not a fence key of [`fence_key`]'s
/// (which a write would reset), and not under the backend's `prefix` (distlock's own
/// keys: its locks, and the resources and fences of the [`FencedStore`]).
fn checked<'a>(key: &'a str, fence: FencingToken, prefix: &str) -> Result<&'a str> {
    check_fence(fence)?;
    let refused = if key.is_empty() {
        "a Redis key must not be empty".to_owned()
    } else if key.ends_with(FENCE_KEY_SUFFIX) {
        format!("a fenced key must not end with {FENCE_KEY_SUFFIX:?}: that names a fence key, and writing it would reset a fence")
    } else if !prefix.is_empty() && key.starts_with(prefix) {
        format!("a fenced key must not start with the backend's prefix {prefix:?}: distlock keeps its own locks and fences there")
    } else {
        return Ok(key);
    };
    Err(Error::new(ErrorKind::InvalidKey, refused).with_backend(NAME))
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
            FenceCheck::Accepted((Some(fence), value)) => Ok(Some(FencedValue::new(fence, value))),
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

    #[test]
    fn no_two_keys_share_a_fence_key_and_no_fence_key_is_accepted_as_a_key() {
        let keys = [
            "a",
            "{a}",
            "a}",
            "{a",
            "{{a}}",
            "{a}:tagged",
            "x{a}",
            "{}a",
            "a:tagged",
        ];
        let fences: std::collections::HashSet<String> = keys.iter().map(|k| fence_key(k)).collect();
        assert_eq!(fences.len(), keys.len(), "{fences:?}");
        for key in keys {
            let fence = fence_key(key);
            let refused = checked(&fence, FencingToken::new(1), "distlock:")
                .expect_err("a fence key is refused as a key");
            assert_eq!(refused.kind(), ErrorKind::InvalidKey, "{refused}");
        }
        let ours = checked(
            "distlock:fenced:{r}:fence",
            FencingToken::new(1),
            "distlock:",
        )
        .expect_err("a key under the prefix");
        assert_eq!(ours.kind(), ErrorKind::InvalidKey, "{ours}");
        assert!(checked("orders:7", FencingToken::new(1), "distlock:").is_ok());
    }
}
