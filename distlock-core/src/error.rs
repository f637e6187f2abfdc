//! The one error type of distlock: a semantic kind, whether a retry may help, the
//! backend that raised it, and the underlying source.

use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// A `Result` whose error is distlock's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A boxed error from a driver or the operating system, kept as an [`Error`]'s source.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// What went wrong, in terms a caller can act on.
///
/// Matching on the kind (never on the message) is the supported way to tell errors
/// apart. New kinds may be added, so a match needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The key is empty, longer than 256 bytes, or holds a control character.
    InvalidKey,
    /// The TTL is zero, outside the backend's limits, or not a multiple of its granularity.
    InvalidTtl,
    /// Some other argument is out of range.
    InvalidInput,
    /// The lease is no longer held: it expired, was taken over, or was released already.
    NotHeld,
    /// The lock was lost while work ran under it (see [`crate::LockClient::with_lock`]).
    LockLost,
    /// A fenced resource has seen a higher fence than the one a write carried: a
    /// newer holder has written, so this one's lock is gone (see
    /// [`crate::FencedStore`]). Not retryable: the same fence stays stale.
    StaleFence,
    /// Time ran out on the lock's own clock before a usable outcome, and a request
    /// may still land: one meaning, in three places. The wait deadline of
    /// [`LockClient::lock`](crate::LockClient::lock) passed; a grant or renewal came
    /// back after the validity it would have started had run out (it is given back);
    /// or, on a quorum backend, too few members answered within their per-member time
    /// (`node_timeout_ms` on a Redlock) while the others' requests may still land.
    /// Retryable. A server that could not be reached or did not answer within the
    /// backend's own response time-out is [`ErrorKind::Unavailable`] instead.
    Timeout,
    /// The server could not be reached or did not answer in time. A retry may help.
    Unavailable,
    /// The server refused the credentials.
    Authentication,
    /// The configuration (a URL, an option, a table name) is invalid.
    Configuration,
    /// The backend does not support this operation; see its [`Capabilities`](crate::backend::Capabilities).
    Unsupported,
    /// The server answered something the backend did not expect.
    Backend,
    /// The client's circuit breaker is open: recent calls found the backend
    /// unavailable, so this one failed at once without reaching it (see
    /// [`crate::BreakerOptions`]). Retryable: the message says for how long it stays
    /// open.
    CircuitOpen,
    /// A single try found the key taken (by another owner, or another task of this
    /// client) and did not wait: a [`Busy`](crate::Busy) turned into an error by `?`.
    /// Retryable: a later try may find it free; [`Error::retry_after`] is the
    /// holder's remaining time where the backend told it. A wait that ran out is
    /// [`ErrorKind::Timeout`] instead.
    // Last: a variant added after 0.1.0 keeps the earlier ones' discriminants.
    Busy,
}

