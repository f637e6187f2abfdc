//! [`EtcdBackend`]: the contract on an etcd cluster, with leases and transactions.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, ExtendRequest, FairBackend, FenceDurability, Grant,
    HolderRecords, OperatorBackend, OwnerToken, ReleaseOutcome, Renewal, RoundTrips, SetBackend,
    SetGrant,
};
use distlock_core::{
    Error, ErrorKind, FencingToken, Holder, LockBackend, LockInfo, LockKey, Result,
};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue, LeaseGrantOptions,
    LeaseTimeToLiveOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    WatchFilterType, WatchOptions,
};
use tokio::time::Instant;
use tracing::debug;

use crate::config::EtcdConfig;
use crate::error::{
    connect_error, from_etcd, is_lease_not_found, is_lease_taken, is_not_sent, timed_out, Setting,
};

const NAME: &str = "etcd";

/// A lock backend on an etcd cluster.
///
/// A lock is a key attached to a lease whose ID is derived from the owner token, so
/// the lease itself names the owner. The fence is the key's creation revision:
/// strictly increasing, durable and cluster-wide. Clones share one connection.
#[derive(Clone)]
pub struct EtcdBackend {
    inner: Arc<Inner>,
}

struct Inner {
    config: EtcdConfig,
    capabilities: Capabilities,
    client: Client,
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// What every etcd backend declares.
fn capabilities() -> Capabilities {
    let mut capabilities = Capabilities::default();
    capabilities.min_ttl = Duration::from_secs(2);
    capabilities.ttl_granularity = Duration::from_secs(1);
    capabilities.fence_durability = FenceDurability::Durable;
    capabilities.leases_survive_restart = true;
    capabilities.change_notification = true;
    capabilities.extend_any_ttl = false;
    // Stored with the lease; timed by the client (put_holder).
    capabilities.holder_records = HolderRecords::ClientClock;
    // A lease grant, then the transaction that creates the key; a keep-alive stream
    // opened, then its message (the owner check runs alongside); one transaction.
    capabilities.round_trips = RoundTrips::new(2, 1, 2);
    capabilities
}

/// Runs one request on `client` within `config`'s request timeout: see
/// [`EtcdBackend::request`].
async fn request<T, F, Fut>(client: &Client, config: &EtcdConfig, op: F) -> Result<T>
where
    F: FnMut(Client) -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    request_refused_for(client, config, config.timeout, op)
        .await?
        .map_err(|failed| failed.error(config))
}

/// A request's driver error, and whether it never left this process (a refusal).
struct Failed {
    error: etcd_client::Error,
    not_sent: bool,
}

impl Failed {
    /// The error as the backend reports it.
    fn error(self, config: &EtcdConfig) -> Error {
        let error = from_etcd(config, self.error);
        if self.not_sent {
            error.with_not_sent()
        } else {
            error
        }
    }
}

/// [`request`], with refused connections tried again for `refused_for` at most (and
/// within the response time-out): a connection's check gives up on refusals sooner
/// than a lock's request does. The outer error is the response time-out's; the inner
/// one the driver's, for the caller to report.
async fn request_refused_for<T, F, Fut>(
    client: &Client,
    config: &EtcdConfig,
    refused_for: Duration,
    mut op: F,
) -> Result<std::result::Result<T, Failed>>
where
    F: FnMut(Client) -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let started = Instant::now();
    let deadline = started + config.timeout;
    let refusals_until = started + refused_for.min(config.timeout);
    let mut pause = Duration::from_millis(10);
    loop {
        match tokio::time::timeout_at(deadline, op(client.clone())).await {
            Err(_) => return Err(timed_out(config, Setting::Response)),
            Ok(Ok(value)) => return Ok(Ok(value)),
            Ok(Err(e)) if is_not_sent(&e) && Instant::now() + pause < refusals_until => {
                debug!(error = %e, "a member refused the connection; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            // A refusal until the deadline: the request never left this process.
            Ok(Err(e)) => {
                let not_sent = is_not_sent(&e);
                return Ok(Err(Failed { error: e, not_sent }));
            }
        }
    }
}

/// Sends a copy of `txn`, so that the same transaction can be sent again.
fn send_txn(
    mut client: Client,
    txn: &Txn,
) -> impl Future<Output = Result<etcd_client::TxnResponse, etcd_client::Error>> + Send + 'static {
    let txn = txn.clone();
    async move { client.txn(txn).await }
}

/// A transaction that succeeds while each of `compares` holds, read linearizably. etcd
/// answers a transaction that neither writes nor reads from the state of the member
/// that received it, without asking the leader first (as a serializable read), and a
/// member may be behind: one that has not applied a grant yet finds the key not there.
/// So the check reads `key` too (its count only), which makes it a linearizable read.
pub(crate) fn check_txn<const N: usize>(compares: [Compare; N], key: String) -> Txn {
    Txn::new()
        .when(compares)
        .and_then([TxnOp::get(key, Some(GetOptions::new().with_count_only()))])
}

