//! The fenced-store suite on a real etcd: a container started here, or the server
//! `DISTLOCK_ETCD_URL` names.

use distlock_etcd::fenced::EtcdStore;
use distlock_etcd::EtcdBackend;

distlock_conformance::fenced_conformance_main!(distlock_testservers::store_target(
    &distlock_testservers::Etcd,
    |url| async move { Ok(EtcdStore::new(&EtcdBackend::connect(&url).await?)) }
));
