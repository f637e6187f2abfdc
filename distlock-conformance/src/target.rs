//! [`Target`]: a backend under test, with the means to fault its server when it has them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLockBackend, Lease, LockKey, MemoryBackend};
use futures_util::future::BoxFuture;
use tokio::sync::RwLock;

/// Control over the server behind a backend, for the fault cases.
///
/// Each method returns once the change has taken effect; `restart` and `start` return
/// once the server accepts requests again.
#[async_trait]
pub trait ServerControl: Send + Sync + fmt::Debug {
    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    async fn pause(&self) -> Result<(), BoxError>;
    /// Ends a pause.
    async fn unpause(&self) -> Result<(), BoxError>;
    /// Stops the server gracefully and starts it again. Whether data survives is the
    /// backend's business, declared in its capabilities.
    async fn restart(&self) -> Result<(), BoxError>;
    /// Kills the server (SIGKILL) and leaves it down.
    async fn kill(&self) -> Result<(), BoxError>;
    /// Starts a killed server again.
    async fn start(&self) -> Result<(), BoxError>;
    /// Whether [`kill_connections`](Self::kill_connections) is supported.
    fn can_kill_connections(&self) -> bool {
        false
    }
    /// Closes every client connection from the server side (the server stays up).
    async fn kill_connections(&self) -> Result<(), BoxError> {
        Err("this server cannot kill client connections".into())
    }
}

/// Counts the round trips between a backend and its server (a proxy in between, say):
/// what the case on contract point 9 reads around each operation.
pub trait RoundTripMeter: Send + Sync + fmt::Debug {
    /// The round trips counted so far: a reply from the server that followed a request
    /// from the client counts one.
    fn round_trips(&self) -> u64;
}

/// Makes a new instance of the backend under test, with connections of its own: a
/// second client of the same server, or (for the wrong-credentials case) one that
/// presents credentials the server refuses.
pub type Connector =
    Arc<dyn Fn() -> BoxFuture<'static, distlock_core::Result<Arc<DynLockBackend>>> + Send + Sync>;

/// A backend under test: the backend, optional control over its server, and the
/// timings the cases derive from its capabilities.
pub struct Target {
    backend: Arc<DynLockBackend>,
    control: Option<Arc<dyn ServerControl>>,
    metered: Option<(Arc<DynLockBackend>, Arc<dyn RoundTripMeter>)>,
    wrong_credentials: Option<(String, Connector)>,
    clients: Option<Connector>,
    /// Ordinary cases share the server (read); fault cases take it alone (write).
    pub(crate) server_use: RwLock<()>,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("backend", &self.backend)
            .field("control", &self.control)
            .field("metered", &self.metered.as_ref().map(|(_, meter)| meter))
            .field("wrong_credentials", &self.wrong_credentials.is_some())
            .field("clients", &self.clients.is_some())
            .finish()
    }
}

impl Target {
    /// A target without server control: the fault cases are skipped, and said to be.
    pub fn new(backend: Arc<DynLockBackend>) -> Self {
        Target {
            backend,
            control: None,
            metered: None,
            wrong_credentials: None,
            clients: None,
            server_use: RwLock::new(()),
        }
    }

    /// Adds a second instance of the backend whose traffic `meter` counts, which
    /// enables the round-trip case (contract point 9).
    pub fn with_round_trip_meter(
        mut self,
        backend: Arc<DynLockBackend>,
        meter: Arc<dyn RoundTripMeter>,
    ) -> Self {
        self.metered = Some((backend, meter));
        self
    }

    /// Adds a way to connect with credentials the server refuses, holding `secret`
    /// (which no error may show), which enables the wrong-credentials case.
    pub fn with_wrong_credentials(
        mut self,
        secret: impl Into<String>,
        connect: impl Fn() -> BoxFuture<'static, distlock_core::Result<Arc<DynLockBackend>>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.wrong_credentials = Some((secret.into(), Arc::new(connect)));
        self
    }

    /// Adds a way to make more clients of the same server, each with connections of
    /// its own, which enables the cases across independent clients.
    pub fn with_clients(
        mut self,
        connect: impl Fn() -> BoxFuture<'static, distlock_core::Result<Arc<DynLockBackend>>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.clients = Some(Arc::new(connect));
        self
    }

