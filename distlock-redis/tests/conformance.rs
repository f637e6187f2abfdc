//! The whole conformance suite against a real Redis: a container started here, with its
//! fault controls, round-trip meter and wrong credentials, or the server
//! `DISTLOCK_REDIS_URL` names (no fault cases).

use distlock_redis::RedisBackend;

distlock_conformance::conformance_main!(distlock_testservers::target(
    &distlock_testservers::Redis,
    |url| async move { RedisBackend::connect(&url).await }
));
