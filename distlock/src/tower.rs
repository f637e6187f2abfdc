//! distlock in a tower stack (the `tower` feature): a layer that runs each request
//! under a lock of its own key, and a layer that bounds how many requests run at once
//! across every process that shares a [`Semaphore`] (the cross-process twin of
//! `tower::limit::ConcurrencyLimit`). For a resource that lock holders send requests
//! to, [`CheckLayer`] admits only those whose sequencer (key and fence) is still the
//! live holder's, and answers the others 409.
//!
//! The layers answer a request they cannot admit themselves, with the status
//! [`Error::http_status`] gives: 423 when the key stayed held (or every permit stayed
//! taken) through the wait, 409 when a sequencer is stale, 503 when the backend could
//! not be reached or the client's circuit breaker is open, and 400 when the key
//! [`LockLayer`]'s key function made of the request is not a valid key (too long, say:
//! the request's input made it), or the request carries no valid sequencer. A 423
//! carries `Retry-After`: the holder's remaining time where the backend told it, at
//! most one second by default (the time a handler takes, not the holder's lease,
//! is what a caller waits for), and that second where nothing better is known
//! (another task of this process holds the key, every permit is taken); set the
//! bound with `with_retry_after`, or send none with `without_retry_after`.
//!
//! A refusal has a [`Refusal`] in its extensions (the error's kind), and, where the
//! response body is axum's (the `axum` feature), the kind's name as a plain-text body,
//! as [`Error`]'s `IntoResponse` writes it; another body type is left empty (the layers
//! are generic over tower's body, as tower-http's are). The message, which names keys
//! and backends, goes to the service's log (`tracing`, at debug), not to the caller.
//!
//! A request they admit runs with a [`Held`] in its extensions: the key and the
//! fencing token of its grant, to hand to the store it writes to. With the `axum`
//! feature, [`Held`] is also an extractor.
//!
//! The lock (or permit) is held until the inner service's future completes, and
//! released before the response goes on: a body streamed after that runs without it.
//! If the lock is lost while the inner service runs, its future is dropped and the
//! request is answered 409 (as [`LockClient::with_lock`] cancels its work).
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use axum::{routing::post, Router};
//! use distlock::tower::{path_param, Acquire, Held, LockLayer};
//! use distlock::{LockClient, MemoryBackend};
//!
//! async fn settle(held: Held) -> String {
//!     // Write under `held.fence()` to a store that refuses older fences.
//!     format!("settled {} under fence {}", held.key(), held.fence())
//! }
//!
//! let locks = LockClient::new(Arc::new(MemoryBackend::new()));
//! let app: Router = Router::new().route("/accounts/{id}/settle", post(settle)).layer(
//!     LockLayer::new(locks, Acquire::Wait(Duration::from_secs(2)), |req: &axum::extract::Request| {
//!         // One key per account: the route's `{id}` (the `axum` feature's `path_param`).
//!         path_param(req, "id").map(|id| format!("accounts/{id}"))
//!     }),
//! );
//! # let _ = app;
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use distlock_core::{
    Busy, BusyReason, Error, ErrorKind, FencingToken, LockBackend as _, LockClient, LockGuard,
    LockKey, Semaphore,
};
use futures_util::future::{select, Either};
use http::{header, HeaderValue, Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

/// How a layer takes what it guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// Waits up to this long, as [`LockClient::lock`] does; then answers 423.
    Wait(Duration),
    /// Tries once, as [`LockClient::try_lock`] does; answers 423 at once when taken.
    Try,
}

/// How long a 423's `Retry-After` says at most unless a layer is told otherwise.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Why a layer refused a request, in the refusal's extensions: the kind of the error
/// the layer answered (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    kind: ErrorKind,
}

impl Refusal {
    /// The kind of the error the request was refused for: [`ErrorKind::Busy`] or
    /// [`ErrorKind::Timeout`] for a 423, for example.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

/// What a request admitted by [`LockLayer`] or [`LimitLayer`] runs under, in its
/// extensions: the key (for a limit, the semaphore's name) and the fencing token of
/// its grant; for [`CheckLayer`], the sequencer it carried and passed the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    key: LockKey,
    fence: FencingToken,
}

