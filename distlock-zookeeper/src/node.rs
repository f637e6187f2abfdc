//! The node model: what a node under a key's node is (a lease or a fair waiter's
//! place), read from its name, data and stat; and the reads every lock step makes.

use std::time::{Duration, SystemTime};

use distlock_core::{FencingToken, Holder, LockInfo, LockKey};
use futures_util::future::join_all;
use zookeeper_client::Error as ZkError;
use zookeeper_client::{Client, Stat};

/// What a node under a key's node is: a lease (`l-<owner>`) or a fair waiter's place
/// (`p-<owner>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Lease,
    Place,
}

/// A lease or place as read: its name, what it is, its TTL, its holder and its stat.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) path: String,
    pub(crate) kind: Kind,
    pub(crate) owner: String,
    pub(crate) ttl_ms: i64,
    pub(crate) holder: Option<Holder>,
    pub(crate) stat: Stat,
}

/// A lease's data: its TTL in ms (8 bytes, big-endian), then the holder as it encodes
/// itself. A lease of an earlier version has the TTL alone.
pub(crate) fn lease_data(ttl: Duration, holder: &Holder) -> Vec<u8> {
    let mut data = millis(ttl).to_be_bytes().to_vec();
    data.extend_from_slice(holder.encoded().as_bytes());
    data
}

impl Node {
    /// The server time (ms since the epoch) after which it has expired.
    pub(crate) fn expires_at(&self) -> i64 {
        self.stat.mtime.saturating_add(self.ttl_ms)
    }

    /// Whether it was still unexpired at server time `now`.
    pub(crate) fn live_at(&self, now: i64) -> bool {
        now <= self.expires_at()
    }

    pub(crate) fn remaining_at(&self, now: i64) -> Duration {
        Duration::from_millis(u64::try_from(self.expires_at() - now).unwrap_or(0))
    }

    pub(crate) fn fence(&self) -> Result<FencingToken, ZkError> {
        fence_of(&self.stat)
    }

    /// What inspecting shows of it at server time `now`: its holder was granted when
    /// its node was created, by the server's clock.
    pub(crate) fn info(&self, now: i64) -> Result<LockInfo, ZkError> {
        let created = u64::try_from(self.stat.ctime).ok();
        let granted_at = created.map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        let granted_at = self.holder.as_ref().and(granted_at);
        Ok(LockInfo::new(self.fence()?, self.remaining_at(now))
            .held_by(self.holder.clone(), granted_at))
    }
}

/// A lease's fence: its node's creation zxid, which is positive; any other value is
/// an unexpected answer (a backend error).
pub(crate) fn fence_of(stat: &Stat) -> Result<FencingToken, ZkError> {
    FencingToken::from_server(stat.czxid)
        .map_err(|e| ZkError::UnexpectedError(e.message().to_owned()))
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The key a segment made by [`encode_key`](crate::config::encode_key) names; `None` for any other node.
pub(crate) fn decode_key(segment: &str) -> Option<LockKey> {
    let encoded = segment.strip_prefix("k-")?;
    let mut bytes = Vec::with_capacity(encoded.len());
    let mut rest = encoded.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    LockKey::new(String::from_utf8(bytes).ok()?).ok()
}

/// A node's name and data read back as a lease or place; `None` for anything else.
pub(crate) fn parse_node(dir: &str, name: &str, data: &[u8], stat: Stat) -> Option<Node> {
    let (kind, owner) = if let Some(owner) = name.strip_prefix("l-") {
        (Kind::Lease, owner)
    } else if let Some(owner) = name.strip_prefix("p-") {
        (Kind::Place, owner)
    } else {
        return None;
    };
    let (ttl, holder) = (data.get(..8)?, data.get(8..)?);
    let ttl_ms = i64::from_be_bytes(ttl.try_into().ok()?);
    let holder = std::str::from_utf8(holder).ok().and_then(Holder::decode);
    Some(Node {
        path: format!("{dir}/{name}"),
        kind,
        owner: owner.to_owned(),
        ttl_ms,
        holder,
        stat,
    })
}

/// Whether a driver error is only "the node is not there".
pub(crate) fn gone<T>(
    result: std::result::Result<T, ZkError>,
) -> std::result::Result<Option<T>, ZkError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(ZkError::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The leases and places under `dir`, read in one round trip after `names` (the
/// children listed), each request sent before any answer is awaited.
pub(crate) async fn read_nodes(
    client: &Client,
    dir: &str,
    names: Vec<String>,
) -> std::result::Result<Vec<Node>, ZkError> {
    let reads = join_all(
        names
            .iter()
            .map(|name| client.get_data(&format!("{dir}/{name}"))),
    );
    let mut nodes = Vec::new();
    for (name, read) in names.iter().zip(reads.await) {
        if let Some((data, stat)) = gone(read)? {
            nodes.extend(parse_node(dir, name, &data, stat));
        }
    }
    Ok(nodes)
}

/// The owner's own lease node at `path`, as read: its data and what it says; `None`
/// when it is gone (or holds something else).
pub(crate) async fn own_lease(
    client: &Client,
    path: &str,
) -> std::result::Result<Option<(Vec<u8>, Node)>, ZkError> {
    let Some((data, stat)) = gone(client.get_data(path).await)? else {
        return Ok(None);
    };
    Ok(parse_node("", "l-", &data, stat).map(|node| (data, node)))
}

/// The children of `dir`, none when it does not exist.
pub(crate) async fn children(
    client: &Client,
    dir: &str,
) -> std::result::Result<Vec<String>, ZkError> {
    Ok(gone(client.list_children(dir).await)?.unwrap_or_default())
}

/// The holder among `nodes` at server time `now`: the live lease created first.
pub(crate) fn holder(nodes: &[Node], now: i64) -> Option<&Node> {
    nodes
        .iter()
        .filter(|n| n.kind == Kind::Lease && n.live_at(now))
        .min_by_key(|n| n.stat.czxid)
}
