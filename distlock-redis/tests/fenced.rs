//! The fenced-store suite on a real Redis, resources kept as strings beside their
//! fence keys: a container started here, or the server `DISTLOCK_REDIS_URL` names.

use distlock_redis::fenced::RedisStore;
use distlock_redis::RedisBackend;

distlock_conformance::fenced_conformance_main!(distlock_testservers::store_target(
    &distlock_testservers::Redis,
    |url| async move { Ok(RedisStore::new(&RedisBackend::connect(&url).await?)) }
));
