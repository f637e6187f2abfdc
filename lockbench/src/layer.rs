//! S6, the tower layer's cost: requests per second through an axum router behind
//! [`LockLayer`] (a fresh key per request, tried once), beside the same router without
//! the layer (the handler's floor) and the client's own try and release of such keys,
//! 32 tasks each, in one run.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use distlock::tower::{Acquire, LockLayer};
use distlock::{DynLockBackend, LockClient};
use serde::Serialize;
use tower::ServiceExt as _;

use crate::run::BoxError;
use crate::scenarios::{self, Contender, S1Entry, Sizes};
use crate::stats::Summary;

/// The tasks each of S6's three runs has.
const TASKS: usize = 32;

/// The header the layer reads each request's key from.
const KEY_HEADER: &str = "x-lock-key";

/// What S6 found on one backend.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LayerRow {
    /// Requests through the router without the layer: the handler's floor.
    pub(crate) bare_handler: Summary,
    /// Requests through the router behind the layer.
    pub(crate) through_layer: Summary,
    /// The client's own try and release, as S2 does them.
    pub(crate) bare_lock: Summary,
}

/// A router driven as a contender: a request with the key in its header is a try;
/// 200 is a grant (held for the request alone), 423 a key held elsewhere.
#[derive(Clone)]
struct Routed(Router);

impl Contender for Routed {
    type Held = ();

    async fn try_take(&self, key: &str) -> Result<Option<()>, BoxError> {
        let request = Request::post("/")
            .header(KEY_HEADER, key)
            .body(Body::empty())?;
        let response = self.0.clone().oneshot(request).await?;
        match response.status() {
            StatusCode::OK => Ok(Some(())),
            StatusCode::LOCKED => Ok(None),
            other => Err(format!("the router answered {other}").into()),
        }
    }

    async fn take(&self, key: &str, _wait: std::time::Duration) -> Result<(), BoxError> {
        self.try_take(key)
            .await?
            .ok_or_else(|| format!("{key} is held").into())
    }

    async fn give_back(&self, (): ()) -> Result<(), BoxError> {
        Ok(())
    }
}

/// The handler: nothing but an answer, so that what is measured is the layer.
async fn handler() -> &'static str {
    "ok"
}

/// The key of a request: its header's.
fn key_of(request: &Request) -> Option<String> {
    request
        .headers()
        .get(KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// S6 on `backend`.
pub(crate) async fn measure(
    backend: &Arc<DynLockBackend>,
    sizes: Sizes,
) -> Result<LayerRow, BoxError> {
    let client: LockClient = scenarios::client(backend)?;
    let bare = Router::new().route("/", post(handler));
    let layered = bare
        .clone()
        .layer(LockLayer::new(client.clone(), Acquire::Try, key_of));
    let bare_handler = S1Entry::new("bare handler", Routed(bare))
        .s2(TASKS, sizes)
        .await?;
    let through_layer = S1Entry::new("through LockLayer", Routed(layered))
        .s2(TASKS, sizes)
        .await?;
    let bare_lock = S1Entry::new("client try_lock + release", client)
        .s2(TASKS, sizes)
        .await?;
    Ok(LayerRow {
        bare_handler,
        through_layer,
        bare_lock,
    })
}