impl Held {
    /// The key the request holds (for a limit, the semaphore's name).
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// The grant's fencing token: hand it to the store the request writes to.
    pub fn fence(&self) -> FencingToken {
        self.fence
    }
}

/// A layer that runs each request under a lock of the key `key` makes of it, on
/// `client`; a request it makes no key of (`None`) runs without one. See the
/// [module docs](self).
pub struct LockLayer<K> {
    client: LockClient,
    acquire: Acquire,
    key: Arc<K>,
    retry_after: Option<Duration>,
}

impl<K> LockLayer<K> {
    /// Locks the key `key` makes of each request, taken as `acquire` says.
    pub fn new(client: LockClient, acquire: Acquire, key: K) -> Self {
        LockLayer {
            client,
            acquire,
            key: Arc::new(key),
            retry_after: Some(RETRY_AFTER),
        }
    }

    /// A 423's `Retry-After` says at most `at_most` (one second unless set): the
    /// holder's remaining time where the backend told it and it is shorter, else
    /// `at_most`. Give a handler's usual time under the lock.
    pub fn with_retry_after(mut self, at_most: Duration) -> Self {
        self.retry_after = Some(at_most);
        self
    }

    /// A 423 carries no `Retry-After`.
    pub fn without_retry_after(mut self) -> Self {
        self.retry_after = None;
        self
    }
}

impl<K> Clone for LockLayer<K> {
    fn clone(&self) -> Self {
        LockLayer {
            client: self.client.clone(),
            acquire: self.acquire,
            key: self.key.clone(),
            retry_after: self.retry_after,
        }
    }
}

impl<K> fmt::Debug for LockLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockLayer")
            .field("backend", &self.client.backend().name())
            .field("acquire", &self.acquire)
            .field("retry_after", &self.retry_after)
            .finish_non_exhaustive()
    }
}

impl<S, K> Layer<S> for LockLayer<K> {
    type Service = LockService<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`LockLayer`] makes.
pub struct LockService<S, K> {
    inner: S,
    layer: LockLayer<K>,
}

impl<S: Clone, K> Clone for LockService<S, K> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S, K> fmt::Debug for LockService<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockService")
            .field("layer", &self.layer)
            .finish_non_exhaustive()
    }
}

/// The future of a request through [`LockService`] or [`LimitService`].
pub type ResponseFuture<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S, K, B, ResBody> Service<Request<B>> for LockService<S, K>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    K: Fn(&Request<B>) -> Option<String> + Send + Sync + 'static,
    B: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let key = (self.layer.key)(&request);
        let inner = take_ready(&mut self.inner);
        let (client, acquire) = (self.layer.client.clone(), self.layer.acquire);
        let retry_after = self.layer.retry_after;
        Box::pin(async move {
            let Some(key) = key else {
                let mut inner = inner;
                return inner.call(request).await;
            };
            let taken = match acquire {
                Acquire::Wait(wait) => client.lock(&key, wait).await,
                Acquire::Try => match client.try_lock(&key).await {
                    Ok(Ok(guard)) => Ok(guard),
                    Ok(Err(busy)) => Err(refused(&client, busy, retry_after).await),
                    Err(error) => Err(error),
                },
            };
            match taken {
                Ok(guard) => run_under(guard, request, inner).await,
                Err(error) => Ok(refusal(&error, retry_after)),
            }
        })
    }
}

/// A layer that bounds how many requests run at once, across every process that
/// shares the semaphore's name: each request holds one of its permits while it runs.
/// See the [module docs](self).
#[derive(Clone)]
pub struct LimitLayer {
    permits: Semaphore,
    acquire: Acquire,
    retry_after: Option<Duration>,
}

impl LimitLayer {
    /// Runs each request under one permit of `permits`, taken as `acquire` says.
    pub fn new(permits: Semaphore, acquire: Acquire) -> Self {
        LimitLayer {
            permits,
            acquire,
            retry_after: Some(RETRY_AFTER),
        }
    }

    /// A 423's `Retry-After` says at most `at_most` (one second unless set): the
    /// soonest end of a holder's lease where the backend told it and it is shorter,
    /// else `at_most`. Give a handler's usual time under a permit.
    pub fn with_retry_after(mut self, at_most: Duration) -> Self {
        self.retry_after = Some(at_most);
        self
    }

