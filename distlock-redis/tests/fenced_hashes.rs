//! The fenced-store suite on a real Redis, resources kept as hash fields with the
//! hash's fence in a field of its own.

use distlock_redis::fenced::RedisStore;
use distlock_redis::RedisBackend;

distlock_conformance::fenced_conformance_main!(distlock_testservers::store_target(
    &distlock_testservers::Redis,
    |url| async move { Ok(RedisStore::new(&RedisBackend::connect(&url).await?).in_hashes()) }
));