/// The fence a revision gives (a key's creation revision, or the revision a grant's
/// transaction made): revisions are positive, and any other value is a backend error.
pub(crate) fn fence(revision: i64) -> Result<FencingToken> {
    FencingToken::from_server(revision).map_err(|e| e.with_backend(NAME))
}

/// The holder a holder key stores (see `EtcdBackend::holder_key`), when it is on the
/// lock's `lease`.
fn read_holder(kv: Option<&KeyValue>, lease: i64) -> (Option<Holder>, Option<SystemTime>) {
    let stored = kv
        .filter(|kv| kv.lease() == lease && lease != 0)
        .and_then(|kv| std::str::from_utf8(kv.value()).ok())
        .and_then(|text| text.split_once('/'));
    let Some((ms, holder)) = stored else {
        return (None, None);
    };
    match (ms.parse::<u64>(), Holder::decode(holder)) {
        (Ok(ms), Some(holder)) => (
            Some(holder),
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
        ),
        _ => (None, None),
    }
}

/// An acquisition whose lease expired (or was revoked) before the transaction that
/// writes its grant reached the server: the server or the link stalled past the
/// TTL, and nothing was granted. The contract's "a grant would have come back after
/// its validity": an [`ErrorKind::Timeout`], which a waiter retries.
fn lease_ran_out() -> Error {
    Error::new(
        ErrorKind::Timeout,
        "the acquisition's lease ran out before its grant was written (the server or the \
         link stalled past the TTL); nothing was granted",
    )
    .with_backend(NAME)
}

/// The lease of an owner: the token's first 63 bits, never zero (zero asks etcd to
/// choose an ID).
pub(crate) fn lease_id(owner: &OwnerToken) -> i64 {
    let b = owner.as_bytes();
    let raw = i64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) & i64::MAX;
    raw.max(1)
}

/// The lease that keeps a fair waiter's place: the token's last 63 bits, never zero,
/// so that it is not the lease of the owner's lock.
pub(crate) fn place_lease_id(owner: &OwnerToken) -> i64 {
    let b = owner.as_bytes();
    let raw = i64::from_be_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]) & i64::MAX;
    raw.max(1)
}

/// The TLS settings an `etcds://` URL names, with the files read.
#[cfg(feature = "tls")]
fn tls_options(config: &EtcdConfig) -> Result<etcd_client::TlsOptions> {
    use etcd_client::{Certificate, Identity, TlsOptions};
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            distlock_core::backend::config_error(
                "etcd",
                format!("cannot read {}: {e}", path.display()),
            )
        })
    };
    let files = &config.tls_files;
    let mut options = TlsOptions::new();
    if let Some(ca) = &files.ca {
        options = options.ca_certificate(Certificate::from_pem(read(ca)?));
    }
    if let (Some(cert), Some(key)) = (&files.cert, &files.key) {
        options = options.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    if let Some(name) = &files.server_name {
        options = options.domain_name(name.clone());
    }
    Ok(options)
}