    /// A 423 carries no `Retry-After`.
    pub fn without_retry_after(mut self) -> Self {
        self.retry_after = None;
        self
    }
}

impl fmt::Debug for LimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitLayer")
            .field("name", self.permits.name())
            .field("limit", &self.permits.limit())
            .field("acquire", &self.acquire)
            .field("retry_after", &self.retry_after)
            .finish()
    }
}

impl<S> Layer<S> for LimitLayer {
    type Service = LimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        LimitService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`LimitLayer`] makes.
#[derive(Clone, Debug)]
pub struct LimitService<S> {
    inner: S,
    layer: LimitLayer,
}

impl<S, B, ResBody> Service<Request<B>> for LimitService<S>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let inner = take_ready(&mut self.inner);
        let (permits, acquire) = (self.layer.permits.clone(), self.layer.acquire);
        let retry_after = self.layer.retry_after;
        Box::pin(async move {
            let taken = match acquire {
                Acquire::Wait(wait) => permits.acquire(wait).await,
                Acquire::Try => permits
                    .try_acquire()
                    .await
                    .and_then(|tried| tried.map_err(Error::from)),
            };
            match taken {
                Ok(guard) => run_under(guard, request, inner).await,
                Err(error) => Ok(refusal(&error, retry_after)),
            }
        })
    }
}

/// The header a holder sends its key in, for [`sequencer_headers`].
pub const KEY_HEADER: &str = "distlock-key";

/// The header a holder sends its fence in (decimal), for [`sequencer_headers`].
pub const FENCE_HEADER: &str = "distlock-fence";

/// The sequencer a request carries in the headers [`KEY_HEADER`] and [`FENCE_HEADER`],
/// for a [`CheckLayer`]: `None` when either is missing, or the key is not UTF-8, or the
/// fence is not a decimal number.
///
/// ```
/// use distlock::tower::sequencer_headers;
/// use distlock::FencingToken;
///
/// let request = http::Request::post("/ledger")
///     .header("distlock-key", "ledger")
///     .header("distlock-fence", "42")
///     .body(())
///     .unwrap();
/// assert_eq!(
///     sequencer_headers(&request),
///     Some(("ledger".to_owned(), FencingToken::new(42)))
/// );
/// ```
pub fn sequencer_headers<B>(request: &Request<B>) -> Option<(String, FencingToken)> {
    let headers = request.headers();
    let key = headers.get(KEY_HEADER)?.to_str().ok()?;
    let fence = headers.get(FENCE_HEADER)?.to_str().ok()?.parse().ok()?;
    Some((key.to_owned(), FencingToken::new(fence)))
}

/// A layer for a resource that receives requests from lock holders: each request
/// carries its holder's sequencer (a key and the fence of its grant, which `sequencer`
/// reads: [`sequencer_headers`], say), and runs only when that fence is still the
/// key's live holder's ([`LockClient::check`], one request to the lock service). A
/// stale fence (another lease holds the key, or it is free) is answered 409; a request
/// that carries no sequencer (`None`), an invalid key or the fence 0 is answered 400;
/// a backend that cannot be reached, 503. An admitted request runs with a [`Held`] in
/// its extensions, the sequencer it carried.
///
/// The check is the lock service's answer as of its read, and the request runs after
/// it: a lease that ends meanwhile is not seen. Where the resource can keep the
/// highest fence it has seen, a [`FencedStore`](distlock_core::FencedStore) refuses a
/// stale write in the write's own step instead.
///
/// ```
/// use std::sync::Arc;
/// use axum::{routing::post, Router};
/// use distlock::tower::{sequencer_headers, CheckLayer, Held};
/// use distlock::{LockClient, MemoryBackend};
///
/// async fn append(held: Held) -> String {
///     format!("appended for {} under fence {}", held.key(), held.fence())
/// }
///
/// let locks = LockClient::new(Arc::new(MemoryBackend::new()));
/// let app: Router = Router::new()
///     .route("/journal", post(append))
///     .layer(CheckLayer::new(locks, sequencer_headers));
/// # let _ = app;
/// ```
pub struct CheckLayer<Q> {
    client: LockClient,
    sequencer: Arc<Q>,
}

