//! [`Descriptor`]: what a backend crate says of itself once, for whoever chooses
//! backends by URL.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::contract::DynLockBackend;
use crate::error::Result;

/// A boxed future, as a descriptor's functions return one.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// One URL scheme a backend serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheme {
    name: &'static str,
    feature: Option<&'static str>,
    built: bool,
}

impl Scheme {
    /// A scheme this build of the crate always serves.
    pub const fn new(name: &'static str) -> Self {
        Scheme {
            name,
            feature: None,
            built: true,
        }
    }

    /// A scheme that needs the crate's cargo feature `feature`; `built` says whether
    /// this build has it (the crate passes `cfg!(feature = "...")`).
    pub const fn with_feature(name: &'static str, feature: &'static str, built: bool) -> Self {
        Scheme {
            name,
            feature: Some(feature),
            built,
        }
    }

    /// The names of `schemes`, in their order: a crate's list of scheme names
    /// (its `SCHEMES`) read from its one list of [`Scheme`]s.
    ///
    /// ```
    /// use distlock_core::backend::Scheme;
    ///
    /// const LIST: [Scheme; 2] = [
    ///     Scheme::new("mystore"),
    ///     Scheme::with_feature("mystores", "tls", cfg!(feature = "tls")),
    /// ];
    /// const SCHEMES: &[&str] = &Scheme::names(&LIST);
    /// assert_eq!(SCHEMES, ["mystore", "mystores"]);
    /// ```
    pub const fn names<const N: usize>(schemes: &[Scheme; N]) -> [&'static str; N] {
        let mut names = [""; N];
        let mut i = 0;
        while i < N {
            names[i] = schemes[i].name;
            i += 1;
        }
        names
    }

    /// The scheme, as a URL starts with it (without `://`).
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The crate's cargo feature the scheme needs beyond its defaults, if any.
    pub const fn feature(&self) -> Option<&'static str> {
        self.feature
    }

    /// Whether this build serves the scheme.
    pub const fn is_built(&self) -> bool {
        self.built
    }
}

/// Connects to a URL of one of a backend's schemes.
pub type ConnectFn = fn(String) -> BoxFuture<Result<Arc<DynLockBackend>>>;

/// The tables a backend keeps, for `distlock migrate`: the statements that create
/// them for a URL, without running them, and their creation.
#[derive(Clone, Copy)]
pub struct Migration {
    statements: fn(&str) -> Result<Vec<String>>,
    run: fn(String) -> BoxFuture<Result<String>>,
}

impl Migration {
    /// `statements` lists what creates the tables a URL names; `run` creates them
    /// and says which, in one line.
    pub const fn new(
        statements: fn(&str) -> Result<Vec<String>>,
        run: fn(String) -> BoxFuture<Result<String>>,
    ) -> Self {
        Migration { statements, run }
    }

    /// The statements that create the tables `url` names (a configuration error for
    /// a URL the backend cannot read); nothing is sent.
    pub fn statements(&self, url: &str) -> Result<Vec<String>> {
        (self.statements)(url)
    }

    /// Creates the tables `url` names, if they are not there: one line saying which.
    pub async fn run(&self, url: &str) -> Result<String> {
        (self.run)(url.to_owned()).await
    }
}

impl fmt::Debug for Migration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Migration").finish_non_exhaustive()
    }
}

/// What a backend crate says of itself, once, as its `DESCRIPTOR`: its name, the URL
/// schemes it serves (and the cargo feature each needs), its server's default port,
/// how to connect from a URL, and the tables it keeps, if any. Whoever chooses
/// backends by URL (the `distlock` facade's `connect`, the `distlock` command line,
/// lockbench) reads it instead of matching strings of its own.
///
/// ```
/// use std::sync::Arc;
/// use distlock_core::backend::{Descriptor, Scheme};
/// use distlock_core::{DynLockBackend, MemoryBackend};
///
/// pub const DESCRIPTOR: Descriptor = Descriptor::new(
///     "memory",
///     &[Scheme::new("memory")],
///     0,
///     |_url| Box::pin(async { Ok(Arc::new(MemoryBackend::new()) as Arc<DynLockBackend>) }),
/// );
/// assert!(DESCRIPTOR.serves("memory://"));
/// ```
#[derive(Clone, Copy)]
pub struct Descriptor {
    name: &'static str,
    schemes: &'static [Scheme],
    default_port: u16,
    connect: ConnectFn,
    migration: Option<Migration>,
}

impl Descriptor {
    /// A backend named `name` (as its [`LockBackend::name`](super::LockBackend::name)
    /// gives it), serving `schemes`, whose server listens on `default_port` unless a
    /// URL says otherwise (0: no server), connected to by `connect`.
    pub const fn new(
        name: &'static str,
        schemes: &'static [Scheme],
        default_port: u16,
        connect: ConnectFn,
    ) -> Self {
        Descriptor {
            name,
            schemes,
            default_port,
            connect,
            migration: None,
        }
    }

    /// The same backend, keeping tables that `migration` creates.
    pub const fn with_migration(mut self, migration: Migration) -> Self {
        self.migration = Some(migration);
        self
    }

    /// The backend's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Every scheme it serves, built or not.
    pub fn schemes(&self) -> &'static [Scheme] {
        self.schemes
    }

    /// The schemes this build serves.
    pub fn built_schemes(&self) -> impl Iterator<Item = &'static str> {
        self.schemes.iter().filter(|s| s.built).map(|s| s.name)
    }

    /// The port its server listens on by default.
    pub fn default_port(&self) -> u16 {
        self.default_port
    }

    /// The scheme `url` starts with, among this backend's, built or not.
    pub fn scheme_of(&self, url: &str) -> Option<&'static Scheme> {
        let (scheme, _) = url.split_once("://")?;
        self.schemes.iter().find(|s| s.name == scheme)
    }

    /// Whether this build serves `url`'s scheme.
    pub fn serves(&self, url: &str) -> bool {
        self.scheme_of(url).is_some_and(|s| s.built)
    }

    /// Connects to the backend `url` names, as a shared trait object.
    pub async fn connect(&self, url: &str) -> Result<Arc<DynLockBackend>> {
        (self.connect)(url.to_owned()).await
    }

    /// The function [`connect`](Self::connect) calls.
    pub fn connect_fn(&self) -> ConnectFn {
        self.connect
    }

    /// The tables it keeps, where it keeps any.
    pub fn migration(&self) -> Option<&Migration> {
        self.migration.as_ref()
    }
}

impl fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Descriptor")
            .field("name", &self.name)
            .field("schemes", &self.schemes)
            .field("default_port", &self.default_port)
            .field("migration", &self.migration.is_some())
            .finish_non_exhaustive()
    }
}