impl EtcdBackend {
    /// Connects with the settings of an `etcd://` URL (see [`EtcdConfig`]). An
    /// unreachable cluster fails with [`ErrorKind::Unavailable`]: at once where its one
    /// member refuses the connection, within the connect time-out where each of several
    /// does, within the connect and response time-outs where none answers; wrong
    /// credentials fail with [`ErrorKind::Authentication`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(EtcdConfig::from_url(url)?).await
    }

    /// Connects with `config`, typed or parsed (see [`EtcdConfig`]), after
    /// [checking](EtcdConfig::check) it.
    pub async fn connect_with(config: EtcdConfig) -> Result<Self> {
        config.check()?;
        let mut options = ConnectOptions::new()
            .with_timeout(config.timeout)
            .with_connect_timeout(config.connect_timeout)
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true);
        if let Some((user, password)) = &config.user {
            options = options.with_user(user.clone(), password.clone());
        }
        #[cfg(feature = "tls")]
        if config.tls {
            options = options.with_tls(tls_options(&config)?);
        }
        let connect = Client::connect(config.endpoints(), Some(options));
        let client = tokio::time::timeout(config.connect_timeout + config.timeout, connect)
            .await
            .map_err(|_| timed_out(&config, Setting::Connect))?
            .map_err(|e| from_etcd(&config, e))?;
        // One member that refuses the connection is down now, and says so at once;
        // of several, the channel may route the check to one that is down while
        // another is up, so refusals are tried again within the connect time-out.
        let refused_for = if config.endpoints.len() == 1 {
            Duration::ZERO
        } else {
            config.connect_timeout
        };
        Self::checked(client, config, refused_for).await
    }

    /// A backend on the service's own etcd `client`, which it shares (clones are
    /// cheap: one channel): no second connection is opened. From `config`, only the
    /// lock settings are read (`prefix`, the response timeout); the client's own
    /// endpoints, credentials, TLS and time-outs stay as the service set them. One
    /// request (`status`) checks that the cluster answers, so that an unreachable
    /// cluster or refused credentials fail here. The backend never changes the
    /// client's settings; it creates leases and keys under the prefix only.
    pub async fn from_client(client: Client, config: EtcdConfig) -> Result<Self> {
        let refused_for = config.connect_timeout;
        Self::checked(client, config, refused_for).await
    }

    /// A backend on `client` once one request (`status`) found the cluster
    /// answering, with refused connections tried again for `refused_for`.
    async fn checked(client: Client, config: EtcdConfig, refused_for: Duration) -> Result<Self> {
        distlock_core::backend::key_prefix("etcd", &config.prefix)?;
        // A member that is down may be the one the channel's balancer picks first.
        let checked = request_refused_for(&client, &config, refused_for, |mut c| async move {
            c.status().await
        })
        .await?;
        if let Err(failed) = checked {
            return Err(match failed.not_sent {
                true => failed.error(&config),
                false => connect_error(&config, failed.error).await,
            });
        }
        Ok(EtcdBackend {
            inner: Arc::new(Inner {
                config,
                capabilities: capabilities(),
                client,
            }),
        })
    }

    /// The settings in force.
    pub fn config(&self) -> &EtcdConfig {
        &self.inner.config
    }

    fn key(&self, key: &LockKey) -> String {
        format!("{}{}", self.inner.config.prefix, key)
    }

    /// Where `key`'s holder is stored, on the grant's lease, as
    /// `"<ms>/<holder>"`: the grant's time in ms by the granting client's clock (etcd
    /// has none a client can read), and the holder as it encodes itself. It belongs to
    /// the lock's holder only while both keys are on the same lease.
    fn holder_key(&self, key: &str) -> String {
        format!("{}\0holder\0{key}", self.inner.config.prefix)
    }

    /// The holder key's put for `request`, on the lease `id`.
    fn put_holder(&self, request: &AcquireRequest, id: i64) -> TxnOp {
        let ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        TxnOp::put(
            self.holder_key(request.key().as_str()),
            format!("{ms}/{}", request.holder().encoded()),
            Some(PutOptions::new().with_lease(id)),
        )
    }

    /// Where `key`'s fair waiters queue, in the order of their keys' creation
    /// revisions. A NUL cannot occur in a lock key, so no lock or other queue shares it.
    fn queue(&self, key: &LockKey) -> String {
        format!("{}\0queue\0{}\0", self.inner.config.prefix, key)
    }

    /// Grants the lease `id` for `ttl` (its ID chosen by the owner token): `false` when
    /// a lease of that ID is live already.
    pub(crate) async fn grant_lease(&self, id: i64, ttl: Duration) -> Result<bool> {
        let secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        self.request(|mut client| async move {
            match client
                .lease_grant(secs, Some(LeaseGrantOptions::new().with_id(id)))
                .await
            {
                Ok(_) => Ok(true),
                Err(e) if is_lease_taken(&e) => Ok(false),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// Sends `txn`, whose puts are attached to leases: its reply, or `None` when a
    /// lease was gone, so that the transaction wrote nothing.
    pub(crate) async fn txn_on_leases(
        &self,
        txn: &Txn,
    ) -> Result<Option<etcd_client::TxnResponse>> {
        self.request(|c| {
            let put = send_txn(c, txn);
            async move {
                match put.await {
                    Err(e) if is_lease_not_found(&e) => Ok(None),
                    other => other.map(Some),
                }
            }
        })
        .await
    }

    /// Sends `txn`, whose puts are attached to leases that the step has just granted
    /// or kept alive: a lease gone meanwhile (the server or the link stalled past its
    /// TTL) wrote nothing, and is the retryable [`lease_ran_out`] error, as a waiter's
    /// next step can cure it.
    pub(crate) async fn txn_with_live_leases(&self, txn: &Txn) -> Result<etcd_client::TxnResponse> {
        self.txn_on_leases(txn).await?.ok_or_else(lease_ran_out)
    }

    /// The lease `id` of an owner for at least `ttl` from now, for a step that attaches
    /// its keys to it: granted fresh, or, live from an earlier step of the same owner
    /// (a grant whose reply was lost, a resumed term, a step whose transaction never
    /// landed), restarted by a keep-alive, so that the expiry the client counts from
    /// this step is the server's too. A live lease granted shorter than asked is revoked
    /// and granted again. Where it ran out between the two steps, it is granted again;
    /// where even that finds it taken, the retryable [`lease_ran_out`] error.
    pub(crate) async fn restart_lease(&self, id: i64, ttl: Duration) -> Result<()> {
        if self.grant_lease(id, ttl).await? {
            return Ok(());
        }
        match self.keep_alive_once(id).await? {
            Some(granted) if granted >= ttl => return Ok(()),
            Some(_) => self.revoke_now(id).await?,
            None => {}
        }
        if self.grant_lease(id, ttl).await? {
            Ok(())
        } else {
            Err(lease_ran_out())
        }
    }

    /// The lease of `request`'s owner for at least `request.ttl()` from now: granted
    /// fresh, or, when its ID is live already and the lease is this owner's (from an
    /// earlier step whose reply was lost), restarted by a keep-alive, so that a retry
    /// counts its expiry from this step, on the server as in the client. A live lease
    /// granted shorter than asked is revoked and granted again. `None` when the ID
    /// belongs to a live lease that cannot be made this step's: another token that
    /// shares the 63 bits the ID is made of holds it, or it ran out meanwhile.
    async fn lease_for(&self, request: &AcquireRequest) -> Result<Option<LeaseStep>> {
        let id = lease_id(request.owner());
        if self.grant_lease(id, request.ttl()).await? {
            return Ok(Some(LeaseStep::Fresh));
        }
        if !self.lease_is_owners(id, request).await? {
            return Ok(None);
        }
        match self.keep_alive_once(id).await? {
            Some(granted) if granted >= request.ttl() => Ok(Some(LeaseStep::Kept)),
            // Gone between the grant and the keep-alive: the next step grants it.
            None => Ok(None),
            Some(_) => {
                // Granted for a shorter TTL by an earlier step: revoking it deletes
                // whatever key it held, and the lease is granted again for this TTL.
                self.revoke_now(id).await?;
                Ok(self
                    .grant_lease(id, request.ttl())
                    .await?
                    .then_some(LeaseStep::Fresh))
            }
        }
    }

    /// Whether the live lease `id` is `request`'s owner's: it holds no key (an owner's
    /// lease holds its one key at most, with that key's holder record; one from a step
    /// whose transaction was not applied holds none), or it holds the request's key
    /// with this whole owner token in it. A lease that holds any other key is another token's, one that shares
    /// the 63 bits the ID is made of, and is never touched.
    async fn lease_is_owners(&self, id: i64, request: &AcquireRequest) -> Result<bool> {
        let attached = self
            .request(|mut c| async move {
                c.lease_time_to_live(id, Some(LeaseTimeToLiveOptions::new().with_keys()))
                    .await
            })
            .await?;
        let key = self.key(request.key());
        // The key's holder record rides on the same lease.
        let holder = self.holder_key(request.key().as_str());
        let keys: Vec<&[u8]> = attached
            .keys()
            .iter()
            .map(|k| k.as_slice())
            .filter(|k| *k != holder.as_bytes())
            .collect();
        match keys.as_slice() {
            [] => Ok(true),
            [only] if *only == key.as_bytes() => {
                let read = self.request(|mut c| {
                    let key = key.clone();
                    async move { c.get(key, None).await }
                });
                let value = read.await?.kvs().first().map(|kv| kv.value().to_vec());
                Ok(value.as_deref() == Some(request.owner().to_hex().as_bytes()))
            }
            _ => Ok(false),
        }
    }

    /// The acquisition transaction on the owner's lease (see
    /// [`lease_for`](Self::lease_for)): creates the key only if it does not exist,
    /// attached to the lease, and runs `also` with it; a key that exists and is this
    /// owner's on this lease (a retry whose first reply was lost) is granted again
    /// with its fence. The fence, or `None` when another holds the key.
    ///
    /// A failed step leaves the lease alone: the outcome of a request whose reply was
    /// lost is unknown, and the owner's next step, or its release, settles it. Only a
    /// lease this step knows to hold nothing is revoked, and before the step answers,
    /// never in the background: the same owner's next step takes the lease again, and
    /// a revoke landing after it would delete the key under that grant.
    async fn create_lock(
        &self,
        request: &AcquireRequest,
        also: Vec<TxnOp>,
    ) -> Result<Option<FencingToken>> {
        let id = lease_id(request.owner());
        let key = self.key(request.key());
        let mut ops = vec![
            TxnOp::put(
                key.clone(),
                request.owner().to_hex(),
                Some(PutOptions::new().with_lease(id)),
            ),
            self.put_holder(request, id),
        ];
        ops.extend(also);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then(ops)
            .or_else([TxnOp::get(key, None)]);
        let reply = match self.txn_on_leases(&txn).await? {
            Some(reply) => reply,
            None => return Err(lease_ran_out()),
        };
        if reply.succeeded() {
            let revision = reply.header().map(|h| h.revision()).unwrap_or_default();
            return Ok(Some(fence(revision)?));
        }
        let holder = match reply.op_responses().first() {
            Some(TxnOpResponse::Get(got)) => got.kvs().first().cloned(),
            _ => None,
        };
        if let Some(holder) = holder {
            if holder.value() == request.owner().to_hex().as_bytes() && holder.lease() == id {
                return Ok(Some(fence(holder.create_revision())?));
            }
        }
        self.revoke_now(id).await?;
        Ok(None)
    }

    /// Revokes lease `id` and returns once the server has (a lease already gone is
    /// not an error).
    pub(crate) async fn revoke_now(&self, id: i64) -> Result<()> {
        self.request(|mut c| async move {
            match c.lease_revoke(id).await {
                Ok(_) => Ok(()),
                Err(e) if is_lease_not_found(&e) => Ok(()),
                Err(e) => Err(e),
            }
        })
        .await
    }

    fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// Runs one request within the request timeout. `op` gets a handle on the client
    /// and is called again when the request could not even be sent (a refused
    /// connection to a member that is down): nothing reached a server, so trying
    /// again is always safe. The channel's balancer may pick the dead member several
    /// times in a row, so refusals are retried until the deadline, with a short
    /// growing pause; a request refused until then fails with the refusal.
    pub(crate) async fn request<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        request(&self.inner.client, &self.inner.config, op).await
    }

    /// Sends `txn` within the request timeout (again, if it could not be sent).
    pub(crate) async fn txn(&self, txn: &Txn) -> Result<etcd_client::TxnResponse> {
        self.request(|client| send_txn(client, txn)).await
    }

    /// Revokes a lease in the background: its keys (if any) are already dealt with,
    /// and an unrevoked lease runs out at its TTL anyway.
    pub(crate) fn revoke_later(&self, id: i64) {
        let mut client = self.client();
        let timeout = self.inner.config.timeout;
        tokio::spawn(async move {
            if let Ok(Err(e)) = tokio::time::timeout(timeout, client.lease_revoke(id)).await {
                if !is_lease_not_found(&e) {
                    debug!(error = %e, "lease revoke failed; it runs out at its ttl");
                }
            }
        });
    }

    /// The time left on lease `lease`, zero when it is gone or cannot be read.
    pub(crate) async fn lease_left(&self, lease: i64) -> Duration {
        let left = self
            .request(|mut c| async move { c.lease_time_to_live(lease, None).await })
            .await
            .ok()
            .and_then(|r| u64::try_from(r.ttl()).ok())
            .unwrap_or(0);
        Duration::from_secs(left)
    }

    /// Watches `key` (with `deletes_only`, for deletions only: a lock's release), or,
    /// without, every key under the prefix `key` for any change (a name's permits).
    pub(crate) async fn watch_prefix(
        &self,
        key: String,
        deletes_only: bool,
    ) -> Result<ChangeStream> {
        let options = if deletes_only {
            WatchOptions::new().with_filters([WatchFilterType::NoPut])
        } else {
            WatchOptions::new().with_prefix()
        };
        let stream = self
            .request(|mut c| {
                let (key, options) = (key.clone(), options.clone());
                async move { c.watch(key, Some(options)).await }
            })
            .await?;
        let changes = futures_util::stream::unfold(stream, move |mut stream| async move {
            loop {
                match stream.message().await {
                    Ok(Some(reply)) if reply.canceled() => return None,
                    Ok(Some(reply)) => {
                        if !deletes_only
                            || reply
                                .events()
                                .iter()
                                .any(|e| e.event_type() == EventType::Delete)
                        {
                            return Some(((), stream));
                        }
                    }
                    // The stream ended or broke: the waiter polls instead.
                    Ok(None) | Err(_) => return None,
                }
            }
        });
        Ok(Box::pin(changes))
    }

    /// Keeps the lease `id` alive once: its granted TTL, or `None` when it is gone.
    pub(crate) async fn keep_alive_once(&self, id: i64) -> Result<Option<Duration>> {
        self.request(|mut client| async move {
            let exchange = async {
                let (mut keeper, mut stream) = client.lease_keep_alive(id).await?;
                keeper.keep_alive().await?;
                stream.message().await
            };
            match exchange.await {
                Ok(reply) => Ok(reply
                    .and_then(|r| u64::try_from(r.ttl()).ok())
                    .filter(|s| *s > 0)
                    .map(Duration::from_secs)),
                // The lease expired or was revoked: not held, not a fault.
                Err(e) if is_lease_not_found(&e) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await
    }
}

/// How [`EtcdBackend::lease_for`] got the owner's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseStep {
    /// Granted by this step.
    Fresh,
    /// Live from an earlier step of the same owner, restarted by this one.
    Kept,
}

#[async_trait]
impl LockBackend for EtcdBackend {
    fn fair(&self) -> Option<&dyn FairBackend> {
        Some(self)
    }

    fn sets(&self) -> Option<&dyn SetBackend> {
        Some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorBackend> {
        Some(self)
    }

    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> &Capabilities {
        &self.inner.capabilities
    }

    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        if let Some(place) = request.place() {
            return self.grant_in_turn(request, place).await;
        }
        if self.lease_for(request).await?.is_none() {
            return Ok(Grant::Held { remaining: None });
        }
        Ok(match self.create_lock(request, Vec::new()).await? {
            Some(fence) => Grant::Granted(fence),
            None => Grant::Held { remaining: None },
        })
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        // The key is deleted only if it holds this whole owner token and is attached to
        // this acquisition's lease: the lease ID is made of 63 of the token's bits, so
        // it cannot stand for the token alone. The lease is revoked afterwards.
        let id = lease_id(owner);
        let holder = self.holder_key(key.as_str());
        let key = self.key(key);
        let txn = Txn::new()
            .when([
                Compare::value(key.clone(), CompareOp::Equal, owner.to_hex()),
                Compare::lease(key.clone(), CompareOp::Equal, id),
            ])
            .and_then([TxnOp::delete(key, None), TxnOp::delete(holder, None)]);
        let reply = self.request(|c| send_txn(c, &txn)).await?;
        if !reply.succeeded() {
            return Ok(ReleaseOutcome::NotHeld);
        }
        self.revoke_later(id);
        Ok(ReleaseOutcome::Released)
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        let id = lease_id(request.owner());
        let key = self.key(request.key());
        // Refresh the lease and check that the key is still ours, side by side: one
        // round trip of latency. Neither can re-create the key.
        let check = check_txn(
            [
                Compare::value(key.clone(), CompareOp::Equal, request.owner().to_hex()),
                Compare::lease(key.clone(), CompareOp::Equal, id),
            ],
            key,
        );
        let (kept, checked) = tokio::join!(
            self.keep_alive_once(id),
            self.request(|c| send_txn(c, &check))
        );
        let checked = checked?;
        let granted = match kept? {
            Some(granted) => granted,
            None => return Ok(Renewal::NotHeld),
        };
        if !checked.succeeded() {
            self.revoke_later(id);
            return Ok(Renewal::NotHeld);
        }
        // Core only asks for the granted TTL (capabilities.extend_any_ttl is false); a
        // lease that came back shorter would make the validity a lie.
        if granted < request.ttl() {
            return Err(Error::new(
                ErrorKind::Backend,
                format!(
                    "etcd renewed the lease to {granted:?}, less than the {:?} asked for",
                    request.ttl()
                ),
            )
            .with_backend(NAME));
        }
        Ok(Renewal::Renewed)
    }

    /// A lease renews only to its granted TTL, so the key (and its holder record)
    /// moves onto a fresh lease of `request.ttl()`, in one transaction that holds only
    /// while the key is still the owner's on the owner's lease; the owner's lease is
    /// revoked after. The key's creation revision, its fence, is unchanged. A retry of
    /// a step whose reply was lost finds the key the owner's on another lease:
    /// released already. A step that fails leaves both leases to run out by themselves.
    async fn release_after(&self, request: &ExtendRequest) -> Result<ReleaseOutcome> {
        let id = lease_id(request.owner());
        let secs = i64::try_from(request.ttl().as_secs()).unwrap_or(i64::MAX);
        let fresh = self
            .request(|mut client| async move { client.lease_grant(secs, None).await })
            .await?
            .id();
        let owner = request.owner().to_hex();
        let holder = self.holder_key(request.key().as_str());
        let key = self.key(request.key());
        let moved = || Some(PutOptions::new().with_ignore_value().with_lease(fresh));
        let txn = Txn::new()
            .when([
                Compare::value(key.clone(), CompareOp::Equal, owner.clone()),
                Compare::lease(key.clone(), CompareOp::Equal, id),
            ])
            .and_then([
                TxnOp::put(key.clone(), "", moved()),
                // The holder record, where there is one on the owner's lease.
                TxnOp::txn(
                    Txn::new()
                        .when([Compare::lease(holder.clone(), CompareOp::Equal, id)])
                        .and_then([TxnOp::put(holder, "", moved())]),
                ),
            ])
            .or_else([TxnOp::get(key, None)]);
        // A failed transaction may have been applied with its reply lost: the key may
        // live on the fresh lease now, so that lease is left to run out by itself, at
        // the hold's end (revoking it would free the key within the hold).
        let reply = self.txn(&txn).await?;
        if reply.succeeded() {
            self.revoke_later(id);
            return Ok(ReleaseOutcome::Released);
        }
        self.revoke_later(fresh);
        let moved_before = reply.op_responses().into_iter().any(|op| match op {
            TxnOpResponse::Get(got) => got
                .kvs()
                .first()
                .is_some_and(|kv| kv.value() == owner.as_bytes() && kv.lease() != id),
            _ => false,
        });
        Ok(if moved_before {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        let read = Txn::new().and_then([
            TxnOp::get(self.key(key), None),
            TxnOp::get(self.holder_key(key.as_str()), None),
        ]);
        let reply = self.txn(&read).await?;
        let mut found = reply.op_responses().into_iter().map(|op| match op {
            TxnOpResponse::Get(got) => got.kvs().first().cloned(),
            _ => None,
        });
        let (Some(kv), holder) = (found.next().flatten(), found.next().flatten()) else {
            return Ok(None);
        };
        let (revision, lease) = (kv.create_revision(), kv.lease());
        let (holder, granted_at) = read_holder(holder.as_ref(), lease);
        Ok(Some(
            LockInfo::new(fence(revision)?, self.lease_left(lease).await)
                .held_by(holder, granted_at),
        ))
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        // Deletions only: a release, a force release, or the lease running out.
        self.watch_prefix(self.key(key), true).await.map(Some)
    }

    fn permits(&self) -> Option<&dyn distlock_core::backend::PermitBackend> {
        Some(self)
    }
}

impl EtcdBackend {
    /// The fair step (contract point 10): a grant whose request carries a place.
    async fn grant_in_turn(&self, request: &AcquireRequest, place: Duration) -> Result<Grant> {
        // The waiter's place is a key under the queue's prefix, attached to a lease of
        // its own that each call keeps alive: its creation revision is its turn, and
        // the lease's expiry is how a vanished waiter leaves. One read, alongside the
        // keep-alive, tells the head of the queue, this waiter's place and the lock.
        let (queue, lock) = (self.queue(request.key()), self.key(request.key()));
        let mine = format!("{queue}{}", request.owner().to_hex());
        let place_id = place_lease_id(request.owner());
        let head = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let read = Txn::new().and_then([
            TxnOp::get(queue.clone(), Some(head)),
            TxnOp::get(mine.clone(), None),
            TxnOp::get(lock, None),
        ]);
        let (kept, read) = tokio::join!(
            self.keep_alive_once(place_id),
            self.request(|c| send_txn(c, &read))
        );
        let replies = read?.op_responses();
        let first_key = |n: usize| match replies.get(n) {
            Some(TxnOpResponse::Get(got)) => got.kvs().first().cloned(),
            _ => None,
        };
        let (head, queued, holder) = (first_key(0), first_key(1), first_key(2));
        let has_place = matches!(kept, Ok(Some(_)));
        let owner = request.owner().to_hex();
        if let Some(holder) = &holder {
            if holder.value() == owner.as_bytes() && holder.lease() == lease_id(request.owner()) {
                // A retry of a grant whose reply was lost: it is ours already, and its
                // lease restarts from this step, as the client counts it.
                if let Some(LeaseStep::Kept) = self.lease_for(request).await? {
                    return Ok(Grant::Granted(fence(holder.create_revision())?));
                }
                // Gone meanwhile, or granted anew: the next step takes the key.
                return Ok(Grant::Held { remaining: None });
            }
        }
        let first = head.as_ref().is_none_or(|h| h.key() == mine.as_bytes());
        if holder.is_none() && first {
            // First in line (or nobody queued) and the key free: take it, and leave
            // the queue in the same transaction.
            if self.lease_for(request).await?.is_none() {
                return Ok(Grant::Held { remaining: None });
            }
            let leave = vec![TxnOp::delete(mine.clone(), None)];
            if let Some(fence) = self.create_lock(request, leave).await? {
                if queued.is_some() || has_place {
                    // The place's key went in the grant's transaction; its lease holds
                    // nothing any later step could take again.
                    self.revoke_later(place_id);
                }
                return Ok(Grant::Granted(fence));
            }
        }
        // Not this waiter's turn: keep its place, or take one at the tail.
        if queued.is_none() || !has_place {
            if !has_place && !self.grant_lease(place_id, place).await? {
                self.keep_alive_once(place_id).await?;
            }
            let join = Txn::new()
                .when([Compare::create_revision(mine.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    mine,
                    owner,
                    Some(PutOptions::new().with_lease(place_id)),
                )]);
            self.txn_with_live_leases(&join).await?;
        }
        Ok(Grant::Held { remaining: None })
    }
}

#[async_trait]
impl FairBackend for EtcdBackend {
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        // Revoking the place's lease deletes the place.
        let _ = key;
        self.revoke_now(place_lease_id(owner)).await
    }
}

#[async_trait]
impl SetBackend for EtcdBackend {
    async fn try_grant_all(&self, requests: &[AcquireRequest]) -> Result<SetGrant> {
        // Each key on its owner's lease, as a single key is, the leases granted side by
        // side (or, where an earlier step of the same owners left one live, restarted
        // from this step, as for a single key); then one transaction creates every key
        // or, when any exists, none, and reads them all instead, to name the first one
        // held, or to find every key held by its own request's owner already (a retry
        // whose first reply was lost). Every key created in it has the transaction's
        // revision as its creation revision: one fence for the set, above every
        // earlier fence of each of its keys.
        let leases: Vec<i64> = requests.iter().map(|r| lease_id(r.owner())).collect();
        let granted =
            futures_util::future::join_all(requests.iter().map(|request| self.lease_for(request)))
                .await;
        let mut refused = None;
        let mut failed = None;
        for (n, outcome) in granted.into_iter().enumerate() {
            match outcome {
                Ok(Some(_)) => {}
                // A live lease of that ID that is not this owner's: another
                // acquisition's token shares its bits.
                Ok(None) => refused = refused.or(Some(n)),
                Err(e) => failed = failed.or(Some((n, e))),
            }
        }
        if refused.is_some() || failed.is_some() {
            // What this step granted goes back; a lease it did not grant is not its own.
            let mut gave_back = 0;
            for (n, id) in leases.iter().enumerate() {
                if Some(n) != refused && failed.as_ref().is_none_or(|(f, _)| *f != n) {
                    self.revoke_later(*id);
                    gave_back += 1;
                }
            }
            debug!(gave_back, "a lease of the set could not be granted");
            if let Some((_, e)) = failed {
                return Err(e);
            }
            return Ok(SetGrant::Held {
                index: refused.unwrap_or(0),
                remaining: None,
            });
        }
        let keys: Vec<String> = requests.iter().map(|r| self.key(r.key())).collect();
        let txn = Txn::new()
            .when(
                keys.iter()
                    .map(|key| Compare::create_revision(key.clone(), CompareOp::Equal, 0))
                    .collect::<Vec<_>>(),
            )
            .and_then(
                requests
                    .iter()
                    .zip(&keys)
                    .zip(&leases)
                    .flat_map(|((request, key), id)| {
                        [
                            TxnOp::put(
                                key.clone(),
                                request.owner().to_hex(),
                                Some(PutOptions::new().with_lease(*id)),
                            ),
                            self.put_holder(request, *id),
                        ]
                    })
                    .collect::<Vec<_>>(),
            )
            .or_else(
                keys.iter()
                    .map(|key| TxnOp::get(key.clone(), None))
                    .collect::<Vec<_>>(),
            );
        let revoke_all = || leases.iter().for_each(|id| self.revoke_later(*id));
        let reply = match self.txn_on_leases(&txn).await {
            Ok(Some(reply)) => reply,
            Ok(None) => {
                revoke_all();
                return Err(lease_ran_out());
            }
            Err(e) => {
                revoke_all();
                return Err(e);
            }
        };
        if reply.succeeded() {
            let revision = reply.header().map(|h| h.revision()).unwrap_or_default();
            return Ok(SetGrant::Granted(vec![fence(revision)?; requests.len()]));
        }
        let found: Vec<Option<KeyValue>> = reply
            .op_responses()
            .into_iter()
            .map(|op| match op {
                TxnOpResponse::Get(got) => got.kvs().first().cloned(),
                _ => None,
            })
            .collect();
        // Every key its own request's owner's, on that owner's lease: this set's
        // earlier step was applied and its reply lost. Granted again, with its fences,
        // the leases restarted above.
        let own: Option<Vec<FencingToken>> = requests
            .iter()
            .zip(&leases)
            .zip(&found)
            .map(|((request, id), kv)| {
                kv.as_ref()
                    .filter(|kv| {
                        kv.value() == request.owner().to_hex().as_bytes() && kv.lease() == *id
                    })
                    .map(|kv| fence(kv.create_revision()))
            })
            .collect::<Option<Result<Vec<_>>>>()
            .transpose()?;
        if let (Some(fences), true) = (own, found.len() == requests.len()) {
            return Ok(SetGrant::Granted(fences));
        }
        revoke_all();
        let index = found.iter().position(Option::is_some).unwrap_or(0);
        Ok(SetGrant::Held {
            index,
            remaining: None,
        })
    }
}

#[async_trait]
impl OperatorBackend for EtcdBackend {
    async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        let start = &self.inner.config.prefix;
        let holders_start = self.holder_key("");
        let read = Txn::new().and_then([
            TxnOp::get(
                format!("{start}{prefix}"),
                Some(GetOptions::new().with_prefix()),
            ),
            TxnOp::get(
                format!("{holders_start}{prefix}"),
                Some(GetOptions::new().with_prefix()),
            ),
        ]);
        let reply = self.txn(&read).await?;
        let mut ranges = reply.op_responses().into_iter().map(|op| match op {
            TxnOpResponse::Get(got) => got.kvs().to_vec(),
            _ => Vec::new(),
        });
        let (locks, holder_kvs) = (
            ranges.next().unwrap_or_default(),
            ranges.next().unwrap_or_default(),
        );
        let holders: std::collections::HashMap<&[u8], &KeyValue> = holder_kvs
            .iter()
            .map(|kv| (&kv.key()[holders_start.len().min(kv.key().len())..], kv))
            .collect();
        let mut held = Vec::new();
        for kv in &locks {
            // A lock's key holds no NUL (queues and permits do) and lives on a lease.
            let name = kv
                .key_str()
                .ok()
                .and_then(|k| k.strip_prefix(start.as_str()));
            let Some(key) = name.and_then(|n| LockKey::new(n).ok()) else {
                continue;
            };
            if kv.lease() == 0 {
                continue;
            }
            let holder = holders.get(key.as_str().as_bytes()).copied();
            let (holder, granted_at) = read_holder(holder, kv.lease());
            let info = LockInfo::new(
                fence(kv.create_revision())?,
                self.lease_left(kv.lease()).await,
            )
            .held_by(holder, granted_at);
            held.push((key, info));
        }
        Ok(held)
    }

    async fn force_release(&self, key: &LockKey) -> Result<bool> {
        // Revoke the holder's lease, not just its key: the holder's own release then
        // finds no lease and rightly answers "not held".
        let key = self.key(key);
        let found = self
            .request(|mut c| {
                let key = key.clone();
                async move { c.get(key, None).await }
            })
            .await?;
        let Some(lease) = found.kvs().first().map(|kv| kv.lease()).filter(|l| *l != 0) else {
            return Ok(false);
        };
        self.request(|mut c| async move {
            match c.lease_revoke(lease).await {
                Ok(_) => Ok(true),
                Err(e) if is_lease_not_found(&e) => Ok(false),
                Err(e) => Err(e),
            }
        })
        .await
    }
}
