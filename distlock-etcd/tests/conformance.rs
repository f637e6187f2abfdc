//! The whole conformance suite against a real etcd: a container started here, with
//! pause, restart and kill, or the cluster `DISTLOCK_ETCD_URL` names (no fault cases).

use std::sync::Arc;

use distlock_conformance::servers::{external_url, ServerHandle, ServerKind};
use distlock_conformance::Target;
use distlock_core::BoxError;
use distlock_etcd::EtcdBackend;

distlock_conformance::conformance_main!(async {
    if let Some(url) = external_url(ServerKind::Etcd) {
        let backend = EtcdBackend::connect(&url).await?;
        return Ok::<_, BoxError>(Target::new(Arc::new(backend)));
    }
    let server = ServerHandle::start(ServerKind::Etcd).await?;
    let backend = EtcdBackend::connect(&server.url()).await?;
    Ok(Target::new(Arc::new(backend)).with_control(Arc::new(server)))
});