impl ErrorKind {
    /// A short, stable, human-readable name of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidKey => "invalid key",
            ErrorKind::InvalidTtl => "invalid ttl",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::NotHeld => "not held",
            ErrorKind::LockLost => "lock lost",
            ErrorKind::StaleFence => "stale fence",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Busy => "busy",
            ErrorKind::Unavailable => "backend unavailable",
            ErrorKind::Authentication => "authentication failed",
            ErrorKind::Configuration => "configuration error",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Backend => "backend error",
            ErrorKind::CircuitOpen => "circuit open",
        }
    }

    /// Whether an error of this kind is retryable when nothing more is known.
    fn retryable_by_default(self) -> bool {
        matches!(
            self,
            ErrorKind::Unavailable | ErrorKind::Timeout | ErrorKind::Busy | ErrorKind::CircuitOpen
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error from distlock or one of its backends.
///
/// `Display` is one line: the kind, the backend in brackets when known, and a message.
/// The driver's error, when there is one, is the [`source`](StdError::source).
/// Messages never hold credentials or owner tokens: backends redact them before an
/// error is built.
#[derive(thiserror::Error)]
pub struct Error {
    kind: ErrorKind,
    message: Cow<'static, str>,
    retryable: bool,
    backend: Option<Cow<'static, str>>,
    code: Option<Cow<'static, str>>,
    not_sent: bool,
    retry_after: Option<Duration>,
    #[source]
    source: Option<BoxError>,
}

impl Error {
    /// An error of `kind` with a message; retryable when the kind usually is
    /// ([`ErrorKind::Unavailable`] and [`ErrorKind::Timeout`]).
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Error {
            kind,
            message: message.into(),
            retryable: kind.retryable_by_default(),
            backend: None,
            code: None,
            not_sent: false,
            retry_after: None,
            source: None,
        }
    }

    /// Says how long from now a retry may first succeed (see
    /// [`retry_after`](Self::retry_after)).
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// How long from now a retry may first succeed, where the client knew when the
    /// error was made: for a wait that ran out on a held key, the holder's remaining
    /// TTL as the last attempt found it; for an open circuit breaker, the time it
    /// stays open. An HTTP service answers it as `Retry-After`.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// [`retry_after`](Self::retry_after) in whole seconds, rounded up, as an HTTP
    /// `Retry-After` header carries it.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        self.retry_after
            .map(|after| after.as_secs() + u64::from(after.subsec_nanos() > 0))
    }

    /// The HTTP status a service answers this error with, so that every service (and
    /// the `tower` and `axum` integrations of the `distlock` crate) answers alike:
    ///
    /// | kind | status |
    /// | --- | --- |
    /// | [`Timeout`](ErrorKind::Timeout) (the key was held until the wait ran out), [`Busy`](ErrorKind::Busy) (a try found it held) | 423 Locked |
    /// | [`LockLost`](ErrorKind::LockLost), [`NotHeld`](ErrorKind::NotHeld), [`StaleFence`](ErrorKind::StaleFence) | 409 Conflict |
    /// | [`CircuitOpen`](ErrorKind::CircuitOpen), [`Unavailable`](ErrorKind::Unavailable) | 503 Service Unavailable |
    /// | the configuration, the input, the credentials, an unsupported call | 500 Internal Server Error |
    /// | anything else: retryable, 503; otherwise 500 |
    pub fn http_status(&self) -> u16 {
        match self.kind {
            ErrorKind::Timeout | ErrorKind::Busy => 423,
            ErrorKind::LockLost | ErrorKind::NotHeld | ErrorKind::StaleFence => 409,
            ErrorKind::CircuitOpen | ErrorKind::Unavailable => 503,
            ErrorKind::InvalidKey
            | ErrorKind::InvalidTtl
            | ErrorKind::InvalidInput
            | ErrorKind::Authentication
            | ErrorKind::Configuration
            | ErrorKind::Unsupported => 500,
            ErrorKind::Backend if self.retryable => 503,
            ErrorKind::Backend => 500,
        }
    }

    /// Keeps `source` as the cause of this error.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Keeps `text` as the cause: for a driver error whose type is better not kept,
    /// for example because its `Debug` output may show connection details. Scrub
    /// credentials from `text` first.
    pub fn with_source_text(self, text: impl Into<String>) -> Self {
        self.with_source(SourceText(text.into()))
    }

    /// Names the backend that raised this error.
    pub fn with_backend(mut self, backend: impl Into<Cow<'static, str>>) -> Self {
        self.backend = Some(backend.into());
        self
    }

    /// Keeps the driver's own code for this error: PostgreSQL's SQLSTATE (`28P01`),
    /// Redis's error code (`NOSCRIPT`, or the driver's kind where the server gave
    /// none: `AuthenticationFailed`), etcd's gRPC status (`Unavailable`).
    pub fn with_code(mut self, code: impl Into<Cow<'static, str>>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// The driver's own code, where the driver gave one (see
    /// [`with_code`](Self::with_code)): for matching a case the kind does not
    /// separate, without parsing the message.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// Sets whether a retry of the same operation may succeed.
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Marks the request as never sent: it failed before it left this process (a
    /// refused connection, no pooled connection free in time), so the server cannot
    /// have applied it. A backend says so only where it knows; by default an error
    /// says nothing of it, and a failed acquisition is then cleaned up as one that
    /// may have been granted.
    pub fn with_not_sent(mut self) -> Self {
        self.not_sent = true;
        self
    }

    /// Whether the request is known never to have left this process (see
    /// [`with_not_sent`](Self::with_not_sent)).
    pub fn was_not_sent(&self) -> bool {
        self.not_sent
    }

    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether retrying the same operation may succeed (a temporary fault).
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The backend that raised this error, when known.
    pub fn backend(&self) -> Option<&str> {
        self.backend.as_deref()
    }

    /// The message, without the kind or the backend.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn invalid_key(message: impl Into<Cow<'static, str>>) -> Self {
        Error::new(ErrorKind::InvalidKey, message)
    }

    pub(crate) fn invalid_ttl(message: impl Into<Cow<'static, str>>) -> Self {
        Error::new(ErrorKind::InvalidTtl, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)?;
        if let Some(backend) = &self.backend {
            write!(f, " [{backend}]")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind)
            .field("message", &self.message)
            .field("retryable", &self.retryable);
        if let Some(backend) = &self.backend {
            d.field("backend", backend);
        }
        if let Some(code) = &self.code {
            d.field("code", code);
        }
        if let Some(after) = &self.retry_after {
            d.field("retry_after", after);
        }
        if let Some(source) = &self.source {
            // The source's Display, not its Debug: drivers' Debug output can hold
            // connection details that Display leaves out.
            d.field("source", &format_args!("{source}"));
        }
        d.finish()
    }
}

/// A cause known only by its text.
#[derive(Debug)]
struct SourceText(String);

impl fmt::Display for SourceText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for SourceText {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_one_line_with_kind_backend_and_message() {
        let e = Error::new(ErrorKind::Unavailable, "connection refused").with_backend("redis");
        assert_eq!(
            e.to_string(),
            "backend unavailable [redis]: connection refused"
        );
        assert!(e.is_retryable());
        assert!(!Error::new(ErrorKind::Configuration, "x").is_retryable());
        assert!(!Error::new(ErrorKind::Unavailable, "x")
            .with_retryable(false)
            .is_retryable());
    }

    #[test]
    fn source_is_kept() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let e = Error::new(ErrorKind::Unavailable, "lost connection").with_source(io);
        assert_eq!(e.source().map(|s| s.to_string()).as_deref(), Some("reset"));
    }
}