impl<Q> CheckLayer<Q> {
    /// Checks the sequencer `sequencer` reads of each request on `client`.
    pub fn new(client: LockClient, sequencer: Q) -> Self {
        CheckLayer {
            client,
            sequencer: Arc::new(sequencer),
        }
    }
}

impl<Q> Clone for CheckLayer<Q> {
    fn clone(&self) -> Self {
        CheckLayer {
            client: self.client.clone(),
            sequencer: self.sequencer.clone(),
        }
    }
}

impl<Q> fmt::Debug for CheckLayer<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckLayer")
            .field("backend", &self.client.backend().name())
            .finish_non_exhaustive()
    }
}

impl<S, Q> Layer<S> for CheckLayer<Q> {
    type Service = CheckService<S, Q>;

    fn layer(&self, inner: S) -> Self::Service {
        CheckService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`CheckLayer`] makes.
pub struct CheckService<S, Q> {
    inner: S,
    layer: CheckLayer<Q>,
}

impl<S: Clone, Q> Clone for CheckService<S, Q> {
    fn clone(&self) -> Self {
        CheckService {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S, Q> fmt::Debug for CheckService<S, Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckService")
            .field("layer", &self.layer)
            .finish_non_exhaustive()
    }
}

impl<S, Q, B, ResBody> Service<Request<B>> for CheckService<S, Q>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    Q: Fn(&Request<B>) -> Option<(String, FencingToken)> + Send + Sync + 'static,
    B: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let sequencer = (self.layer.sequencer)(&request);
        let mut inner = take_ready(&mut self.inner);
        let client = self.layer.client.clone();
        Box::pin(async move {
            let Some((key, fence)) = sequencer else {
                let missing = Error::new(
                    ErrorKind::InvalidInput,
                    "the request carries no sequencer (a lock's key and fence)",
                );
                return Ok(refusal(&missing, None));
            };
            let key = match LockKey::new(key) {
                Ok(key) => key,
                Err(error) => return Ok(refusal(&error, None)),
            };
            if let Err(error) = client.check(key.as_str(), fence).await {
                return Ok(refusal(&error, None));
            }
            request.extensions_mut().insert(Held { key, fence });
            inner.call(request).await
        })
    }
}

/// The inner service that was driven ready, leaving a clone in its place (tower's
/// way for a service whose future outlives the call).
fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

