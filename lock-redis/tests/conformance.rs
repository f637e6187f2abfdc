//! The whole conformance suite against a real Redis: a container started here, with
//! pause, restart and kill, or the server `DISTLOCK_REDIS_URL` names (no fault cases).

use std::sync::Arc;

use conformance::servers::{external_url, ServerHandle, ServerKind};
use conformance::Target;
use lock_core::BoxError;
use lock_redis::RedisBackend;

conformance::conformance_main!(async {
    if let Some(url) = external_url(ServerKind::Redis) {
        let backend = RedisBackend::connect(&url).await?;
        return Ok::<_, BoxError>(Target::new(Arc::new(backend)));
    }
    let server = ServerHandle::start(ServerKind::Redis).await?;
    let backend = RedisBackend::connect(&server.url()).await?;
    Ok(Target::new(Arc::new(backend)).with_control(Arc::new(server)))
});