    /// A new client of the same server, when the target can make one.
    pub async fn another_client(&self) -> Option<distlock_core::Result<Arc<DynLockBackend>>> {
        match &self.clients {
            Some(connect) => Some(connect().await),
            None => None,
        }
    }

    /// Whether the target can make more clients of its server.
    pub fn has_clients(&self) -> bool {
        self.clients.is_some()
    }

    /// The metered backend and its meter, when there are.
    pub fn round_trip_meter(&self) -> Option<&(Arc<DynLockBackend>, Arc<dyn RoundTripMeter>)> {
        self.metered.as_ref()
    }

    /// The secret of the wrong credentials and the way to connect with them, when given.
    pub fn wrong_credentials(&self) -> Option<&(String, Connector)> {
        self.wrong_credentials.as_ref()
    }

    /// Adds control over the server, which enables the fault cases.
    pub fn with_control(mut self, control: Arc<dyn ServerControl>) -> Self {
        self.control = Some(control);
        self
    }

    /// The memory backend with its simulated faults: what the crate's own tests run.
    /// Its other clients are handles on the same in-process store.
    pub fn memory() -> Self {
        let memory = MemoryBackend::new();
        let store = memory.clone();
        Target::new(Arc::new(memory.clone()))
            .with_control(Arc::new(MemoryControl(memory)))
            .with_clients(move || {
                let client: Arc<DynLockBackend> = Arc::new(store.clone());
                Box::pin(async move { Ok(client) })
            })
    }

    /// The backend under test.
    pub fn backend(&self) -> &Arc<DynLockBackend> {
        &self.backend
    }

    /// The server control, when there is one.
    pub fn control(&self) -> Option<&Arc<dyn ServerControl>> {
        self.control.as_ref()
    }

    /// The backend's capabilities.
    pub fn capabilities(&self) -> &Capabilities {
        self.backend.capabilities()
    }

    /// A fresh random key, so that cases never share state.
    pub fn key(&self, case: &str) -> LockKey {
        let suffix: u64 = rand::random();
        LockKey::new(format!("distlock-conformance/{case}/{suffix:016x}"))
            .unwrap_or_else(|e| unreachable!("generated keys are valid: {e}"))
    }

    /// A TTL short enough to wait out in a test, that the backend accepts.
    pub fn short_ttl(&self) -> Duration {
        self.capabilities().ttl_at_least(Duration::from_millis(400))
    }

    /// A TTL that does not run out during a case.
    pub fn long_ttl(&self) -> Duration {
        self.capabilities().ttl_at_least(Duration::from_secs(60))
    }

    /// A long TTL to extend `lease` to, where the backend extends to any TTL; the
    /// lease's own TTL where it renews only to that
    /// ([`Capabilities::extend_any_ttl`]).
    pub fn renewal_ttl(&self, lease: &Lease) -> Duration {
        if self.capabilities().extend_any_ttl {
            self.long_ttl()
        } else {
            lease.ttl()
        }
    }

    /// How late after its TTL an abandoned lease may free its key: the TTL granularity
    /// (servers may round up to it) plus 150 ms for polling and scheduling.
    pub fn expiry_slack(&self) -> Duration {
        self.capabilities().ttl_granularity + Duration::from_millis(150)
    }
}

/// [`ServerControl`] over the memory backend's simulated faults.
#[derive(Debug, Clone)]
pub struct MemoryControl(pub MemoryBackend);

#[async_trait]
impl ServerControl for MemoryControl {
    async fn pause(&self) -> Result<(), BoxError> {
        self.0.pause();
        Ok(())
    }
    async fn unpause(&self) -> Result<(), BoxError> {
        self.0.resume();
        Ok(())
    }
    async fn restart(&self) -> Result<(), BoxError> {
        self.0.restart();
        Ok(())
    }
    async fn kill(&self) -> Result<(), BoxError> {
        self.0.stop();
        Ok(())
    }
    async fn start(&self) -> Result<(), BoxError> {
        self.0.start();
        Ok(())
    }
}