/// Runs `request` through `inner` under `guard`: the grant in its extensions, the
/// inner future dropped (and the request answered 409) if the lock is lost meanwhile,
/// and the lock released once the inner future completes.
async fn run_under<S, B, ResBody>(
    guard: LockGuard,
    mut request: Request<B>,
    mut inner: S,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    ResBody: Default + 'static,
{
    request.extensions_mut().insert(Held {
        key: guard.key().clone(),
        fence: guard.fence(),
    });
    let lost = Box::pin(guard.lost());
    let served = Box::pin(inner.call(request));
    match select(served, lost).await {
        Either::Left((response, _)) => {
            let response = response?;
            if let Err(error) = guard.release().await {
                // The response stands: the work was done; a fenced store refused any
                // write made after the lease ran out.
                tracing::warn!(%error, "the release after a request found the lock gone");
            }
            Ok(response)
        }
        Either::Right((reason, _)) => {
            drop(guard);
            let reason = reason.map_or_else(|| "released".to_owned(), |r| r.to_string());
            Ok(refusal(
                &Error::new(
                    ErrorKind::LockLost,
                    format!("the lock was lost while the request ran: {reason}"),
                ),
                None,
            ))
        }
    }
}

/// The refusal a try that found its key busy answers, with the holder's remaining
/// TTL as its retry-after where the backend told it with the refusal, or tells it when
/// asked and that could say less than the layer's bound.
async fn refused(client: &LockClient, busy: Busy, bound: Option<Duration>) -> Error {
    let worth_asking = bound.is_some_and(|bound| bound > Duration::from_secs(1));
    if busy.reason() != BusyReason::Held || busy.holder_remaining().is_some() || !worth_asking {
        return busy.into();
    }
    let holder = client.backend().inspect(busy.key()).await;
    let error = Error::from(busy);
    match holder {
        Ok(Some(holder)) => error.with_retry_after(holder.remaining),
        _ => error,
    }
}

/// The response a layer answers a request it could not admit with: the status, a
/// 423's `Retry-After` within `bound`, a [`Refusal`] in its extensions, and the kind's
/// name as its body where the body is axum's.
fn refusal<ResBody: Default + 'static>(
    error: &Error,
    bound: Option<Duration>,
) -> Response<ResBody> {
    tracing::debug!(%error, "request refused by a distlock layer");
    let status = match error.kind() {
        // What the layer read of the request (a key, a sequencer): its input made it.
        ErrorKind::InvalidKey | ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
        _ => StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
    };
    let retry_after = if status == StatusCode::LOCKED {
        bound.map(|bound| error.retry_after().map_or(bound, |known| known.min(bound)))
    } else {
        error.retry_after()
    };
    let mut response = Response::new(body_of::<ResBody>(error.kind()));
    *response.status_mut() = status;
    if let Some(after) = retry_after {
        let seconds = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    #[cfg(feature = "axum")]
    if std::any::TypeId::of::<ResBody>() == std::any::TypeId::of::<axum_core::body::Body>() {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    response
        .extensions_mut()
        .insert(Refusal { kind: error.kind() });
    response
}

/// A refusal's body: the kind's name where the body type is axum's, else empty.
fn body_of<ResBody: Default + 'static>(kind: ErrorKind) -> ResBody {
    #[cfg(feature = "axum")]
    {
        let mut body = ResBody::default();
        let any: &mut dyn std::any::Any = &mut body;
        if let Some(axum) = any.downcast_mut::<axum_core::body::Body>() {
            *axum = axum_core::body::Body::from(kind.as_str());
        }
        body
    }
    #[cfg(not(feature = "axum"))]
    {
        let _ = kind;
        ResBody::default()
    }
}

/// With the `axum` feature: the value of the path parameter `name` of the route axum
/// matched for `request` (`"42"` of `/accounts/42` on the route `/accounts/{id}`),
/// percent-decoded, for a [`LockLayer`]'s key function.
///
/// axum matches the route before the layers it applies run: a layer added with
/// `Router::layer`, `Router::route_layer` or a method router's `layer` sees the
/// parameters. A layer around the router as a whole service (a `ServiceBuilder` in
/// front of it, or `LockLayer::layer(router)`) runs before the match and sees none:
/// `None`, logged as a warning, and the request then runs without a lock unless the
/// key function answers a key of its own. The layer's tests check both placements.
#[cfg(feature = "axum")]
pub fn path_param<B>(request: &Request<B>, name: &str) -> Option<String> {
    use axum::extract::RawPathParams;
    use axum_core::extract::FromRequestParts;
    use futures_util::FutureExt;

    let (mut parts, ()) = Request::new(()).into_parts();
    parts.extensions = request.extensions().clone();
    // The extractor reads the extensions only: it is ready at once.
    let params = RawPathParams::from_request_parts(&mut parts, &()).now_or_never();
    match params {
        Some(Ok(params)) => params
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_owned()),
        _ => {
            tracing::warn!(
                parameter = name,
                "no path parameters on the request: a layer that reads them must wrap \
                 the route (route_layer), not the router"
            );
            None
        }
    }
}

#[cfg(feature = "axum")]
mod extract {
    use axum_core::extract::FromRequestParts;
    use http::request::Parts;
    use http::StatusCode;

    use super::Held;

    /// With the `axum` feature: the grant a [`LockLayer`](super::LockLayer),
    /// [`LimitLayer`](super::LimitLayer) or [`CheckLayer`](super::CheckLayer) admitted
    /// the request under. Rejected with 500
    /// on a route that no such layer wraps: a server error, not the client's.
    impl<S: Send + Sync> FromRequestParts<S> for Held {
        type Rejection = (StatusCode, &'static str);

        async fn from_request_parts(
            parts: &mut Parts,
            _state: &S,
        ) -> Result<Self, Self::Rejection> {
            parts.extensions.get::<Held>().cloned().ok_or((
                StatusCode::INTERNAL_SERVER_ERROR,
                "no distlock layer wraps this route",
            ))
        }
    }
}
