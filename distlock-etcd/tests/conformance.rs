//! The whole conformance suite against a real etcd: a container started here, with its
//! fault controls, round-trip meter and wrong credentials, or the server
//! `DISTLOCK_ETCD_URL` names (no fault cases).

use distlock_etcd::EtcdBackend;

distlock_conformance::conformance_main!(distlock_testservers::target(
    &distlock_testservers::Etcd,
    |url| async move { EtcdBackend::connect(&url).await }
));
